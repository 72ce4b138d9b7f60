"""The extractive generator: a few sentences for how/why/what-is questions, one for a fact, never a pointer first."""

from __future__ import annotations

import pytest

from fastcrag.generation.extractive import (
    EXPLAIN_SENTENCES,
    EXPLAIN_WORDS,
    ExtractiveGenerator,
    asks_for_explanation,
    is_reference_line,
)
from fastcrag.retrieval.structure import fragment

from fakes import ScriptedReranker

WITH = (
    "See also: PEP 343 - The with statement and its background. "
    "The with statement wraps the execution of a block with methods defined by a context manager. "
    "Bananas are yellow. "
    "The context manager's __enter__() method is invoked before the block runs. "
    "Its __exit__() method is invoked when the block is left, even by an exception."
)


@pytest.mark.parametrize(
    ("question", "explain"),
    [
        ("How does the with statement work?", True),
        ("Why is the sky blue?", True),
        ("What is a context manager?", True),
        ("Explain decorators", True),
        ("How many children were infected?", False),
        ("How long is the river?", False),
        ("What is the capital of France?", False),
        ("Who won the 2018 World Cup?", False),
        ("When did it end?", False),
    ],
)
def test_question_kinds(question: str, explain: bool) -> None:
    assert asks_for_explanation(question) is explain


def test_reference_lines() -> None:
    assert is_reference_line("See also: PEP 343 - The with statement")
    assert is_reference_line("Compound statements")  # a bare heading
    assert is_reference_line("Links: http://a.example http://b.example")
    assert not is_reference_line("Note that the lock is released when the block ends.")
    assert not is_reference_line("The with statement wraps a block.")
    # a site's breadcrumb trail, run on into the page's name as its first line is split; not a chained comparison
    assert is_reference_line("Apache > HTTP Server > Documentation > Version 2.4 > How-To / Tutorials.")
    assert is_reference_line("Home \u00bb Docs \u00bb Programs apache2ctl - Apache HTTP Server Control Interface.")
    assert not is_reference_line("If x > y > z holds, then x > z holds too.")
    assert not is_reference_line("Returns True if a > b.")


def test_a_how_question_gets_the_best_sentences_in_passage_order() -> None:
    grader = ScriptedReranker({"See also": 0.99, "wraps": 0.9, "__enter__": 0.8, "__exit__": 0.7, "Bananas": 0.1})
    passages = [{"text": WITH, "source": "pydoc:with", "score": 0.9}, {"text": "Unrelated text here.", "score": 0.2}]
    answer = ExtractiveGenerator(grader).generate("How does the with statement work?", passages)
    assert answer.used == [0]
    assert "See also" not in answer.text and "Bananas" not in answer.text
    assert answer.text.index("wraps") < answer.text.index("__enter__") < answer.text.index("__exit__")
    assert answer.text.count(". ") + 1 <= EXPLAIN_SENTENCES


def test_a_factoid_question_gets_one_sentence_never_a_reference_line() -> None:
    grader = ScriptedReranker({"See also": 0.99, "__enter__": 0.8})
    answer = ExtractiveGenerator(grader).generate("When is __enter__ called?", [{"text": WITH, "score": 0.9}])
    assert answer.text == "The context manager's __enter__() method is invoked before the block runs."


def test_only_reference_lines_leave_nothing_to_answer_with() -> None:
    with pytest.raises(ValueError, match="no passage text"):
        ExtractiveGenerator(ScriptedReranker({})).generate("How?", [{"text": "See also: PEP 343.", "score": 0.9}])


# A page as a flattened docs index holds it: the title, the grammar and the lead run together in its first chunk.
PASS_PAGE = (
    'The "pass" statement pass_stmt ::= "pass" "pass" is a null operation; when it is executed, nothing happens. '
    "It is useful as a placeholder when a statement is required syntactically."
)
WITH_LEAD = (
    'The "with" statement The "with" statement is used to wrap the execution of a block with methods defined by a '
    "context manager. This allows common usage patterns to be encapsulated for convenient reuse."
)
WITH_NOTE = (
    'Note: The "with" statement guarantees that if the "__enter__()" method returns without an error, then '
    '"__exit__()" will always be called. Thus, an error in the assignment is treated the same. 6. The suite runs.'
)
TABLE = "+ + + | Operation | Result | Notes | | del s[i:j] | same as s[i:j] = [] | |"


def test_a_title_and_grammar_block_do_not_open_an_answer() -> None:
    grader = ScriptedReranker({"null operation": 0.9, "placeholder": 0.5})
    passages = [{"text": PASS_PAGE, "source": "pydoc:pass", "chunk_id": "p-0", "score": 0.9}]
    answer = ExtractiveGenerator(grader).generate("What does the pass statement do?", passages)
    assert answer.text.startswith('"pass" is a null operation; when it is executed, nothing happens.')
    assert "::=" not in answer.text and answer.used == [0]


def test_a_prose_opening_is_left_as_it_is() -> None:
    grader = ScriptedReranker({"wraps": 0.9, "__enter__": 0.8})
    answer = ExtractiveGenerator(grader).generate("How does the with statement work?", [{"text": WITH, "score": 0.9}])
    assert answer.text.startswith("The with statement wraps") and answer.used == [0]


def test_a_factoid_from_a_table_row_gets_the_first_prose_sentence_of_the_next_passage() -> None:
    grader = ScriptedReranker({"Operation": 0.99, "Deletion": 0.4})
    passages = [
        {"text": TABLE, "source": "pydoc:typesseq", "score": 0.9},
        {"text": "Deletion of a name removes the binding of that name. More.", "source": "pydoc:del", "score": 0.5},
    ]
    answer = ExtractiveGenerator(grader).generate("When is a name unbound by del?", passages)
    assert answer.text == "Deletion of a name removes the binding of that name." and answer.used == [1]


def test_with_no_prose_anywhere_the_answer_is_todays() -> None:
    grader = ScriptedReranker({"Operation": 0.99})
    answer = ExtractiveGenerator(grader).generate("When is it?", [{"text": TABLE, "score": 0.9}])
    assert answer.text == TABLE and answer.used == [0]


SECTION = (
    "The frob statement\n\n"
    "The frob statement turns widgets into gadgets. "
    "It was added in version two. "
    "Widgets must be dry before they are frobbed. "
    "A frobbed widget cannot be unfrobbed."
)


def test_the_reader_never_answers_from_a_title_line() -> None:
    class TitleReader(ScriptedReranker):
        def read(self, question: str, texts: list[str]) -> list[object]:
            from fastcrag.grading.reader import Span

            assert all(not t.startswith("Gadget facts") for t in texts)  # it reads the body only
            start = texts[0].index("blue")
            return [Span("blue", start, start + 4, 0.9)]

    passages = [{"chunk_id": "g-0", "text": "Gadget facts\n\nGadgets are blue.", "source": "g", "score": 0.9}]
    answer = ExtractiveGenerator(TitleReader({}), reader_threshold=0.1).generate("Which colour are gadgets?", passages)
    assert answer.text == "blue\n\nGadgets are blue."


def test_an_explanation_with_no_prose_in_its_chunk_is_the_next_passages_prose_not_its_code() -> None:
    # no passage's best sentence is prose, so the best-ranked chunk is read, and it holds code alone
    grader = ScriptedReranker({"frob -v": 0.9, "Frobbing": 0.4})
    code = {"chunk_id": "c-0", "text": "Frob usage\n\n```\n$ frob -v x\n```", "source": "c", "score": 0.9}
    text = "Frob basics\n\n```\n$ frob -v y\n```\n\nFrobbing turns widgets into gadgets."
    prose = {"chunk_id": "p-0", "text": text, "source": "p", "score": 0.5}
    answer = ExtractiveGenerator(grader).generate("How do I frob verbosely?", [code, prose])
    assert answer.text == "Frobbing turns widgets into gadgets." and answer.used == [1]


def test_a_fact_is_not_read_from_a_chunk_refinement_kept_whole_while_a_passing_strip_stands() -> None:
    class Reader(ScriptedReranker):
        def read(self, question: str, texts: list[str]) -> list[object]:
            from fastcrag.grading.reader import Span

            self.read_texts = list(texts)
            return [Span(t.split()[0], 0, len(t.split()[0]), 0.9 if "Lyon" in t else 0.5) for t in texts]

    whole = {"chunk_id": "w-0", "text": "Lyon makes gadgets. It is a city.", "source": "w", "score": 0.6, "whole": True}
    strip = {"chunk_id": "s-0", "text": "Paris makes gadgets.", "source": "s", "score": 0.5, "strip": True}
    reader = Reader({})
    gen = ExtractiveGenerator(reader, reader_threshold=0.1)
    assert gen.generate("Which city makes gadgets?", [whole, strip]).text.startswith("Paris\n\n")
    assert reader.read_texts == ["Paris makes gadgets."]
    answer = gen.generate("Which city makes gadgets?", [whole])  # with nothing else, the whole chunk is read
    assert answer.text.startswith("Lyon\n\n") and answer.used == [0]


FROB_OPENING = "The frob statement\n\nThe frob statement turns widgets into gadgets. It takes one widget."
FROB_LATER = "The frob statement (continued)\n\nA frobbed widget cannot be unfrobbed. Gadgets are shiny."


def _store(*chunks: tuple[str, str]) -> object:
    """Chunks by id, as `VectorStore.get_by_ids` gives them; records the ids asked for."""
    from langchain_core.documents import Document

    asked: list[list[str]] = []

    def get_by_ids(ids: list[str]) -> list[Document]:
        asked.append(list(ids))
        return [Document(id=i, page_content=t, metadata={"source": "frob.md"}) for i, t in chunks if i in ids]

    get_by_ids.asked = asked  # type: ignore[attr-defined]
    return get_by_ids


def test_documentation_is_answered_with_its_section_unless_a_fact_is_read() -> None:
    class Reader(ScriptedReranker):
        def read(self, question: str, texts: list[str]) -> list[object]:
            from fastcrag.grading.reader import Span

            start = texts[0].index("gadgets")
            return [Span("gadgets", start, start + 7, 0.9)]

    grader = Reader({"turns widgets": 0.9})
    gen = ExtractiveGenerator(grader, reader_threshold=0.1)
    docs = [{"chunk_id": "frob-4", "text": FROB_OPENING, "source": "frob.md", "score": 0.9}]
    prose = [{"chunk_id": "p-0", "text": "The frob statement turns widgets into gadgets.", "source": "p", "score": 0.9}]
    question = "What does frob turn widgets into?"  # no explain form: a reader's span in running text
    assert gen.generate(question, prose).text.startswith("gadgets\n\n")
    assert gen.generate(question, docs).text == "The frob statement turns widgets into gadgets. It takes one widget."
    assert gen.generate("Where are gadgets made?", docs).text.startswith("gadgets\n\n")  # a fact: the span
    # below the reader's floor a fact over documentation is answered by the grader's sentences; over running text
    # no span to answer with declines (the graph abstains)
    strict = ExtractiveGenerator(grader, reader_threshold=0.95)
    assert strict.generate("Where are gadgets made?", docs).text == gen.generate(question, docs).text
    with pytest.raises(ValueError, match="reader threshold"):
        strict.generate("Where are gadgets made?", prose)
    # a chunk of a markup page is documentation without a title line too (a page that opens before its first heading)
    page = [{**prose[0], "source": "docs/frob.html#intro"}]
    assert strict.generate("Where are gadgets made?", page).text == "The frob statement turns widgets into gadgets."
    # documentation wherever a titled section stands among the passages, not only first (an untitled chunk of a
    # page whose heading it does not hold may rank first)
    assert gen.generate(question, [*prose, *docs]).text == "The frob statement turns widgets into gadgets."


def test_a_lead_is_the_sections_first_prose_wherever_it_stands_and_never_a_list_item() -> None:
    grader = ScriptedReranker({"Gadgets": 0.9, "turns widgets": 0.3})
    store = _store(
        ("frob-0", "The frob statement\n\n```\nfrob_stmt ::= 'frob' widget\n```"),  # the heading over a grammar block
        (
            "frob-1",
            "The frob statement (continued)\n\n1. take a widget\n\nThe frob statement turns widgets into gadgets.",
        ),
    )
    passages = [{"chunk_id": "frob-2", "text": "The frob statement (continued)\n\nGadgets are shiny.", "score": 0.8}]
    answer = ExtractiveGenerator(grader, chunks=store).generate("What does frob do?", passages)  # type: ignore[arg-type]
    assert answer.text == "The frob statement turns widgets into gadgets. Gadgets are shiny."
    assert [r["chunk_id"] for r in answer.read] == ["frob-1"] and answer.used == [1, 0]


def test_a_lead_that_does_not_name_its_subject_is_given_its_name() -> None:
    grader = ScriptedReranker({"default": 0.9, "heads": 0.5})
    passages = [
        {
            "chunk_id": "merge-3",
            "text": "merge(1) Manual Page \u203a STRATEGIES \u203a ort\n\n"
            "This is the default strategy when merging one branch. It resolves two heads.",
            "source": "merge.html",
            "score": 0.9,
        }
    ]
    answer = ExtractiveGenerator(grader).generate("Which strategy does merge use by default?", passages)
    assert answer.text.startswith("ort \u2014 This is the default strategy when merging one branch.")
    # a manual page's section name is no subject: the page's name is ("merge \u2014 This command ...")
    passages[0]["text"] = "merge(1) Manual Page \u203a DESCRIPTION\n\nThis command joins two histories by default."
    answer = ExtractiveGenerator(grader).generate("What does merge do by default?", passages)
    assert answer.text == "merge \u2014 This command joins two histories by default."
    # an entry that leaves its subject to its heading
    passages[0]["text"] = "core \u203a core.hooksPath\n\nBy default hooks are looked for in the hooks folder."
    answer = ExtractiveGenerator(grader).generate("What is the default hooks path?", passages)
    assert answer.text == "core.hooksPath \u2014 By default hooks are looked for in the hooks folder."
    # an entry's owner is no part of its name: "this object" does not name object.__enter__
    passages[0]["text"] = "Methods \u203a object.__enter__(self)\n\nEnter the context of this object by default."
    answer = ExtractiveGenerator(grader).generate("What does __enter__ do by default?", passages)
    assert answer.text == "object.__enter__ \u2014 Enter the context of this object by default."
    # an API entry's kind (Sphinx's "class", "classmethod", "property") is no part of its name
    passages[0]["text"] = "Methods \u203a classmethod object.__init_subclass__(cls)\n\nThis is called by default."
    answer = ExtractiveGenerator(grader).generate("What does __init_subclass__ do by default?", passages)
    assert answer.text == "object.__init_subclass__ \u2014 This is called by default."
    # an option whose heading opens a bracket at its qualifier is named without it
    passages[0]["text"] = "commit \u203a --fixup=[(amend|reword):]<commit>\n\nBy default it is marked for a rebase."
    answer = ExtractiveGenerator(grader).generate("What does --fixup do by default?", passages)
    assert answer.text == "--fixup \u2014 By default it is marked for a rebase."
    # a lead that points back but names its subject too, or one that says what it speaks of, stays as it is
    for lead in ("These pages describe how merge joins histories.", "Merge joins two histories by default."):
        passages[0]["text"] = f"merge(1) Manual Page \u203a DESCRIPTION\n\n{lead}"
        assert ExtractiveGenerator(grader).generate("What does merge do by default?", passages).text == lead
    # a section's title is no name of a thing (a FAQ's question, "Bugs", "Binding of names")
    for title in ("FAQ \u203a How do I merge?", "Frob \u203a Bugs", "Frob \u203a Binding of names"):
        passages[0]["text"] = f"{title}\n\nBy default two histories are joined."
        answer = ExtractiveGenerator(grader).generate("What does merge do by default?", passages)
        assert answer.text == "By default two histories are joined."


def test_an_explain_answer_is_read_from_the_best_ranked_chunk_that_says_it_in_prose() -> None:
    table = (
        "Operator precedence\n\nThe following table lists the operators by precedence.\n\n"
        'Operator: "in", "not in"; Description: Membership tests'
    )
    prose_chunk = "Membership test operations\n\nThe operators in and not in test for membership. They return a bool."
    grader = ScriptedReranker({"Operator:": 0.9, "test for membership": 0.7, "table lists": 0.3, "bool": 0.2})
    passages = [
        {"chunk_id": "ops-3", "text": table, "source": "ops.md", "score": 0.9},
        {"chunk_id": "in-0", "text": prose_chunk, "source": "in.md", "score": 0.8},
    ]
    question = "What do the in and not in operators do?"
    answer = ExtractiveGenerator(grader).generate(question, passages)
    # the table's row ranks first: not the table's lead, but the next chunk, which says it in prose
    assert answer.text.startswith("The operators in and not in test for membership.") and answer.used[0] == 1
    # with no chunk saying it in prose, the best-ranked chunk stands: its section's lead
    rows = {"chunk_id": "ops-4", "text": table.replace("Membership", "Identity"), "source": "ops.md", "score": 0.8}
    answer = ExtractiveGenerator(grader).generate(question, [passages[0], rows])
    assert answer.text.startswith("The following table lists the operators by precedence.") and answer.used[0] == 0


def test_an_entry_the_question_names_is_read_before_a_better_ranked_neighbour() -> None:
    index = "String Methods \u203a str.index(sub)\n\nLike find(), but raise ValueError when the substring is not found."
    find = (
        "String Methods \u203a str.find(sub)\n\nReturn the lowest index in the string where sub is found. "
        "Return -1 if sub is not found."
    )
    grader = ScriptedReranker({"Like find()": 0.8, "Return -1": 0.6, "lowest index": 0.5})
    passages = [
        {"chunk_id": "str-7", "text": index, "source": "str.md", "score": 0.8},
        {"chunk_id": "str-5", "text": find, "source": "str.md", "score": 0.7},
    ]
    answer = ExtractiveGenerator(grader).generate("What does str.find return when sub is not found?", passages)
    assert answer.text.startswith("str.find \u2014 Return the lowest index") and "-1" in answer.text
    assert answer.used[0] == 1
    # a question naming no entry reads the best-ranked chunk, as before; an option is named by its dashes
    answer = ExtractiveGenerator(grader).generate("What does find return when sub is not found?", passages)
    assert answer.text.startswith("str.index \u2014 Like find()") and answer.used[0] == 0
    merge = [
        {"chunk_id": "m-2", "text": "merge \u203a --quit\n\nForget about the merge in progress.", "source": "m.md"},
        {"chunk_id": "m-3", "text": "merge \u203a --abort\n\nAbort the merge and restore the state.", "source": "m.md"},
    ]
    grader = ScriptedReranker({"Forget": 0.9, "Abort": 0.5})
    answer = ExtractiveGenerator(grader).generate("What does merge --abort do?", merge)
    assert answer.text.startswith("Abort the merge") and answer.used[0] == 1


def test_a_fragment_never_opens_an_explain_answer() -> None:
    grader = ScriptedReranker({"Note:": 0.99, "Thus": 0.5, "wrap": 0.4, "suite": 0.3, "This allows": 0.2})
    passages = [
        {"text": WITH_NOTE, "source": "pydoc:with", "chunk_id": "w-3", "score": 0.9},
        {"text": WITH_LEAD, "source": "pydoc:with", "chunk_id": "w-0", "score": 0.7},
    ]
    answer = ExtractiveGenerator(grader).generate("How does the with statement work?", passages)
    # the note's words after its label are prose; the list item "6. The suite runs." follows, never opens
    assert fragment(answer.text) is None and "Note:" not in answer.text
    assert answer.text.startswith('The "with" statement guarantees') and answer.used == [0]
    assert answer.text.count(". ") + 1 <= EXPLAIN_SENTENCES and len(answer.text.split()) <= EXPLAIN_WORDS


def test_an_explain_answer_is_its_sections_lead_then_the_sentences_graded_best_in_reading_order() -> None:
    grader = ScriptedReranker({"turns widgets": 0.1, "dry": 0.9, "unfrobbed": 0.8, "version": 0.5, "Elsewhere": 0.99})
    passages = [
        {"chunk_id": "d-0", "text": SECTION, "source": "doc", "score": 0.8},
        {"chunk_id": "e-0", "text": "Elsewhere a frob is mentioned in passing.", "source": "other", "score": 0.7},
    ]
    answer = ExtractiveGenerator(grader).generate("What does the frob statement do?", passages)
    # the best-ranked chunk anchors the answer (not the better-graded sentence elsewhere); the title is not quoted
    assert answer.used == [0]
    assert answer.text == (
        "The frob statement turns widgets into gadgets. Widgets must be dry before they are frobbed. "
        "A frobbed widget cannot be unfrobbed."
    )
    continued = SECTION.replace("The frob statement\n\n", "The frob statement (continued)\n\n")
    answer = ExtractiveGenerator(grader).generate(
        "What does the frob statement do?", [{**passages[0], "text": continued}]
    )
    # where the section's opening is not read, no lead: the best three in reading order
    assert answer.text == (
        "The frob statement \u2014 It was added in version two. Widgets must be dry before they are frobbed. "
        "A frobbed widget cannot be unfrobbed."
    )  # (named: it points back)


def test_the_lead_of_a_section_that_opened_in_an_earlier_chunk_is_fetched_and_cited() -> None:
    grader = ScriptedReranker({"unfrobbed": 0.9, "shiny": 0.6, "turns widgets": 0.7})
    store = _store(("frob-4", FROB_OPENING), ("frob-5", FROB_LATER))
    passages = [{"chunk_id": "frob-5", "text": FROB_LATER, "source": "frob.md", "score": 0.8}]
    gen = ExtractiveGenerator(grader, chunks=store)  # type: ignore[arg-type]
    answer = gen.generate("What does the frob statement do?", passages)
    assert answer.text == (
        "The frob statement turns widgets into gadgets. A frobbed widget cannot be unfrobbed. Gadgets are shiny."
    )
    assert answer.used == [1, 0] and [r["chunk_id"] for r in answer.read] == ["frob-4"]  # the lead's chunk, cited
    assert answer.read[0]["score"] == 0.7  # graded as the sentence quoted from it, under its title
    # a refined strip: its chunk is fetched, then the one where its section opens
    strip = {"chunk_id": "frob-5", "text": "A frobbed widget cannot be unfrobbed.", "source": "frob.md", "score": 0.9}
    answer = gen.generate(
        "What does the frob statement do?", [strip | {"strip": True, "section": "The frob statement"}]
    )
    assert answer.text.startswith("The frob statement turns widgets into gadgets. A frobbed widget")
    # no store (or one that cannot fetch by id): the passages alone
    answer = ExtractiveGenerator(grader).generate("What does the frob statement do?", passages)
    assert answer.text == "A frobbed widget cannot be unfrobbed. Gadgets are shiny." and answer.read == ()


def test_an_explain_answer_stays_in_its_section() -> None:
    text = (
        "Frob \u203a Options (continued)\n\nThe -v flag prints more. It is rarely needed.\n\n"
        "Frob \u203a Bugs\n\nFrob is slow on Sundays. Nobody knows why."
    )
    grader = ScriptedReranker({"-v flag": 0.9, "Sundays": 0.95, "Nobody": 0.8, "rarely": 0.1, "letter": 0.3})
    passages = [{"chunk_id": "frob-2", "text": text, "source": "frob.md", "score": 0.9}]
    opening = ("frob-1", "Frob \u203a Options\n\nOptions change how frob works. Each has a letter.")
    answer = ExtractiveGenerator(grader, chunks=_store(opening)).generate("What does frob's -v flag do?", passages)
    assert answer.text == "Frob is slow on Sundays. Nobody knows why."  # the best sentence's section only
    grader.scores["Sundays"] = 0.2
    answer = ExtractiveGenerator(grader, chunks=_store(opening)).generate("What does frob's -v flag do?", passages)
    assert answer.text == "Options change how frob works. Each has a letter. The -v flag prints more."
    assert answer.used == [1, 0] and answer.read[0]["chunk_id"] == "frob-1"


def test_a_lead_is_the_first_sentence_that_may_open_never_a_list_item_or_lead_in() -> None:
    grader = ScriptedReranker({"Gadgets": 0.9, "turns widgets": 0.3})
    store = _store(
        ("frob-0", "The frob statement\n\n```\nfrob_stmt ::= 'frob' widget\n```"),  # the heading over a grammar block
        ("frob-1", "The frob statement (continued)\n\n1. take a widget\n\nFor example:\n\nFrob turns widgets to gold."),
    )
    passages = [{"chunk_id": "frob-2", "text": "The frob statement (continued)\n\nGadgets are shiny.", "score": 0.8}]
    answer = ExtractiveGenerator(grader, chunks=store).generate("What does frob do?", passages)  # type: ignore[arg-type]
    assert answer.text.startswith("Frob turns widgets to gold.") and answer.text.endswith("Gadgets are shiny.")
    assert [r["chunk_id"] for r in answer.read] == ["frob-1"] and answer.used == [1, 0]


def test_a_sentence_cut_where_its_chunk_ended_is_read_whole() -> None:
    store = _store(("frob-0", 'The frob statement\n\nFrob maps each widget to a gadget: "a" gives "f('))
    passages = [{"chunk_id": "frob-1", "text": 'The frob statement (continued)\n\na)".\n\nGadgets are shiny.'}]
    grader = ScriptedReranker({"shiny": 0.9})
    answer = ExtractiveGenerator(grader, chunks=store).generate("What does frob do?", passages)  # type: ignore[arg-type]
    assert answer.text == 'Frob maps each widget to a gadget: "a" gives "f(a)". Gadgets are shiny.'


MANUAL = "frob(1) Manual Page \u203a "
OPENING = (
    "frob-0",
    f"{MANUAL}NAME\n\nfrob - Turn widgets into gadgets at once\n\n"
    f"{MANUAL}DESCRIPTION\n\nFrob turns each widget it is given into a gadget. It keeps a log.",
)


def test_the_pages_opening_answers_where_the_grader_grades_its_lead_above_the_sections() -> None:
    example = f"{MANUAL}EXAMPLES \u203a frob -n 3\n\nFrob three widgets at once and print nothing."
    grader = ScriptedReranker({"three widgets": 0.6, "each widget": 0.9, "Turn widgets": 0.7, "log": 0.3})
    passages = [{"chunk_id": "frob-3", "text": example, "source": "frob.1.html", "score": 0.9}]
    gen = ExtractiveGenerator(grader, chunks=_store(OPENING))  # type: ignore[arg-type]
    answer = gen.generate("What does frob do to a widget?", passages)
    assert answer.text == (
        "frob - Turn widgets into gadgets at once. Frob turns each widget it is given into a gadget. It keeps a log."
    )  # (the one-line summary given a full stop)
    assert [r["chunk_id"] for r in answer.read] == ["frob-0"] and answer.used == [1]
    # the page's lead graded below the example's own: the example's section answers
    grader.scores["Turn widgets"] = 0.5
    answer = gen.generate("How do I frob three widgets without printing?", passages)
    assert answer.text == "Frob three widgets at once and print nothing." and answer.read == ()


def test_a_pages_opening_is_read_past_a_synopsis_of_code_alone() -> None:
    synopsis = [(f"frob-{n}", f"{MANUAL}SYNOPSIS (continued)\n\n```\nfrob --list-{n}\n```") for n in range(1, 4)]
    chunks = (
        ("frob-0", f"{MANUAL}NAME\n\nfrob - Turn widgets into gadgets at once"),
        *synopsis,
        ("frob-4", f"{MANUAL}DESCRIPTION\n\nFrob turns each widget it is given into a gadget. It keeps a log."),
    )
    example = f"{MANUAL}EXAMPLES \u203a frob -n 3\n\nFrob three widgets at once and print nothing."
    grader = ScriptedReranker({"three widgets": 0.5, "each widget": 0.6, "Turn widgets": 0.9})
    passages = [{"chunk_id": "frob-6", "text": example, "source": "frob.1.html", "score": 0.9}]
    gen = ExtractiveGenerator(grader, chunks=_store(*chunks))  # type: ignore[arg-type]
    answer = gen.generate("What does frob do to a widget?", passages)
    assert answer.text.startswith("frob - Turn widgets into gadgets at once. Frob turns each widget")
    assert [r["chunk_id"] for r in answer.read] == ["frob-0", "frob-4"]


def test_a_section_above_the_best_sentences_answers_where_its_lead_grades_higher() -> None:
    chunks = (
        ("seq-4", "Sequence Types \u203a Lists (continued)\n\nLists sort in place with sort()."),
        ("seq-5", "Sequence Types \u203a Tuples\n\nTuples are immutable sequences of any objects. They can be hashed."),
        (
            "seq-6",
            "Sequence Types \u203a Tuples \u203a class tuple([iterable])\n\n"
            "Tuples may be constructed in a number of ways: the constructor builds a tuple from an iterable.",
        ),
    )
    grader = ScriptedReranker({"constructed": 0.6, "immutable": 0.9, "hashed": 0.2})
    passages = [{"chunk_id": "seq-6", "text": chunks[2][1], "source": "seq.md", "score": 0.9}]
    gen = ExtractiveGenerator(grader, chunks=_store(*chunks))  # type: ignore[arg-type]
    answer = gen.generate("What is a tuple?", passages)
    assert answer.text.startswith("Tuples are immutable sequences of any objects.")
    assert [r["chunk_id"] for r in answer.read] == ["seq-5"]
    grader.scores["immutable"] = 0.3
    answer = gen.generate("How is a new object built from an iterable?", passages)
    assert answer.text.startswith("Tuples may be constructed") and answer.read == ()


def test_a_colon_that_introduces_what_the_answer_leaves_out_becomes_a_full_stop() -> None:
    text = (
        "The frob statement\n\nFrob statements turn widgets into gadgets:\n\n```\nfrob_stmt ::= 'frob' widget\n"
        "widget    ::= name\n```\n\nThe simple form is equivalent to\n\n```\nif widget:\n    gadget()\n```\n\n"
        "Frobbing is fast and safe."
    )
    grader = ScriptedReranker({"simple form": 0.95, "turn widgets": 0.9, "fast": 0.5})
    passages = [{"chunk_id": "frob-0", "text": text, "source": "frob.md", "score": 0.9}]
    answer = ExtractiveGenerator(grader).generate("What does the frob statement do?", passages)
    # the sentence that ran into its example unfinished is left out, though it graded best
    assert answer.text == "Frob statements turn widgets into gadgets. Frobbing is fast and safe."
    # a colon introducing the sentence shown after it stays
    listed = "The frob statement\n\nFrobbing runs in two steps:\n\n1. find the widget.\n\n2. turn it into a gadget."
    passages = [{"chunk_id": "frob-0", "text": listed, "source": "frob.md", "score": 0.9}]
    answer = ExtractiveGenerator(ScriptedReranker({"steps": 0.9})).generate("What does frobbing do?", passages)
    assert answer.text == "Frobbing runs in two steps: 1. find the widget. 2. turn it into a gadget."


def test_a_sentence_of_the_section_read_back_by_id_is_graded_and_cited() -> None:
    later = "The frob statement (continued)\n\nFrobbing twice is an error. Frob logs go to stderr."
    store = _store(
        ("frob-4", FROB_OPENING),
        ("frob-5", "The frob statement (continued)\n\nA frob widget can be tall."),
        ("frob-6", later),
    )
    grader = ScriptedReranker({"tall": 0.8, "twice": 0.3, "turns widgets": 0.6, "logs": 0.2, "one widget": 0.1})
    passages = [{"chunk_id": "frob-6", "text": later, "source": "frob.md", "score": 0.8}]
    answer = ExtractiveGenerator(grader, chunks=store).generate("What is a frob widget like?", passages)  # type: ignore[arg-type]
    assert answer.text == (
        "The frob statement turns widgets into gadgets. A frob widget can be tall. Frobbing twice is an error."
    )
    assert [r["chunk_id"] for r in answer.read] == ["frob-4", "frob-5"] and answer.used == [1, 2, 0]
    assert answer.read[1]["score"] == 0.8


def test_a_section_of_one_line_is_read_with_the_rest_of_its_chunk() -> None:
    grader = ScriptedReranker({"Turn widgets": 0.9, "each widget": 0.5, "log": 0.1})
    passages = [{"chunk_id": "frob-0", "text": OPENING[1], "source": "frob.1.html", "score": 0.9}]
    gen = ExtractiveGenerator(grader, chunks=_store(OPENING))  # type: ignore[arg-type]
    answer = gen.generate("How do I turn widgets into gadgets?", passages)
    assert answer.text == (
        "frob - Turn widgets into gadgets at once. Frob turns each widget it is given into a gadget. It keeps a log."
    )
