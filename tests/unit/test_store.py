"""FAISS store persistence, incremental indexing, loaders and chunking (a hash embedder stands in for the model)."""

from __future__ import annotations

import gzip
import json
from pathlib import Path

import pytest

from fastcrag.retrieval.indexing import build_index
from fastcrag.retrieval.loaders import SourceDocument, load_documents, python_reference
from fastcrag.retrieval.store import FaissStore, IndexLoadError
from fastcrag.retrieval.text import chunk_text, count_tokens, split_sentences

from fakes import ALPHA, BETA, SECTIONED, HashEmbeddings

DOCS = [
    SourceDocument("a", "A", "The Eiffel Tower is in Paris. It opened in 1889."),
    SourceDocument("b", "B", "Bananas are yellow. They grow in the tropics."),
]


def build(folder: Path, docs: list[SourceDocument]) -> object:
    return build_index(docs, folder, embeddings=HashEmbeddings(), chunk_tokens=32, chunk_overlap=8, progress=False)


def test_roundtrip_search(tmp_path: Path) -> None:
    build(tmp_path, DOCS)
    store = FaissStore.load(tmp_path, HashEmbeddings())
    hits = store.similarity_search("eiffel tower paris", k=1)
    assert hits[0].metadata["source"] == "a" and hits[0].metadata["chunk_id"]
    assert "bi_score" in hits[0].metadata
    assert not list(tmp_path.glob(".tmp-*")) and len(list(tmp_path.glob("v-*"))) == 1


def test_rerun_adds_only_new_or_changed_documents(tmp_path: Path) -> None:
    first = build(tmp_path, DOCS)
    assert (first.documents_added, first.chunks_total) == (2, 2)
    again = build(tmp_path, DOCS)
    assert (
        again.documents_added,
        again.documents_changed,
        again.documents_unchanged,
        again.chunks_added,
    ) == (0, 0, 2, 0)
    changed = build(
        tmp_path,
        [DOCS[0], SourceDocument("b", "B", "Apples are red."), SourceDocument("c", "C", "Cats sleep a lot.")],
    )
    assert (changed.documents_added, changed.documents_changed, changed.documents_unchanged) == (1, 1, 1)
    store = FaissStore.load(tmp_path, HashEmbeddings())
    assert len(store) == 3 and all("Bananas" not in c["text"] for c in store.chunks)


def test_duplicate_documents_are_indexed_once(tmp_path: Path) -> None:
    report = build(tmp_path, [DOCS[0], SourceDocument("a-copy", "A", DOCS[0].text)])
    assert report.chunks_total == 1


def test_missing_truncated_and_out_of_step_indexes_are_clear_errors(tmp_path: Path) -> None:
    with pytest.raises(IndexLoadError, match="no index"):
        FaissStore.load(tmp_path / "missing", HashEmbeddings())
    build(tmp_path, DOCS)
    version = next(tmp_path.glob("v-*"))
    chunks = (version / "chunks.jsonl").read_text()
    (version / "chunks.jsonl").write_text(chunks.splitlines()[0] + "\n")
    with pytest.raises(IndexLoadError, match="out of step"):
        FaissStore.load(tmp_path, HashEmbeddings())
    (version / "chunks.jsonl").write_text(chunks)
    data = (version / "index.faiss").read_bytes()
    (version / "index.faiss").write_bytes(data[: len(data) // 2])
    with pytest.raises(IndexLoadError, match="damaged"):
        FaissStore.load(tmp_path, HashEmbeddings())


def test_interrupted_save_leaves_previous_version(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    build(tmp_path, DOCS)
    import fastcrag.retrieval.store as store_module

    def boom(*args: object) -> None:
        raise KeyboardInterrupt

    monkeypatch.setattr(store_module.os, "replace", boom)  # killed before the pointer file is swapped
    with pytest.raises(KeyboardInterrupt):
        build(tmp_path, [SourceDocument("c", "C", "Cats sleep a lot.")])
    monkeypatch.undo()
    assert len(FaissStore.load(tmp_path, HashEmbeddings())) == 2


def test_embedder_mismatch_is_refused(tmp_path: Path) -> None:
    build(tmp_path, DOCS)
    other = HashEmbeddings()
    other.name = "other"  # type: ignore[misc]
    with pytest.raises(IndexLoadError, match="embedder"):
        FaissStore.load(tmp_path, other)


def test_an_index_of_the_batched_int8_embedder_is_refused_then_built_again_in_place(tmp_path: Path) -> None:
    """The int8 embedder before `+per-text` gave vectors that moved with their batch: no setting reads its indexes;
    the refusal says so and how to build it again, and `fastcrag index` into the folder rebuilds it."""
    from fastcrag.retrieval.embeddings import PACKAGED_EMBEDDER, PER_TEXT
    from fastcrag.retrieval.store import RetiredEmbedderError

    packaged = json.loads((PACKAGED_EMBEDDER / "fastcrag_model.json").read_text(encoding="utf-8"))["name"]
    before, now = HashEmbeddings(), HashEmbeddings()
    before.name, now.name = packaged, packaged + PER_TEXT  # type: ignore[misc]
    build_index(DOCS, tmp_path, embeddings=before, chunk_tokens=32, chunk_overlap=8, progress=False)
    with pytest.raises(RetiredEmbedderError) as refused:
        FaissStore.load(tmp_path, now)
    message = str(refused.value)
    assert f"built with embedder {packaged!r}" in message and "no setting reads" in message
    assert f"index it again (`fastcrag index PATHS --index {tmp_path}`)" in message
    assert "FASTRAG_EMBEDDER=<" not in message  # no setting to point at
    build_index(DOCS, tmp_path, embeddings=now, chunk_tokens=32, chunk_overlap=8, progress=False)
    again = FaissStore.load(tmp_path, now)
    assert len(again.documents) == len(DOCS)
    other = HashEmbeddings()
    other.name = "my-embedder"  # type: ignore[misc]
    with pytest.raises(IndexLoadError, match=r"set FASTRAG_EMBEDDER=onnx-int8 \(the default\) to read it"):
        build_index(DOCS, tmp_path, embeddings=other, chunk_tokens=32, chunk_overlap=8, progress=False)  # kept


def test_loaders_read_each_format(tmp_path: Path) -> None:
    (tmp_path / "a.txt").write_text("Plain text file.", encoding="utf-8")
    (tmp_path / "b.md").write_text("# Title\n\nMarkdown body.", encoding="utf-8")
    (tmp_path / "c.html").write_text("<html><script>evil()</script><p>Hello <b>web</b></p></html>")
    (tmp_path / "d.txt").write_bytes(b"caf\xe9 latin-1")
    (tmp_path / "empty.txt").write_text("")
    (tmp_path / "skip.bin").write_bytes(b"\x00")
    with gzip.open(tmp_path / "corpus.jsonl.gz", "wt") as fh:
        fh.write(json.dumps({"_id": "7", "title": "T", "text": "Beir text."}) + "\nnot json\n")
    docs = {d.source.rsplit("/", 1)[-1]: d for d in load_documents([tmp_path])}
    assert set(docs) == {"a.txt", "b.md", "c.html", "d.txt", "corpus.jsonl.gz#7"}
    assert "evil" not in docs["c.html"].text and "Hello" in docs["c.html"].text
    assert "caf\ufffd" in docs["d.txt"].text
    assert docs["corpus.jsonl.gz#7"].text.startswith("T")
    with pytest.raises(FileNotFoundError):
        list(load_documents([tmp_path / "nope"]))


def test_pdf_loader(tmp_path: Path) -> None:
    from pypdf import PdfWriter

    writer = PdfWriter()
    writer.add_blank_page(72, 72)
    with open(tmp_path / "blank.pdf", "wb") as fh:
        writer.write(fh)
    assert list(load_documents([tmp_path / "blank.pdf"])) == []  # no text: skipped, no crash


def test_python_reference_is_embedded() -> None:
    docs = list(python_reference())
    assert len(docs) > 50 and any(d.source == "pydoc:with" for d in docs)


def test_sentence_strips() -> None:
    text = "Dr. Smith arrived on Jan. 5. He left, e.g. at noon! Did he?\n\nNew block here"
    assert split_sentences(text) == [
        "Dr. Smith arrived on Jan. 5.",
        "He left, e.g. at noon!",
        "Did he?",
        "New block here",
    ]


def test_a_short_code_block_a_sentence_runs_into_is_part_of_it() -> None:
    text = (
        "Edit the file, then run\n\n```\n$ git commit --amend\n```\n\nwhich replaces the commit. Then push.\n\n"
        "Run this:\n\n```\nmake all\n```\n\nDone.\n\nOr type\n\n```\nline one\nline two\n```\n\nAnd stop."
    )
    assert split_sentences(text) == [
        'Edit the file, then run "$ git commit --amend" which replaces the commit.',
        "Then push.",
        "Run this:",  # a sentence that introduces its code ends before it
        "``` make all ```",
        "Done.",
        "Or type",  # a block of more than one line stays a strip of its own
        "``` line one line two ```",
        "And stop.",
    ]
    # a heading never runs into its block, nor a sentence into a heading; a bracketed sentence has ended
    heading = "Guide \u203a Options \u203a -D"
    text = (
        f"Use it with care\n\n```\nrm -rf x\n```\n\n{heading.lower()}\n\n```\nShortcut for -d.\n```\n\n(See git-log.)"
    )
    assert split_sentences(f"{text}\n\n```\nmore\n```") == [
        'Use it with care "rm -rf x"',
        heading.lower(),
        "``` Shortcut for -d. ```",
        "(See git-log.)",
        "``` more ```",
    ]


@pytest.mark.parametrize(("size", "overlap"), [(16, 4), (32, 8), (64, 0)])
def test_chunks_respect_the_token_budget(size: int, overlap: int) -> None:
    text = " ".join(f"Sentence number {i} says something about topic {i}." for i in range(60)) + " " + "x" * 400
    chunks = chunk_text(text, size, overlap)
    assert all(n <= size for n in count_tokens(chunks))
    joined = " ".join(chunks)
    assert all(f"number {i} " in joined for i in range(60))


def test_strip_markup_keeps_words_drops_markup() -> None:
    from fastcrag.retrieval.text import strip_markup

    rst = (
        "The with statement\n******************\n\n.. note::\n   :class: aside\n\n   Body stays.\n\n"
        "See :func:`os.path.join`, ``x = 1``, `Python <https://python.org>`_ and **PEP 343**.\n"
        ".. a comment\n## Heading\nDots.......... here; a**2 and f(**kwargs) stay.\n"
        "Raise :exc:`~werkzeug.exceptions.NotFound` or :func:`!abort` with the `blinker`_ library, `here`__."
    )
    out = strip_markup(rst)
    assert out.startswith("The with statement\n\n")
    for gone in ("***", ".. note", ":class:", ":func:", "``", "<https", "**PEP", ".. a comment", "## ", "...."):
        assert gone not in out, gone
    for kept in ("Body stays.", "os.path.join", "x = 1", "Python", "PEP 343", "Heading", "a**2", "**kwargs"):
        assert kept in out, kept
    assert "Raise NotFound or abort with the blinker library, here." in out  # as Sphinx shows them
    assert split_sentences(out)[0] == "The with statement"


def test_html_loader_drops_page_furniture(tmp_path: Path) -> None:
    page = tmp_path / "p.html"
    page.write_text("<nav>Home | About</nav><header>Site</header><p>Real text here.</p><footer>(c) 2026</footer>")
    [doc] = list(load_documents([page]))
    assert "Real text here." in doc.text and not any(w in doc.text for w in ("Home", "Site", "(c)"))


def test_get_by_ids_and_where_a_section_opens(tmp_path: Path) -> None:
    from fastcrag.retrieval.sections import part_holding, parts, section_before, section_onward
    from fastcrag.retrieval.text import CONTINUED, split_title

    build(tmp_path, [SECTIONED, *DOCS])
    store = FaissStore.load(tmp_path, HashEmbeddings())
    ids = store.documents["guide.md"]["ids"]
    texts = [d.page_content for d in store.get_by_ids(ids)]
    assert len(ids) >= 4 and split_title(texts[0])[0] == ALPHA  # the section runs over several chunks
    assert all(split_title(t)[0] == ALPHA + CONTINUED for t in texts[1:-1])  # each later one marked continued
    got = store.get_by_ids([ids[1], "nope-0", ids[0], ids[1]])  # unknown ids left out, each id once, in order
    assert [d.id for d in got] == [ids[1], ids[0]] and got[0].metadata["chunk_id"] == ids[1]
    # Beta opens inside the chunk before the last, under its heading path; the last one continues it
    beta = [(p.title, p.opens, p.sentences[:1]) for p in parts(texts[-2])][-1]
    assert beta == (BETA, True, ("Beta is another topic.",)) and parts(texts[-1])[0].title == BETA
    held = part_holding(texts[-2], "Alpha sentence number 11 says something about the alpha topic.")
    assert held is not None and held.title == ALPHA and not held.opens
    before = section_before(store.get_by_ids, ids[-2], ALPHA)
    assert [d.id for d in before] == ids[:-2]  # back over the continued chunks, to the opening, in reading order
    assert [d.id for d in section_before(store.get_by_ids, ids[-1], BETA)] == [ids[-2]]  # it opens inside a chunk
    assert section_before(store.get_by_ids, ids[-2], ALPHA, reach=1) == []  # the opening is out of reach
    assert section_before(store.get_by_ids, ids[0], ALPHA) == []  # chunk 0 has nothing before it
    assert section_before(store.get_by_ids, "no-number", ALPHA) == []
    # onward: the chunk and the ones after it that continue its section, up to the next section's chunk
    assert [d.id for d in section_onward(store.get_by_ids, ids[0], ALPHA, reach=len(ids))] == ids[:-1]
    assert [d.id for d in section_onward(store.get_by_ids, ids[0], ALPHA, reach=1)] == ids[:2]
    assert section_onward(store.get_by_ids, ids[-1], ALPHA) == [] and section_onward(store.get_by_ids, "x", BETA) == []
    store.delete([ids[1]])  # the map from ids to rows follows the store: the chain is broken
    assert store.get_by_ids([ids[1]]) == [] and section_before(store.get_by_ids, ids[2], ALPHA) == []


def test_a_store_that_cannot_fetch_by_id_gives_no_opening() -> None:
    from langchain_core.vectorstores import InMemoryVectorStore

    from fastcrag.retrieval.sections import section_before

    class NoIds(InMemoryVectorStore):
        def get_by_ids(self, ids: object, /) -> list[object]:  # type: ignore[override]
            raise NotImplementedError("no ids here")

    texts, meta = ["Alpha\n\nThe lead.", "Alpha (continued)\n\nMore of it."], [{"source": "s"}] * 2
    no_ids = NoIds.from_texts(texts, HashEmbeddings(), meta, ids=["d-0", "d-1"])
    assert section_before(no_ids.get_by_ids, "d-1", "Alpha") == []
    # any LangChain store that fetches by id gives it (here: LangChain's in-memory one)
    langchain = InMemoryVectorStore.from_texts(texts, HashEmbeddings(), meta, ids=["d-0", "d-1"])
    assert [d.id for d in section_before(langchain.get_by_ids, "d-1", "Alpha")] == ["d-0"]


def test_the_index_gives_its_word_weights(tmp_path: Path) -> None:
    docs = [SourceDocument(str(i), f"T{i}", f"Widgets are common. Item {i} is here.") for i in range(6)]
    build(tmp_path, [*docs, SourceDocument("z", "Z", "Widgets are common. A zebra is rare.")])
    idf = FaissStore.load(tmp_path, HashEmbeddings()).lexical_idf()
    common, rare, absent = idf("widgets"), idf("zebra"), idf("giraffe")
    assert 0 < common < rare and absent == 0.0


def test_a_postgres_writer_releases_its_lock_before_it_hangs_up() -> None:
    # A closed session's advisory locks go only when its server process has ended, a moment after the client hangs
    # up: the writer unlocks in the session first, so that a build started at once does not find the collection locked.
    from types import SimpleNamespace

    from fastcrag.retrieval.pgstore import PgWriter

    said: list[str] = []

    class Conn:
        def execute(self, query: str, params: object = None) -> None:
            said.append(query)
            if len(said) > 1:
                raise RuntimeError("connection lost")

        def close(self) -> None:
            said.append("close")

    writer = PgWriter.__new__(PgWriter)
    writer._conn, writer.collection = Conn(), SimpleNamespace(id=7)  # type: ignore[assignment]
    writer.close()
    assert said[0].startswith("SELECT pg_advisory_unlock(") and said[-1] == "close"
    said.clear()
    said.append("a failed call before")  # a broken connection: closed all the same
    writer.close()
    assert said[-1] == "close"
