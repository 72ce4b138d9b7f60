"""Unit tests of the evaluation package: scoring, metrics, percentiles, reports, resume (no models)."""

from __future__ import annotations

import argparse
import json
import math
from pathlib import Path

import pytest

from fastcrag.config.settings import Context
from fastcrag.datasets import LabelledQuestion, read_qrels
from fastcrag.evaluation import report as rp
from fastcrag.evaluation.abstention import (
    VARIANTS,
    AbstentionConfig,
    rewrite_lines,
    score_response,
    summaries,
    truthfulness_gains,
    variant_context,
    variant_name,
    variant_of,
    write_report,
)
from fastcrag.evaluation.common import calibration_sample, question_id, select_questions
from fastcrag.evaluation.configs import RetrievalConfig
from fastcrag.evaluation.retrieval import GraphOrder, doc_id, evaluate, graph_run, rank_documents
from fastcrag.evaluation.runlog import ConfigMismatchError, ResultLog, config_hash
from fastcrag.evaluation.scoring import (
    contains_gold,
    is_abstention,
    normalize_answer,
    outcome_of,
    precision_coverage,
    summarize,
    truthfulness,
)
from fastcrag.fileio import write_text_atomic
from fastcrag.grading.reranker import CachingReranker

# ---------------------------------------------------------------------------------------------- scoring


def test_normalize_answer_is_squad_normalisation() -> None:
    assert normalize_answer("The  Normans, in France!") == "normans in france"
    assert normalize_answer("An apple a day") == "apple day"
    assert normalize_answer("  ") == ""


def test_contains_gold_on_word_boundaries() -> None:
    assert contains_gold("It was founded in 1636 by the colony.", ["1636"])
    assert contains_gold("The Normans came from Normandy.", ["the normans"])
    assert not contains_gold("In 16360 years", ["1636"])
    assert not contains_gold("anything", [""])


def test_abstention_detection() -> None:
    assert is_abstention("whatever", "abstain")
    assert is_abstention("I don't know.", "disabled")
    assert is_abstention("I do not know", "generate", abstain_message="I do not know")
    assert is_abstention("", "generate")
    assert not is_abstention("Rollo led them.", "generate")


def test_outcomes_and_truthfulness() -> None:
    assert outcome_of("Rollo", ["Rollo"], abstained=False) == "correct"
    assert outcome_of("Charles", ["Rollo"], abstained=False) == "wrong"
    assert outcome_of("I don't know.", ["Rollo"], abstained=True) == "abstained"
    assert outcome_of("Something", [], abstained=False) == "wrong"  # unanswerable: any answer hallucinates
    assert truthfulness(["correct", "abstained", "wrong", "correct"]) == pytest.approx(0.25)
    assert math.isnan(truthfulness([]))


def _rec(kind: str, outcome: str, action: str = "generate") -> dict[str, str]:
    return {"kind": kind, "outcome": outcome, "action": action}


def test_summarize_precision_recall_answer_rate() -> None:
    records = [
        _rec("answerable", "correct"),
        _rec("answerable", "abstained", "abstain"),
        _rec("answerable", "wrong"),
        _rec("unanswerable", "abstained", "abstain"),
        _rec("unanswerable", "wrong"),
        _rec("off_corpus", "abstained", "abstain"),
    ]
    s = summarize(records)
    assert (s.n, s.correct, s.wrong, s.abstained) == (6, 1, 2, 3)
    assert s.truthfulness == pytest.approx(-1 / 6)
    assert s.abstention_precision == pytest.approx(2 / 3)
    assert s.abstention_recall == pytest.approx(2 / 3)
    assert s.answer_rate == pytest.approx(0.5)
    assert s.accuracy_answered == pytest.approx(1 / 3)
    assert s.actions == {"generate": 3, "abstain": 3}
    only_answerable = summarize([_rec("answerable", "correct")])
    assert only_answerable.abstention_precision is None and only_answerable.abstention_recall is None


def test_precision_coverage_sweep() -> None:
    scores = [0.9, 0.8, 0.3, 0.2]
    kinds = ["answerable", "unanswerable", "off_corpus", "answerable"]
    rows = {t: (c, p, r) for t, c, p, r in precision_coverage(scores, kinds, [0.0, 0.5, 1.0])}
    assert rows[0.0] == (1.0, None, 0.0)
    assert rows[0.5] == (0.5, 0.5, 0.5)
    assert rows[1.0] == (0.0, 0.5, 1.0)
    full = precision_coverage(scores, kinds)
    assert full[0][1] == 1.0 and full[-1][1] == 0.0


def test_score_response_reads_the_trace() -> None:
    result = {
        "answer": "I don't know.",
        "crag": {"action": "abstain", "band": "INCORRECT", "top_score": 0.1, "timings": {"retrieve_ms": 1.0}},
    }
    rec = score_response(result, "off_corpus", ["x"], "I don't know.")
    assert rec["outcome"] == "abstained" and rec["band"] == "INCORRECT" and rec["top_score"] == 0.1
    rec = score_response({"answer": "Rollo did.", "crag": {"action": "refine"}}, "answerable", ["Rollo"], "n/a")
    assert rec["outcome"] == "correct" and rec["action"] == "refine"


def test_rewritten_questions_are_told_apart_by_where_their_own_paragraph_went() -> None:
    verdicts = [{"source": "A#1", "score": 0.2}, {"source": "A#2", "score": 0.1}, {"source": "A#1", "score": 0.3}]
    result = {"answer": "I don't know.", "crag": {"action": "abstain", "rewriter": "keyword", "verdicts": verdicts}}
    graded = score_response(result, "answerable", ["x"], "I don't know.", "A#1")
    missed = score_response(result, "answerable", ["x"], "I don't know.", "B#0")
    assert graded["gold_score"] == 0.3 and missed["gold_score"] is None
    high = {**graded, "gold_score": 0.9}
    records = [{**r, "crag": True, "kind": "answerable"} for r in (graded, missed, high)]
    line = rewrite_lines(records, threshold=0.35)[0]
    assert "rewritten (CRAG on, all generators): 3" in line
    assert "never retrieved in 1" in line and "below reranker_threshold in 1" in line and "above it in 1" in line
    assert rewrite_lines([{**r, "crag": False} for r in records], 0.35) == []


# ---------------------------------------------------------------------------------------------- reports


def test_percentile_and_format() -> None:
    values = [float(v) for v in range(1, 101)]
    assert rp.percentile(values, 50) == pytest.approx(50.5)
    assert rp.percentile(values, 100) == 100.0
    assert rp.percentile([7.0], 95) == 7.0
    assert math.isnan(rp.percentile([], 50))
    assert rp.fmt(None) == "n/a" and rp.fmt(float("nan")) == "n/a" and rp.fmt(0.12345) == "0.123"


def test_table_and_completion_note() -> None:
    text = rp.table(["a", "b"], [[1, 0.5], ["x", None]])
    assert text.splitlines() == ["| a | b |", "|---|---|", "| 1 | 0.500 |", "| x | n/a |"]
    assert "complete (5 of 5" in rp.completion_note(5, 5)
    assert "INCOMPLETE: 3 of 5" in rp.completion_note(3, 5)


def test_abstention_report_marks_partial_runs(tmp_path: Path) -> None:
    cfg = AbstentionConfig(tmp_path / "squad", tmp_path / "off", out=tmp_path, generators=["extractive"], per_class=2)
    log = ResultLog(tmp_path / "results.jsonl", {"x": 1})
    for i, (kind, outcome, crag) in enumerate(
        [("answerable", "correct", True), ("off_corpus", "abstained", True), ("answerable", "correct", False)]
    ):
        log.add(
            f"k{i}",
            {
                "qid": f"q{i % 2}",
                "kind": kind,
                "outcome": outcome,
                "crag": crag,
                "generator": "extractive",
                "action": "generate",
                "top_score": 0.2 + 0.3 * (i % 2),
            },
        )
    text = write_report(cfg, log, 12, (0.4, 0.8), "fake-grader", "", 1.0)
    assert "INCOMPLETE: 3 of 12" in text
    assert (tmp_path / "score_distributions.png").stat().st_size > 0
    assert (tmp_path / "precision_coverage.png").stat().st_size > 0
    summary = json.loads((tmp_path / "summary.json").read_text())
    assert summary["complete"] is False and summary["done"] == 3
    sums = summaries(list(log.records.values()), ["extractive"])
    assert sums["extractive / CRAG on"]["all"].n == 2


def test_abstention_summaries_and_report_for_three_variants(tmp_path: Path) -> None:
    cfg = AbstentionConfig(
        tmp_path / "squad", tmp_path / "off", out=tmp_path, generators=["extractive", "llm"], per_class=1
    )
    assert cfg.variants == list(VARIANTS) == ["crag", "threshold", "plain"]
    log = ResultLog(tmp_path / "results.jsonl", {"x": 2})
    outcomes = {  # (answerable, unanswerable) per variant
        "crag": ("correct", "abstained"),
        "threshold": ("correct", "abstained"),
        "plain": ("correct", "wrong"),
    }
    actions = {"crag": "generate", "threshold": "disabled", "plain": "plain"}
    for variant, pair in outcomes.items():
        for kind, outcome in zip(("answerable", "unanswerable"), pair, strict=True):
            log.add(
                f"extractive|{variant}|{kind}",
                {
                    "qid": kind,
                    "kind": kind,
                    "outcome": outcome,
                    "variant": variant,
                    "crag": variant == "crag",
                    "generator": "extractive",
                    "action": "abstain" if outcome == "abstained" else actions[variant],
                    "top_score": 0.5,
                },
            )
    sums = summaries(list(log.records.values()), cfg.generators)
    assert list(sums) == ["extractive / CRAG on", "extractive / threshold only", "extractive / plain RAG"]
    assert sums["extractive / plain RAG"]["all"].truthfulness == 0.0
    assert sums["extractive / plain RAG"]["all"].actions == {"plain": 2}
    assert sums["extractive / threshold only"]["all"].actions == {"disabled": 1, "abstain": 1}
    assert truthfulness_gains(sums, cfg.generators) == {"extractive": pytest.approx(0.5), "llm": None}
    text = write_report(cfg, log, 12, (0.4, 0.8), "fake-grader", "", 1.0)
    assert "- `extractive`: truthfulness CRAG on minus plain RAG = +0.500 (CRAG on 0.500, plain RAG 0.000)" in text
    assert "- `llm`: n/a" in text
    assert "| extractive / plain RAG | 2 |" in text
    assert "| generate | refine | rewrite | abstain | disabled | plain |" in text
    summary = json.loads((tmp_path / "summary.json").read_text())
    assert summary["truthfulness_crag_minus_plain"] == {"extractive": 0.5, "llm": None}
    only = summaries(list(log.records.values()), ["extractive"], ["plain"])
    assert list(only) == ["extractive / plain RAG"]


def test_variant_contexts_and_names() -> None:
    assert variant_context("crag") == Context(crag_enabled=True, plain=False)
    assert variant_context("threshold") == Context(crag_enabled=False, plain=False)
    assert variant_context("plain") == Context(crag_enabled=False, plain=True)
    with pytest.raises(ValueError, match="unknown variant"):
        variant_context("off")
    assert variant_name("g", "threshold") == "g / threshold only"
    assert variant_of({"crag": False}) == "threshold" and variant_of({"crag": True}) == "crag"  # version-1 records
    assert variant_of({"crag": False, "variant": "plain"}) == "plain"


def test_cdf_plot_writes_png(tmp_path: Path) -> None:
    rp.plot_cdfs({"crag_ms": {"CRAG on": [0.1, 5.0, 200.0], "CRAG off": [0.1, 0.1, 0.2]}}, tmp_path / "cdf.png", "t")
    assert (tmp_path / "cdf.png").read_bytes()[:4] == b"\x89PNG"


# ---------------------------------------------------------------------------------------------- resume


def test_result_log_resumes_and_ignores_torn_line(tmp_path: Path) -> None:
    path = tmp_path / "r.jsonl"
    log = ResultLog(path, {"seed": 1})
    log.add("a", {"v": 1})
    log.add("b", {"v": 2})
    with path.open("a", encoding="utf-8") as fh:
        fh.write('{"key": "c", "v"')  # interrupted mid-write
    again = ResultLog(path, {"seed": 1})
    assert set(again.records) == {"a", "b"} and "c" not in again and len(again) == 2
    again.add("c", {"v": 3})
    assert set(ResultLog(path, {"seed": 1}).records) == {"a", "b", "c"}


def test_result_log_refuses_other_config_unless_fresh(tmp_path: Path) -> None:
    path = tmp_path / "r.jsonl"
    ResultLog(path, {"seed": 1}).add("a", {"v": 1})
    with pytest.raises(ConfigMismatchError):
        ResultLog(path, {"seed": 2})
    fresh = ResultLog(path, {"seed": 2}, fresh=True)
    assert len(fresh) == 0
    assert config_hash({"a": 1, "b": 2}) == config_hash({"b": 2, "a": 1})


def test_atomic_write_leaves_no_temp_files(tmp_path: Path) -> None:
    target = tmp_path / "sub" / "report.md"
    write_text_atomic(target, "one")
    write_text_atomic(target, "two")
    assert target.read_text() == "two"
    assert [p.name for p in target.parent.iterdir()] == ["report.md"]


# ---------------------------------------------------------------------------------------------- selection


def _q(kind: str, i: int) -> LabelledQuestion:
    return LabelledQuestion(f"question {kind} {i}?", kind, ("a",) if kind != "unanswerable" else (), f"T#{i}", "T")


def test_select_questions_seeded_interleaved_and_held_out() -> None:
    pools = {k: [_q(k, i) for i in range(30)] for k in ("answerable", "unanswerable", "off_corpus")}
    a = select_questions(pools, 5, seed=3)
    assert a == select_questions(pools, 5, seed=3)
    assert [q.kind for q in a[:3]] == ["answerable", "unanswerable", "off_corpus"]
    held = select_questions(pools, 10, seed=13)
    chosen = select_questions(pools, 20, seed=3, exclude=(10, 13))
    assert not {question_id(q) for q in held} & {question_id(q) for q in chosen}
    assert len(chosen) == 60


def test_calibration_sample_parsed() -> None:
    from fastcrag.config.calibration import Calibration, CalibrationSample, load_calibration

    cal = Calibration(
        reranker_model="m",
        reranker_threshold=0.2,
        crag_upper=0.5,
        data="free text naming no sample",
        sample=CalibrationSample(questions="squad2-dev", per_class=200, seed=13),
    )
    assert calibration_sample(cal) == (200, 13)
    assert calibration_sample(cal.model_copy(update={"sample": None})) is None
    # `fit` records a seed but draws no per-class sample: nothing to exclude
    fitted = cal.model_copy(update={"sample": CalibrationSample(seed=13, labelled=40, calibrated_on=30)})
    assert calibration_sample(fitted) is None
    # the packaged calibration carries its sample as fields, the same as its note says
    packaged = load_calibration()
    assert packaged.sample is not None and packaged.sample.questions == "squad2-dev"
    assert calibration_sample(packaged) == (200, 13) and "200 questions per class, seed 13" in packaged.data


def test_calibration_sample_of_an_older_file(tmp_path: Path) -> None:
    """A calibration.json written before `sample` existed still names its sample (read once from its note)."""
    from fastcrag.config.calibration import PACKAGED_CALIBRATION, load_calibration

    raw = json.loads(PACKAGED_CALIBRATION.read_text(encoding="utf-8"))
    del raw["sample"]
    old = tmp_path / "calibration.json"
    old.write_text(json.dumps(raw), encoding="utf-8")
    cal = load_calibration(old)
    assert calibration_sample(cal) == (200, 13)
    assert cal.thresholds() == load_calibration().thresholds()
    raw["data"] = "other"
    old.write_text(json.dumps(raw), encoding="utf-8")
    assert load_calibration(old).sample is None and calibration_sample(load_calibration(old)) is None


class _CountingReranker:
    name = "counting"

    def __init__(self) -> None:
        self.calls: list[int] = []

    def score(self, query: str, texts: list[str]) -> list[float]:
        self.calls.append(len(texts))
        return [len(t) / 10 for t in texts]


def test_caching_reranker_scores_each_pair_once() -> None:
    inner = _CountingReranker()
    cached = CachingReranker(inner)
    assert cached.name == "counting"
    assert cached.score("q", ["ab", "abc"]) == [0.2, 0.3]
    assert cached.score("q", ["abc", "abcd", "abcd"]) == [0.3, 0.4, 0.4]
    assert inner.calls == [2, 1]


# ---------------------------------------------------------------------------------------------- retrieval


def test_rank_documents_and_ir_measures(tmp_path: Path) -> None:
    hits = [("d1", "t1", 0.9), ("d2", "t2", 0.8), ("d1", "t1b", 0.7), ("d3", "t3", 0.6)]
    bi, rr = rank_documents(hits, [0.1, 0.2, 0.3], depth=2)  # the hits of d1 and d2 are reranked
    assert list(bi) == ["d1", "d2", "d3"]
    assert sorted(rr, key=lambda d: rr[d], reverse=True) == ["d1", "d2", "d3"]
    bi2, rr2 = rank_documents(hits, [0.1, 0.9, 0.05], depth=2)
    assert sorted(rr2, key=lambda d: rr2[d], reverse=True) == ["d2", "d1", "d3"]
    qrels_file = tmp_path / "test.tsv"
    qrels_file.write_text("query-id\tcorpus-id\tscore\nq1\td2\t1\n", encoding="utf-8")
    qrels = read_qrels(qrels_file)
    assert qrels == {"q1": {"d2": 1}}
    m_bi = evaluate(qrels, {"q1": bi2})
    m_rr = evaluate(qrels, {"q1": rr2})
    assert m_rr["nDCG@10"] == pytest.approx(1.0)
    assert m_bi["nDCG@10"] == pytest.approx(1 / math.log2(3))
    assert m_bi["R@10"] == m_rr["R@100"] == 1.0
    assert doc_id("corpus.jsonl.gz#4983") == "4983"


def test_graph_run_orders_documents_as_the_graph_does() -> None:
    def order(run: dict[str, float]) -> list[str]:
        return sorted(run, key=lambda d: run[d], reverse=True)

    first = {"d1": 0.9, "d2": 0.8, "d3": 0.7, "d4": 0.1}
    reranked = {"d1": 2.2, "d2": 2.95, "d3": 2.5, "d4": -1.9}  # d4 was not reranked
    assert order(graph_run(first, reranked, GraphOrder())) == ["d2", "d3", "d1", "d4"]
    assert order(graph_run(first, reranked, GraphOrder(weight=0.0))) == ["d1", "d2", "d3", "d4"]
    # batches of 1: d1 (0.2) then d2 (0.95 >= 0.9) are graded; d3 stays ungraded, after them
    exit_early = graph_run(first, reranked, GraphOrder(batch=1, upper=0.9))
    assert order(exit_early) == ["d2", "d1", "d3", "d4"] and exit_early.keys() == reranked.keys()
    assert not GraphOrder().changes_order() and GraphOrder(batch=5).changes_order()


# ---------------------------------------------------------------------------------------------- cli


def test_add_commands_wires_subcommands() -> None:
    from fastcrag.evaluation.cli import add_commands, parse_variants

    parser = argparse.ArgumentParser(prog="fastcrag")
    add_commands(parser.add_subparsers(dest="command", required=True))
    args = parser.parse_args(["eval", "abstention", "--per-class", "5", "--generators", "extractive"])
    assert args.per_class == 5 and args.generators == "extractive" and callable(args.func)
    assert args.variants == "crag,threshold,plain"
    args = parser.parse_args(["eval", "abstention", "--variants", "plain,crag"])
    assert parse_variants(args.variants) == ["crag", "plain"]
    assert parse_variants(" threshold ,") == ["threshold"]
    for bad in ("crag,off", " , "):
        with pytest.raises(ValueError, match="--variants"):
            parse_variants(bad)
    args = parser.parse_args(["eval", "retrieval", "--queries", "10"])
    assert args.queries == 10 and args.out == "runs/eval-retrieval"


def test_results_page_stitches_reports(tmp_path: Path) -> None:
    from fastcrag.evaluation.results import compose, demote, write_results

    assert demote("# A\n## B\ntext #1") == "## A\n### B\ntext #1"
    (tmp_path / "bench").mkdir()
    (tmp_path / "bench" / "report.md").write_text(
        "# Bench\n\nStatus: complete.\n\n## Stage\n\n![cdf](latency_cdf.png)\n"
    )
    text = compose(tmp_path, ["python -m lab bench"], "Preface.")
    assert "## Latency and grader cost" in text and "### Stage" in text and "# Bench" not in text
    assert f"plot `{tmp_path}/bench/latency_cdf.png`" in text
    assert "_No report at" in text and "Preface." in text and "python -m lab bench" in text
    out = tmp_path / "docs" / "RESULTS.md"
    write_results(tmp_path, out, ["x"])
    assert out.read_text().startswith("# Results")


def test_distractors_come_only_from_articles_nobody_asked_about() -> None:
    from fastcrag.datasets import distractor_documents

    squad = {
        "data": [
            {"title": t, "paragraphs": [{"context": f"{t} text {i}", "qas": []} for i in range(2)]}
            for t in ("Asked", "Corpus", "Free_1", "Free_2", "Free_3")
        ]
    }
    docs = distractor_documents(squad, {"Asked", "Corpus"}, 2, seed=3)
    titles = {d.source.split("#")[0] for d in docs}
    assert len(titles) == 2 and titles <= {"Free_1", "Free_2", "Free_3"} and len(docs) == 4
    assert docs == distractor_documents(squad, {"Asked", "Corpus"}, 2, seed=3)  # seeded
    assert distractor_documents(squad, set(), 0, seed=3) == []
    assert len(distractor_documents(squad, {"Asked"}, 99, seed=3)) == 8  # at most what there is


@pytest.mark.parametrize(
    ("command", "flag", "folder"),
    [("abstention", "--squad", "squad2-dev"), ("retrieval", "--beir", "scifact")],
)
def test_eval_without_its_data_says_which_option_or_setting_in_one_line(
    command: str, flag: str, folder: str, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    from fastcrag.cli import main

    monkeypatch.delenv("FASTRAG_DATA", raising=False)
    assert main(["eval", command]) == 2
    err = capsys.readouterr().err
    assert flag in err and "FASTRAG_DATA" in err and folder in err and "Traceback" not in err


def test_eval_finds_its_data_in_the_fastrag_data_folder(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    from fastcrag.cli import main
    from fastcrag.evaluation import abstention, retrieval

    data = tmp_path / "data"
    for folder in ("squad2-dev", "train/squad11-train", "scifact"):
        (data / folder).mkdir(parents=True)
    seen: dict[str, object] = {}

    def fake_run(cfg: object, settings: object) -> int:
        seen[type(cfg).__name__] = cfg
        (tmp_path / "out").mkdir(exist_ok=True)
        (tmp_path / "out" / "report.md").write_text("# report\n", encoding="utf-8")
        return 0

    monkeypatch.setattr(abstention, "run", fake_run)
    monkeypatch.setattr(retrieval, "run", fake_run)
    monkeypatch.setenv("FASTRAG_DATA", str(data))
    off = tmp_path / "elsewhere"
    off.mkdir()
    assert main(["eval", "abstention", "--off-corpus", str(off), "--out", str(tmp_path / "out")]) == 0
    assert main(["eval", "retrieval", "--out", str(tmp_path / "out")]) == 0
    ab, rt = seen["AbstentionConfig"], seen["RetrievalConfig"]
    assert isinstance(ab, AbstentionConfig) and isinstance(rt, RetrievalConfig)
    assert (ab.squad, ab.off_corpus, rt.beir) == (data / "squad2-dev", off, data / "scifact")  # an option wins
    assert "# report" in capsys.readouterr().out
