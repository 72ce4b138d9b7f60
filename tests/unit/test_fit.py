"""`fastcrag fit` with fakes: the questions file, every bad input, the split, the labels and a whole --no-train run."""

from __future__ import annotations

import io
import json
import re
import sys
import tarfile
from collections.abc import Sequence
from pathlib import Path
from typing import Any

import pytest

from fastcrag import components
from fastcrag.cli import main
from fastcrag.components import Components
from fastcrag.config.calibration import CalibrationError, load_calibration, materialise_fit
from fastcrag.config.settings import Settings
from fastcrag.fitting import fit as fitmod
from fastcrag.fitting.calibrate import choose_condition_factor, condition_curve
from fastcrag.fitting.fit import FitOptions, fit
from fastcrag.fitting.labels import Candidate, Labelled, answer_span, is_evidence, training_pairs
from fastcrag.fitting.measure import choose_weight, condition_views, order_curve
from fastcrag.fitting.questions import MIN_QUESTIONS, FitError, FitQuestion, read_questions, split_held_out
from fastcrag.grading.reader import Span
from fastcrag.retrieval.store import FaissStore

from fakes import HashEmbeddings, ScriptedChat

TOWNS = [f"Town{chr(65 + i)}{chr(75 + i)}" for i in range(16)]


def facts(i: int) -> str:
    town = TOWNS[i]
    return (
        f"{town} was founded in {1700 + 7 * i}. The river of {town} is called Flow{i:02d}. "
        f"{town} is known for its market of {['salt', 'silk', 'wool', 'tin'][i % 4]}."
    )


class AnswerGrader:
    """Scores a passage 0.9 when it holds the question's answer, 0.5 when it is about the question's town."""

    name = "answer-grader"

    def __init__(self, answers: dict[str, str]) -> None:
        self.answers = answers

    def score(self, query: str, texts: Sequence[str]) -> list[float]:
        answer = self.answers.get(query, "\0")
        town = next((t for t in TOWNS if t in query), "\0")
        return [0.9 if answer in t else 0.5 if town in t else 0.1 for t in texts]


def write_questions(path: Path, rows: list[dict[str, Any]]) -> Path:
    path.write_text("".join(json.dumps(r) + "\n" for r in rows), encoding="utf-8")
    return path


def labelled_rows() -> list[dict[str, Any]]:
    rows: list[dict[str, Any]] = []
    for i, town in enumerate(TOWNS):
        rows.append({"question": f"When was {town} founded?", "answers": [str(1700 + 7 * i)]})
        rows.append({"question": f"What is the river of {town} called?", "sources": [f"doc{i}.txt"]})
    rows += [{"question": f"Who is the mayor of {t}?", "answerable": False} for t in TOWNS[:6]]
    return rows


@pytest.fixture
def index(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Path:
    monkeypatch.setattr(components, "default_embeddings", lambda spec=None: HashEmbeddings())
    store = FaissStore(HashEmbeddings())
    texts = [facts(i) for i in range(len(TOWNS))]
    store.add_texts(texts, [{"source": f"doc{i}.txt", "title": TOWNS[i]} for i in range(len(TOWNS))])
    folder = tmp_path / "index"
    store.save(folder)
    answers = {r["question"]: r["answers"][0] for r in labelled_rows() if "answers" in r}
    answers |= {f"What is the river of {t} called?": f"Flow{i:02d}" for i, t in enumerate(TOWNS)}
    grader = AnswerGrader(answers)
    monkeypatch.setattr(fitmod, "load_reranker", lambda spec: grader)
    monkeypatch.setattr(fitmod, "default_reranker_spec", lambda: "answer-grader")
    return folder


def test_a_valid_file_reads_every_kind(tmp_path: Path) -> None:
    qs = read_questions(write_questions(tmp_path / "q.jsonl", labelled_rows()))
    assert len(qs) == 38
    assert qs[0].answers == ("1700",) and qs[1].sources == ("doc0.txt",) and not qs[-1].answerable
    assert qs[0].line == 1


@pytest.mark.parametrize(
    ("line", "message"),
    [
        ("{not json", "not valid JSON"),
        ('["a list"]', "expected a JSON object"),
        ('{"answers": ["x"]}', "`question` is missing"),
        ('{"question": "  ", "answers": ["x"]}', "`question` is missing"),
        ('{"question": "q"}', "exactly one of"),
        ('{"question": "q", "answers": ["x"], "sources": ["s"]}', "exactly one of"),
        ('{"question": "q", "answers": []}', "non-empty list"),
        ('{"question": "q", "answers": "x"}', "non-empty list"),
        ('{"question": "q", "answerable": "no"}', "true or false"),
        ('{"question": "q", "answerable": false, "answers": ["x"]}', "cannot come with"),
        ('{"question": "q", "answer": ["x"]}', "unknown keys"),
    ],
)
def test_a_bad_line_names_its_number(tmp_path: Path, line: str, message: str) -> None:
    path = tmp_path / "q.jsonl"
    good = [json.dumps(r) for r in labelled_rows()]
    path.write_text("\n".join([*good[:3], line, *good[3:]]) + "\n", encoding="utf-8")
    with pytest.raises(FitError, match=rf"q\.jsonl:4: .*{message}"):
        read_questions(path)


def test_missing_file_and_too_few_questions(tmp_path: Path) -> None:
    with pytest.raises(FitError, match="not found"):
        read_questions(tmp_path / "nope.jsonl")
    few = write_questions(tmp_path / "few.jsonl", labelled_rows()[: MIN_QUESTIONS - 1])
    with pytest.raises(FitError, match=f"at least {MIN_QUESTIONS}"):
        read_questions(few)


def test_split_keeps_groups_whole_and_is_seeded() -> None:
    groups = [f"g{i // 3}" for i in range(60)]
    held = split_held_out(groups, 0.3, seed=1)
    assert held == split_held_out(groups, 0.3, seed=1)
    assert 0.2 < sum(held) / len(held) < 0.45
    for g in set(groups):
        assert len({h for h, gg in zip(held, groups, strict=True) if gg == g}) == 1
    assert held != split_held_out(groups, 0.3, seed=2)


def test_evidence_by_answers_and_by_sources() -> None:
    by_answer = FitQuestion(1, "q", answers=("Founded in  1921",))
    assert is_evidence(by_answer, "a.txt", "it was FOUNDED in\n1921 by")
    assert not is_evidence(by_answer, "a.txt", "founded in 1922")
    by_source = FitQuestion(2, "q", sources=("a.txt",))
    assert is_evidence(by_source, "a.txt", "anything") and not is_evidence(by_source, "b.txt", "anything")


def test_training_pairs_skip_retrieval_misses() -> None:
    def item(q: FitQuestion, flags: list[bool]) -> Labelled:
        return Labelled(q, [Candidate(f"c{i}", "s", f"text {i}", e) for i, e in enumerate(flags)])

    hit = item(FitQuestion(1, "hit", answers=("x",)), [False, True, False, False, False])
    miss = item(FitQuestion(2, "miss", answers=("x",)), [False] * 5)
    unanswerable = item(FitQuestion(3, "none"), [False] * 5)
    pairs = training_pairs([hit, miss, unanswerable], top_k=4)
    assert [(q, label) for q, _, label, _ in pairs] == [("hit", 1.0)] + [("hit", 0.0)] * 3 + [("none", 0.0)] * 3
    assert pairs[0][3] == "x" and {a for *_, a in pairs[1:]} == {""}  # only a positive carries its answer
    # a positive carries its answer as the passage spells it (for a reader's span head)
    assert answer_span(FitQuestion(4, "q", answers=("Founded in 1921",)), "It was FOUNDED  in\n1921.") == (
        "FOUNDED  in\n1921"
    )
    assert answer_span(FitQuestion(5, "q", sources=("a",)), "anything") == ""
    assert hit.gold_removed_view(3) == [c for c in hit.candidates if not c.evidence][:3]
    # with the base grader's scores, the negatives are its own mistakes: the candidates it scores highest
    wide = item(FitQuestion(6, "wide", answers=("x",)), [True, False, False, False, False, False])
    scores = {"text 1": 0.1, "text 2": 0.9, "text 3": 0.2, "text 4": 0.8, "text 5": 0.7}
    pairs = training_pairs([wide], top_k=6, grade=lambda q, texts: [scores[t] for t in texts])
    assert [p for _, p, label, _ in pairs if label == 0.0] == ["text 2", "text 4", "text 5"]


def test_no_train_fit_writes_calibration_report_and_plots(tmp_path: Path, index: Path) -> None:
    questions = write_questions(tmp_path / "q.jsonl", labelled_rows())
    out = tmp_path / "fit-out"
    out.mkdir()
    (out / "stale.txt").write_text("from an earlier fit", encoding="utf-8")
    lines: list[str] = []
    result = fit(FitOptions(questions, out, index=index, train=False, progress=False), log=lines.append)
    assert not (out / "stale.txt").exists()  # the folder is replaced whole
    assert {p.name for p in out.iterdir()} == {
        "calibration.json",
        "observations.jsonl",
        "report.md",
        "scores.png",
        "threshold.png",
    }
    rows = [json.loads(line) for line in (out / "observations.jsonl").read_text(encoding="utf-8").splitlines()]
    assert {r["kind"] for r in rows} == {"answerable", "gold_removed", "unanswerable"} and rows[0]["question"]
    cal = load_calibration(out / "calibration.json", expected_model="answer-grader")
    # the fake grader separates perfectly: the threshold falls between 0.5 (on topic, no answer) and 0.9
    assert 0.5 < cal.reranker_threshold <= 0.9
    # its provenance as fields: the questions it was drawn on, no per-class sample
    assert cal.sample is not None and cal.sample.calibrated_on == cal.metrics["questions"]["calibrated_on"]
    assert cal.sample.per_class is None and cal.sample.labelled == 38 and cal.sample.classes[1] == "gold_removed"
    base = result.figures["base"]
    assert base.auc_gold_removed == 1.0 and base.auc_unanswerable == 1.0
    assert base.at_threshold["abstention_precision"] == 1.0 and base.at_threshold["answerable_answered"] == 1.0
    assert result.counts["questions"] == 38 and result.counts["held_out"] > 0
    assert not result.kept_fitted and result.env == [f"FASTRAG_CALIBRATION={out / 'calibration.json'}"]
    report = (out / "report.md").read_text(encoding="utf-8")
    assert "AUC answerable vs gold removed" in report and "answer-grader" in report
    # the grader puts the evidence first: the first pass is not mixed into the order
    assert cal.rerank_weight == 1.0 and cal.metrics["ndcg@10_by_rerank_weight"]["1.0"] == 1.0
    assert "| rerank_weight |" in report
    # the answer's floor is the embedder's, not the grader's: the fit keeps the packaged one
    packaged = load_calibration(None)
    assert packaged.answer_floor is not None
    assert (cal.answer_floor, cal.answer_embedder) == (packaged.answer_floor, packaged.answer_embedder)
    assert any("held out" in line for line in lines)
    assert not list(tmp_path.glob(".fit-out*"))  # no temporary folder left behind


def test_without_matplotlib_the_fit_report_says_how_to_get_its_plots(
    tmp_path: Path, index: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setitem(sys.modules, "matplotlib", None)  # as if the `eval` extra were not installed
    questions = write_questions(tmp_path / "q.jsonl", labelled_rows())
    out = tmp_path / "fit-out"
    fit(FitOptions(questions, out, index=index, train=False, progress=False), log=lambda line: None)
    assert {p.name for p in out.iterdir()} == {"calibration.json", "observations.jsonl", "report.md"}
    report = (out / "report.md").read_text(encoding="utf-8")
    assert "fastcrag[eval]" in report and "scores.png" not in report


def test_rerank_weight_follows_the_held_out_order_and_needs_a_real_gain() -> None:
    class Fixed:
        name = "fixed"

        def __init__(self, scores: dict[str, float]) -> None:
            self.scores = scores

        def score(self, query: str, texts: Sequence[str]) -> list[float]:
            return [self.scores[t] for t in texts]

    items = [
        Labelled(FitQuestion(i, f"q{i}", answers=("x",)), [Candidate(f"c{j}", "s", f"t{j}", j == 0) for j in range(4)])
        for i in range(3)
    ]  # the evidence is always first in the first pass
    misled = order_curve(Fixed({"t0": 0.2, "t1": 0.9, "t2": 0.8, "t3": 0.7}), items, top_k=4)
    assert misled[0.0] == 1.0 and misled[1.0] < 0.6
    weight, objective = choose_weight(misled)
    assert weight < 1.0 and misled[weight] == 1.0 and "nDCG@10" in objective
    assert choose_weight({**{w: 0.5 for w in misled}, 0.3: 0.505})[0] == 1.0  # a gain under ORDER_GAIN: no mix
    # `sources` labels judge documents: a source's second chunk adds nothing
    by_source = [
        Labelled(
            FitQuestion(0, "q0", sources=("s1",)),
            [Candidate(f"c{j}", f"s{1 + j // 2}", f"t{j}", j < 2) for j in range(4)],
        )
    ]
    grader = Fixed({"t0": 0.9, "t1": 0.6, "t2": 0.8, "t3": 0.5})  # chunks of s1, s1, s2, s2: s1, s2, s1, s2
    assert order_curve(grader, by_source, top_k=4)[1.0] == 1.0  # per chunk it would be below 1
    per_chunk = [Labelled(FitQuestion(0, "q0", answers=("x",)), by_source[0].candidates)]
    assert order_curve(grader, per_chunk, top_k=4)[1.0] < 1.0


def test_condition_factor_is_chosen_on_the_labels_and_kept_when_they_say_nothing() -> None:
    class TownGrader:  # reads the town, not the year: every chunk about the town scores the same
        name = "town"

        def score(self, query: str, texts: Sequence[str]) -> list[float]:
            town = query.split()[2]
            return [0.9 if town in t else 0.1 for t in texts]

    def item(i: int, year: bool) -> Labelled:
        town, when = TOWNS[i], 1700 + i
        q = f"Who ruled {town} in {when}?" if year else f"Who ruled {town} first?"
        texts = [f"{town} was ruled by Ada in {when}.", f"{town} was ruled by Bo in {when + 30}.", "Bananas."]
        candidates = [Candidate(f"c{j}", "s", t, j == 0) for j, t in enumerate(texts)]
        return Labelled(FitQuestion(i, q, answers=("Ada",)), candidates)

    naming = [item(i, year=True) for i in range(6)]
    views = condition_views(TownGrader(), naming, top_k=3)
    assert {k for k, *_ in views} == {"answerable", "gold_removed", "condition_changed"}
    curve = condition_curve(views)
    assert curve[1.0] == 0.5 and curve[0.0] == 1.0  # the year tells evidence from its near misses
    factor, objective = choose_condition_factor(curve, views, default=1.0)
    assert factor == 0.75 and "6 questions name" in objective  # ties: the mildest value with the best AUC
    # a corpus whose evidence does not state the year its questions name (dated elsewhere): the check would decline
    # answerable questions, so the labels keep it off
    undated = [
        Labelled(
            FitQuestion(i, f"Who ruled {TOWNS[i]} in {1700 + i}?", answers=("Ada",)),
            [Candidate("c0", "s", f"{TOWNS[i]} was ruled by Ada.", True), Candidate("c1", "s", "Bananas.", False)],
        )
        for i in range(6)
    ]
    kept_off = condition_views(TownGrader(), undated, top_k=2)
    assert choose_condition_factor(condition_curve(kept_off), kept_off, default=0.0)[0] == 1.0
    silent = condition_views(TownGrader(), [item(i, year=False) for i in range(6)], top_k=3)
    assert len(set(condition_curve(silent).values())) == 1  # nothing named: the factor changes nothing
    assert choose_condition_factor(condition_curve(silent), silent, default=0.5)[0] == 0.5


def test_install_puts_the_fit_beside_the_index_and_components_use_it(
    tmp_path: Path, index: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    questions = write_questions(tmp_path / "q.jsonl", labelled_rows())
    out = tmp_path / "fit-out"
    result = fit(FitOptions(questions, out, index=index, train=False, install=True, progress=False), log=print)
    assert (index / "fit" / "calibration.json").is_file() and (index / "fit" / "fit.json").is_file()
    assert any("Installed" in n for n in result.notes)

    parts = Components(Settings(index_dir=index))
    fitted = parts.index_fit()
    assert fitted is not None and fitted.calibration == index / "fit" / "calibration.json" and fitted.grader is None
    monkeypatch.setattr(components, "load_reranker", lambda spec: AnswerGrader({}))
    assert parts.calibration().reranker_model == "answer-grader"  # no setting needed
    assert Components(Settings()).index_fit() is None  # the embedded index has no fit

    record = json.loads((index / "fit" / "fit.json").read_text(encoding="utf-8"))
    (index / "fit" / "fit.json").write_text(json.dumps(record | {"embedder": "another"}), encoding="utf-8")
    with pytest.raises(CalibrationError, match="made with embedder 'another'"):
        Components(Settings(index_dir=index)).index_fit()
    (index / "fit" / "fit.json").write_text(json.dumps(record | {"grader": True}), encoding="utf-8")
    with pytest.raises(CalibrationError, match=r"missing .*grader/model\.onnx"):
        Components(Settings(index_dir=index)).index_fit()


@pytest.mark.parametrize(
    ("change", "message"),
    [
        ({"index": "missing"}, "no index folder"),
        ({"source": "doc99.txt"}, "source 'doc99.txt' is not in the index"),
        ({"precision": 1.5}, "--precision"),
        ({"both": True}, "exactly one of --index"),
    ],
)
def test_bad_inputs_are_clear_errors_and_write_nothing(
    tmp_path: Path, index: Path, change: dict[str, Any], message: str
) -> None:
    rows = labelled_rows()
    if "source" in change:
        rows[5] = {"question": "What is the river?", "sources": [change["source"]]}
    questions = write_questions(tmp_path / "q.jsonl", rows)
    out = tmp_path / "fit-out"
    opts = FitOptions(
        questions,
        out,
        index=tmp_path / "missing" if change.get("index") else index,
        store="postgresql://x@localhost/db" if change.get("both") else "",
        train=False,
        precision=change.get("precision", 0.9),
        progress=False,
    )
    with pytest.raises(FitError, match=message):
        fit(opts, log=print)
    assert not out.exists()
    assert not list(tmp_path.glob(".fit-out*"))


def test_cli_reports_a_bad_line_in_one_line(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    path = tmp_path / "q.jsonl"
    path.write_text('{"question": "q", "answers": ["a"]}\n{oops\n', encoding="utf-8")
    code = main(["fit", "--questions", str(path), "--index", str(tmp_path), "--out", str(tmp_path / "o")])
    err = capsys.readouterr().err
    assert code == 2 and "q.jsonl:2: not valid JSON" in err and "Traceback" not in err
    assert not (tmp_path / "o").exists()


def test_generate_writes_questions_with_a_chat_model_then_fits(
    tmp_path: Path, index: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    def reply(prompt: str) -> dict[str, str]:
        town, year = re.findall(r"(Town[A-Z]{2}) was founded in (\d+)", prompt)[-1]
        return {"question": f"When was {town} founded?", "answer": year, "near_miss": f"Who is the mayor of {town}?"}

    chat = ScriptedChat(replies=[reply])
    monkeypatch.setattr(fitmod, "load_chat_model", lambda spec, *a: chat)
    questions = tmp_path / "generated.jsonl"
    opts = FitOptions(
        questions, tmp_path / "out", index=index, train=False, progress=False, generate=16, llm="x:y", held_out=0.45
    )
    result = fit(opts, log=print)
    written = read_questions(questions)
    assert len(written) == 32 and sum(q.answerable for q in written) == 16  # a near miss for every chunk
    assert result.figures["base"].auc_gold_removed == 1.0
    with pytest.raises(FitError, match="exists"):  # never overwrites a questions file
        fit(opts, log=print)
    with pytest.raises(FitError, match="needs --llm"):
        fit(FitOptions(questions, tmp_path / "o2", index=index, generate=5), log=print)


def test_judge_relabels_answer_questions_only(tmp_path: Path, index: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    chat = ScriptedChat(replies=[{"answers": False}])  # a judge that finds no passage answering
    monkeypatch.setattr(fitmod, "load_chat_model", lambda spec, *a: chat)
    questions = write_questions(tmp_path / "q.jsonl", labelled_rows())
    opts = FitOptions(questions, tmp_path / "out", index=index, train=False, progress=False, judge=True, llm="x:y")
    result = fit(opts, log=print)
    # the judge took the evidence from the 16 `answers` questions; the 16 `sources` ones keep theirs
    assert result.counts["retrieval_misses"] == 16 and result.counts["held_out_answerable_retrieved"] == 16
    assert chat.prompts and all("Question:" in p for p in chat.prompts)


def _tar(members: dict[str, bytes]) -> bytes:
    buf = io.BytesIO()
    with tarfile.open(fileobj=buf, mode="w") as tar:
        for name, data in members.items():
            info = tarfile.TarInfo(name)
            info.size = len(data)
            tar.addfile(info, io.BytesIO(data))
    return buf.getvalue()


def test_a_fit_held_as_data_unpacks_once_and_safely(tmp_path: Path) -> None:
    cal = {"reranker_model": "g-fit", "reranker_threshold": 0.4, "crag_upper": 0.8}
    fit1 = materialise_fit(cal, _tar({"model.onnx": b"onnx", "tokenizer.json": b"{}"}), "e", tmp_path)
    assert fit1.grader is not None and (fit1.grader / "model.onnx").read_bytes() == b"onnx"
    assert load_calibration(fit1.calibration).crag_upper == 0.8
    assert materialise_fit(cal, _tar({"model.onnx": b"onnx", "tokenizer.json": b"{}"}), "e", tmp_path) == fit1
    assert materialise_fit(cal, None, "e", tmp_path).grader is None
    with pytest.raises(tarfile.TarError):  # a member that would land outside its folder is refused
        materialise_fit(cal, _tar({"../escape.txt": b"x"}), "e", tmp_path)
    assert not (tmp_path / "escape.txt").exists()


class ReadingGrader(AnswerGrader):
    """Grades every passage about the question's town alike; its reader finds the answer only where it is."""

    name = "reading-grader"
    has_reader = True

    def score(self, query: str, texts: Sequence[str]) -> list[float]:
        town = next((t for t in TOWNS if t in query), "\0")
        return [0.9 if town in t else 0.1 for t in texts]

    def read(self, query: str, texts: Sequence[str]) -> list[Span | None]:
        answer = self.answers.get(query, "\0")
        found = [(t.index(answer), t.index(answer) + len(answer)) if answer in t else None for t in texts]
        return [Span(answer, *f, 0.95) if f else Span(t[:4], 0, 4, 0.2) for t, f in zip(texts, found, strict=True)]


def test_a_reading_grader_gets_a_reader_threshold_that_declines_what_grading_cannot(
    tmp_path: Path, index: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    grader = ReadingGrader(fitmod.load_reranker("answer-grader").answers)  # the fixture's answers
    monkeypatch.setattr(fitmod, "load_reranker", lambda spec: grader)
    questions = write_questions(tmp_path / "q.jsonl", labelled_rows())
    result = fit(FitOptions(questions, tmp_path / "out", index=index, train=False, progress=False), log=print)
    cal = result.calibration
    base = result.figures["base"]
    assert base.auc_unanswerable == 0.5  # grading alone cannot tell the town's facts from its unanswerable questions
    assert cal.reader_threshold is not None and 0.2 < cal.reader_threshold <= 0.95
    # with the reader's floor the graph declines the unanswerable questions and answers the answerable ones
    assert base.at_threshold["abstention_recall"] == 1.0 and base.at_threshold["answerable_answered"] == 1.0
    assert "reader_threshold" in cal.objective
    assert f"reader_threshold {cal.reader_threshold}" in (tmp_path / "out" / "report.md").read_text(encoding="utf-8")


def _views(n: int, base_gap: float, fitted_gap: float, seed: int = 0) -> tuple[list[Any], list[Any]]:
    """Observations of `n` questions (answerable and gold removed) by two graders with noisy scores."""
    import numpy as np

    from fastcrag.fitting.calibrate import Observation

    rng = np.random.default_rng(seed)
    base, fitted = [], []
    for i in range(n):
        for kind, lift in (("answerable", 1.0), ("gold_removed", 0.0)):
            e, f = rng.normal(0, 0.2, 2)  # each grader errs on its own
            base.append(Observation(kind, 0.5 + lift * base_gap + e, "c", "c", None, f"q{i}"))
            fitted.append(Observation(kind, 0.5 + lift * fitted_gap + f, "c", "c", None, f"q{i}"))
    return base, fitted


def test_a_fitted_grader_is_kept_only_for_a_gain_beyond_chance() -> None:
    from fastcrag.fitting.measure import held_out_aucs, keep_fitted

    assert keep_fitted(*_views(200, 0.1, 0.3), seed=1)[0]  # a large gain on many questions
    assert not keep_fitted(*_views(200, 0.3, 0.1), seed=1)[0]  # worse
    # two graders of the same quality on a dozen questions: a fitted one that is ahead by chance is rarely kept
    kept = sum(keep_fitted(*_views(12, 0.1, 0.1, seed), seed=1)[0] for seed in range(20))
    ahead = sum(held_out_aucs(f)[0] > held_out_aucs(b)[0] for b, f in (_views(12, 0.1, 0.1, s) for s in range(20)))
    assert kept <= 3 and ahead >= 6


def test_a_precision_met_only_by_declining_a_few_gives_way_to_the_recall_floor() -> None:
    from fastcrag.fitting.calibrate import Observation, abstention_rates, choose_threshold

    # 20 on-topic questions without evidence and 20 answerable, overlapping: precision 0.9 holds for the lowest 6
    gold_removed = [0.05, 0.1, 0.15, 0.2, 0.25, 0.3, *(0.32 + 0.03 * i for i in range(14))]
    answerable = [0.31, *(0.355 + 0.03 * i for i in range(19))]
    obs = [Observation("gold_removed", s, "", "") for s in gold_removed]
    obs += [Observation("answerable", s, "", "") for s in answerable]
    strict, why = choose_threshold(obs, 0.9)
    assert abstention_rates(obs, strict)[1] < 0.5 and "precision >= 0.9" in why
    floor, why = choose_threshold(obs, 0.9, min_recall=0.5)
    recall = abstention_rates(obs, floor)[1]
    assert recall >= 0.5 and floor > strict and "unreachable at recall >= 0.5" in why
    below = max(o.top_score for o in obs if o.top_score < floor)
    assert abstention_rates(obs, below)[1] < 0.5  # the lowest threshold that declines half


def test_the_grade_and_reader_floors_are_drawn_together() -> None:
    from fastcrag.fitting.calibrate import Observation, abstention_rates, choose_pair

    obs = [Observation("answerable", 0.8 + i / 100, "", "", 0.9, f"a{i}") for i in range(20)]
    obs += [Observation("gold_removed", 0.3, "", "", 0.9, f"g{i}") for i in range(10)]  # grading declines these
    obs += [Observation("gold_removed", 0.85, "", "", 0.1, f"r{i}") for i in range(10)]  # only the reader can
    lower, reader, why = choose_pair(obs, 0.9, min_recall=0.5)
    assert reader is not None and 0.1 < reader <= 0.9 and 0.3 < lower <= 0.8
    assert abstention_rates(obs, lower, reader_threshold=reader) == (1.0, 1.0) and "together" in why
    # a reader that tells nothing apart is given no floor: it would only decline answerable questions
    flat = [Observation(o.kind, o.top_score, "", "", 0.5, o.question) for o in obs]
    assert choose_pair(flat, 0.9, min_recall=0.5)[1] is None


def test_train_without_data_root_says_no_mix_is_replayed(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    seen: list[FitOptions] = []

    def stop(opts: FitOptions, settings: Settings) -> None:
        seen.append(opts)
        raise FitError("stopped before any work")

    monkeypatch.setattr(fitmod, "fit", stop)
    args = ["fit", "--index", str(tmp_path), "--out", str(tmp_path / "o"), "--train"]
    assert main(args) == 2
    assert "replays no training mix" in capsys.readouterr().out and seen[-1].data_root is None
    assert main([*args, "--data-root", str(tmp_path / "mix")]) == 2
    assert "replays no training mix" not in capsys.readouterr().out and seen[-1].data_root == tmp_path / "mix"
