"""How often the condition check would misfire on real evidence (figures in lab/RESULTS.md, "Conditions ...").

For each answerable question that names a condition (a year, ordinal, quarter or month: `named_conditions`), whether
its evidence states it in no form: SQuAD 2.0 dev gold paragraphs and their two-sentence gold snippets, SQuAD 1.1
train gold paragraphs (the first 200 articles), and COVID-QA's 800-character windows around the answer.

    python -m lab.scripts.condition_misfires [--data DIR] [--show 4]     # DIR: the shared data folder by default
"""

from __future__ import annotations

import argparse
import gzip
import json
import random
import sys
from collections.abc import Iterator
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[2] / "src"))  # the project's own code, installed or not

from fastcrag.grading.conditions import named_conditions, unmet_conditions
from fastcrag.retrieval.text import split_sentences
from lab.data import SHARED_DATA

Pair = tuple[str, str]


def squad_dev(data: Path) -> tuple[list[Pair], list[Pair]]:
    """(question, gold paragraph) and (question, gold two-sentence snippet) of SQuAD 2.0 dev's answerable ones."""
    paragraphs: list[Pair] = []
    snippets: list[Pair] = []
    for file in sorted((data / "squad2-dev").glob("*.json")):
        for article in json.loads(file.read_text(encoding="utf-8"))["data"]:
            for p in article["paragraphs"]:
                sents = split_sentences(p["context"])
                parts = [" ".join(sents[i : i + 2]) for i in range(0, len(sents), 2)]
                for qa in p["qas"]:
                    if qa.get("is_impossible") or not qa["answers"]:
                        continue
                    paragraphs.append((qa["question"], p["context"]))
                    home = [s for s in parts if qa["answers"][0]["text"] in s]
                    if home:
                        snippets.append((qa["question"], home[0]))
    return paragraphs, snippets


def squad_train(data: Path, articles: int = 200) -> list[Pair]:
    """(question, gold paragraph) of SQuAD 1.1 train's first `articles` articles."""
    with gzip.open(data / "train" / "squad11-train" / "train-v1.1.from_explorer.json.gz", "rt") as fh:
        raw = json.load(fh)
    rows = raw["data"] if isinstance(raw, dict) else raw
    return [(qa["question"], p["context"]) for a in rows[:articles] for p in a["paragraphs"] for qa in p["qas"]]


def covidqa(data: Path) -> list[Pair]:
    """(question, the 800 characters around its answer) of COVID-QA."""
    raw = json.loads((data / "train" / "covidqa" / "200423_covidQA.json").read_text(encoding="utf-8"))["data"]
    out: list[Pair] = []
    for article in raw:
        for p in article["paragraphs"]:
            for qa in p["qas"]:
                start = qa["answers"][0]["answer_start"]
                out.append((qa["question"], p["context"][max(0, start - 400) : start + 400]))
    return out


def misfires(pairs: list[Pair]) -> Iterator[tuple[str, list[str]]]:
    """(question, conditions its evidence lacks) for each question naming a condition its evidence states in no form."""
    for question, text in pairs:
        if unmet := unmet_conditions(named_conditions(question), text):
            yield question, unmet


def main() -> None:
    """Command line."""
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--data", type=Path, default=SHARED_DATA)
    p.add_argument("--show", type=int, default=4, help="misfires shown per set (seeded sample)")
    a = p.parse_args()
    paragraphs, snippets = squad_dev(a.data)
    sets = {
        "SQuAD 2.0 dev, gold paragraphs": paragraphs,
        "SQuAD 2.0 dev, gold two-sentence snippets": snippets,
        "SQuAD 1.1 train (200 articles), gold paragraphs": squad_train(a.data),
        "COVID-QA, 800 characters around the answer": covidqa(a.data),
    }
    for name, pairs in sets.items():
        naming = sum(bool(named_conditions(q)) for q, _ in pairs)
        found = list(misfires(pairs))
        print(f"{name}: {len(pairs)} questions, {naming} name a condition, {len(found)} of those lack it")
        random.Random(0).shuffle(found)
        for question, unmet in found[: a.show]:
            print(f"    states no {', '.join(unmet)}: {question}")


if __name__ == "__main__":
    main()
