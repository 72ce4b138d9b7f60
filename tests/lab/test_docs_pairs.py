"""Documentation training pairs: which sections are topics, what their subject is, and how each passage is labelled."""

from __future__ import annotations

import json
import random
from collections import Counter
from pathlib import Path

import pytest

from fastcrag.retrieval.text import TITLE_JOINER
from lab.scripts import docs_pairs as dp

PAGE = """<html><body>
<h1>CREATE TABLE</h1>
<p>CREATE TABLE — define a new table</p>
<h2>Synopsis</h2>
<pre>CREATE TABLE table_name ( column_name data_type )</pre>
<h2>Description</h2>
<p>CREATE TABLE will create a new, initially empty table in the current database. The table will be owned by the
user issuing the command.</p>
<p>If a schema name is given then the table is created in the specified schema. Otherwise it is created in the
current schema of the session that issues the command.</p>
<h2>Parameters</h2>
<dl><dt>UNLOGGED (optional)</dt><dd><p>If specified, the table is created as an unlogged table. Data written to
unlogged tables is not written to the write-ahead log, which makes them considerably faster than ordinary tables.</p>
</dd></dl>
<h2>Examples</h2>
<p>Create table films and table distributors with a primary key on each of them today.</p>
</body></html>
"""

OTHER = """<html><body>
<h1>CREATE INDEX</h1>
<p>CREATE INDEX constructs an index on the specified column of the specified relation, which can be a table.</p>
<h2>9.4.1. Index Storage</h2>
<p>An index is stored in its own file beside the table it indexes, and is kept up to date by every write.</p>
<table><tr><th>Option</th><th>Meaning</th></tr><tr><td>fillfactor</td><td>how full each page is packed</td></tr>
</table>
</body></html>
"""


def _corpus(tmp_path: Path) -> Path:
    (tmp_path / "sql-createtable.html").write_text(PAGE, encoding="utf-8")
    (tmp_path / "sql-createindex.html").write_text(OTHER, encoding="utf-8")
    return tmp_path


def test_subjects_drop_numbering_and_trailing_parentheses() -> None:
    assert dp.subject_of("9.4.1. format") == "format"
    assert dp.subject_of("F.2. amcheck") == "amcheck"
    assert dp.subject_of("escape_string_warning ( boolean )") == "escape_string_warning"
    assert dp.subject_of("UNLOGGED (optional)") == "UNLOGGED"


def test_topics_are_sections_with_a_subject_and_a_lead(tmp_path: Path) -> None:
    topics = {(t.page, t.title): t for t in dp.collect(_corpus(tmp_path))}
    titles = {title for _, title in topics}
    assert not any("Examples" in t or "Synopsis" in t for t in titles)  # no lead, or not what the subject is
    description = next(t for (_, title), t in topics.items() if title.endswith("Description"))
    assert description.subject == "CREATE TABLE"  # a page's description speaks of the page's subject
    assert description.lead.startswith("CREATE TABLE will create a new, initially empty table")
    assert any(s.startswith("Otherwise it is created") for s in description.side)
    unlogged = next(t for (_, title), t in topics.items() if "UNLOGGED" in title)
    assert (unlogged.subject, unlogged.part_of) == ("UNLOGGED", "CREATE TABLE")
    storage = next(t for (_, title), t in topics.items() if title.endswith("Index Storage"))
    assert storage.subject == "Index Storage"
    assert any("fillfactor" in f for f in storage.fragments)


def test_pairs_label_the_lead_above_side_sentences_fragments_and_other_subjects(tmp_path: Path) -> None:
    out = tmp_path / "pairs.jsonl"
    assert dp.main([str(_corpus(tmp_path)), "--out", str(out)]) == 0
    rows = [json.loads(line) for line in out.read_text(encoding="utf-8").splitlines()]
    by_kind: dict[str, list[dict[str, object]]] = {}
    for r in rows:
        by_kind.setdefault(str(r["kind"]), []).append(r)
        assert r["group"] in {"sql-createtable.html", "sql-createindex.html"}  # the page, relative to the corpus
    assert {float(r["label"]) for r in by_kind["lead"]} == {1.0}
    assert {float(r["label"]) for r in by_kind["side"]} == {dp.SIDE_LABEL}
    assert {float(r["label"]) for r in by_kind["fragment"]} == {0.0}
    # CREATE TABLE and CREATE INDEX share a word: each is the other's near negative
    neighbours = by_kind["neighbour"]
    assert neighbours and all(float(r["label"]) == 0.0 for r in neighbours)
    page_of = {str(r["passage"]): str(r["group"]) for r in by_kind["lead"]}
    assert all(page_of[str(r["passage"])] != r["group"] for r in neighbours)  # always another page's lead
    # each passage is read as the graph reads it: the section's title on its own line, then the text
    assert all("\n\n" in str(r["passage"]) for r in rows)


def test_a_written_question_replaces_the_templates_and_none_leaves_a_topic_out(tmp_path: Path) -> None:
    topics = dp.collect(_corpus(tmp_path))
    asked = {t.title: f"newcomer question {i}" for i, t in enumerate(topics) if "UNLOGGED" not in t.title}
    rows = dp.make_pairs(topics, random.Random(3), ask=lambda t, _rng: asked.get(t.title))
    assert rows and {r["question"] for r in rows} <= set(asked.values())
    lead_questions = {r["question"] for r in rows if r["kind"] == "lead"}
    assert lead_questions == set(asked.values())  # every written topic is asked, the one given None is not


def test_questions_come_from_the_templates() -> None:
    topic = dp.Topic("p", "Importing a Large Object", "Importing a Large Object", "", "To import ...", "", (), ())
    rng = random.Random(1)
    asked = {dp.question_for(topic, rng) for _ in range(20)}
    assert asked <= {t.format(s=topic.subject) for t in dp._ACTIVITY_TEMPLATES}
    part = dp.Topic(
        "p", f"Parameters{TITLE_JOINER}UNLOGGED", "UNLOGGED", "CREATE TABLE", "If specified ...", "", (), ()
    )
    assert any("CREATE TABLE" in dp.question_for(part, rng) for _ in range(20))


def test_an_empty_corpus_is_a_clear_error(tmp_path: Path) -> None:
    assert dp.main([str(tmp_path), "--out", str(tmp_path / "p.jsonl")]) == 2
    assert dp.main([str(tmp_path / "missing"), "--out", str(tmp_path / "p.jsonl")]) == 2
    assert not (tmp_path / "p.jsonl").exists()


def test_details_ask_of_a_later_sentence_with_its_rarest_words(tmp_path: Path) -> None:
    out = tmp_path / "pairs.jsonl"
    assert dp.main([str(_corpus(tmp_path)), "--out", str(out), "--details"]) == 0
    rows = [json.loads(line) for line in out.read_text(encoding="utf-8").splitlines()]
    details = [r for r in rows if r["kind"] == "detail"]
    templates = " ".join(dp._DETAIL_TEMPLATES)
    assert details and {float(r["label"]) for r in details} == {1.0}
    for r in details:
        sentence = str(r["passage"]).split("\n\n", 1)[1]
        asked = [
            w for w in dp._detail_words(str(r["question"])) if w not in dp._words("CREATE TABLE INDEX " + templates)
        ]
        assert asked and all(w in sentence.casefold() for w in asked)  # every word asked stands in the sentence
    # the same question: the sentence's chunk too, the section's lead only as a side
    q = details[0]["question"]
    kinds = {r["kind"]: float(r["label"]) for r in rows if r["question"] == q}
    assert kinds["detail-lead"] == dp.SIDE_LABEL
    assert kinds.get("detail-chunk", 1.0) == 1.0
    plain = tmp_path / "plain.jsonl"
    assert dp.main([str(_corpus(tmp_path)), "--out", str(plain)]) == 0
    assert "detail" not in plain.read_text(encoding="utf-8")  # details only when asked for


def test_a_detail_question_needs_two_words_its_subject_does_not_name() -> None:
    topic = dp.Topic("p", "CREATE TABLE", "CREATE TABLE", "", "lead", "", (), ())
    rng = random.Random(2)
    assert dp.detail_question(topic, "The table is created.", Counter(), rng) == ("", [])
    q, asked = dp.detail_question(topic, "Otherwise it is created in the current schema.", Counter(), rng)
    assert q and set(asked) <= {"otherwise", "created", "current", "schema"} and len(asked) >= 2


def test_pages_are_named_from_the_corpus_folder_however_it_is_reached(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    (tmp_path / "corpus").mkdir()
    corpus = _corpus(tmp_path / "corpus")
    (tmp_path / "link").symlink_to(corpus)
    monkeypatch.chdir(tmp_path)
    pages = {t.page for t in dp.collect(corpus)}
    assert pages == {"sql-createtable.html", "sql-createindex.html"}  # the written questions' keys name these
    assert {t.page for t in dp.collect(tmp_path / "link")} == pages
    assert {t.page for t in dp.collect(Path("link"))} == pages
    assert {t.page for t in dp.collect(Path("corpus"))} == pages
