"""The FLARE measurement's arithmetic: ROUGE-L, sentences with content, a row and its table, on tiny inputs."""

from __future__ import annotations

import pytest

from lab.scripts import flare_measure as fm


def test_rouge_l_is_the_f_measure_of_the_longest_common_subsequence() -> None:
    assert fm.rouge_l("the cat sat on the mat", "the cat sat on the mat") == 1.0
    assert fm.rouge_l("", "anything") == 0.0 and fm.rouge_l("dog", "cat") == 0.0
    # LCS "the cat the mat" = 4 of 5 candidate words and 4 of 6 reference words
    assert fm.rouge_l("the cat on the mat", "The cat sat. The mat sits.") == pytest.approx(
        2 * 0.8 * (4 / 6) / (0.8 + 4 / 6)
    )


def test_sentences_with_content() -> None:
    assert not fm.is_content("1.") and not fm.is_content("The answer is:")
    assert fm.is_content("Liddle syndrome raises blood pressure early.")


def test_focus_of_an_answer_document() -> None:
    assert fm.focus_of("3-0000222-3-genetic-changes") == "3-0000222"


def test_a_row_and_its_table() -> None:
    records = [
        {"abstained": False, "sentences": ["1.", "It raises blood pressure in childhood."], "supported": [True, False],
         "rouge_l": 0.2, "latency_s": 1.0, "flare": [{"action": "drop"}], "chat_calls": 1},
        {"abstained": True, "sentences": [], "supported": [], "rouge_l": 0.0, "latency_s": 3.0, "flare": [],
         "chat_calls": 2},
    ]  # fmt: skip
    row = fm.summarise(records)
    assert row["answered"] == 1 and row["supported"] == 0.5 and row["content_supported"] == 0.0
    assert row["rouge_l"] == pytest.approx(0.1) and row["rouge_l_answered"] == pytest.approx(0.2)
    assert row["latency_p50_s"] == 2.0 and row["chat_calls_per_answer"] == 1.5 and row["actions"] == {"drop": 1}
    text = fm.table({"flare masked": row}, 0.12)
    assert (
        "| flare masked | 1/2 | 2.00 (1.00) | 0.500 (0.000) | 0.100 / 0.200 | 2.0 / 2.0 | 1.50 | 0.50 | drop 1 |"
        in text
    )
