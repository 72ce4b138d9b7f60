"""bench-speed's quality from stored runs: replaying a retrieval run for a lever, reading tables, the Pareto marks."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest

from fastcrag.evaluation.retrieval import GraphOrder
from lab.benchmarks import pareto
from lab.benchmarks.pareto import SCIFACT, LeverSetup, RetrievalRun
from lab.cli import main

# One query: the first pass ranks a, b, c, d; the grader (recorded as 2 + score) puts the relevant d first.
FIRST = {"a": 0.9, "b": 0.8, "c": 0.7, "d": 0.6}
RR = {"a": 2.1, "b": 2.95, "c": 2.2, "d": 2.99}
QRELS = {"q1": {"d": 1}}


def _write_run(folder: Path, config: dict[str, Any], complete: bool = True) -> None:
    folder.mkdir(parents=True)
    header = {"type": "header", "config_hash": "h1", "config": config}
    record = {"key": "q1", "hybrid": FIRST, "rr": RR}
    (folder / "results.jsonl").write_text(json.dumps(header) + "\n" + json.dumps(record) + "\n", encoding="utf-8")
    summary = {"complete": complete, "config_hash": "h1"}
    (folder / "summary.json").write_text(json.dumps(summary), encoding="utf-8")


def _config(**over: Any) -> dict[str, Any]:
    base = {"command": "eval retrieval", "embedder": "e", "reranker": "g", "reranked_first_pass": "hybrid"}
    return base | {"depth": 4, "beir": "unused", "split": "test"} | over


def test_replay_reranks_only_the_levers_top_k(tmp_path: Path) -> None:
    _write_run(tmp_path / "r", _config())
    run = pareto.retrieval_runs(tmp_path)[0]
    all4 = pareto.replayed_ndcg(run, LeverSetup("e", "g", 4, GraphOrder()), QRELS)
    top2 = pareto.replayed_ndcg(run, LeverSetup("e", "g", 2, GraphOrder()), QRELS)
    assert all4 == pytest.approx(1.0)  # d reranked to the top
    assert top2 < 0.5  # d lies beyond the top 2: it keeps its fourth place


def test_replay_follows_the_early_exit(tmp_path: Path) -> None:
    _write_run(tmp_path / "r", _config())
    run = pareto.retrieval_runs(tmp_path)[0]
    # batches of 2: b (0.95) clears crag_upper 0.9 in the first batch, so c and d stay ungraded below a and b
    exit_early = pareto.replayed_ndcg(run, LeverSetup("e", "g", 4, GraphOrder(1.0, 2, 0.9)), QRELS)
    no_exit = pareto.replayed_ndcg(run, LeverSetup("e", "g", 4, GraphOrder(1.0, 2, 0.999)), QRELS)
    assert no_exit == pytest.approx(1.0)
    assert exit_early < 0.5


def test_only_complete_matching_runs_serve_a_lever(tmp_path: Path) -> None:
    _write_run(tmp_path / "done", _config())
    _write_run(tmp_path / "cut", _config(reranker="other"), complete=False)
    (tmp_path / "other").mkdir()
    (tmp_path / "other" / "results.jsonl").write_text('{"type": "header", "config": {"command": "eval abstention"}}\n')
    runs = pareto.retrieval_runs(tmp_path)
    assert [r.folder.name for r in runs] == ["done"]
    assert runs[0].serves(LeverSetup("e", "g", 3, GraphOrder()))
    assert not runs[0].serves(LeverSetup("e", "g", 5, GraphOrder()))  # shallower than the lever's top_k
    assert not runs[0].serves(LeverSetup("fp32", "g", 3, GraphOrder()))
    dense = RetrievalRun(tmp_path, _config(reranked_first_pass="dense"))
    assert not dense.serves(LeverSetup("e", "g", 3, GraphOrder()))


def test_lever_quality_joins_the_replay_and_the_graders_table(tmp_path: Path) -> None:
    beir = tmp_path / "beir"
    (beir / "qrels").mkdir(parents=True)
    (beir / "qrels" / "test.tsv").write_text("query-id\tcorpus-id\tscore\nq1\td\t1\n", encoding="utf-8")
    _write_run(tmp_path / "r", _config(beir=str(beir)))
    table = {"command": "eval-grader", "table": {pareto.GRADER_MEASURES[0]: {"g": 0.7, "bi-encoder": 0.6}}}
    (tmp_path / "grader.json").write_text(json.dumps(table), encoding="utf-8")
    levers = {"known": LeverSetup("e", "g", 4, GraphOrder()), "unknown": LeverSetup("x", "y", 4, GraphOrder())}
    quality = pareto.lever_quality(levers, tmp_path)
    assert quality["known"][SCIFACT] == pytest.approx(1.0)
    assert quality["known"][pareto.GRADER_MEASURES[0]] == 0.7
    assert quality["unknown"] == {}


def test_pareto_marks_front_dominated_and_unknown() -> None:
    m = pareto.GRADER_MEASURES[0]
    rows = {
        "fast and good": {"ms": 100.0, SCIFACT: 0.66, m: 0.63},
        "slow and worse": {"ms": 200.0, SCIFACT: 0.65, m: 0.63},
        "slow but better": {"ms": 200.0, SCIFACT: 0.70, m: 0.63},
        "no stored run": {"ms": 50.0, m: 0.63},
    }
    lines = pareto.pareto_table(rows, "ms").splitlines()
    marks = {line.split(" | ")[0].strip("| "): line.rsplit(" | ", 1)[1].strip(" |") for line in lines[2:]}
    assert marks == {
        "fast and good": "**front**",
        "slow and worse": "dominated",
        "slow but better": "**front**",
        "no stored run": "?",
    }
    assert "| fast and good | 100 | 0.660 | 0.630 | **front** |" in lines


def test_eval_grader_writes_its_table(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    from lab.training import bench

    table = {"squad2-dev AUC answerable vs off-corpus": {"g": 0.97}}
    monkeypatch.setattr(bench, "quality_benchmark", lambda **_: table)
    out = tmp_path / "t.json"
    assert main(["eval-grader", "--only", "squad2", "--out", str(out)]) == 0
    written = json.loads(out.read_text(encoding="utf-8"))
    assert written["command"] == "eval-grader"
    assert written["table"] == table
    assert written["config"]["only"] == ["squad2"]


def _write_abstention(folder: Path, config: dict[str, Any], truthfulness: float) -> None:
    folder.mkdir(parents=True)
    header = {"type": "header", "config_hash": "h2", "config": {"command": "eval abstention", **config}}
    (folder / "results.jsonl").write_text(json.dumps(header) + "\n", encoding="utf-8")
    crag = {"all": {"truthfulness": truthfulness, "abstention_precision": 0.88}, "answerable": {"correct": 26}}
    summary = {"complete": True, "config_hash": "h2", "summaries": {"extractive / CRAG on": crag}}
    (folder / "summary.json").write_text(json.dumps(summary), encoding="utf-8")


def test_abstention_quality_needs_every_setting_of_the_lever(tmp_path: Path) -> None:
    lever = LeverSetup("e", "g", 15, GraphOrder(1.0, 10, 0.84), (0.45, 0.84, 0.03, None))
    same = {"embedder": "e", "reranker": "g", "top_k": 15, "grade_batch": 10, "thresholds": [0.45, 0.84]}
    same |= {"reader_thresholds": [0.03, None]}
    _write_abstention(tmp_path / "match", same, -0.15)
    _write_abstention(tmp_path / "other-batch", same | {"grade_batch": 0}, -0.5)
    _write_abstention(tmp_path / "other-thresholds", same | {"thresholds": [0.4, 0.84]}, -0.5)
    _write_abstention(tmp_path / "other-floor", same | {"reader_thresholds": [0.03, 0.2]}, -0.5)
    _write_abstention(tmp_path / "no-embedder", {k: v for k, v in same.items() if k != "embedder"}, -0.5)
    assert pareto.abstention_quality(tmp_path, lever) == {
        pareto.TRUTHFULNESS: -0.15,
        pareto.PRECISION: 0.88,
        pareto.RIGHT: 26.0,
    }
    assert pareto.abstention_quality(tmp_path, LeverSetup("e", "g", 10, lever.order, lever.thresholds)) == {}


def test_missing_quality_names_the_commands_that_store_it(tmp_path: Path) -> None:
    from lab.benchmarks import bench_speed

    names = list(bench_speed.LEVERS)
    quality = {names[0]: {SCIFACT: 0.6}, names[1]: {pareto.TRUTHFULNESS: -0.1}, names[2]: {}}
    commands = bench_speed.missing_quality(quality, tmp_path)
    assert len([c for c in commands if "eval abstention" in c]) == 2
    retrieval = [c for c in commands if "eval retrieval" in c]
    assert len(retrieval) == 2  # levers 1 and 2 (fp32 vs int8 embedder) need different first passes
    assert all("--depth 20" in c and "GRADE_BATCH" not in c for c in retrieval)
    assert any(c.startswith("FASTRAG_EMBEDDER=sentence-transformers FASTRAG_GRADE_BATCH=10") for c in commands)
