"""The label-free fit: pseudo-questions and their twins, the draw for few labels (shrinkage, intervals), end to end."""

from __future__ import annotations

import json
import random
from collections.abc import Sequence
from pathlib import Path
from typing import Any

import numpy as np
import pytest

from fastcrag import components
from fastcrag.config.calibration import Calibration
from fastcrag.fitting import fit as fitmod
from fastcrag.fitting.calibrate import Observation
from fastcrag.fitting.draw import _ahead, blend, draw_alone, shrink, utility
from fastcrag.fitting.fit import FitOptions, fit
from fastcrag.fitting.measure import KEEP_CONFIDENCE, Thresholds, calibrate_on
from fastcrag.fitting.pseudo import (
    PseudoQuestion,
    cloze,
    cut_sentence,
    make_pseudo_questions,
    measure_shift,
    pseudo_first_pass,
    shift_scores,
    twin_pairs,
)
from fastcrag.fitting.questions import FitError
from fastcrag.retrieval.store import FaissStore
from fastcrag.retrieval.text import titled

from fakes import HashEmbeddings


def test_cloze_asks_about_a_term_a_year_a_number_or_a_name() -> None:
    rng = random.Random(0)
    made = {cloze("A context manager is an object that defines the runtime context of a with statement.", rng)}
    made |= {
        cloze("The bridge over the river was opened to traffic in 1932 after six years of work.", rng) for _ in "ab"
    }
    questions = {m[0] for m in made if m}
    assert "What is context manager?" in questions
    assert any("what year" in q and "1932" not in q for q in questions)
    assert all(q.endswith("?") for q in questions)
    assert cloze("it was then done quickly and without much fuss at all.", rng) is None  # nothing to ask about
    named = cloze("The first printed edition was sold by Aldus Manutius to scholars across the city.", rng)
    assert named == ("The first printed edition was sold by what to scholars across the city?", "Aldus Manutius")


def test_questions_come_one_a_chunk_from_prose_with_a_cap_per_source() -> None:
    prose = "The old mill on the river was rebuilt in 1871 by the town council of Eastwick."
    chunks = [(f"doc{i % 3}.txt", titled("Mill", prose)) for i in range(30)]
    chunks += [("table.txt", "| a | b |\n| 1 | 2 |"), ("short.txt", "Too short to ask.")]
    made = make_pseudo_questions(chunks, 20, seed=1)
    assert len(made) == 6  # at most max(2, 5% of 20) from each of the three sources; none from the table or stub
    assert {p.source for p in made} == {"doc0.txt", "doc1.txt", "doc2.txt"}
    assert all(p.sentence == prose and p.kind == "cloze" for p in made)
    both = make_pseudo_questions(chunks, 4, seed=1, kinds=("cloze", "ict"))
    assert [p.kind for p in both] == ["cloze", "ict", "cloze", "ict"] and both[1].question == prose
    with pytest.raises(ValueError, match="unknown"):
        make_pseudo_questions(chunks, 4, seed=1, kinds=("title",))


def test_cut_sentence_keeps_the_title_and_the_rest() -> None:
    text = titled("Mill", "The mill was rebuilt in 1871.  It grinds  wheat. It has two stones.")
    assert cut_sentence(text, "It grinds wheat.") == titled("Mill", "The mill was rebuilt in 1871. It has two stones.")


class ListRetriever:
    def __init__(self, docs: list[Any]) -> None:
        self.docs = docs

    def search(self, query: str, k: int = 10) -> tuple[list[Any], str]:
        return self.docs[:k], "hybrid"


def test_first_pass_labels_the_sentence_and_cuts_it_for_the_twin() -> None:
    from langchain_core.documents import Document

    sentence = "The mill was rebuilt in 1871 by the town council."
    docs = [
        Document("Other text about mills and rivers in the valley.", metadata={"source": "b", "chunk_id": "b0"}),
        Document(f"Mills. {sentence} It has two stones.", metadata={"source": "a", "chunk_id": "a0"}),
        Document(sentence, metadata={"source": "a", "chunk_id": "a1"}),  # an overlap holding only the sentence
    ]
    asked = [
        PseudoQuestion("The mill was rebuilt in what year?", sentence, "1871", "cloze", "a"),
        PseudoQuestion(sentence, sentence, "", "ict", "a"),
    ]
    cloze_item, ict_item = pseudo_first_pass(ListRetriever(docs), asked, top_k=3, progress=False)  # type: ignore[arg-type]
    assert [c.evidence for c in cloze_item.candidates] == [False, True, True]
    assert sentence in cloze_item.candidates[1].text  # a cloze question is graded against the sentence itself
    twin = cloze_item.gold_removed_view(3)
    assert [c.chunk_id for c in twin] == ["b0", "a0"] and not any(c.evidence for c in twin)  # a1 had nothing else
    assert twin[1].text == "Mills. It has two stones."
    assert sentence not in ict_item.candidates[1].text and ict_item.candidates[1].evidence  # ict: the rest answers
    assert cloze_item.question.answers == ("1871",) and ict_item.question.answers == (sentence,)
    # a fine-tune learns the evidence against its own twin: the same words around, the sentence gone
    assert twin_pairs([cloze_item], top_k=3) == [
        (cloze_item.question.question, docs[1].page_content, 1.0, "1871"),
        (cloze_item.question.question, "Mills. It has two stones.", 0.0, ""),
    ]


def _obs(n: int, gap: float, seed: int, prefix: str = "q") -> list[Observation]:
    rng = np.random.default_rng(seed)
    out = []
    for i in range(n):
        for kind, lift in (("answerable", gap), ("gold_removed", 0.0)):
            out.append(
                Observation(kind, float(np.clip(0.4 + lift + rng.normal(0, 0.1), 0, 1)), "c", "c", None, f"{prefix}{i}")
            )
    return out


def test_utility_and_blend() -> None:
    obs = _obs(10, 0.4, 0)
    assert utility(obs, Thresholds(0.0, 1.0)) == 0.0  # everything answered: +10 - 10
    assert utility(obs, Thresholds(1.1, 1.1)) == 0.0  # everything declined
    assert utility(obs, Thresholds(0.6, 0.9)) > 0.4  # of at most 0.5: half the views are to decline
    mixed = blend(Thresholds(0.6, 0.8, 0.3), Thresholds(0.2, 0.4, None), 0.25)
    assert mixed.lower == pytest.approx(0.3) and mixed.upper == pytest.approx(0.5) and mixed.reader is None
    assert blend(Thresholds(0.6, 0.5), Thresholds(0.2, 0.3), 1.0).upper == 0.6  # never below the lower edge
    # a floor the labels could not draw (none of theirs answered by a span) is the prior's, whatever their weight
    assert blend(Thresholds(0.6, 0.8, None), Thresholds(0.2, 0.4, 0.9), 1.0).reader == 0.9
    assert blend(Thresholds(0.6, 0.8, 0.3), Thresholds(0.2, 0.4, None), 0.5).reader == 0.3


def draw(obs: Sequence[Observation]) -> tuple[Thresholds, str]:
    return calibrate_on(obs, 0.9, 0.5)


def test_shrinkage_trusts_labels_that_separate_and_a_prior_that_does() -> None:
    labels = _obs(40, 0.4, 1)
    groups = {o.question: o.question for o in labels}
    bad_prior = Thresholds(0.05, 0.1)  # declines nothing
    trusted = shrink(labels, bad_prior, [], draw, groups, seed=3, prior_name="p")
    assert trusted.weight is not None and trusted.weight >= 0.75 and "cross-validation" in trusted.objective
    assert trusted.cv[f"{trusted.weight:g}"] >= trusted.cv["0"] and "beat the prior alone in 100%" in trusted.objective
    good_prior = draw(_obs(400, 0.4, 2, "p"))[0]  # the same corpus, drawn on many more questions
    kept = shrink(labels, good_prior, [], draw, groups, seed=3, prior_name="p")
    assert kept.weight == 0.0  # ties go to the prior: labels must show they do better
    lo, hi = kept.intervals["reranker_threshold"] or (0, 0)
    assert lo - 1e-4 <= kept.thresholds.lower <= hi + 1e-4  # the interval is rounded to 4 places


def test_labels_move_off_the_prior_only_when_ahead_beyond_chance() -> None:
    assert _ahead([1.0] * 20, [0.0] * 20, seed=1) == 1.0
    assert _ahead([0.0] * 20, [0.0] * 20, seed=1) == 0.0  # a tie is not ahead
    one_question = [2.0] + [0.0] * 39  # ahead on one question of 40: in the resamples that draw it
    assert 0.5 < _ahead(one_question, [0.0] * 40, seed=1) < KEEP_CONFIDENCE


def test_intervals_narrow_with_more_questions() -> None:
    few = draw_alone(_obs(12, 0.3, 4), draw, seed=1, what="few").intervals["reranker_threshold"]
    many = draw_alone(_obs(300, 0.3, 4), draw, seed=1, what="many").intervals["reranker_threshold"]
    assert few is not None and many is not None and (many[1] - many[0]) < (few[1] - few[0])


class TokenGrader:
    """Scores a passage by the share of the question's numbered words (names, years) it holds."""

    name = "token-grader"

    @staticmethod
    def tokens(text: str) -> set[str]:
        return {w.strip("?.,") for w in text.split() if any(ch.isdigit() for ch in w)}

    def score(self, query: str, texts: Sequence[str]) -> list[float]:
        asked = self.tokens(query)
        return [len(asked & self.tokens(t)) / max(1, len(asked)) for t in texts]


@pytest.fixture
def prose_index(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Path:
    monkeypatch.setattr(components, "default_embeddings", lambda spec=None: HashEmbeddings())
    texts, metas = [], []
    for i in range(60):
        texts.append(
            f"The Kel{i}mar bridge crossing the Ro{i}dan opened for carts in {1800 + 3 * i} under surveyor Tam{i}son. "
            "Its arches were rebuilt after a flood in the wet winter that followed."
        )
        metas.append({"source": f"doc{i}.txt"})
    store = FaissStore(HashEmbeddings())
    store.add_texts(texts, metas)
    store.save(tmp_path / "index")
    monkeypatch.setattr(fitmod, "load_reranker", lambda spec: TokenGrader())
    monkeypatch.setattr(fitmod, "default_reranker_spec", lambda: "token-grader")
    return tmp_path / "index"


def test_a_label_free_fit_draws_thresholds_between_the_evidence_and_its_twin(tmp_path: Path, prose_index: Path) -> None:
    out = tmp_path / "fit"
    result = fit(FitOptions(None, out, index=prose_index, pseudo=40, progress=False), log=print)
    cal = result.calibration
    assert cal.sample is not None and cal.sample.pseudo == result.counts["pseudo_questions_retrieved"] > 20
    assert cal.sample.labelled == 0 and "label-free" in cal.data and "pseudo-questions" in cal.data
    rows = [json.loads(x) for x in (out / "observations.jsonl").read_text(encoding="utf-8").splitlines()]
    answerable = [r["top_score"] for r in rows if r["kind"] == "answerable"]
    twins = [r["top_score"] for r in rows if r["kind"] == "gold_removed"]
    assert min(answerable) > max(twins)  # the twin has the sentence cut: it no longer holds the question's words
    assert max(twins) < cal.reranker_threshold <= min(answerable)
    assert set(cal.metrics["intervals"]) == {"reranker_threshold", "crag_upper", "reader_threshold"}
    report = (out / "report.md").read_text(encoding="utf-8")
    assert "label-free" in report and "rerank_weight kept at the packaged value" in report  # no empty order table


def test_the_shift_is_the_gap_between_median_logits_and_never_raises_a_grade() -> None:
    real, pseudo = [0.5, 0.731059, 0.9], [0.731059, 0.880797, 0.99]  # median logits 1 and 2
    assert measure_shift(real, pseudo) == pytest.approx(-1.0, abs=1e-4)
    assert measure_shift(pseudo, real) == 0.0  # pseudo-questions graded lower than real ones: no shift
    with pytest.raises(ValueError, match="needs real and pseudo"):
        measure_shift([], pseudo)
    obs = [Observation("answerable", 0.880797, "a", "a"), Observation("gold_removed", 0.0, "b", "b")]
    moved = shift_scores(obs, -1.0)
    assert moved[0].top_score == pytest.approx(0.731059, abs=1e-5) and moved[1].top_score < 1e-6
    assert [o.kind for o in moved] == ["answerable", "gold_removed"] and shift_scores(obs, 0.0) == obs


def test_a_label_free_fit_lowers_the_pseudo_grades_by_the_packaged_shift(
    tmp_path: Path, prose_index: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    plain = fit(FitOptions(None, tmp_path / "a", index=prose_index, pseudo=40, progress=False), log=print)
    assert "no pseudo_shift for this grader" in plain.calibration.objective
    packaged = Calibration(reranker_model="token-grader", reranker_threshold=0.5, crag_upper=0.6, pseudo_shift=-1.0)
    monkeypatch.setattr(fitmod, "_packaged_calibration", lambda name: packaged)
    shifted = fit(FitOptions(None, tmp_path / "b", index=prose_index, pseudo=40, progress=False), log=print)
    assert "lowered by 1 logits" in shifted.calibration.objective
    before, after = plain.calibration.reranker_threshold, shifted.calibration.reranker_threshold
    expected = shift_scores([Observation("answerable", before, "", "")], -1.0)[0].top_score
    assert after == pytest.approx(expected, abs=1e-5) and after < before


def test_a_label_free_draw_keeps_the_packaged_reader_floor_for_a_grader_that_reads() -> None:
    obs = [
        Observation(kind, score, "c", "c", span, f"q{i}")
        for i in range(30)
        for kind, score, span in (("answerable", 0.9 + i / 1000, 0.99), ("gold_removed", 0.2 + i / 100, 0.01))
    ]
    packaged = Calibration(reranker_model="r", reranker_threshold=0.4, crag_upper=0.8, reader_threshold=0.97)

    def rule(o: Sequence[Observation]) -> tuple[Thresholds, str]:
        return calibrate_on(o, 0.9, 0.5)

    drawn = fitmod._draw_label_free(obs, rule, 1, -0.9, packaged)
    assert drawn.thresholds.reader == 0.97 and drawn.intervals["reader_threshold"] == (0.97, 0.97)
    assert all(d.reader == 0.97 for d in drawn.draws) and "reader_threshold: the packaged one" in drawn.objective
    assert drawn.thresholds[:2] == rule(obs)[0][:2] and "lowered by 0.9 logits" in drawn.objective
    # pseudo-questions all answered by sentences (over documentation): the floor stays for the factoids asked later
    unread = [Observation(o.kind, o.top_score, "c", "c", None, o.question) for o in obs]
    assert fitmod._draw_label_free(unread, rule, 1, 0.0, packaged).thresholds.reader == 0.97
    # a grader without a packaged floor (one that does not read) gets none
    unfloored = packaged.model_copy(update={"reader_threshold": None})
    assert fitmod._draw_label_free(unread, rule, 1, 0.0, unfloored).thresholds.reader is None


def test_a_label_free_fit_refuses_what_it_cannot_do(tmp_path: Path, prose_index: Path) -> None:
    with pytest.raises(FitError, match="--train needs labelled questions"):
        fit(FitOptions(None, tmp_path / "o", index=prose_index, train=True), log=print)
    with pytest.raises(FitError, match="--pseudo must be above 0"):
        fit(FitOptions(None, tmp_path / "o", index=prose_index, pseudo=0), log=print)
    with pytest.raises(FitError, match="needs at least"):
        fit(FitOptions(None, tmp_path / "o", index=prose_index, pseudo=5, progress=False), log=print)
    assert not (tmp_path / "o").exists()


def test_labels_are_blended_with_the_label_free_prior(tmp_path: Path, prose_index: Path) -> None:
    rows = [{"question": f"When did the Kel{i}mar bridge open?", "answers": [str(1800 + 3 * i)]} for i in range(30)]
    questions = tmp_path / "q.jsonl"
    questions.write_text("".join(json.dumps(r) + "\n" for r in rows), encoding="utf-8")
    result = fit(FitOptions(questions, tmp_path / "fit", index=prose_index, pseudo=40, progress=False), log=print)
    cal = result.calibration
    shrinkage = cal.metrics["shrinkage"]
    assert shrinkage["labels_weight"] in (0.0, 0.25, 0.5, 0.75, 1.0) and set(shrinkage["cv"]) == {
        "0",
        "0.25",
        "0.5",
        "0.75",
        "1",
    }
    assert "blended with the label-free thresholds" in cal.objective
    assert cal.sample is not None and cal.sample.labelled == 30 and cal.sample.pseudo and cal.sample.pseudo > 20
    assert {"base, label-free thresholds", "kept, final thresholds"} <= set(result.figures)
    # both separate the evidence from its twin perfectly here: so does the blend, on the labels
    final = result.figures["kept, final thresholds"].at_threshold
    assert final["answerable_answered"] == 1.0 and final["abstention_recall"] == 1.0
    without = fit(FitOptions(questions, tmp_path / "fit0", index=prose_index, pseudo=0, progress=False), log=print)
    assert without.calibration.sample is not None and without.calibration.sample.pseudo == 0
    assert "label-free" not in without.calibration.objective
