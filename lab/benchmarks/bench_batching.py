"""`python -m lab bench-batching`: the int8 embedder's texts embedded alone against the padded batches it used before.

Both ways run the packaged int8 export in one process, round after round in alternating order, so machine load hits
them alike:
- **batched** (the embedder before `+per-text`): texts sorted by length, `batch` per padded ONNX Runtime call, every
  thread on each call; int8 dynamic quantisation scales each layer's activations by the whole batch, padding included;
- **alone** (`OnnxEmbeddings` now): each text its own call on one thread, `threads` texts at once.

Measures: throughput (chunks/s, median of rounds) over chunks of SciFact abstracts; the cosine of a text's vector
alone against the same text inside a batch of eight (a sample of chunks, mixed lengths); optionally SciFact test
nDCG@10 of dense retrieval (title + abstract, cosine, top 100) each way.
"""

from __future__ import annotations

import gzip
import json
import statistics
from collections.abc import Callable, Sequence
from pathlib import Path
from typing import Any

import numpy as np

from fastcrag.ortsession import cpu_session, padded_tokenizer
from fastcrag.retrieval.embeddings import PACKAGED_EMBEDDER, OnnxEmbeddings
from fastcrag.retrieval.text import chunk_text
from lab.benchmarks.bench_embedder import scifact_dense_ndcg, timed_rounds
from lab.data import SHARED_DATA

BEFORE_BATCH = 32  # the texts per call of the batched embedder
GROUP = 8  # texts sharing a batch in the alone-against-batch cosine


class BatchedEmbedder:
    """The int8 embedder as it ran before `+per-text`: padded batches of length-sorted texts, every thread per call."""

    def __init__(self, folder: Path, threads: int, batch_size: int = BEFORE_BATCH) -> None:
        """Load the export in `folder` with `threads` intra-op threads."""
        meta = json.loads((folder / "fastcrag_model.json").read_text(encoding="utf-8"))
        self.dimension = int(meta["dimension"])
        self.tokenizer = padded_tokenizer(folder / "tokenizer.json", int(meta.get("max_length", 256)))
        self.session = cpu_session(folder / "model.onnx", threads)
        self.batch_size = batch_size

    def encode(self, texts: Sequence[str]) -> Any:
        """Unit vectors, one row per text, in order."""
        order = sorted(range(len(texts)), key=lambda i: len(texts[i]))
        out = np.empty((len(texts), self.dimension), dtype=np.float32)
        for s in range(0, len(order), self.batch_size):
            rows = order[s : s + self.batch_size]
            encs = self.tokenizer.encode_batch([texts[i] for i in rows])
            ids = np.asarray([e.ids for e in encs], dtype=np.int64)
            mask = np.asarray([e.attention_mask for e in encs], dtype=np.int64)
            feeds = {"input_ids": ids, "attention_mask": mask, "token_type_ids": np.zeros_like(ids)}
            (vectors,) = self.session.run(["sentence_embedding"], feeds)
            out[rows] = vectors
        return out


def scifact_chunks(corpus: Path, count: int, chunk_tokens: int = 128, chunk_overlap: int = 24) -> list[str]:
    """The first `count` chunks of SciFact's abstracts (title + abstract, chunked as `fastcrag index` does)."""
    texts: list[str] = []
    with gzip.open(corpus, "rt", encoding="utf-8") as fh:
        for line in fh:
            row = json.loads(line)
            texts += chunk_text(f"{row.get('title', '')} {row.get('text', '')}".strip(), chunk_tokens, chunk_overlap)
            if len(texts) >= count:
                break
    return texts[:count]


def alone_against_batch(encode: Callable[[Sequence[str]], Any], texts: Sequence[str]) -> tuple[Any, Any]:
    """Per text, its vector alone against its vector inside a batch of `GROUP` texts: the cosine, and bit equality."""
    cosines, same = [], []
    for s in range(0, len(texts) - GROUP + 1, GROUP):
        group = list(texts[s : s + GROUP])
        together = encode(group)
        for i, text in enumerate(group):
            alone = encode([text])[0]
            cosines.append(float(alone @ together[i]))
            same.append(bool(np.array_equal(alone, together[i])))
    return np.asarray(cosines), np.asarray(same)


def batching_benchmark(
    *,
    beir: Path = SHARED_DATA / "scifact",
    chunks: int = 2000,
    rounds: int = 3,
    threads: int = 2,
    sample: int = 200,
    ndcg: bool = False,
    progress: Callable[[str], None] = print,
) -> dict[str, dict[str, float]]:
    """Measure both ways and print the table; returns {measure: {way: value}}.

    Args:
        beir: The SciFact BEIR folder (its corpus gives the chunks; its claims the nDCG row).
        chunks: Chunks of SciFact abstracts per throughput round.
        rounds: Throughput rounds, each way once per round, in alternating order.
        threads: CPU threads each way uses.
        sample: Chunks in the alone-against-batch cosine (mixed lengths: every k-th of the round's chunks).
        ndcg: Also embed the whole corpus each way and score SciFact test nDCG@10 (dense).
        progress: Where progress lines go.
    """
    corpus = beir / "corpus.jsonl.gz"
    if not corpus.is_file():
        raise FileNotFoundError(f"no SciFact corpus at {corpus}")
    ways: dict[str, Any] = {
        f"batched ({BEFORE_BATCH} per call, {threads} threads each)": BatchedEmbedder(PACKAGED_EMBEDDER, threads),
        f"alone ({threads} at once, 1 thread each)": OnnxEmbeddings(PACKAGED_EMBEDDER, threads=threads),
    }
    names = list(ways)
    texts = scifact_chunks(corpus, chunks)
    for way in ways.values():  # model load and first-call allocation stay out of the timings
        way.encode(texts[:GROUP])
    progress(f"{len(texts)} chunks of SciFact abstracts, {rounds} rounds, {threads} threads")
    seconds, vectors = timed_rounds(ways, texts, rounds, progress)
    table: dict[str, dict[str, float]] = {}
    rate = {n: len(texts) / statistics.median(seconds[n]) for n in names}
    table["throughput, chunks/s (median of rounds)"] = rate
    table["throughput vs batched"] = {n: rate[n] / rate[names[0]] for n in names}

    picked = texts[:: max(1, len(texts) // sample)][:sample]
    for n in names:
        cos, same = alone_against_batch(ways[n].encode, picked)
        table.setdefault(f"cosine alone vs in a batch of {GROUP} ({len(cos)} chunks): min", {})[n] = float(cos.min())
        table.setdefault(f"cosine alone vs in a batch of {GROUP}: mean", {})[n] = float(cos.mean())
        table.setdefault("share of chunks whose vector alone is the same bit for bit", {})[n] = float(same.mean())
    table["cosine between the two ways, every chunk: min"] = {
        names[1]: float((vectors[names[0]] * vectors[names[1]]).sum(axis=1).min())
    }
    if ndcg:
        table.update(_ndcg(beir, ways, progress))
    _print(table, names)
    return table


def _ndcg(beir: Path, ways: dict[str, Any], progress: Callable[[str], None]) -> dict[str, dict[str, float]]:
    ndcg, claims = scifact_dense_ndcg(beir, ways, progress)
    return {f"SciFact test nDCG@10 (dense, {claims} claims)": ndcg}


def _print(table: dict[str, dict[str, float]], names: Sequence[str]) -> None:
    width = max(len(k) for k in table) + 2
    print("\n" + "measure".ljust(width) + "".join(n.rjust(44) for n in names))
    for measure, row in table.items():
        cells = "".join((f"{row[n]:.6f}" if n in row else "-").rjust(44) for n in names)
        print(measure.ljust(width) + cells)
