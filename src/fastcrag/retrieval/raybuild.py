"""Index building on Ray Data: the documents, chunks and writes of `stream_index`, spread over a cluster.

`fastcrag index PATHS --store URL --ray [ADDRESS|auto]` runs this pipeline (Ray Data, the `ray` extra):

1. **read**: one task per file, through `loaders.read_file` (the single-process loader), with each document's
   content hash (`indexing.document_digest`);
2. **look up**: the stored hash of each source, read from Postgres per batch (and marked seen for `--prune`);
3. **deduplicate** as `stream_index` does: a text met twice in the run is indexed once, under its first source (by
   file order, then order in the file); a source met twice keeps its last text;
4. **chunk**: `indexing.chunk_document`, the single-process path's pure per-document function, so both build the
   same chunk ids, texts and hashes; unchanged documents pass through unchunked;
5. **embed**: an actor pool, one model load per actor: on GPUs when the cluster has some (`FASTRAG_RAY_NUM_GPUS`
   each), else one actor per CPU;
6. **write**: a few writer actors, each with one connection, write whole documents per transaction with
   `pgstore.write_documents`, an upsert by source and content hash (chunks and the full-text side together);
7. **finish**, on the driver: `PgWriter.prune`, and `PgWriter.finish` builds the HNSW index once and shows a new
   collection to readers.

Faults: Ray restarts a killed actor and retries a killed task, so a batch may be written twice or cut short; a cut
transaction is rolled back by Postgres, and a repeated one changes nothing (chunk ids derive from the content hash),
so no chunk is lost or duplicated. A build that stops (killed, interrupted) leaves whole documents behind; run again,
it skips them as unchanged and writes only the rest. A collection's first build stays hidden from `ask` and `serve`
until it finishes (`open_collection`); a later build replaces documents one whole document at a time.

The PATHS must be readable at the same path on every node of the cluster (a shared file system); the driver lists
the files. Ray is imported inside the functions, so this module imports without it.
"""

from __future__ import annotations

import logging
import os
import socket
import sys
import time
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING, Any

import numpy as np

from fastcrag.config.settings import Settings, is_postgres_url, redact_message, redact_url
from fastcrag.retrieval.embeddings import default_embeddings
from fastcrag.retrieval.indexing import BuildReport, chunk_document, document_digest, encode
from fastcrag.retrieval.loaders import SourceDocument, iter_files, read_file
from fastcrag.retrieval.pgstore import Collection, PgStoreError, PgWriter, connect, stored_hashes, write_documents
from fastcrag.retrieval.writing import ChunkBatch, DocumentEntry

if TYPE_CHECKING:
    import pyarrow as pa

log = logging.getLogger(__name__)

#: Logical CPUs each stage asks Ray for. Embedding is the heavy stage: each CPU actor takes most of a CPU (and runs
#: its model on one thread); reading, looking up, chunking and writing are light (I/O, hashing, tokenizing) and take
#: a small share each, so they run beside the actors instead of waiting for a free CPU.
EMBED_CPUS, LIGHT_CPUS = 0.8, 0.1
#: Documents per block out of a read task, and per batch through the chunk, embed and write stages.
READ_BLOCK_DOCS, BATCH_DOCS = 1000, 64
#: Input bytes per shuffle partition when deduplicating (and the most partitions), and per block of documents.
PARTITION_BYTES, MAX_PARTITIONS, BLOCK_BYTES = 256 * 2**20, 200, 16 * 2**20
#: Seconds to wait for a Ray cluster's address to accept a connection.
CONNECT_TIMEOUT_S = 10.0
#: Blocks per embedding actor, at least, that the documents to embed are cut into (so every actor has work).
BLOCKS_PER_ACTOR = 4
#: The document counts of a build.
STATUS_ADDED, STATUS_CHANGED, STATUS_UNCHANGED = "added", "changed", "unchanged"
COUNTS = (STATUS_ADDED, STATUS_CHANGED, STATUS_UNCHANGED, "dups")


class RayBuildError(PgStoreError):
    """The Ray build could not run (no `ray` extra, no cluster at the address, a stage failed); said in one line."""


def _ray() -> Any:
    try:
        import ray
        import ray.data
    except ImportError as exc:
        raise RayBuildError(f"`--ray` needs the `ray` extra (pip install 'fastcrag[ray]'): {exc}") from None
    return ray


@dataclass(frozen=True)
class RayPlan:
    """How many actors of each kind, and what each takes."""

    embed_actors: int
    embed_gpus: float
    writers: int

    def describe(self) -> str:
        """One line for the log."""
        where = f"{self.embed_gpus:g} GPU each" if self.embed_gpus else f"{EMBED_CPUS:g} CPU each"
        return f"{self.embed_actors} embedding actors ({where}), {self.writers} writers"


def plan(resources: dict[str, float], settings: Settings) -> RayPlan:
    """The actor pools for a cluster with these resources (`ray.cluster_resources()`): GPU actors when it has GPUs."""
    gpus, cpus = float(resources.get("GPU", 0.0)), float(resources.get("CPU", 1.0))
    if gpus > 0:
        actors = settings.ray_embed_actors or max(1, int(gpus // settings.ray_num_gpus))
        return RayPlan(actors, settings.ray_num_gpus, settings.ray_writers)
    return RayPlan(settings.ray_embed_actors or max(1, int(cpus)), 0.0, settings.ray_writers)


def start_ray(address: str, num_cpus: int | None = None) -> bool:
    """Connect to the Ray cluster at `address`; False when this process is connected already.

    `auto` is the cluster `RAY_ADDRESS` names (as in a Ray job), else a new local runtime.

    Raises:
        RayBuildError: no `ray` extra, or no cluster answers at `address`.
    """
    ray = _ray()
    if ray.is_initialized():
        return False
    if address != "auto":
        _check_reachable(address)
    try:
        if address == "auto" and not os.environ.get("RAY_ADDRESS"):
            # local workers import what this process imports: its PYTHONPATH, made absolute
            path = os.pathsep.join(
                str(Path(p).resolve()) for p in os.environ.get("PYTHONPATH", "").split(os.pathsep) if p
            )
            env = {"env_vars": {"PYTHONPATH": path}} if path else None
            ray.init(address="local", num_cpus=num_cpus, runtime_env=env, include_dashboard=False)
        elif address == "auto":
            ray.init()  # the cluster RAY_ADDRESS names; its nodes run their own installation
        else:
            ray.init(address=address)
    except (ConnectionError, RuntimeError, ValueError) as exc:
        raise RayBuildError(f"cannot reach the Ray cluster at {address!r}: {exc}") from None
    return True


def _check_reachable(address: str) -> None:
    """Fail fast when nothing listens at a `host:port` (or `ray://host:port`) address: Ray would wait for minutes.

    Raises:
        RayBuildError: the address has no port, or the connection is refused or times out.
    """
    host, _, port = address.removeprefix("ray://").rpartition(":")
    if not host or not port.isdigit():
        raise RayBuildError(
            f"--ray takes `auto` or a cluster's address (HOST:PORT or ray://HOST:PORT), not {address!r}"
        )
    try:
        socket.create_connection((host, int(port)), timeout=CONNECT_TIMEOUT_S).close()
    except OSError as exc:
        raise RayBuildError(f"no Ray cluster answers at {address!r}: {exc}") from None


# -- the stages (module functions and classes, so Ray ships them by reference) -------------------------------------
def _table(columns: dict[str, Any]) -> pa.Table:
    import pyarrow as pa

    return pa.table(columns)


def read_documents(batch: pa.Table, chunk_tokens: int, chunk_overlap: int) -> Iterator[pa.Table]:
    """Read files (`path`, `file` order) into documents with their content hash, in blocks of `READ_BLOCK_DOCS`."""
    for path, file_no in zip(batch.column("path").to_pylist(), batch.column("file").to_pylist(), strict=True):
        rows: dict[str, list[Any]] = {k: [] for k in ("source", "title", "text", "digest", "file", "line")}
        for line, doc in enumerate(read_file(Path(path))):
            digest = document_digest(doc.text, chunk_tokens, chunk_overlap)
            for key, value in zip(rows, (doc.source, doc.title, doc.text, digest, file_no, line), strict=True):
                rows[key].append(value)
            if len(rows["source"]) >= READ_BLOCK_DOCS:
                yield _table(rows)
                rows = {k: [] for k in rows}
        if rows["source"]:
            yield _table(rows)


def look_up(batch: pa.Table, url: str, collection: Collection, run_id: str | None) -> pa.Table:
    """Add each document's stored content hash (`stored`, empty when new); `run_id` marks the sources seen."""
    sources = batch.column("source").to_pylist()
    with connect(url) as conn:
        known = stored_hashes(conn, collection, list(dict.fromkeys(sources)), run_id)
    return batch.append_column("stored", _table({"s": [known.get(s, "") for s in sources]}).column("s"))


def first_of_text(group: pa.Table) -> pa.Table:
    """Of the documents sharing a text (content hash), the first in file order; `dups` counts the others."""
    order = sorted(range(group.num_rows), key=lambda i: (group["file"][i].as_py(), group["line"][i].as_py()))
    kept = group.take([order[0]])
    return kept.append_column("dups", _table({"d": [group.num_rows - 1]}).column("d"))


def last_of_source(group: pa.Table) -> pa.Table:
    """Of the documents under one source, the last in file order (as a later one replaces an earlier one)."""
    order = sorted(range(group.num_rows), key=lambda i: (group["file"][i].as_py(), group["line"][i].as_py()))
    return group.take([order[-1]])


def chunk(batch: pa.Table, chunk_tokens: int, chunk_overlap: int) -> pa.Table:
    """Cut the new and changed documents into chunks with `chunk_document`; unchanged ones are only counted."""
    import pyarrow as pa

    counts = dict.fromkeys(COUNTS, 0)
    out: dict[str, list[Any]] = {k: [] for k in ("source", "titles", "digest", "chunk_ids", "texts")}
    for row in batch.to_pylist():
        counts["dups"] += row["dups"]
        if row["stored"] == row["digest"]:
            counts[STATUS_UNCHANGED] += 1
            continue
        counts[STATUS_CHANGED if row["stored"] else STATUS_ADDED] += 1
        doc = SourceDocument(row["source"], row["title"], row["text"])
        chunked = chunk_document(doc, chunk_tokens, chunk_overlap, row["digest"])
        titles = [m["title"] for m in chunked.metadatas]  # each chunk's own: its section's title, else the document's
        values = (row["source"], titles, row["digest"], list(chunked.entry.chunk_ids), chunked.texts)
        for key, value in zip(out, values, strict=True):
            out[key].append(value)
    # the batch's counts ride on its first row (on a row without chunks when every document is unchanged)
    if not out["source"]:
        for key, value in zip(out, ("", [], "", [], []), strict=True):
            out[key].append(value)
    for key in COUNTS:
        out[key] = [counts[key]] + [0] * (len(out["source"]) - 1)
    schema = pa.schema(
        [
            ("source", pa.string()),
            ("titles", pa.list_(pa.string())),
            ("digest", pa.string()),
            ("chunk_ids", pa.list_(pa.string())),
            ("texts", pa.list_(pa.string())),
            *((key, pa.int64()) for key in COUNTS),
        ]
    )
    return pa.Table.from_pydict(out, schema=schema)


class Embed:
    """An embedding actor: loads the embedder once, then embeds each batch's chunks (float32 rows as bytes)."""

    def __init__(self, spec: str, batch_size: int) -> None:
        """Load the embedder `spec` names (`FASTRAG_EMBEDDER`); onto the actor's GPU when Ray gave it one."""
        import ray

        self.embeddings = default_embeddings(spec)
        self.batch_size = batch_size
        if ray.get_gpu_ids():
            model = getattr(self.embeddings, "model", None)
            if model is not None and hasattr(model, "to"):
                model.to("cuda")  # a torch embedder (FASTRAG_EMBEDDER=sentence-transformers or a model folder)
            else:
                log.warning("embedder %r runs on the CPU: only a torch embedder uses the GPU", spec)

    def __call__(self, batch: pa.Table) -> pa.Table:
        """Add `vectors`: each document's chunk embeddings, row after row, as float32 bytes."""
        texts_per_doc = batch.column("texts").to_pylist()
        flat = [t for texts in texts_per_doc for t in texts]
        parts = [encode(self.embeddings, flat[i : i + self.batch_size]) for i in range(0, len(flat), self.batch_size)]
        vectors = np.concatenate(parts) if parts else np.zeros((0, 0), dtype=np.float32)
        blobs, at = [], 0
        for texts in texts_per_doc:
            blobs.append(np.ascontiguousarray(vectors[at : at + len(texts)], dtype=np.float32).tobytes())
            at += len(texts)
        import pyarrow as pa

        return batch.append_column("vectors", pa.array(blobs, type=pa.binary()))


class Write:
    """A writer actor: one Postgres connection, each batch's documents in one transaction."""

    def __init__(self, url: str, collection: Collection, run_id: str) -> None:
        """Connect to the store."""
        self.url, self.collection, self.run_id = url, collection, run_id
        self.conn = connect(url)

    def __call__(self, batch: pa.Table) -> pa.Table:
        """Write the batch; returns one row: its document counts (`COUNTS`) and the chunks written."""
        entries: list[DocumentEntry] = []
        chunks = ChunkBatch([], [], [], None)
        vectors: list[Any] = []
        dim = self.collection.dim
        rows = batch.to_pylist()
        for row in rows:
            if not row["chunk_ids"]:
                continue  # a row that only carries counts
            entries.append(DocumentEntry(row["source"], row["digest"], tuple(row["chunk_ids"])))
            chunks.texts.extend(row["texts"])
            chunks.ids.extend(row["chunk_ids"])
            chunks.metadatas.extend({"source": row["source"], "title": title} for title in row["titles"])
            vectors.append(np.frombuffer(row["vectors"], dtype=np.float32).reshape(-1, dim))
        chunks.vectors = np.concatenate(vectors) if vectors else np.zeros((0, dim), dtype=np.float32)
        if entries:
            write_documents(self.conn, self.collection, self.run_id, entries, chunks)
        return _table({**{k: [sum(int(r[k]) for r in rows)] for k in COUNTS}, "chunks": [len(chunks.ids)]})


# -- the driver ----------------------------------------------------------------------------------------------------
def ray_build_index(
    paths: list[Path],
    url: str,
    collection: str = "default",
    *,
    address: str = "auto",
    settings: Settings | None = None,
    batch_size: int = 256,
    progress: bool = True,
    prune: bool = False,
) -> BuildReport:
    """Index files and folders into a Postgres collection on Ray (see the module's docstring).

    Args:
        paths: Files and folders (readable at the same path on every node).
        url: The Postgres store.
        collection: The collection (created when missing; hidden from readers until its first build finishes).
        address: A Ray cluster's address (`ray://head:10001`, `head:6379`), or `auto`: `RAY_ADDRESS` when set (a
            Ray job), else a new local runtime; the runtime this process already runs, when it runs one.
        settings: The embedder, chunk settings and actor pools (`FASTRAG_*`); the environment's when None.
        batch_size: Chunks per forward pass in an embedding actor.
        progress: Show progress bars (Ray Data's per stage, and the chunks written).
        prune: Remove documents whose source is not among the files' documents.

    Raises:
        RayBuildError: no `ray` extra, no cluster at `address`, or a stage failed (its error, in one line).
        PgStoreError: the store is unreachable, the collection does not fit, or another build is writing it.
    """
    settings = settings or Settings()
    if not is_postgres_url(url):
        raise PgStoreError(f"the Ray build writes into a Postgres store (postgresql://...), not {redact_url(url)!r}")
    ray = _ray()
    files = list(dict.fromkeys(str(p.resolve()) for p in iter_files(paths)))
    started = time.perf_counter()
    embeddings = default_embeddings(settings.embedder)
    chunk_settings = (settings.chunk_tokens, settings.chunk_overlap)
    writer = PgWriter(url, embeddings, collection, chunk_settings=chunk_settings, prune=prune)
    own_runtime = False
    report = BuildReport()
    try:
        own_runtime = start_ray(address)
        ray.data.DataContext.get_current().enable_progress_bars = progress
        pools = plan(ray.cluster_resources(), settings)
        log.info("Ray build of %d files: %s", len(files), pools.describe())
        try:
            if files:
                docs = _documents(ray, files, url, writer, chunk_settings, pools)
                if docs.count():
                    _embed_and_write(ray, docs, url, writer, settings, pools, batch_size, progress, report)
        except ray.exceptions.RayError as exc:
            raise RayBuildError(f"the Ray build failed: {redact_message(_first_line(exc), url)}") from None
        report.documents_removed = writer.prune()
        changed = bool(report.chunks_added or report.documents_changed or report.documents_removed)
        report.chunks_total = writer.finish(changed)
        report.seconds = time.perf_counter() - started
        return report
    finally:
        writer.close()
        if own_runtime:
            ray.shutdown()


def _documents(
    ray: Any, files: list[str], url: str, writer: PgWriter, chunk_settings: tuple[int, int], pools: RayPlan
) -> Any:
    """The run's documents, read, looked up and deduplicated, in blocks for the actors (a materialized dataset)."""
    tokens, overlap = chunk_settings
    light = {"num_cpus": LIGHT_CPUS}
    ds = ray.data.from_items([{"path": p, "file": i} for i, p in enumerate(files)], override_num_blocks=len(files))
    kw = {"chunk_tokens": tokens, "chunk_overlap": overlap}
    ds = ds.map_batches(read_documents, batch_size=1, batch_format="pyarrow", fn_kwargs=kw, **light)
    lookup = {"url": url, "collection": writer.collection, "run_id": writer.run_id if writer.prune_unseen else None}
    ds = ds.map_batches(look_up, batch_size=READ_BLOCK_DOCS, batch_format="pyarrow", fn_kwargs=lookup, **light)
    # Deduplicating needs every document (two shuffles), so it runs, and its result is kept in the object store
    # (spilled to disk when large), before the actor pools start: these all-to-all steps take whole CPUs, and must
    # not wait for CPUs the actors hold.
    size = sum(os.path.getsize(f) for f in files)
    partitions = max(1, min(MAX_PARTITIONS, size // PARTITION_BYTES))
    ds = ds.groupby("digest", num_partitions=partitions).map_groups(first_of_text, batch_format="pyarrow")
    ds = ds.groupby("source", num_partitions=partitions).map_groups(last_of_source, batch_format="pyarrow")
    blocks = max(pools.embed_actors * BLOCKS_PER_ACTOR, size // BLOCK_BYTES)
    return ds.repartition(blocks).materialize()


def _embed_and_write(
    ray: Any,
    docs: Any,
    url: str,
    writer: PgWriter,
    settings: Settings,
    pools: RayPlan,
    batch_size: int,
    progress: bool,
    report: BuildReport,
) -> None:
    """Chunk, embed (actor pool) and write (writer actors) the new and changed documents; count them all."""
    from tqdm import tqdm

    light = {"num_cpus": LIGHT_CPUS}
    # batches small enough that every actor has some, when the documents are few
    per_batch = max(1, min(BATCH_DOCS, -(-docs.count() // (pools.embed_actors * BLOCKS_PER_ACTOR))))
    kw = {"chunk_tokens": settings.chunk_tokens, "chunk_overlap": settings.chunk_overlap}
    ds = docs.map_batches(chunk, batch_size=per_batch, batch_format="pyarrow", fn_kwargs=kw, **light)
    embed_resources = {"num_gpus": pools.embed_gpus} if pools.embed_gpus else {"num_cpus": EMBED_CPUS}
    threads = str(os.cpu_count() or 1) if pools.embed_gpus else "1"
    ds = ds.map_batches(
        Embed,
        batch_size=per_batch,
        batch_format="pyarrow",
        fn_constructor_kwargs={"spec": settings.embedder, "batch_size": batch_size},
        compute=ray.data.ActorPoolStrategy(size=pools.embed_actors),
        runtime_env={"env_vars": {"FASTRAG_ORT_THREADS": threads, "OMP_NUM_THREADS": threads}},
        **embed_resources,
    )
    ds = ds.map_batches(
        Write,
        batch_size=per_batch,
        batch_format="pyarrow",
        fn_constructor_kwargs={"url": url, "collection": writer.collection, "run_id": writer.run_id},
        compute=ray.data.ActorPoolStrategy(size=pools.writers),
        **light,
    )
    total = docs.count()
    with tqdm(total=total, unit="doc", desc="indexing", disable=not progress, file=sys.stderr) as bar:
        for row in ds.iter_rows():
            report.documents_added += int(row[STATUS_ADDED])
            report.documents_changed += int(row[STATUS_CHANGED])
            report.documents_unchanged += int(row[STATUS_UNCHANGED])
            report.documents_seen += int(row[STATUS_ADDED] + row[STATUS_CHANGED] + row[STATUS_UNCHANGED] + row["dups"])
            report.chunks_added += int(row["chunks"])
            bar.update(int(row[STATUS_ADDED] + row[STATUS_CHANGED] + row[STATUS_UNCHANGED]))


def _first_line(exc: BaseException) -> str:
    """The innermost error of a Ray failure, in one line (Ray wraps a stage's error in its own, with a traceback)."""
    cause = getattr(exc, "cause", None)
    if isinstance(cause, BaseException) and cause is not exc:
        return _first_line(cause)
    lines = [line.strip() for line in str(exc).splitlines() if line.strip()]
    return f"{type(exc).__name__}: {lines[-1] if lines else ''}"
