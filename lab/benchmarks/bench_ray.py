"""`python -m lab bench-ray`: index build throughput, single process against Ray Data, in one run.

Both builds index the same SciFact slice (the first `--docs` abstracts) into their own collection of one bundled
Postgres (started in a temporary folder), with the default embedder: first `build_pg_index` (the single-process
path), then `ray_build_index` on a local Ray runtime of `--ray-cpus` CPUs (one embedding actor per CPU). It reports
wall seconds and chunks/s of each (the Ray figure includes starting the runtime), the process CPU seconds per chunk
of the single-process build and its stored bytes per chunk (table, HNSW, full-text index: what the cluster plan in
docs/DEPLOY.md scales), and whether both stored the same chunk ids and texts.
"""

from __future__ import annotations

import argparse
import gzip
import itertools
import json
import os
import resource
import tempfile
import time
from pathlib import Path
from typing import Any

from lab.data import SHARED_DATA


def _cpu_seconds() -> float:
    usage = resource.getrusage(resource.RUSAGE_SELF)
    return usage.ru_utime + usage.ru_stime


def _chunks(url: str, collection: str) -> list[tuple[Any, ...]]:
    from fastcrag.retrieval.pgstore import connect

    with connect(url) as conn:
        row = conn.execute("SELECT id FROM fastcrag_collections WHERE name = %s", (collection,)).fetchone()
        assert row is not None
        return conn.execute(f"SELECT chunk_id, text FROM fastcrag_chunks_{int(row[0])} ORDER BY chunk_id").fetchall()


def _bytes_per_chunk(url: str, collection: str) -> dict[str, float]:
    """The collection's table (with TOAST), HNSW and full-text (GIN) index sizes, per chunk."""
    from fastcrag.retrieval.pgstore import connect

    with connect(url) as conn:
        row = conn.execute("SELECT id, chunks FROM fastcrag_collections WHERE name = %s", (collection,)).fetchone()
        assert row is not None
        table, chunks = f"fastcrag_chunks_{int(row[0])}", max(1, int(row[1]))
        sizes = conn.execute(
            "SELECT pg_table_size(%s), pg_relation_size(%s), pg_relation_size(%s)",
            (table, f"{table}_hnsw", f"{table}_tsv"),
        ).fetchone()
    assert sizes is not None
    return {name: round(int(size) / chunks) for name, size in zip(("table", "hnsw", "gin"), sizes, strict=True)}


def run(docs: int, ray_cpus: int, data: Path) -> dict[str, Any]:
    """Build the slice both ways; the figures."""
    import ray

    from fastcrag.config.settings import Settings
    from fastcrag.retrieval.embeddings import default_embeddings
    from fastcrag.retrieval.loaders import load_documents
    from fastcrag.retrieval.pgstore import build_pg_index
    from fastcrag.retrieval.raybuild import ray_build_index
    from fastcrag.server.postgres import start_local_postgres

    corpus = data / "scifact" / "corpus.jsonl.gz"
    with tempfile.TemporaryDirectory() as tmp:
        folder = Path(tmp) / "corpus"
        folder.mkdir()
        with gzip.open(corpus, "rt", encoding="utf-8") as fh:
            (folder / "scifact.jsonl").write_text("".join(itertools.islice(fh, docs)), encoding="utf-8")
        url = start_local_postgres(Path(tmp) / "pg", "bench_ray")

        cpu, started = _cpu_seconds(), time.perf_counter()
        single = build_pg_index(load_documents([folder]), url, default_embeddings(), "single", progress=False)
        single_s, single_cpu = time.perf_counter() - started, _cpu_seconds() - cpu

        started = time.perf_counter()
        ray.init(num_cpus=ray_cpus, include_dashboard=False, log_to_driver=False)
        try:
            on_ray = ray_build_index([folder], url, "ray", settings=Settings(), progress=False)
        finally:
            ray.shutdown()
        ray_s = time.perf_counter() - started
        same = _chunks(url, "single") == _chunks(url, "ray")
        sizes = _bytes_per_chunk(url, "single")
    return {
        "documents": single.documents_added,
        "chunks": single.chunks_added,
        "single_s": round(single_s, 1),
        "single_chunks_per_s": round(single.chunks_added / single_s, 1),
        "single_cpu_ms_per_chunk": round(1000 * single_cpu / max(1, single.chunks_added), 1),
        "ray_workers": ray_cpus,
        "ray_s": round(ray_s, 1),
        "ray_chunks_per_s": round(on_ray.chunks_added / ray_s, 1),
        "speedup": round(single_s / ray_s, 2),
        "same_chunks": same,
        "cores": os.cpu_count(),
        "bytes_per_chunk": sizes,
    }


def cmd_bench_ray(args: argparse.Namespace) -> int:
    """Run `python -m lab bench-ray`."""
    print(json.dumps(run(args.docs, args.ray_cpus, Path(args.data)), indent=2))
    return 0


def add_commands(subparsers: argparse._SubParsersAction) -> None:  # type: ignore[type-arg]
    """Add `bench-ray` to the main CLI's subparsers."""
    b = subparsers.add_parser("bench-ray", help="index build throughput: single process against Ray Data")
    b.add_argument("--docs", type=int, default=500, help="SciFact abstracts to index")
    b.add_argument("--ray-cpus", type=int, default=2, help="CPUs of the local Ray runtime (one embedding actor each)")
    b.add_argument("--data", default=str(SHARED_DATA), help="the shared data folder (holding scifact/)")
    b.set_defaults(func=cmd_bench_ray)
