"""`python -m lab bench-embedder`: the int8 ONNX embedder against sentence-transformers fp32, side by side in one run.

Measures (all interleaved round by round, so machine load hits both alike):
- index-build throughput: chunks/s embedding the embedded Python-reference corpus's chunks, and the ratio;
- query embedding latency: P50/P95 of one short question at a time;
- fidelity: cosine between the two embeddings of the same chunks (mean, 1st percentile, minimum);
- quality: SciFact test nDCG@10 of dense retrieval (title + abstract as one passage, cosine, top 100) per embedder.
"""

from __future__ import annotations

import gzip
import json
import statistics
import time
from collections.abc import Callable, Mapping, Sequence
from pathlib import Path
from typing import Any

import numpy as np

from fastcrag.datasets import read_qrels, read_queries
from fastcrag.evaluation.retrieval import evaluate
from fastcrag.measures import percentile
from fastcrag.retrieval.embeddings import Embedder, OnnxEmbeddings, SentenceTransformerEmbeddings
from fastcrag.retrieval.loaders import python_reference
from fastcrag.retrieval.text import chunk_text
from lab.data import SHARED_DATA

TARGETS = {"throughput ratio": 2.0, "query P50 ms": 5.0, "mean cosine": 0.99, "nDCG@10 gap": 0.005}
QUERIES = [
    "How does the with statement work?",
    "What does the yield keyword do?",
    "How are default argument values evaluated?",
    "What is a generator expression?",
    "How do I define a class method?",
    "What does the global statement do?",
    "How are exceptions chained?",
    "What is the difference between is and ==?",
    "How does asyncio run a coroutine?",
    "What does __slots__ do?",
]


def _corpus_chunks(chunk_tokens: int, chunk_overlap: int) -> list[str]:
    return [c for doc in python_reference() for c in chunk_text(doc.text, chunk_tokens, chunk_overlap)]


def _scifact(beir: Path) -> tuple[list[str], list[str], dict[str, str], dict[str, dict[str, int]]]:
    """SciFact test: doc ids, doc texts (title + abstract), query texts by id, qrels."""
    corpus = beir / "corpus.jsonl.gz" if (beir / "corpus.jsonl.gz").is_file() else beir / "corpus.jsonl"
    opener: Callable[..., Any] = gzip.open if corpus.suffix == ".gz" else open
    ids, texts = [], []
    with opener(corpus, "rt", encoding="utf-8") as f:
        for line in f:
            row = json.loads(line)
            ids.append(str(row["_id"]))
            texts.append(f"{row.get('title', '')} {row.get('text', '')}".strip())
    queries_file = next(p for p in (beir / "queries.jsonl.gz", beir / "queries.jsonl") if p.is_file())
    return ids, texts, read_queries(queries_file), read_qrels(beir / "qrels" / "test.tsv")


def timed_rounds(
    embedders: Mapping[str, Any],
    texts: Sequence[str],
    rounds: int,
    progress: Callable[[str], None] | None = None,
) -> tuple[dict[str, list[float]], dict[str, Any]]:
    """Each embedder encodes `texts` once a round, in alternating order: seconds per round, and the last vectors."""
    names = list(embedders)
    seconds: dict[str, list[float]] = {n: [] for n in names}
    vectors: dict[str, Any] = {}
    for r in range(rounds):
        for n in names if r % 2 == 0 else reversed(names):
            t = time.perf_counter()
            vectors[n] = embedders[n].encode(texts)
            seconds[n].append(time.perf_counter() - t)
            if progress is not None:
                progress(f"  round {r + 1}: {n}: {len(texts) / seconds[n][-1]:.1f} chunks/s")
    return seconds, vectors


def scifact_dense_ndcg(
    beir: Path, embedders: Mapping[str, Any], progress: Callable[[str], None]
) -> tuple[dict[str, float], int]:
    """SciFact test nDCG@10 of dense retrieval over whole abstracts, per embedder; and the claims scored."""
    ids, docs, queries, qrels = _scifact(beir)
    qids = sorted(q for q in qrels if q in queries)
    ndcg: dict[str, float] = {}
    for n, embedder in embedders.items():
        t = time.perf_counter()
        dvec = np.asarray(embedder.encode(docs))
        qvec = np.asarray(embedder.encode([queries[q] for q in qids]))
        sims = qvec @ dvec.T
        top = np.argsort(-sims, axis=1)[:, :100]
        run = {q: {ids[j]: float(sims[i, j]) for j in top[i]} for i, q in enumerate(qids)}
        ndcg[n] = evaluate(qrels, run)["nDCG@10"]
        progress(f"  SciFact: {n} embedded {len(docs)} abstracts in {time.perf_counter() - t:.0f} s")
    return ndcg, len(qids)


def embedder_benchmark(
    *,
    beir: Path | None = SHARED_DATA / "scifact",
    rounds: int = 3,
    chunks: int = 0,
    threads: int = 2,
    progress: Callable[[str], None] = print,
) -> dict[str, dict[str, float]]:
    """Measure both embedders and print the table; returns {measure: {embedder: value}}.

    Args:
        beir: The SciFact BEIR folder for the nDCG row (skipped when None or missing).
        rounds: Interleaved throughput rounds over the corpus's chunks.
        chunks: Chunks per throughput round (0: every chunk of the embedded corpus).
        threads: Threads for both runtimes (torch and ONNX Runtime).
        progress: Where progress lines go.
    """
    import torch  # heavy (over a second): loaded with the models it benchmarks

    torch.set_num_threads(threads)
    embedders: dict[str, Embedder] = {
        "sentence-transformers fp32": SentenceTransformerEmbeddings(),
        "onnx int8": OnnxEmbeddings(threads=threads),
    }
    names = list(embedders)
    texts = _corpus_chunks(128, 24)
    if chunks:
        texts = texts[:chunks]
    table: dict[str, dict[str, float]] = {}
    t0 = time.perf_counter()
    for e in embedders.values():  # model load and first-call allocation stay out of the timings
        e.encode(texts[:8])
    progress(f"models loaded in {time.perf_counter() - t0:.1f} s; {len(texts)} chunks of the embedded corpus")

    seconds, vectors = timed_rounds(embedders, texts, rounds)
    rate = {n: len(texts) / statistics.median(seconds[n]) for n in names}
    table["index build: chunks/s (median of rounds)"] = rate
    table["index build: throughput vs fp32"] = {n: rate[n] / rate[names[0]] for n in names}

    latencies: dict[str, list[float]] = {n: [] for n in names}
    for _ in range(5):
        for q in QUERIES:
            for n in names:
                t = time.perf_counter()
                embedders[n].embed_query(q)
                latencies[n].append((time.perf_counter() - t) * 1000)
    table["query embedding P50 ms"] = {n: percentile(latencies[n], 50, "nearest") for n in names}
    table["query embedding P95 ms"] = {n: percentile(latencies[n], 95, "nearest") for n in names}

    sample = texts[:1000]
    ref, other = (np.asarray(vectors[n][: len(sample)]) for n in names)
    cos = (ref * other).sum(axis=1)
    n_int8 = names[1]
    table[f"cosine with fp32, {len(sample)} chunks: mean"] = {n_int8: float(cos.mean())}
    table[f"cosine with fp32, {len(sample)} chunks: 1st percentile"] = {n_int8: float(np.percentile(cos, 1))}
    table[f"cosine with fp32, {len(sample)} chunks: min"] = {n_int8: float(cos.min())}

    if beir is not None and beir.is_dir():
        ndcg, claims = scifact_dense_ndcg(beir, embedders, progress)
        table[f"SciFact test nDCG@10 (dense, {claims} claims)"] = ndcg
        table["SciFact nDCG@10 minus fp32"] = {n: ndcg[n] - ndcg[names[0]] for n in names}

    _print(table, names)
    ratio = table["index build: throughput vs fp32"][n_int8]
    p50 = table["query embedding P50 ms"][n_int8]
    mean_cos = float(cos.mean())
    progress("\ntargets (int8):")
    progress(f"  throughput >= {TARGETS['throughput ratio']}x fp32: {ratio:.2f}x {_ok(ratio >= 2.0)}")
    progress(f"  query P50 <= {TARGETS['query P50 ms']} ms: {p50:.1f} ms {_ok(p50 <= 5.0)}")
    progress(f"  mean cosine >= {TARGETS['mean cosine']}: {mean_cos:.4f} {_ok(mean_cos >= 0.99)}")
    gap_row = table.get("SciFact nDCG@10 minus fp32")
    if gap_row is not None:
        gap = gap_row[n_int8]
        progress(f"  SciFact nDCG@10 within {TARGETS['nDCG@10 gap']} of fp32: {gap:+.4f} {_ok(abs(gap) <= 0.005)}")
    return table


def _ok(passed: bool) -> str:
    return "(met)" if passed else "(MISSED)"


def _print(table: dict[str, dict[str, float]], names: Sequence[str]) -> None:
    width = max(len(k) for k in table) + 2
    print("\n" + "measure".ljust(width) + "".join(n.rjust(28) for n in names))
    for measure, row in table.items():
        cells = "".join((f"{row[n]:.4f}" if n in row else "-").rjust(28) for n in names)
        print(measure.ljust(width) + cells)
