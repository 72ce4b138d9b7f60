"""`python -m lab bench-store`: vector stores at scale (FAISS flat, FAISS HNSW, pgvector HNSW) and indexing memory.

Per size it reports query latency (P50/P95, one query at a time, as a request would), recall@10 against exact
search, and index build throughput. Base vectors are synthetic but shaped like the real ones: a Gaussian with the
mean and covariance of real embeddings (the default embedder, all-MiniLM-L6-v2) of a corpus sample, or
(`--distribution perturb`) noisy copies of those real vectors; both are normalised to unit length. Queries are real
embeddings of held-out texts (SciFact claims when the shared data is there). It also measures the peak RSS of
the real streaming indexing path (documents -> chunks -> batches -> the Postgres sink) at two corpus sizes, each
in its own process, to show memory stays flat as the corpus grows.
"""

from __future__ import annotations

import argparse
import gzip
import hashlib
import json
import os
import resource
import subprocess
import sys
import tempfile
import time
import zlib
from collections.abc import Iterator, Sequence
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import Any

import numpy as np
from langchain_core.embeddings import Embeddings
from platformdirs import user_cache_dir

from fastcrag.config.settings import HNSW_BUILD_MEMORY_MB, HNSW_EF_CONSTRUCTION, HNSW_M
from fastcrag.fileio import write_json_atomic
from fastcrag.measures import percentile
from lab.data import SHARED_DATA

STORES = ("faiss-flat", "faiss-hnsw", "pgvector-hnsw")
TARGET_RECALL, TARGET_P50_MS, TARGET_RSS_GROWTH = 0.95, 20.0, 0.20
DATA = str(SHARED_DATA)


@dataclass
class StoreResult:
    """One store at one size (and one ef_search for the HNSW stores)."""

    store: str
    size: int
    build_s: float
    rows_per_s: float
    ef_search: int | None
    p50_ms: float
    p95_ms: float
    recall_at_10: float
    note: str = ""


@dataclass
class RssResult:
    """Peak resident memory of one indexing run in its own process."""

    chunks: int
    peak_rss_mb: float
    start_rss_mb: float
    seconds: float


@dataclass
class Report:
    """Everything one `bench-store` run measured."""

    vectors: str
    queries: str
    machine: str
    results: list[StoreResult] = field(default_factory=list)
    rss: list[RssResult] = field(default_factory=list)
    notes: list[str] = field(default_factory=list)


class SyntheticEmbeddings(Embeddings):
    """Deterministic unit vectors from a hash of the text (no model): the indexing-memory runs' embedder."""

    name = "bench-synthetic"

    def __init__(self, dimension: int = 384) -> None:
        """Vectors of `dimension` floats."""
        self.dimension = dimension

    def encode(self, texts: list[str], show_progress_bar: bool = False) -> np.ndarray:
        """One pseudo-random unit vector per text, the same for the same text."""
        out = np.empty((len(texts), self.dimension), dtype=np.float32)
        for i, text in enumerate(texts):
            out[i] = np.random.default_rng(zlib.crc32(text.encode())).standard_normal(self.dimension)
        out /= np.linalg.norm(out, axis=1, keepdims=True)
        return out

    def embed_documents(self, texts: list[str]) -> list[list[float]]:
        """Embed passages."""
        return self.encode(texts).tolist()  # type: ignore[no-any-return]

    def embed_query(self, text: str) -> list[float]:
        """Embed one query."""
        return self.encode([text])[0].tolist()  # type: ignore[no-any-return]


# -- vectors -----------------------------------------------------------------------------------------------------
def _texts(data_root: Path, fit: int, queries: int, seed: int) -> tuple[list[str], list[str], str]:
    """Corpus texts to fit the distribution on and held-out query texts, and where they came from."""
    rng = np.random.default_rng(seed)
    corpus, claims = data_root / "scifact" / "corpus.jsonl.gz", data_root / "scifact" / "queries.jsonl"
    if corpus.exists() and claims.exists():
        with gzip.open(corpus, "rt", encoding="utf-8") as fh:
            rows = [json.loads(line) for line in fh if line.strip()]
        with open(claims, encoding="utf-8") as fh:
            asked = [str(json.loads(line)["text"]) for line in fh if line.strip()]
        picked = rng.choice(len(rows), size=min(fit, len(rows)), replace=False)
        texts = [f"{rows[i].get('title', '')}\n\n{rows[i].get('text', '')}" for i in picked]
        chosen = rng.choice(len(asked), size=min(queries, len(asked)), replace=False)
        return texts, [asked[i] for i in chosen], f"SciFact ({corpus.parent})"
    # the CLI imports this module for its parser: the retrieval stack (about 1 s) loads when the bench runs
    from fastcrag.retrieval.loaders import python_reference
    from fastcrag.retrieval.text import chunk_text

    chunks = [c for doc in python_reference() for c in chunk_text(doc.text)]
    order = rng.permutation(len(chunks))
    held = [chunks[i] for i in order[:queries]]
    return [chunks[i] for i in order[queries : queries + fit]], held, "the embedded Python reference"


def real_vectors(data_root: Path, fit: int, queries: int, seed: int) -> tuple[np.ndarray, np.ndarray, str]:
    """Real embeddings (the default embedder) of a corpus sample and of held-out query texts."""
    # the retrieval stack (about 1 s) loads when the bench runs, not when the CLI builds its parser
    from fastcrag.retrieval.embeddings import default_embeddings
    from fastcrag.retrieval.indexing import encode

    fit_texts, query_texts, origin = _texts(data_root, fit, queries, seed)
    embedder = default_embeddings()
    name = str(getattr(embedder, "name", type(embedder).__name__))
    described = f"{name} embeddings of {len(fit_texts)} texts from {origin}"
    # embedding the sample takes minutes on a small CPU: keep it, keyed by the embedder and the exact texts
    key = hashlib.sha256("\0".join([name, *fit_texts, "\1", *query_texts]).encode()).hexdigest()[:24]
    cached = Path(user_cache_dir("fastcrag")) / "bench-store" / f"{key}.npz"
    if cached.exists():
        with np.load(cached, allow_pickle=False) as data:
            return data["sample"], data["queries"], described
    sample = encode(embedder, fit_texts)
    asked = encode(embedder, query_texts)
    cached.parent.mkdir(parents=True, exist_ok=True)
    staging = cached.with_suffix(".tmp.npz")
    np.savez(staging, sample=sample, queries=asked)
    os.replace(staging, cached)
    return sample, asked, described


def synthetic_vectors(sample: np.ndarray, n: int, seed: int, chunk: int = 100_000) -> np.ndarray:
    """`n` unit vectors from a Gaussian with the sample's mean and covariance (float32)."""
    mean = sample.mean(axis=0).astype(np.float64)
    cov = np.cov(sample, rowvar=False).astype(np.float64)
    lower = np.linalg.cholesky(cov + 1e-6 * np.eye(cov.shape[0]))
    rng = np.random.default_rng(seed)
    out = np.empty((n, sample.shape[1]), dtype=np.float32)
    for start in range(0, n, chunk):
        stop = min(n, start + chunk)
        block = mean + rng.standard_normal((stop - start, sample.shape[1])) @ lower.T
        out[start:stop] = block / np.linalg.norm(block, axis=1, keepdims=True)
    return out


def perturbed_vectors(sample: np.ndarray, n: int, seed: int, chunk: int = 100_000) -> tuple[np.ndarray, float]:
    """`n` unit vectors, each a real sample vector plus noise shaped by the sample's covariance.

    The noise is scaled so a copy's cosine to its parent equals the sample's mean nearest-neighbour cosine: copies
    stay as close to real points as real points are to each other. Returns the vectors and that cosine.
    """
    sims = sample @ sample.T
    np.fill_diagonal(sims, -np.inf)
    nn_cos = float(np.clip(sims.max(axis=1).mean(), 1e-3, 0.999))
    cov = np.cov(sample, rowvar=False).astype(np.float64)
    lower = np.linalg.cholesky(cov + 1e-6 * np.eye(cov.shape[0]))
    scale = np.sqrt((1.0 / nn_cos**2 - 1.0) / float(np.trace(cov)))
    rng = np.random.default_rng(seed)
    out = np.empty((n, sample.shape[1]), dtype=np.float32)
    for start in range(0, n, chunk):
        stop = min(n, start + chunk)
        parents = sample[rng.integers(0, len(sample), stop - start)].astype(np.float64)
        block = parents + scale * (rng.standard_normal((stop - start, sample.shape[1])) @ lower.T)
        out[start:stop] = block / np.linalg.norm(block, axis=1, keepdims=True)
    return out, nn_cos


# -- measuring ---------------------------------------------------------------------------------------------------
def _percentiles(samples_ms: Sequence[float]) -> tuple[float, float]:
    return percentile(samples_ms, 50), percentile(samples_ms, 95)


def _recall(found: Sequence[Sequence[int]], truth: np.ndarray, k: int) -> float:
    hits = [len(set(map(int, f[:k])) & set(map(int, t[:k]))) / k for f, t in zip(found, truth, strict=True)]
    return float(np.mean(hits))


def _timed(search: Any, queries: np.ndarray, warmup: int = 10) -> tuple[list[list[int]], list[float]]:
    for q in queries[:warmup]:
        search(q)
    found, times = [], []
    for q in queries:
        started = time.perf_counter()
        ids = search(q)
        times.append((time.perf_counter() - started) * 1000)
        found.append(ids)
    return found, times


def bench_faiss(
    base: np.ndarray,
    queries: np.ndarray,
    k: int,
    ef_values: Sequence[int],
    stores: Sequence[str],
    m: int = HNSW_M,
    ef_construction: int = HNSW_EF_CONSTRUCTION,
) -> tuple[np.ndarray, list[StoreResult]]:
    """Exact ground truth from a flat index, then the flat and HNSW stores' speed and recall."""
    import faiss  # loaded when the bench runs, not with the CLI parser

    n, dim = base.shape
    results: list[StoreResult] = []
    started = time.perf_counter()
    flat = faiss.IndexFlatIP(dim)
    flat.add(base)
    flat_s = time.perf_counter() - started
    truth = flat.search(queries, k)[1]
    if "faiss-flat" in stores:
        found, times = _timed(lambda q: flat.search(q[None, :], k)[1][0].tolist(), queries)
        p50, p95 = _percentiles(times)
        results.append(
            StoreResult("faiss-flat", n, flat_s, n / flat_s, None, p50, p95, _recall(found, truth, k), "exact")
        )
    if "faiss-hnsw" in stores:
        started = time.perf_counter()
        hnsw = faiss.IndexHNSWFlat(dim, m, faiss.METRIC_INNER_PRODUCT)
        hnsw.hnsw.efConstruction = ef_construction
        hnsw.add(base)
        build_s = time.perf_counter() - started
        for ef in ef_values:
            hnsw.hnsw.efSearch = ef
            found, times = _timed(lambda q: hnsw.search(q[None, :], k)[1][0].tolist(), queries)
            p50, p95 = _percentiles(times)
            results.append(
                StoreResult(
                    "faiss-hnsw", n, build_s, n / build_s, ef, p50, p95, _recall(found, truth, k),
                    f"M={m}, efConstruction={ef_construction}",
                )
            )  # fmt: skip
        del hnsw
    return truth, results


def bench_pgvector(
    url: str,
    base: np.ndarray,
    queries: np.ndarray,
    truth: np.ndarray,
    k: int,
    ef_values: Sequence[int],
    memory_limit_mb: int = HNSW_BUILD_MEMORY_MB,
    m: int = HNSW_M,
    ef_construction: int = HNSW_EF_CONSTRUCTION,
) -> list[StoreResult]:
    """Load `base` into a fresh collection with COPY (binary), build its HNSW index, and query it through PgStore."""
    from psycopg import sql  # the optional `postgres` extra

    from fastcrag.retrieval.pgstore import PgStore, build_hnsw_index, connect, open_collection

    n, dim = base.shape
    name = f"bench-store-{n}"
    embedder = SyntheticEmbeddings(dim)
    conn = connect(url)
    try:
        _drop_collection(conn, name)
        collection = open_collection(conn, url, name, embedder, create=True)
        table = sql.Identifier(collection.table)
        conn.execute(sql.SQL("DROP INDEX {}").format(sql.Identifier(f"{collection.table}_hnsw")))  # load, then index
        started = time.perf_counter()
        with conn.transaction(), conn.cursor() as cur:
            statement = sql.SQL("COPY {} (chunk_id, source, title, text, embedding) FROM STDIN WITH (FORMAT BINARY)")
            with cur.copy(statement.format(table)) as copy:
                copy.set_types(["text", "text", "text", "text", "vector"])
                for i in range(n):
                    copy.write_row((f"v{i}", "bench", "bench", f"vector {i}", base[i]))
        copy_s = time.perf_counter() - started
        conn.execute("UPDATE fastcrag_collections SET chunks = %s WHERE id = %s", (n, collection.id))
        started = time.perf_counter()
        used = build_hnsw_index(conn, collection, m=m, ef_construction=ef_construction, memory_limit_mb=memory_limit_mb)
        index_s = time.perf_counter() - started
        conn.execute(sql.SQL("ANALYZE {}").format(table))
    finally:
        conn.close()
    build_s = copy_s + index_s
    note = (
        f"COPY (binary) {copy_s:.1f} s + HNSW index {index_s:.1f} s (m={m}, ef_construction="
        f"{ef_construction}, {used}); queries through PgStore"
    )
    results = []
    with PgStore(url, embedder, name, pool_size=1) as store:
        for ef in ef_values:
            search = store.similarity_search_by_vector_with_score

            def ids(q: np.ndarray, ef: int = ef, search: Any = search) -> list[int]:
                return [int(doc.metadata["chunk_id"][1:]) for doc, _ in search(q, k, ef_search=ef)]

            found, times = _timed(ids, queries)
            p50, p95 = _percentiles(times)
            results.append(
                StoreResult("pgvector-hnsw", n, build_s, n / build_s, ef, p50, p95, _recall(found, truth, k), note)
            )
    conn = connect(url)
    try:
        _drop_collection(conn, name)
    finally:
        conn.close()
    return results


def _drop_collection(conn: Any, name: str) -> None:
    from psycopg import sql  # the optional `postgres` extra

    with conn.transaction():
        row = conn.execute("DELETE FROM fastcrag_collections WHERE name = %s RETURNING id", (name,)).fetchone()
        if row is not None:
            conn.execute(sql.SQL("DROP TABLE IF EXISTS {}").format(sql.Identifier(f"fastcrag_chunks_{int(row[0])}")))


# -- indexing memory ---------------------------------------------------------------------------------------------
def synthetic_documents(n: int) -> Iterator[Any]:
    """`n` short documents of one chunk each, generated on the fly (nothing held in memory)."""
    from fastcrag.retrieval.loaders import SourceDocument  # loaded when the bench runs, not with the CLI parser

    for i in range(n):
        yield SourceDocument(
            f"bench-{i}", "bench", f"Synthetic passage {i} about topic {i % 97}, subject {i % 89} and case {i % 83}."
        )


def _rss_child(url: str, chunks: int, collection: str) -> None:
    """Index `chunks` synthetic one-chunk documents through the real streaming path; print peak RSS as JSON."""
    from fastcrag.retrieval.pgstore import build_pg_index  # loaded when the bench runs, not with the CLI parser

    started = time.perf_counter()
    before = _peak_rss_mb()
    report = build_pg_index(synthetic_documents(chunks), url, SyntheticEmbeddings(), collection, progress=False)
    out = {
        "chunks": report.chunks_total,
        "peak_rss_mb": _peak_rss_mb(),
        "start_rss_mb": before,
        "seconds": time.perf_counter() - started,
    }
    print(json.dumps(out))


def _peak_rss_mb() -> float:
    """This process's peak resident memory in MB.

    `VmHWM` from /proc where there is one: `ru_maxrss` of a child started by a large parent carries the parent's
    high-water mark across fork and exec on Linux, so it would report the parent's memory, not the child's.
    """
    try:
        for line in Path("/proc/self/status").read_text(encoding="utf-8").splitlines():
            if line.startswith("VmHWM:"):
                return int(line.split()[1]) / 1024
    except OSError:
        pass
    return resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024  # kilobytes on Linux


def bench_rss(url: str, sizes: Sequence[int]) -> list[RssResult]:
    """Peak RSS of indexing each size into a fresh collection, each in a fresh process."""
    from fastcrag.retrieval.pgstore import connect  # loaded when the bench runs, not with the CLI parser

    results = []
    for n in sizes:
        collection = f"bench-rss-{n}"
        conn = connect(url)
        try:
            _drop_collection(conn, collection)
        finally:
            conn.close()
        run = subprocess.run(
            [sys.executable, "-m", "lab.benchmarks.bench_store", "rss-child", url, str(n), collection],
            capture_output=True,
            text=True,
            check=False,
        )
        if run.returncode != 0:
            tail = run.stderr.strip().splitlines()[-1:] or ["no output"]
            raise RuntimeError(f"the indexing run of {n} chunks failed: {tail[0]}")
        data = json.loads(run.stdout.strip().splitlines()[-1])
        results.append(
            RssResult(int(data["chunks"]), data["peak_rss_mb"], data["start_rss_mb"], float(data["seconds"]))
        )
        conn = connect(url)
        try:
            _drop_collection(conn, collection)
        finally:
            conn.close()
    return results


# -- the command -------------------------------------------------------------------------------------------------
def render(report: Report) -> str:
    """The report as text, with the targets."""
    lines = [
        "python -m lab bench-store",
        f"machine: {report.machine}",
        f"base vectors: synthetic, unit-normalised: {report.vectors}",
        f"queries: {report.queries}",
        f"targets: recall@10 >= {TARGET_RECALL} with query P50 <= {TARGET_P50_MS:g} ms for the ANN stores at 1M "
        f"vectors; indexing peak RSS at the larger size within {TARGET_RSS_GROWTH:.0%} of the smaller",
        "",
        f"{'store':<15}{'vectors':>10}{'build s':>10}{'rows/s':>10}{'ef':>6}{'P50 ms':>9}{'P95 ms':>9}"
        f"{'recall@10':>11}  verdict",
    ]
    for r in report.results:
        if r.store == "faiss-flat":
            verdict = "exact baseline"
        else:
            ok = r.recall_at_10 >= TARGET_RECALL and r.p50_ms <= TARGET_P50_MS
            scope = "" if r.size >= 1_000_000 else f" (target is at 1M; this is {r.size:,})"
            verdict = ("meets target" if ok else "misses target") + scope
        ef = "-" if r.ef_search is None else str(r.ef_search)
        lines.append(
            f"{r.store:<15}{r.size:>10,}{r.build_s:>10.1f}{r.rows_per_s:>10,.0f}{ef:>6}{r.p50_ms:>9.2f}"
            f"{r.p95_ms:>9.2f}{r.recall_at_10:>11.3f}  {verdict}"
        )
    for r in report.results:
        if r.note and r.store == "pgvector-hnsw":
            lines.append(f"  pgvector-hnsw {r.size:,}: {r.note}")
            break
    if report.rss:
        lines += [
            "",
            "indexing peak RSS (VmHWM of a fresh process; the real streaming path into the Postgres sink, synthetic "
            "one-chunk documents and a hash embedder in place of the model):",
        ]
        for rss in report.rss:
            lines.append(
                f"  {rss.chunks:>9,} chunks: {rss.peak_rss_mb:8.1f} MB  ({rss.chunks / rss.seconds:,.0f} chunks/s)"
            )
        if len(report.rss) >= 2:
            small, large = report.rss[0], report.rss[-1]
            growth = large.peak_rss_mb / small.peak_rss_mb - 1
            verdict = "meets" if growth <= TARGET_RSS_GROWTH else "misses"
            lines.append(
                f"  growth {small.chunks:,} -> {large.chunks:,} chunks: {growth:+.1%} ({verdict} the "
                f"<= {TARGET_RSS_GROWTH:.0%} target)"
            )
    lines += [f"note: {n}" for n in report.notes]
    return "\n".join(lines)


def run(args: argparse.Namespace) -> int:
    """Run the benchmark and print (and optionally write) the report."""
    from fastcrag.evaluation.common import machine_note  # loaded when the bench runs, not with the CLI parser

    stores = [s.strip() for s in args.stores.split(",") if s.strip()]
    unknown = sorted(set(stores) - set(STORES))
    if unknown:
        print(
            f"fastcrag: error: unknown store(s) {', '.join(unknown)}; choose from {', '.join(STORES)}", file=sys.stderr
        )
        return 2
    sample, queries, origin = real_vectors(Path(args.data_root), args.fit_sample, args.queries, args.seed)
    report = Report(
        vectors=f"a Gaussian with the mean and covariance of {origin}",
        queries=f"{len(queries)} real embeddings of held-out texts (not in the fitted sample)",
        machine=machine_note(),
    )
    url = args.store
    needs_pg = "pgvector-hnsw" in stores or bool(args.rss_sizes)
    with tempfile.TemporaryDirectory(prefix="fastcrag-bench-store-") as scratch:
        if needs_pg and not url:
            from fastcrag.server.postgres import start_local_postgres  # pgserver: the optional `postgres` extra

            url = start_local_postgres(Path(scratch) / "pg", "fastcrag_bench")
            report.notes.append("Postgres: the bundled local server (pgserver: Postgres 16, pgvector 0.6), Unix socket")
        for n in args.sizes:
            print(f"bench-store: {n:,} vectors ...", file=sys.stderr, flush=True)
            if args.distribution == "perturb":
                base, nn_cos = perturbed_vectors(sample, n, args.seed + n)
                report.vectors = (
                    f"perturbed copies of {origin} (noise from their covariance, scaled so a copy's cosine to its "
                    f"parent is the sample's mean nearest-neighbour cosine, {nn_cos:.3f})"
                )
            else:
                base = synthetic_vectors(sample, n, args.seed + n)
            truth, results = bench_faiss(
                base, queries, args.k, args.ef_search, stores, m=args.hnsw_m, ef_construction=args.ef_construction
            )
            report.results += results
            if "pgvector-hnsw" in stores:
                report.results += bench_pgvector(
                    url,
                    base,
                    queries,
                    truth,
                    args.k,
                    args.ef_search,
                    memory_limit_mb=args.hnsw_build_memory,
                    m=args.hnsw_m,
                    ef_construction=args.ef_construction,
                )
            del base
        if args.rss_sizes:
            print(f"bench-store: indexing RSS at {args.rss_sizes} chunks ...", file=sys.stderr, flush=True)
            report.rss = bench_rss(url, args.rss_sizes)
    text = render(report)
    print(text)
    if args.out:
        write_json_atomic(Path(args.out), asdict(report))
    return 0


def add_commands(subparsers: argparse._SubParsersAction) -> None:  # type: ignore[type-arg]
    """Add `bench-store` to the main CLI's subparsers."""
    b = subparsers.add_parser(
        "bench-store", help="vector stores at scale: latency, recall@10, build throughput; indexing memory"
    )
    b.add_argument("--sizes", type=int, nargs="+", default=[100_000, 1_000_000], help="vectors per run")
    b.add_argument("--stores", default=",".join(STORES), help=f"comma-separated, from {', '.join(STORES)}")
    b.add_argument("--ef-search", type=int, nargs="+", default=[40, 100], help="HNSW ef_search values to measure")
    b.add_argument("--queries", type=int, default=200, help="held-out real query vectors")
    b.add_argument("--fit-sample", type=int, default=1500, help="real corpus embeddings the distribution is fitted on")
    b.add_argument("--k", type=int, default=10, help="neighbours per query (recall@k)")
    b.add_argument(
        "--distribution",
        choices=("gaussian", "perturb"),
        default="gaussian",
        help="base vectors: a Gaussian fitted to the real sample (mean, covariance), or noisy copies of real vectors",
    )
    b.add_argument(
        "--rss-sizes",
        type=int,
        nargs="*",
        default=[10_000, 100_000],
        help="chunks per indexing-memory run (none: skip)",
    )
    b.add_argument("--hnsw-m", type=int, default=HNSW_M, help=f"HNSW graph degree m (default: {HNSW_M})")
    b.add_argument(
        "--ef-construction",
        type=int,
        default=HNSW_EF_CONSTRUCTION,
        help=f"HNSW ef_construction (default: {HNSW_EF_CONSTRUCTION})",
    )
    b.add_argument(
        "--hnsw-build-memory",
        type=int,
        default=HNSW_BUILD_MEMORY_MB,
        metavar="MB",
        help="most maintenance_work_mem for pgvector's HNSW build (past it the build goes to disk, much slower)",
    )
    b.add_argument("--store", help="Postgres URL to use (default: start the bundled one in a temporary folder)")
    b.add_argument("--data-root", default=DATA, help="shared data folder holding scifact/")
    b.add_argument("--seed", type=int, default=2026)
    b.add_argument("--out", help="also write the report as JSON here")
    b.set_defaults(func=run)


if __name__ == "__main__":  # the indexing-memory child: python -m lab.benchmarks.bench_store rss-child URL N NAME
    if len(sys.argv) == 5 and sys.argv[1] == "rss-child":
        _rss_child(sys.argv[2], int(sys.argv[3]), sys.argv[4])
    else:
        print("usage: python -m lab.benchmarks.bench_store rss-child URL CHUNKS COLLECTION", file=sys.stderr)
        sys.exit(2)
