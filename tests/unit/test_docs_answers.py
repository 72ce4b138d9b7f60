"""Unit tests of the documentation-answers scorer: topic cited, substance, fragments, the dev set, the command."""

from __future__ import annotations

import argparse
import json
import os
import re
import sys
from pathlib import Path
from typing import Any

import pytest

from fastcrag.evaluation.configs import DocsConfig
from fastcrag.evaluation.docs_answers import (
    DocsQuestion,
    load_questions,
    normalize,
    score_answer,
    score_graph,
    source_matches,
    summarize,
    why,
    worst,
    write_report,
)
from fastcrag.evaluation.runlog import ResultLog
from fastcrag.retrieval.structure import fragment, opening

DEVSET = Path(__file__).resolve().parents[1] / "data" / "docs_devset_python.jsonl"
GIT_DEVSET = DEVSET.with_name("docs_devset_git.jsonl")
FLASK_DEVSET = DEVSET.with_name("docs_devset_flask.jsonl")
GIT_NEWCOMER_SET = DEVSET.with_name("docs_devset_git_newcomer.jsonl")

WITH = DocsQuestion(
    "with",
    "What is the with statement used for?",
    ("pydoc:with", "pydoc:compound"),
    'The "with" statement is used to wrap the execution of a block with methods defined by a context manager '
    "(see section With Statement Context Managers).",
    ("context manager", "__enter__", "__exit__"),
)

# Real fragments, as the embedded index's answers read (runs of one mark are cleaned to a space) and as the raw
# documentation writes them.
TABLES = [
    '+ + + + | Operation | Result | Notes | | | | | | "s[i] = x" | item *i* of *s* is replaced by | | | | *x* | |'
    " + + + +",
    "+------------------+---------------------+\n| Operation        | Result              |\n+==================+",
    "| Method | Description |\n|---|---|\n| append | adds an item |",
    "=====  =====  ======\n  A      B    A and B\n=====  =====  ======\nFalse  False  False",
    'New in version 3.3. | | + + + + | "__module__" | The name of the module the | Writable |',
]
GRAMMAR = [
    'funcdef ::= [decorators] "def" funcname "(" [parameter_list] ")" ["->" expression] ":" suite',
    'with_stmt ::= "with" ( "(" with_stmt_contents ","? ")" | with_stmt_contents ) ":" suite',
    'del_stmt ::= "del" target_list Deletion is recursively defined very similar to the way assignment is defined.',
]
KEYWORD_LISTS = [
    "They must be spelled exactly as written here: False await else import pass None break except in raise True "
    "class finally is return and continue for lambda try as def from nonlocal while assert del global not with",
    "False None True and as assert async await break class continue def del elif else except",
]
NOTES = [
    'Note: The "with" statement guarantees that if the "__enter__()" method returns without an error, then '
    '"__exit__()" will always be called.',
    "Changed in version 3.8: The first character is now put into titlecase rather than uppercase.",
    "New in version 3.5.",
    "Deprecated since version 3.12: Use the new API instead.",
    "**CPython implementation detail:** In CPython, the length is required to be at most sys.maxsize.",
    "Added in version 3.13.",
    "See also\n\nPEP 343 - The with statement",
    "Warning: Never pass untrusted input to eval().",
]
PROSE = [
    'The "with" statement is used to wrap the execution of a block with methods defined by a context manager.',
    'These methods are called to implement the binary arithmetic operations ("+", "-", "*", "@", "/", "//", "%", '
    '"divmod()", "pow()", "**", "<<", ">>", "&", "^", "|").',
    "Note that comparisons, membership tests, and identity tests all have the same precedence.",
    "The expression x if C else y first evaluates the condition, C rather than x.",
    "Use a | b to merge two dictionaries; the result is a new dict.",
    "Slices such as a[1:2] and a[::2] select a range of items.",
    "See also the section on context managers, which describes __enter__ and __exit__.",
    "Warnings are issued by the warnings module.",
    "",
]


@pytest.mark.parametrize("text", TABLES)
def test_tables_are_fragments(text: str) -> None:
    assert fragment(text) in ("table", "note")  # the last opens with a version line before its table


def test_each_kind_is_named() -> None:
    assert [fragment(t) for t in TABLES[:4]] == ["table"] * 4
    assert fragment(TABLES[4]) == "note"


@pytest.mark.parametrize("text", GRAMMAR)
def test_grammar_productions_are_fragments(text: str) -> None:
    assert fragment(text) == "grammar"


@pytest.mark.parametrize("text", KEYWORD_LISTS)
def test_keyword_lists_are_fragments(text: str) -> None:
    assert fragment(text) == "keywords"


@pytest.mark.parametrize("text", NOTES)
def test_notes_and_version_lines_are_fragments(text: str) -> None:
    assert fragment(text) == "note"


@pytest.mark.parametrize("text", PROSE)
def test_prose_is_not_a_fragment(text: str) -> None:
    assert fragment(text) is None


def test_a_fragment_after_the_opening_sentence_is_allowed() -> None:
    text = 'The "del" statement deletes names. del_stmt ::= "del" target_list'
    assert opening(text) == 'The "del" statement deletes names.'
    assert fragment(text) is None
    assert opening("A slicing selects items, e.g. a string. Then more.") == "A slicing selects items, e.g. a string."


def test_normalize_ignores_quotes_markup_and_line_breaks() -> None:
    assert normalize('The \u2018"is"\u2019 operator\ncompares *identity*;') == "the is operator compares identity"


def test_right_topic_any_citation_and_first() -> None:
    answer = WITH.sentence
    r = score_answer(WITH, answer, ["pydoc:specialnames", "pydoc:compound"])
    assert r["topic_cited"] and not r["topic_first"] and r["substance"]
    r = score_answer(WITH, answer, ["pydoc:with"])
    assert r["topic_cited"] and r["topic_first"]
    r = score_answer(WITH, answer, ["pydoc:typesseq"])
    assert not r["topic_cited"] and not r["substance"]
    assert why(r) == "right topic not cited"


@pytest.mark.parametrize(
    ("cited", "expected"),
    [
        ("pydoc:with", "pydoc:with"),
        ("/srv/docs/git-stash.html", "git-stash.html"),
        ("/srv/docs/git-stash.html", "./git-stash.html"),
        ("/srv/docs/howto/new-command.html", "howto/new-command.html"),
        ("C:\\docs\\howto\\new-command.html", "howto/new-command.html"),
        ("/srv/docs/howto/new-command.html", "howto\\new-command.html"),
        ("/srv/docs/git-stash.html", "/srv/docs/git-stash.html"),
    ],
)
def test_a_cited_path_matches_the_expected_path_by_its_last_components(cited: str, expected: str) -> None:
    assert source_matches(cited, expected)


@pytest.mark.parametrize(
    ("cited", "expected"),
    [
        ("/srv/docs/old-git-stash.html", "git-stash.html"),  # whole components only
        ("/srv/docs/git-stash.html", "docs/git-stash.htm"),
        ("/srv/docs/new-command.html", "howto/new-command.html"),
        ("/srv/docs/git-stash.html", "/elsewhere/git-stash.html"),  # an absolute path matches only itself
        ("/srv/docs/git-stash.html", "C:/srv/docs/git-stash.html"),
        ("/srv/docs/git-stash.html", "./"),
        ("pydoc:with", "with"),
        ("git-stash.html", "/srv/docs/git-stash.html"),
    ],
)
def test_a_cited_path_with_other_last_components_does_not_match(cited: str, expected: str) -> None:
    assert not source_matches(cited, expected)


def test_a_question_naming_pages_relative_to_the_corpus_matches_the_index_paths() -> None:
    q = DocsQuestion("s", "Where is the latest stash?", ("git-stash.html", "user-manual.html"), "It is in refs/stash.")
    r = score_answer(q, q.sentence, ["/home/a/git-doc/git-log.html", "/home/a/git-doc/user-manual.html"])
    assert r["topic_cited"] and not r["topic_first"] and r["substance"]
    r = score_answer(q, q.sentence, ["D:\\corpora\\git-doc\\git-stash.html"])
    assert r["topic_cited"] and r["topic_first"]
    assert not score_answer(q, q.sentence, ["/home/a/git-doc/git-stash.html.bak"])["topic_cited"]


def test_sentence_or_all_key_terms_carry_the_substance() -> None:
    reflowed = WITH.sentence.replace(" ", "\n", 3).replace('"with"', "with")
    r = score_answer(WITH, "It is this. " + reflowed, ["pydoc:with"])
    assert r["sentence"] and r["substance"]
    terms = "A context manager's __enter__() runs first and its __exit__() always runs last."
    r = score_answer(WITH, terms, ["pydoc:with"])
    assert not r["sentence"] and r["key_terms"] and r["substance"]
    partial = "The __enter__() method runs first."
    r = score_answer(WITH, partial, ["pydoc:with"])
    assert r["missing_terms"] == ["context manager", "__exit__"] and not r["substance"]
    assert why(r) == "no defining sentence, lacks context manager, __exit__"
    assert not score_answer(WITH, "a context manager, __enter__x and __exit__", ["pydoc:with"])["key_terms"]


def test_a_fragment_or_an_abstention_is_not_the_substance() -> None:
    r = score_answer(WITH, NOTES[0] + " " + WITH.sentence, ["pydoc:with"])
    assert r["sentence"] and r["fragment"] == "note" and not r["substance"]
    assert why(r) == "opens with a note fragment"
    r = score_answer(WITH, "I don't know.", [], action="abstain")
    assert score_answer(WITH, "Sorry, no idea.", ["pydoc:with"], abstain_message="Sorry, no idea.")["abstained"]
    assert r["abstained"] and not r["substance"] and r["fragment"] is None and why(r) == "abstained"


class FakeGraph:
    """Answers each question from a script: (answer, cited sources)."""

    def __init__(self, script: dict[str, tuple[str, list[str]]]) -> None:
        self.script = script

    def invoke(self, input: Any, /, **kwargs: Any) -> dict[str, Any]:
        answer, sources = self.script[input["question"]]
        return {
            "answer": answer,
            "citations": [{"source": s, "chunk_id": f"{s}-0", "score": 0.9} for s in sources],
            "crag": {"action": "generate", "top_score": 0.9, "band": "CORRECT"},
        }


def _questions() -> list[DocsQuestion]:
    dele = DocsQuestion(
        "del",
        "What does del do?",
        ("pydoc:del",),
        "Deletion of a name removes the binding of that name from the local or global namespace.",
        ("removes the binding",),
        "explain",
        "statement",
    )
    return [WITH, dele]


def test_score_graph_summary_and_report(tmp_path: Path) -> None:
    graph = FakeGraph(
        {
            WITH.question: (WITH.sentence, ["pydoc:with"]),
            "What does del do?": (TABLES[0], ["pydoc:typesseq", "pydoc:del"]),
        }
    )
    records = score_graph(graph, _questions())
    assert [r["substance"] for r in records] == [True, False]
    assert records[1]["fragment"] == "table" and records[1]["cited"] == ["pydoc:typesseq", "pydoc:del"]
    assert records[0]["band"] == "CORRECT" and records[0]["failure"] is None
    s = summarize(records)
    assert (s.n, s.substance, s.topic_cited, s.topic_first, s.fragments) == (2, 1, 2, 1, 1)
    assert s.fragment_kinds == {"table": 1}
    assert [r["id"] for r in worst(records)] == ["del"]

    cfg = DocsConfig(questions=tmp_path / "set.jsonl", out=tmp_path / "out")
    log = ResultLog(cfg.out / "results.jsonl", {"index": "fake", "llm": "extractive", "reranker": ""})
    log.add(records[0]["id"], records[0])
    text = write_report(cfg, log, _questions(), 1.0)
    assert "INCOMPLETE: 1 of 2" in text and "| answered with the substance | 1/1 (100%) |" in text
    log.add(records[1]["id"], records[1])
    text = write_report(cfg, log, _questions(), 1.0)
    assert "complete (2 of 2" in text and "| fragments (table 1) | 1/2 (50%) |" in text
    assert "opens with a table fragment" in text and "\\| Operation \\|" in text  # pipes escaped in the table
    summary = json.loads((cfg.out / "summary.json").read_text())
    assert summary["complete"] and summary["summary"]["substance"] == 1


def test_load_questions_accepts_a_users_set_and_refuses_bad_lines(tmp_path: Path) -> None:
    path = tmp_path / "set.jsonl"
    path.write_text(
        '{"question": "What is X?", "source": "guide.md", "key_terms": ["x"]}\n\n'
        '{"id": "b", "question": "How is Y done?", "sources": ["a.md", "b.md"], "sentence": "Y is done so."}\n'
    )
    first, second = load_questions(path)
    assert first.sources == ("guide.md",) and first.key_terms == ("x",) and len(first.id) == 12
    assert second.id == "b" and second.sources == ("a.md", "b.md") and second.sentence == "Y is done so."
    for bad, match in [
        ('{"question": "Q", "sentence": "S"}', "sources"),
        ('{"question": "Q", "sources": "a"}', "sentence"),
        ('{"sources": "a", "sentence": "S"}', "question"),
        ('{"question": "Q", "sources": [""], "sentence": "S"}', "sources"),
        ("not json", "not JSON"),
        ('{"id": "a", "question": "Q", "sources": "a", "sentence": "S"}\n' * 2, "more than once"),
    ]:
        path.write_text(bad + "\n")
        with pytest.raises(ValueError, match=match):
            load_questions(path)


def test_the_dev_set_is_sixty_distinct_questions_with_their_facts() -> None:
    questions = load_questions(DEVSET)
    assert len(questions) == 60 and len({q.question for q in questions}) == 60
    assert all(q.sentence and q.key_terms and q.sources for q in questions)
    assert all(s.startswith("pydoc:") for q in questions for s in q.sources)
    assert {q.category for q in questions} >= {"statement", "data model", "expression", "type"}
    for q in questions:  # its own sentence, cited from its page, is an answer with the substance
        r = score_answer(q, q.sentence, [q.sources[0]])
        assert r["substance"] and r["sentence"] and r["fragment"] is None, q.id


@pytest.mark.skipif(sys.version_info[:2] != (3, 11), reason="the set was checked against Python 3.11's reference")
def test_the_dev_set_sentences_and_terms_stand_in_their_topics() -> None:
    from pydoc_data.topics import topics

    def flat(text: str) -> str:
        return re.sub(r"\s+", " ", text)

    for q in load_questions(DEVSET):
        for source in q.sources:
            text = topics[source.removeprefix("pydoc:")]
            assert q.sentence in flat(text), (q.id, source)  # verbatim, line breaks aside
        first = normalize(topics[q.sources[0].removeprefix("pydoc:")])
        assert all(f" {normalize(t)} " in f" {first} " for t in q.key_terms), q.id
        copies = {f"pydoc:{k}" for k, v in topics.items() if q.sentence in flat(v)}
        assert copies == set(q.sources), q.id  # every copy of the text is an acceptable topic


def assert_own_sentences_have_the_substance(questions: list[DocsQuestion]) -> None:
    """Each question's own sentence, cited from its first page wherever the corpus lies, scores with the substance."""
    for q in questions:
        r = score_answer(q, q.sentence, [f"/any/folder/{q.sources[0]}"])
        assert r["substance"] and r["sentence"] and r["topic_first"] and r["fragment"] is None, q.id


def test_the_git_set_is_thirty_distinct_questions_with_their_facts() -> None:
    questions = load_questions(GIT_DEVSET)
    assert len(questions) == 30 and len({q.question for q in questions}) == 30
    assert all(q.id.startswith("git-") and q.sentence and q.key_terms and q.sources for q in questions)
    # pages relative to the corpus folder (scripts/fetch_docs_corpus.sh), never a path of one machine
    assert all(s.endswith(".html") and "/" not in s and "\\" not in s for q in questions for s in q.sources)
    kinds = {k: sum(q.kind == k for q in questions) for k in ("explain", "how", "factoid")}
    assert kinds == {"explain": 18, "how": 7, "factoid": 5}
    assert_own_sentences_have_the_substance(questions)


def test_the_git_newcomer_set_is_thirty_questions_half_of_them_asked_after_the_askers_situation() -> None:
    questions = load_questions(GIT_NEWCOMER_SET)
    assert len(questions) == 30 and len({q.question for q in questions}) == 30
    assert all(q.id.startswith("gn-") and q.sentence and q.key_terms and q.sources for q in questions)
    assert all(s.endswith(".html") and "/" not in s and "\\" not in s for q in questions for s in q.sources)
    assert {k: sum(q.kind == k for q in questions) for k in ("explain", "how", "factoid")} == {
        "explain": 10,
        "how": 15,
        "factoid": 5,
    }
    assert sum(len(re.split(r"(?<=[.?;])\s+", q.question.strip())) > 1 for q in questions) == 15
    older = {q.question for q in load_questions(GIT_DEVSET)}
    assert not older & {q.question for q in questions}
    assert_own_sentences_have_the_substance(questions)


@pytest.mark.parametrize("corpus", ["apache", "typer", "eigen", "libssh", "proftpd", "jsoup"])
def test_each_held_out_set_is_thirty_distinct_questions_with_their_facts(corpus: str) -> None:
    questions = load_questions(DEVSET.with_name(f"docs_heldout_{corpus}.jsonl"))
    assert len(questions) == 30 and len({q.question for q in questions}) == 30 and len({q.id for q in questions}) == 30
    assert all(q.sentence and q.key_terms and q.sources for q in questions)
    # pages relative to the corpus folder (scripts/fetch_docs_corpus.sh --corpus NAME)
    assert all(s.endswith(".html") and not s.startswith("/") and "\\" not in s for q in questions for s in q.sources)
    assert_own_sentences_have_the_substance(questions)


def test_the_flask_set_is_twenty_distinct_questions_with_their_facts() -> None:
    questions = load_questions(FLASK_DEVSET)
    assert len(questions) == 20 and len({q.question for q in questions}) == 20
    assert all(q.id.startswith("fl-") and q.sentence and q.key_terms and q.sources for q in questions)
    # pages relative to the Sphinx build's folder (scripts/fetch_docs_corpus.sh --corpus flask)
    assert all(s.endswith(".html") and not s.startswith("/") and "\\" not in s for q in questions for s in q.sources)
    assert_own_sentences_have_the_substance(questions)


GIT_CORPUS = os.environ.get("FASTRAG_DOCS_CORPUS")


@pytest.mark.skipif(
    not GIT_CORPUS, reason="set FASTRAG_DOCS_CORPUS to the folder of scripts/fetch_docs_corpus.sh (Git's manual)"
)
def test_the_git_sets_sentences_and_terms_stand_in_their_pages() -> None:
    from fastcrag.retrieval.loaders import load_documents

    folder = Path(str(GIT_CORPUS))
    assert (folder / "git.html").is_file(), f"{folder} does not hold Git's manual: run scripts/fetch_docs_corpus.sh"
    pages = {Path(d.source).relative_to(folder.resolve()).as_posix(): d.text for d in load_documents([folder])}

    def flat(text: str) -> str:
        # line breaks aside, and the break an HTML inline element (<code>, <em>) may leave before punctuation
        text = re.sub(r"\s+", " ", text)
        return re.sub(r"\( ", "(", re.sub(" ([,.;:!?)'\u2019])", r"\1", text))

    flats = {name: flat(text) for name, text in pages.items()}
    for q in [*load_questions(GIT_DEVSET), *load_questions(GIT_NEWCOMER_SET)]:
        sentence = flat(q.sentence)
        assert sentence in flats[q.sources[0]], q.id  # verbatim in its page
        for source in q.sources:  # another page that answers it states the same facts
            text = normalize(pages[source])
            assert all(f" {normalize(t)} " in f" {text} " for t in q.key_terms), (q.id, source)
        copies = {name for name, text in flats.items() if sentence in text}
        assert copies <= set(q.sources), q.id  # every page holding the sentence is an acceptable source


def test_eval_docs_subcommand_options(tmp_path: Path) -> None:
    from fastcrag.evaluation.cli import add_commands, cmd_docs

    parser = argparse.ArgumentParser(prog="fastcrag")
    add_commands(parser.add_subparsers(dest="command", required=True))
    args = parser.parse_args(["eval", "docs", "--questions", "set.jsonl", "--index", "ix", "--llm", "extractive"])
    assert args.func is cmd_docs and args.questions == "set.jsonl" and args.index == "ix" and not args.fresh
    args = parser.parse_args(["eval", "docs"])
    assert args.out == "runs/eval-docs" and args.questions is None
    with pytest.raises(ValueError, match="--questions"):
        cmd_docs(args)
    args = parser.parse_args(["eval", "docs", "--questions", str(tmp_path / "missing.jsonl")])
    with pytest.raises(FileNotFoundError, match=r"missing\.jsonl"):
        cmd_docs(args)
