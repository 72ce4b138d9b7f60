"""Fit questions written by a scripted chat model: filtering, near misses, failures, the spread, the judge, JSONL."""

from __future__ import annotations

import time
from collections import Counter
from pathlib import Path
from typing import Any

from fastcrag.fitting import generate as gen
from fastcrag.fitting.generate import (
    MAX_CHUNK_CHARS,
    GenerationStats,
    generate_questions,
    judge,
    pick_chunks,
    write_questions_jsonl,
)
from fastcrag.fitting.questions import FitQuestion, parse_question
from fastcrag.generation.prompts import QUESTIONS_EXAMPLE_OUTPUT

from fakes import ScriptedChat

RIVER = "Oakford was founded in 1712 by wool merchants. The river of Oakford is called the Lune."


def reply(question: str, answer: str, near_miss: str) -> dict[str, Any]:
    return {"question": question, "answer": answer, "near_miss": near_miss}


def chunk_of(prompt: str) -> str:
    """The chunk text shown in a generation prompt (the last <text> block; the first is the worked example)."""
    return prompt.rsplit("<text>\n", 1)[1].rsplit("\n</text>", 1)[0]


def about_chunk(prompt: str) -> dict[str, Any]:
    """A well-behaved model: asks for the chunk's first word, which it copies; the near miss names the chunk's tag."""
    text = chunk_of(prompt)
    tag = text.split()[2]
    return reply(f"Which word opens the passage about {tag}?", text.split()[0], f"Who wrote about {tag} first?")


def corpus(sources: int, per_source: int) -> list[tuple[str, str]]:
    return [
        (f"doc{s}.txt", f"Word{s}x{c} opens chunk{s}x{c} of document {s}, which holds enough words to ask about.")
        for s in range(sources)
        for c in range(per_source)
    ]


# ----------------------------------------------------------------------------------------------- generation


def test_answer_must_be_in_the_chunk_case_and_whitespace_aside() -> None:
    llm = ScriptedChat(
        replies=[
            reply("When was Oakford founded?", "1712", "Who was the first mayor of Oakford?"),
            reply("What is Oakford's river called?", "the  LUNE", "How long is the river of Oakford?"),
            reply("Who founded Oakford?", "cloth traders", "When did the Oakford wool trade end?"),
        ]
    )
    chunks = [("a.txt", RIVER), ("b.txt", RIVER), ("c.txt", RIVER)]
    questions, stats = generate_questions(chunks, llm, n=3, progress=False)
    assert [q.answers for q in questions if q.answerable] == [("1712",), ("the LUNE",)]
    assert "Who founded Oakford?" not in [q.question for q in questions]
    assert (stats.asked, stats.answerable, stats.answer_not_in_chunk, stats.near_miss) == (3, 2, 1, 3)


def test_answer_not_in_chunk_is_dropped_and_its_near_miss_kept() -> None:
    llm = ScriptedChat(replies=[reply("Who founded Oakford?", "cloth traders", "Who was Oakford's first mayor?")])
    questions, stats = generate_questions([("a.txt", RIVER)], llm, n=1, progress=False)
    assert questions == [FitQuestion(1, "Who was Oakford's first mayor?")]
    assert stats == GenerationStats(asked=1, near_miss=1, answer_not_in_chunk=1, seconds=stats.seconds)


def test_near_miss_is_an_unanswerable_question_after_its_answerable_one() -> None:
    llm = ScriptedChat(replies=[reply("When was Oakford founded?", "1712", "Who was the first mayor of Oakford?")])
    questions, stats = generate_questions([("a.txt", RIVER)], llm, n=1, progress=False)
    assert questions == [
        FitQuestion(1, "When was Oakford founded?", answers=("1712",)),
        FitQuestion(2, "Who was the first mayor of Oakford?"),
    ]
    assert questions[0].answerable and not questions[1].answerable
    assert not questions[1].answers and not questions[1].sources
    assert (stats.answerable, stats.near_miss, stats.failed) == (1, 1, 0)


def test_failed_calls_are_counted_and_skipped() -> None:
    def slow(prompt: str) -> dict[str, Any]:
        time.sleep(0.5)
        return about_chunk(prompt)

    llm = ScriptedChat(
        replies=[
            RuntimeError("connection reset"),
            about_chunk,
            {"question": "What?", "answer": "Word"},  # no near_miss: outside the schema
            "not json at all",
            slow,  # past the timeout
            {"question": "", "answer": "x", "near_miss": "y"},  # empty question: outside the schema
            about_chunk,
        ]
    )
    questions, stats = generate_questions(corpus(7, 1), llm, n=7, progress=False, timeout=0.1)
    assert stats.asked == 7 and stats.failed == 5
    assert (stats.answerable, stats.near_miss) == (2, 2)
    assert [q.line for q in questions] == [1, 2, 3, 4]
    assert [q.answerable for q in questions] == [True, False, True, False]


def test_include_raw_style_output_is_read_and_its_parsing_error_is_a_failure() -> None:
    good = reply("When was Oakford founded?", "1712", "Who was the first mayor of Oakford?")
    llm = ScriptedChat(
        replies=[
            {"raw": "...", "parsed": good, "parsing_error": None},
            {"raw": "...", "parsed": None, "parsing_error": "bad JSON"},
        ]
    )
    questions, stats = generate_questions([("a.txt", RIVER), ("b.txt", RIVER)], llm, n=2, progress=False)
    assert len(questions) == 2 and stats.failed == 1


def test_unusable_questions_are_dropped_and_counted() -> None:
    llm = ScriptedChat(
        replies=[
            reply("Was Oakford founded in 1712?", "1712", "When was Oakford founded?"),  # answer given away
            reply(
                QUESTIONS_EXAMPLE_OUTPUT["question"], "1712", QUESTIONS_EXAMPLE_OUTPUT["near_miss"]
            ),  # the worked example copied
            reply("When was Oakford founded?", "1", "When was Oakford founded?"),  # one-digit answer; near miss echoes
            reply("Where is it?", "Lune", "What colour is the sky?"),  # near miss shares no word with the chunk
            reply("Oakford river name", "Lune", "<code>Oakford wool</code>"),  # neither is a question
            reply(
                "¿Cómo se llama el río de Oakford?", "Lune", "Oakford 的市长是谁\uff1f"
            ),  # other languages, a full-width mark
        ]
    )
    chunks = [(f"{i}.txt", RIVER) for i in range(6)]
    questions, stats = generate_questions(chunks, llm, n=6, progress=False)
    assert [(q.question, q.answers) for q in questions] == [
        ("When was Oakford founded?", ()),
        ("Where is it?", ("Lune",)),
        ("¿Cómo se llama el río de Oakford?", ("Lune",)),
        ("Oakford 的市长是谁\uff1f", ()),
    ]
    assert stats.unusable == 8 and stats.answer_not_in_chunk == 0


def test_repeated_questions_are_kept_once() -> None:
    same = reply("When was Oakford founded?", "1712", "Who was the first mayor of Oakford?")
    questions, stats = generate_questions(
        [("a.txt", RIVER), ("b.txt", RIVER)], ScriptedChat(replies=[same]), 2, 13, False
    )
    assert len(questions) == 2 and stats.unusable == 2


def test_prompt_holds_the_capped_chunk_and_the_rules() -> None:
    long = "Oakford " + "word " * 2000
    llm = ScriptedChat(replies=[about_chunk])
    generate_questions([("a.txt", long)], llm, n=1, progress=False)
    shown = chunk_of(llm.prompts[0])
    assert long.startswith(shown) and len(shown) <= MAX_CHUNK_CHARS
    assert "copied exactly" in llm.prompts[0] and "does NOT answer" in llm.prompts[0]


# ----------------------------------------------------------------------------------------------- the spread


def test_picks_spread_across_sources_round_robin() -> None:
    picked = pick_chunks(corpus(3, 5), n=7, seed=13)
    per_source = Counter(s for s, _ in picked)
    assert len(picked) == 7 and sorted(per_source.values()) == [2, 2, 3]
    first_round = [s for s, _ in picked[:3]]
    assert sorted(first_round) == ["doc0.txt", "doc1.txt", "doc2.txt"]
    assert [s for s, _ in picked[3:6]] == first_round  # the same seeded source order each round


def test_picks_are_seeded() -> None:
    chunks = corpus(6, 6)
    assert pick_chunks(chunks, 10, seed=13) == pick_chunks(chunks, 10, seed=13)
    assert pick_chunks(chunks, 10, seed=13) != pick_chunks(chunks, 10, seed=14)


def test_picks_take_everything_when_asked_for_more_and_pass_over_short_chunks() -> None:
    chunks = [*corpus(2, 3), ("doc9.txt", "A heading"), ("doc0.txt", "   ")]
    picked = pick_chunks(chunks, 100)
    assert sorted(picked) == sorted(corpus(2, 3))
    assert pick_chunks(chunks, 0) == []
    assert pick_chunks([], 5) == []


def test_generation_asks_about_the_picked_chunks_in_order() -> None:
    llm = ScriptedChat(replies=[about_chunk])
    questions, stats = generate_questions(corpus(4, 3), llm, n=6, seed=5, progress=False)
    shown = [chunk_of(p) for p in llm.prompts]
    assert shown == [t for _, t in pick_chunks(corpus(4, 3), 6, seed=5)]
    assert {t.split()[5] for t in shown} == {"0,", "1,", "2,", "3,"}  # all four documents
    assert (stats.asked, stats.answerable, stats.near_miss) == (6, 6, 6)
    assert [q.line for q in questions] == list(range(1, 13))
    assert "6 answerable and 6 near-miss" in stats.summary()


# ----------------------------------------------------------------------------------------------- the judge


def test_judge_true_false_and_none_where_the_call_failed() -> None:
    llm = ScriptedChat(
        replies=[{"answers": True}, {"answers": False}, RuntimeError("rate limited"), {"verdict": "yes"}]
    )
    verdicts = judge(llm, "When was Oakford founded?", [RIVER, "The Lune is long.", "x", "y"])
    assert verdicts == [True, False, None, None]
    assert len(llm.prompts) == 4
    assert "When was Oakford founded?" in llm.prompts[0] and RIVER in llm.prompts[0]


def test_judge_times_out_to_none_and_takes_model_instances() -> None:
    def slow(prompt: str) -> dict[str, Any]:
        time.sleep(0.5)
        return {"answers": True}

    llm = ScriptedChat(replies=[slow, gen.PassageVerdict(answers=True)])
    assert judge(llm, "q", ["a", "b"], timeout=0.1) == [None, True]
    assert judge(ScriptedChat(replies=[{"answers": False}]), "q", []) == []


# ----------------------------------------------------------------------------------------------- JSONL


def test_written_questions_round_trip_through_the_parser(tmp_path: Path) -> None:
    llm = ScriptedChat(
        replies=[
            reply("When was Oakford founded?", "1712", "Who was the first mayor of Oakford?"),
            reply("Who founded Oakford — and why?", "wool merchants", 'What did Oakford\'s "merchants" sell?'),
        ]
    )
    questions, _ = generate_questions([("a.txt", RIVER), ("b.txt", RIVER)], llm, n=2, progress=False)
    questions.append(FitQuestion(len(questions) + 1, "Which file names the river?", sources=("a.txt",)))
    path = tmp_path / "out" / "QUESTIONS.jsonl"
    write_questions_jsonl(path, questions)
    lines = path.read_text(encoding="utf-8").splitlines()
    assert len(lines) == len(questions) == 5
    assert [parse_question(line, f"{path}:{n}", n) for n, line in enumerate(lines, 1)] == questions
    assert '"answerable": false' in lines[1] and "—" in lines[2]
    assert [p.name for p in path.parent.iterdir()] == ["QUESTIONS.jsonl"]  # no temporary file left
