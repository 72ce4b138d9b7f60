"""Labelled-question files for measuring `fastcrag fit` on the shared data (written under runs/, never committed).

    python -m lab.scripts.fit_data scifact --out runs/fit-data/scifact
    python -m lab.scripts.fit_data covidqa --out runs/fit-data/covidqa600 --questions 600

scifact: the train claims with their relevant abstracts as `sources` (`corpus.jsonl.gz#<id>`, as citations name
them); index the corpus with `fastcrag index DATA/scifact/corpus.jsonl.gz --index DIR` (DATA: `--data`, by default
the shared data folder).
covidqa: one text file per paper (`corpus/`, to index) and the questions with their `answers`.
"""

from __future__ import annotations

import argparse
import json
import random
import re
from pathlib import Path

from lab.data import SHARED_DATA


def scifact(data: Path, out: Path) -> None:
    """questions.jsonl from SciFact's train qrels."""
    root = data / "scifact"
    queries = {}
    for line in (root / "queries.jsonl").read_text(encoding="utf-8").splitlines():
        row = json.loads(line)
        queries[str(row["_id"])] = row["text"]
    sources: dict[str, list[str]] = {}
    for line in (root / "qrels" / "train.tsv").read_text(encoding="utf-8").splitlines()[1:]:
        qid, doc, score = line.split("\t")
        if int(score) > 0:
            sources.setdefault(qid, []).append(f"corpus.jsonl.gz#{doc}")
    out.mkdir(parents=True, exist_ok=True)
    with open(out / "questions.jsonl", "w", encoding="utf-8") as fh:
        for qid in sorted(sources, key=int):
            fh.write(json.dumps({"question": queries[qid], "sources": sources[qid]}) + "\n")
    print(f"{out / 'questions.jsonl'}: {len(sources)} claims")


def covidqa(data: Path, out: Path, n: int, seed: int) -> None:
    """corpus/ (one file per paper) and questions.jsonl (answers) from COVID-QA."""
    raw = json.loads((data / "train" / "covidqa" / "200423_covidQA.json").read_text(encoding="utf-8"))["data"]
    corpus = out / "corpus"
    corpus.mkdir(parents=True, exist_ok=True)
    rows = []
    for i, article in enumerate(raw):
        for para in article["paragraphs"]:
            name = re.sub(r"[^A-Za-z0-9]+", "-", str(article.get("title") or f"paper-{i}"))[:60].strip("-")
            (corpus / f"{i:03d}-{name}.txt").write_text(para["context"], encoding="utf-8")
            for qa in para["qas"]:
                answers = sorted({a["text"].strip() for a in qa["answers"] if a["text"].strip()})
                if answers:
                    rows.append({"question": qa["question"].strip(), "answers": answers})
    if n and n < len(rows):
        rows = random.Random(seed).sample(rows, n)
    with open(out / "questions.jsonl", "w", encoding="utf-8") as fh:
        fh.writelines(json.dumps(r) + "\n" for r in rows)
    print(f"{corpus}: {len(raw)} papers; {out / 'questions.jsonl'}: {len(rows)} questions")


def main() -> None:
    """Command line."""
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("dataset", choices=["scifact", "covidqa"])
    p.add_argument("--data", type=Path, default=SHARED_DATA)
    p.add_argument("--out", type=Path, required=True)
    p.add_argument("--questions", type=int, default=0, help="covidqa: a seeded sample of this many (0 = all)")
    p.add_argument("--seed", type=int, default=13)
    a = p.parse_args()
    scifact(a.data, a.out) if a.dataset == "scifact" else covidqa(a.data, a.out, a.questions, a.seed)


if __name__ == "__main__":
    main()
