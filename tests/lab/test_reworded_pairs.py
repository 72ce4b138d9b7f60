"""Questions worded as people word them: the committed rewordings and the pairs made from them."""

from __future__ import annotations

import json
import random
from collections import Counter
from pathlib import Path

import pytest

from fastcrag.fitting.mix import Article, QAItem
from fastcrag.retrieval.text import titled
from lab.experiments import reworded_pairs as rp
from lab.scripts.docs_pairs import Topic


def test_the_committed_rewordings_name_their_item_and_kind() -> None:
    squad = [json.loads(line) for f in sorted(rp.HERE.glob("squad-*.jsonl")) for line in f.open(encoding="utf-8")]
    assert len({r["id"] for r in squad}) == len(squad) > 2000
    assert set(Counter(r["how"] for r in squad)) == {"example", "verb", "longer", "vaguer", "own-terms"}
    assert all(r["reworded"].strip() and isinstance(r["question_index"], int) and r["article"] for r in squad)
    for manual in ("postgresql", "django", "sqlalchemy"):
        docs = [json.loads(line) for line in (rp.HERE / f"docs-{manual}.jsonl").open(encoding="utf-8")]
        assert len({r["id"] for r in docs}) == len(docs) > 1000
        assert set(Counter(r["how"] for r in docs)) == {"plain", "situation", "own-terms", "skip"}
        assert all((r["question"] is None) == (r["how"] == "skip") for r in docs)


def test_a_reworded_question_pairs_with_its_paragraph_and_sentence_not_the_others(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    own = "The castle was built in 1120 by the count. It burned down twice. Its walls are of local granite."
    other = "The town holds a fair every summer, with music and a market in its square."
    article = Article("Castle", [own, other], [QAItem("When was the castle built?", ["1120"], paragraph=0)])
    (tmp_path / "squad-0.jsonl").write_text(
        json.dumps({"id": "sq-0-000", "article": "Castle", "question_index": 0, "reworded": "How old is it?"}) + "\n",
        encoding="utf-8",
    )
    monkeypatch.setattr(rp, "HERE", tmp_path)
    monkeypatch.setattr(rp, "_train_articles", lambda: [article])
    rows = rp.squad_pairs([0], random.Random(0))
    labelled = {(str(r["passage"]), r["label"]) for r in rows}
    assert (own, 1) in labelled and ("The castle was built in 1120 by the count.", 1) in labelled
    assert (other, 0) in labelled  # the article's paragraph without the answer
    assert any(label == 0 and "granite" in passage for passage, label in labelled)  # a sentence without it
    assert all(r["question"] == "How old is it?" and r["group"] == "reworded:Castle" for r in rows)
    assert all(r.get("answer") == "1120" for r in rows if r["label"] == 1)


def _topic(page: str, title: str, lead: str) -> Topic:
    return Topic(page, title, title, "", lead, lead, (), ())


def test_a_newcomers_question_is_paired_with_the_nearest_section_of_another_manual_as_no_answer(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    sql = _topic(
        "create-index.html",
        "CREATE INDEX",
        "CREATE INDEX constructs an index on the specified column of a table, which speeds up lookups.",
    )
    web = {
        "db": _topic(
            "fields.html",
            "db_index",
            "If True, a database index will be created for this model field so queries filter on it quickly.",
        ),
        "tpl": _topic(
            "templates.html",
            "Templates",
            "A template is a text file that defines the structure of an HTML page with variables and tags.",
        ),
        "idx": _topic(
            "indexes.html",
            "Model indexes",
            "Indexes are created on the database table of a model from the indexes option of its Meta class.",
        ),
    }
    for name, rows in {
        "sql": [{"id": "create-index.html#CREATE INDEX", "question": "How do I make lookups on a column faster?"}],
        "web": [
            {"id": "templates.html#Templates", "question": "Where do I put the HTML layout of my pages?"},
            {"id": "fields.html#db_index", "question": None},
            {"id": "indexes.html#Model indexes", "question": "How can lookups on a table column be made faster?"},
        ],
    }.items():
        (tmp_path / f"docs-{name}.jsonl").write_text("".join(json.dumps(r) + "\n" for r in rows), encoding="utf-8")
    monkeypatch.setattr(rp, "HERE", tmp_path)
    rows = rp.cross_pairs({"sql": [sql], "web": list(web.values())})
    by_question = {r["question"]: r for r in rows}
    assert len(rows) == 2  # a skipped section asks nothing; CREATE INDEX answers the last (too near to be a no)
    assert "How can lookups on a table column be made faster?" not in by_question
    asked_sql = by_question["How do I make lookups on a column faster?"]
    assert asked_sql["passage"] == titled("db_index", web["db"].lead)  # the nearest of the other manual, not any
    assert asked_sql["label"] == 0 and asked_sql["group"] == "reworded-sql:create-index.html"
    assert by_question["Where do I put the HTML layout of my pages?"]["passage"] == titled("CREATE INDEX", sql.lead)


def test_written_questions_are_matched_to_their_sections_and_skips_left_out(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    sections = [
        _topic("a.html", "Alpha", "Alpha lead."),
        _topic("a.html", "Beta", "Beta lead."),
        _topic("b.html", "C", "C."),
    ]
    rows = [
        {"id": "a.html#Beta", "question": "What is beta for?", "how": "plain"},
        {"id": "b.html#C", "question": None, "how": "skip"},
        {"id": "gone.html#D", "question": "Where did D go?", "how": "plain"},  # a section this manual no longer has
    ]
    (tmp_path / "docs-m.jsonl").write_text("".join(json.dumps(r) + "\n" for r in rows), encoding="utf-8")
    monkeypatch.setattr(rp, "HERE", tmp_path)
    assert rp.written_topics("m", sections) == [("What is beta for?", sections[1])]


def test_a_manuals_written_questions_make_a_reproducible_question_set(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    rows = [{"id": f"p{i}.html#S{i}", "question": f"Question {i}?", "how": "plain"} for i in range(10)]
    rows.append({"id": "skip.html#T", "question": None, "how": "skip"})
    (tmp_path / "docs-m.jsonl").write_text("".join(json.dumps(r) + "\n" for r in rows), encoding="utf-8")
    monkeypatch.setattr(rp, "HERE", tmp_path)
    drawn = rp.question_set("m", 4, seed=1)
    assert drawn == rp.question_set("m", 4, seed=1) != rp.question_set("m", 4, seed=2)
    assert len({str(r["question"]) for r in drawn}) == 4
    for r in drawn:  # each asks of its own page, and a skipped section is never drawn
        assert r["sources"] == [f"p{str(r['question'])[9:-1]}.html"]
