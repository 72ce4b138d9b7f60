"""The fit trial's corpora (tiny synthetic inputs), its right/wrong rule and its columns' arithmetic."""

from __future__ import annotations

import io
import json
import math
import tarfile
from pathlib import Path

import pytest

from fastcrag.evaluation.scoring import normalize_answer
from lab.scripts import fit_trial as ft
from lab.scripts.fit_trial import Question


def _xml(doc_id: str, focus: str, cui: str, pairs: list[tuple[str, str, str]]) -> bytes:
    body = "".join(
        f'<QAPair pid="{k}"><Question qid="{doc_id}-{k}" qtype="{t}">{q}</Question><Answer>{a}</Answer></QAPair>'
        for k, (t, q, a) in enumerate(pairs, 1)
    )
    return (
        f'<?xml version="1.0" encoding="UTF-8"?><Document id="{doc_id}" source="GHR"><Focus>{focus}</Focus>'
        f"<FocusAnnotations><UMLS><CUIs><CUI>{cui}</CUI></CUIs></UMLS></FocusAnnotations>"
        f"<QAPairs>{body}</QAPairs></Document>"
    ).encode()


SHARED = "These resources address the diagnosis or management of many conditions today."


def _medquad_tar(root: Path) -> None:
    files = {
        "medquad/3_GHR_QA/0000001.xml": _xml(
            "0000001",
            "Alpha syndrome",
            "C001",
            [
                (
                    "information",
                    "What is (are) Alpha syndrome ?",
                    "Alpha syndrome is a rare disorder of the skin. " + SHARED,
                ),
                (
                    "symptoms",
                    "What are the symptoms of Alpha syndrome ?",
                    "Alpha syndrome causes dry skin and hair loss.",
                ),
                ("treatment", "What are the treatments for Alpha syndrome ?", SHARED),
            ],
        ),
        "medquad/3_GHR_QA/0000002.xml": _xml(
            "0000002",
            "Beta disease",
            "C002",
            [
                ("information", "What is (are) Beta disease ?", "Beta disease is an inherited kidney disorder."),
                (
                    "frequency",
                    "How many people are affected by Beta disease ?",
                    "Beta disease affects 1 in 10,000 people.",
                ),
            ],
        ),
        # the same concept as Alpha syndrome under another name: never both in one sample
        "medquad/2_GARD_QA/0000003.xml": _xml(
            "0000003",
            "Alpha disorder",
            "C001",
            [
                (
                    "information",
                    "What is (are) Alpha disorder ?",
                    "Alpha disorder is a skin condition seen in children.",
                ),
                ("causes", "What causes Alpha disorder ?", "Alpha disorder is caused by changes in the ALF gene."),
            ],
        ),
        # one answered pair only: no sibling to stay as a near miss
        "medquad/3_GHR_QA/0000004.xml": _xml(
            "0000004", "Gamma", "C004", [("information", "What is Gamma ?", "Gamma is a very rare eye disorder.")]
        ),
    }
    folder = root / "train" / "medquad"
    folder.mkdir(parents=True)
    with tarfile.open(folder / "medquad.tar.gz", "w:gz") as tar:
        for name, data in files.items():
            info = tarfile.TarInfo(name)
            info.size = len(data)
            tar.addfile(info, io.BytesIO(data))


def test_medquad_documents_and_questions(tmp_path: Path) -> None:
    _medquad_tar(tmp_path)
    docs, questions = ft.medquad(tmp_path, sample=10, seed=1)
    foci = {d.split("-")[1] for d in docs}
    assert len(foci) == 2  # Gamma has one answer; Alpha syndrome and Alpha disorder share a concept: one of them
    assert all(t.startswith("# ") for t in docs.values())  # titled with the focus
    assert len(docs) in (4, 5)
    for q in questions:
        assert q.doc in docs and q.sentences and q.near and q.trimmed == ""
        assert all(normalize_answer(a) in normalize_answer(docs[q.doc]) for a in q.answers)
    # the sentence two answers share is nobody's gold, and an answer of nothing else has no question
    assert all(SHARED not in q.answers for q in questions)
    assert not any("treatments" in q.question for q in questions)


def test_medquad_missing_archive_is_a_clear_error(tmp_path: Path) -> None:
    with pytest.raises(SystemExit, match="no MedQuAD archive"):
        ft.medquad(tmp_path)


def _selqa_row(question: str, answers: list[int], section: str = "History") -> dict[str, object]:
    return {
        "question": question,
        "article": "Atlantis",
        "section": section,
        "topic": "TRAVEL",
        "answers": answers,
        "candidates": [
            "Atlantis was founded in the year 1200 by sailors.",
            "Its first king was named Poseidon the Elder.",
            "The city sank beneath the sea in a single night.",
            "Many stories were later told about its fall.",
        ],
    }


def test_selqa_sections_and_near_miss_text(tmp_path: Path) -> None:
    folder = tmp_path / "train" / "selqa"
    folder.mkdir(parents=True)
    rows = [_selqa_row("Who was the first king of Atlantis?", [1]), _selqa_row("When did Atlantis sink?", [2])]
    (folder / "selqa-ass-dev.json").write_text(json.dumps(rows[:1]))
    (folder / "selqa-ass-test.json").write_text(json.dumps([*rows[1:], _selqa_row("Who?", [0], "Other")]))
    docs, questions = ft.selqa(tmp_path)
    assert len(docs) == 2  # two sections
    king = next(q for q in questions if "king" in q.question)
    assert king.answers == ("Its first king was named Poseidon the Elder.",)
    assert docs[king.doc].startswith("# Atlantis: History\n\n")
    assert king.trimmed is not None and "Poseidon" not in king.trimmed and "sank" in king.trimmed
    assert king.near and king.sentences


def test_selqa_near_miss_needs_two_sentences_left() -> None:
    row = _selqa_row("Q?", [0, 1, 2])
    _, questions = ft.selqa_documents([row])
    assert not questions[0].near


def test_pubmedqa_abstracts_conclusions_and_neighbours() -> None:
    def rec(i: int) -> dict[str, object]:
        mesh = {0: ["Breast Neoplasms", "Mammography"], 1: ["Breast Neoplasms", "Mammography"]}.get(
            i, ["Breast Neoplasms", f"Term {i}"] if i == 2 else [f"Term {i}"]
        )
        return {
            "QUESTION": f"Question {i}?",
            "CONTEXTS": [f"Background of study {i}.", "We measured it."],
            "MESHES": ["Humans", *mesh],
            "LONG_ANSWER": f"Conclusion number {i} holds true here.",
        }

    docs, questions = ft.pubmedqa_documents({str(i): rec(i) for i in range(200)})
    assert len(docs) == 200
    by = {q.question: q for q in questions}
    q0 = by["Question 0?"]
    assert docs[q0.doc].endswith("Conclusion number 0 holds true here.")
    assert q0.answers == ("Conclusion number 0 holds true here.",)  # the conclusion's sentences only
    assert q0.near and q0.trimmed == ""  # abstract 1 shares two specific headings
    assert not by["Question 2?"].near  # one specific heading shared is not enough
    assert not by["Question 5?"].near  # Humans names no subject


def test_right_for_spans() -> None:
    q = Question("When?", ("1200",), "d")
    assert ft.right("In 1200.\n\nAtlantis was founded in the year 1200 by sailors.", q)
    assert not ft.right("In 12000.", q)


def test_right_for_sentences() -> None:
    gold = "Alpha syndrome causes dry skin and hair loss in most affected people."
    q = Question("What are the symptoms?", (gold,), "d", sentences=True)
    assert ft.right(f"Dry skin.\n\n{gold}", q)  # the gold sentence stands in the answer
    assert ft.right("dry skin\n\nAlpha syndrome causes dry skin and hair loss.", q)  # a cut of the gold sentence
    assert not ft.right("dry skin\n\nAlpha syndrome causes dry skin and nail loss.", q)  # not inside the gold
    assert not ft.right("dry skin and hair", q)  # too short to stand for the sentence
    assert not ft.right("Beta disease is an inherited kidney disorder.", q)
    # the first quoted sentence decides: a right sentence after a wrong lead does not count
    assert not ft.right("Beta disease is an inherited kidney disorder. Alpha syndrome causes dry skin and hair", q)
    span = Question("What are the symptoms?", (gold,), "d")  # the same gold as a span: only rule one
    assert not ft.right("Alpha syndrome causes dry skin and hair loss", span)


def _rec(declined: bool, right: bool = False) -> dict[str, object]:
    return {"declined": declined, "right": right}


def test_measure_arithmetic() -> None:
    records = {
        "answerable": [_rec(False, True), _rec(False, True), _rec(False, False), _rec(True)],
        "near_miss": [_rec(True), _rec(True), _rec(False), _rec(False, True)],  # an answered near miss is wrong
    }
    m = ft.measure(records)
    assert m["abstention_precision"] == pytest.approx(0.667, abs=1e-3)  # 2 of 3 declines were near misses
    assert m["abstention_recall"] == 0.5
    assert m["answerable_answered"] == 0.75
    assert m["answerable_right"] == 0.5
    assert m["truthfulness"] == pytest.approx((2 - 1 - 2) / 8, abs=1e-3)
    assert m["asked"] == {"answerable": 4, "near_miss": 4}


def test_measure_without_declines() -> None:
    m = ft.measure({"answerable": [_rec(False, True)], "near_miss": [_rec(False)]})
    assert m["abstention_precision"] is None and m["abstention_recall"] == 0.0 and m["truthfulness"] == 0.0
    assert ft.measure({})["truthfulness"] is None
    assert not math.isnan(ft.measure({"answerable": [_rec(True)]})["truthfulness"])


def test_pick_uses_the_corpus_near_miss_text() -> None:
    docs = {f"d{i}": f"# T{i}\n\nAnswer sentence number {i} is here." for i in range(6)}
    qs = [
        Question(f"q{i}?", (f"Answer sentence number {i} is here.",), f"d{i}", True, trimmed=f"# T{i}")
        for i in range(6)
    ]
    qs.append(Question("again?", ("Answer sentence number 0 is here.",), "d0", True, trimmed="# T0"))
    corpus, fit, answerable, near = ft.pick(docs, qs, n_fit=2, n_test=4, seed=3)
    assert len(near) == 2 and len({q.doc for q in near}) == 2
    assert all(corpus[q.doc] == q.trimmed for q in near)
    assert all(q.doc not in {n.doc for n in near} for q in [*fit, *answerable])
    assert len(fit) == 2 and len(answerable) == 2


def test_parse_rows() -> None:
    assert ft.parse_rows(None, 0.0, False) == list(ft.DEFAULT_ROWS)
    assert ft.parse_rows(None, 5.0, True)[-2:] == ["train", "naming"]
    assert ft.parse_rows("base, plain", 0.0, False) == ["base", "plain"]
    with pytest.raises(SystemExit, match="unknown row"):
        ft.parse_rows("base,nope", 0.0, False)
    with pytest.raises(SystemExit, match="--minutes"):
        ft.parse_rows("train", 0.0, False)


def test_summary_over_trial_folders(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    new, old = tmp_path / "trial-medquad", tmp_path / "trial-old"
    new.mkdir()
    old.mkdir()
    records = {"answerable": [_rec(False, True), _rec(True)], "near_miss": [_rec(True), _rec(False)]}
    row = {"label": "plain RAG (base calibration)", **ft.measure(records), "records": records}
    (new / "trial.json").write_text(
        json.dumps({"corpus": "medquad", "rows": {"plain": row}, "skipped": {"labelfree": "fit failed"}})
    )
    (old / "trial.json").write_text(json.dumps({"packaged": {"near_miss_declined": 0.5, "records": records}}))
    ft.main(["summary", str(new), str(old)])
    out = capsys.readouterr().out
    assert out.startswith("| corpus")
    assert "| medquad (2 + 2) | plain RAG (base calibration) | 0.50 | 0.50 | 0.50 | 0.50 | 0.00 |" in out
    assert "| trial-old (2 + 2) | packaged |" in out
    assert "fit without labels skipped (fit failed)" in out
    with pytest.raises(SystemExit, match=r"no trial\.json"):
        ft.main(["summary", str(tmp_path)])


def test_sweep_counts_answers_by_the_base_rows_top_grade(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    folder = tmp_path / "trial"
    (folder / "fit-labelfree").mkdir(parents=True)
    base = {
        "answerable": [{"top_score": 0.9}, {"top_score": 0.5}],
        "near_miss": [{"top_score": 0.7}, {"top_score": None}],
    }
    plain = {"answerable": [{"right": True}, {"right": False}], "near_miss": [{"right": False}, {"right": False}]}
    rows = {"base": {"records": base}, "plain": {"records": plain}}
    (folder / "trial.json").write_text(json.dumps({"corpus": "c", "rows": rows}))
    (folder / "fit-labelfree" / "calibration.json").write_text(json.dumps({"reranker_threshold": 0.85}))
    curve = ft.sweep(folder)["curve"]
    # at 0.30 three are answered: one right (+1), one answerable wrong and one near miss (-2), of four questions
    assert curve[0.3] == -0.25 and curve[0.55] == 0.0 and curve[0.75] == 0.25 and curve[0.95] == 0.0
    ft.main(["sweep", str(folder)])
    assert "| c | " in (out := capsys.readouterr().out) and "| 0.90 (0.25) | 0.85 |" in out
    del rows["plain"]
    (folder / "trial.json").write_text(json.dumps({"corpus": "c", "rows": rows}))
    with pytest.raises(SystemExit, match="base and plain rows"):
        ft.sweep(folder)
