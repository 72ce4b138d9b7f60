"""Unit tests of the grader benchmark's pure helpers: snippet windows, gold-removed candidates, top scores."""

from __future__ import annotations

from collections.abc import Sequence

import pytest

from lab.training.bench import _candidate_scores, auc, fused, gold_removed_candidates, snippet_windows


def test_snippet_windows_three_sentences_give_five() -> None:
    text = "The tower opened in 1889. It is 330 metres tall. Gustave Eiffel's company built it."
    assert snippet_windows(text) == [
        "The tower opened in 1889.",
        "The tower opened in 1889. It is 330 metres tall.",
        "It is 330 metres tall.",
        "It is 330 metres tall. Gustave Eiffel's company built it.",
        "Gustave Eiffel's company built it.",
    ]


def test_snippet_windows_one_sentence_and_empty() -> None:
    assert snippet_windows("Bananas are yellow.") == ["Bananas are yellow."]
    assert snippet_windows("   ") == []


def test_gold_removed_candidates_drop_gold_and_answer_holders() -> None:
    paragraphs = [
        "The Eiffel Tower was completed in 1889.",  # gold
        "Its opening in  1889 drew crowds.",  # holds the answer (whitespace differs): dropped
        "The tower is 330 metres tall.",
        "Paris hosted the EXPOSITION of the same year.",  # holds the second answer (case differs): dropped
        "Gustave Eiffel's company designed it.",
    ]
    assert gold_removed_candidates(paragraphs, 0, ["1889", "exposition"]) == [2, 4]
    assert gold_removed_candidates(paragraphs, 2, ["  "]) == [0, 1, 3, 4]  # blank answers match nothing
    assert gold_removed_candidates(paragraphs[:1], 0, ["1889"]) == []


class _LengthGrader:
    """A fake grader: longer passages score higher, in (0, 1)."""

    name = "fake"

    def score(self, query: str, texts: Sequence[str]) -> list[float]:
        return [len(t) / (len(t) + 10) for t in texts]


def test_candidate_scores_columns_and_tops() -> None:
    w = (1.0, 2.0, -0.5)
    texts = [["a", "abcdef", "abc"], ["abcdefgh"]]
    cosines = [[0.9, 0.1, 0.4], [0.3]]
    lines: list[str] = []
    got = _candidate_scores({"spec": _LengthGrader()}, {"spec": w}, ["q1", "q2"], texts, cosines, "x", lines.append)
    assert list(got) == ["bi-encoder", "fake", "fake+bi"]
    assert got["bi-encoder"] == cosines
    assert got["fake"][0] == pytest.approx([1 / 11, 6 / 16, 3 / 13])
    assert got["fake+bi"][1] == pytest.approx(fused([8 / 18], [0.3], w))
    assert [max(s) for s in got["fake"]] == pytest.approx([6 / 16, 8 / 18])
    assert len(lines) == 1 and "fake" in lines[0]
    no_fusion = _candidate_scores({"spec": _LengthGrader()}, {}, ["q1", "q2"], texts, cosines, "x", lines.append)
    assert list(no_fusion) == ["bi-encoder", "fake"]


def test_auc_orders_classes() -> None:
    assert auc([0.9, 0.8], [0.1, 0.2]) == 1.0
    assert auc([0.5], [0.5]) == 0.5
