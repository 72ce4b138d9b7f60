"""Does a grader read meaning? The paraphrase probe (`lab/questions/paraphrase_probe.jsonl`) measured per grader.

For each pair (a question and the same question reworded), the graph's first pass retrieves candidates for the
rewording from that pair's corpus; the passage that answers is graded beside them. Per grader, with its own
calibration:

- `kept`: the share of rewordings whose answering passage grades at or above `reranker_threshold` (and the same for
  the plain questions, graded among the same candidates, so the drop a rewording costs is seen);
- `first`, `mrr`: the answering passage's rank among the graph's candidates (a candidate that holds most of the
  passage's words is the passage itself, not a competitor).

    python -m lab.scripts.paraphrase_probe --grader src/fastcrag/models/grader \
        --grader runs/v5/export:runs/v5/calibration.json --index git=IDX --index flask=IDX [--teacher DIR]

Python's pairs use the embedded reference index, SQuAD's the 294 paragraphs of `--squad`; a corpus with no index
given is left out (and said so). `--teacher` adds a torch cross-encoder folder (`lab.training.teacher`'s) graded
by its sigmoid, with the first grader's threshold (it has no calibration of its own).
"""

from __future__ import annotations

import argparse
import json
import math
import re
from collections import defaultdict
from collections.abc import Callable, Sequence
from functools import partial
from pathlib import Path
from typing import Any

from fastcrag.config.calibration import load_calibration
from fastcrag.config.settings import Settings
from lab.data import SHARED_DATA

Score = Callable[[str, Sequence[str]], list[float]]
_WORD = re.compile(r"[a-z0-9_]{4,}")


def _words(text: str) -> set[str]:
    return set(_WORD.findall(text.lower()))


def is_same_passage(candidate: str, passage: str) -> bool:
    """Whether a retrieved chunk is the answering passage itself (holds 60% or more of its distinct words)."""
    gold = _words(passage)
    return bool(gold) and len(gold & _words(candidate)) >= 0.6 * len(gold)


def first_pass(corpus: str, indexes: dict[str, str], squad: Path) -> Any:
    """The graph's first pass over a probe corpus (None for a corpus `indexes` does not name).

    SQuAD's paragraphs, Python's embedded reference, or the index `indexes` names for Git or Flask.
    """
    from fastcrag.components import Components
    from fastcrag.datasets import read_squad, squad_corpus_and_questions
    from fastcrag.evaluation.common import squad_store
    from fastcrag.retrieval.hybrid import HybridRetriever

    settings = Settings()
    if corpus == "squad":
        docs, _ = squad_corpus_and_questions(read_squad(squad))
        store = squad_store(docs, settings.chunk_tokens, settings.chunk_overlap)
        return HybridRetriever(store=store, mode=settings.retrieval, k=settings.top_k)
    if corpus == "python" or corpus in indexes:
        index = None if corpus == "python" else Path(indexes[corpus])
        return Components(settings.model_copy(update={"index_dir": index})).retriever()
    return None


def candidates_by_corpus(pairs: Sequence[dict[str, Any]], indexes: dict[str, str], squad: Path) -> dict[str, list[str]]:
    """The graph's first-pass candidates for each pair's rewording, by pair id (corpora without an index: none)."""
    out: dict[str, list[str]] = {}
    for corpus in sorted({p["corpus"] for p in pairs}):
        retriever = first_pass(corpus, indexes, squad)
        if retriever is None:
            print(f"{corpus}: no --index given, its pairs are left out")
            continue
        for p in pairs:
            if p["corpus"] == corpus:
                out[p["id"]] = [d.page_content for d in retriever.invoke(p["reworded"])]
    return out


def teacher_scorer(folder: str) -> Score:
    """A torch cross-encoder folder (encoder + `relevance.safetensors`) as a scorer: the sigmoid of its logit."""
    import torch
    from transformers import AutoTokenizer

    from lab.training.teacher import teacher_logits, teacher_network

    model = teacher_network(folder).eval()
    tokenizer = AutoTokenizer.from_pretrained(folder, local_files_only=True)

    def score(query: str, texts: Sequence[str]) -> list[float]:
        logits = teacher_logits(model, tokenizer, [query] * len(texts), list(texts), 256, 32)
        return torch.sigmoid(torch.from_numpy(logits)).tolist()

    return score


def measure(
    pairs: Sequence[dict[str, Any]], candidates: dict[str, list[str]], score: Score, threshold: float
) -> dict[str, Any]:
    """`kept` (reworded and plain), `first` and `mrr`, overall and per corpus and kind of rewording."""
    rows: dict[str, list[tuple[float, float, int]]] = defaultdict(list)
    for p in pairs:
        if p["id"] not in candidates:
            continue
        others = [c for c in candidates[p["id"]] if not is_same_passage(c, p["passage"])]
        graded = score(p["reworded"], [p["passage"], *others])
        plain = score(p["question"], [p["passage"], *others])[0]  # graded in the same company as the rewording
        rank = 1 + sum(s > graded[0] for s in graded[1:])
        for key in ("all", f"corpus:{p['corpus']}", f"how:{p['how']}"):
            rows[key].append((graded[0], plain, rank))
    out: dict[str, Any] = {}
    for key, vals in sorted(rows.items()):
        n = len(vals)
        out[key] = {
            "n": n,
            "kept_reworded": round(sum(g >= threshold for g, _, _ in vals) / n, 3),
            "kept_plain": round(sum(q >= threshold for _, q, _ in vals) / n, 3),
            "first": round(sum(r == 1 for _, _, r in vals) / n, 3),
            "mrr": round(sum(1 / r for _, _, r in vals) / n, 3),
        }
    return out


def main(argv: Sequence[str] | None = None) -> int:
    """The command line: print (and write) the figures per grader."""
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--probe", default="lab/questions/paraphrase_probe.jsonl")
    ap.add_argument("--grader", action="append", default=[], help="ONNX grader folder[:calibration.json] (repeatable)")
    ap.add_argument("--teacher", default="", help="a torch cross-encoder folder to measure beside the graders")
    ap.add_argument("--index", action="append", default=[], help="CORPUS=INDEX (git, flask)")
    ap.add_argument("--squad", default=str(SHARED_DATA / "squad2-dev"), help="SQuAD v2 JSON file or folder")
    ap.add_argument("--out", default="", help="also write the figures as JSON here")
    args = ap.parse_args(argv)
    from fastcrag.grading.reranker import calibration_for, checked_scores, load_reranker

    pairs = [json.loads(line) for line in Path(args.probe).read_text(encoding="utf-8").splitlines() if line.strip()]
    indexes = dict(i.split("=", 1) for i in args.index)
    candidates = candidates_by_corpus(pairs, indexes, Path(args.squad))
    results: dict[str, Any] = {}
    first_threshold = math.nan
    for spec in args.grader:
        folder, _, cal = spec.partition(":")
        grader = load_reranker(folder)
        calibration = load_calibration(Path(cal) if cal else calibration_for(None, folder), expected_model=grader.name)
        threshold = calibration.reranker_threshold
        first_threshold = threshold if math.isnan(first_threshold) else first_threshold
        graded = measure(pairs, candidates, partial(checked_scores, grader), threshold)  # as the graph grades
        results[grader.name] = {"threshold": threshold, **graded}
    if args.teacher:
        results[f"teacher:{Path(args.teacher).name}"] = {
            "threshold": first_threshold,
            **measure(pairs, candidates, teacher_scorer(args.teacher), first_threshold),
        }
    for name, res in results.items():
        print(f"\n{name} (reranker_threshold {res['threshold']:.4f})")
        print(f"  {'':18s} {'n':>4s} {'kept(rew)':>10s} {'kept(plain)':>12s} {'first':>6s} {'mrr':>6s}")
        for key, r in res.items():
            if key != "threshold":
                kept = f"{r['kept_reworded']:10.3f} {r['kept_plain']:12.3f}"
                print(f"  {key:18s} {r['n']:4d} {kept} {r['first']:6.3f} {r['mrr']:6.3f}")
    if args.out:
        Path(args.out).write_text(json.dumps(results, indent=2) + "\n", encoding="utf-8")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
