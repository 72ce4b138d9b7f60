"""`fastcrag fit` end to end with the real models: a FAISS folder (calibrate, fine-tune, install) and Postgres."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from fastcrag.cli import main
from fastcrag.components import Components
from fastcrag.config.calibration import load_calibration
from fastcrag.config.settings import Settings
from fastcrag.grading.reranker import PACKAGED_GRADER
from fastcrag.modelmeta import read_model_meta
from fastcrag.retrieval.embeddings import default_embeddings
from fastcrag.retrieval.loaders import SourceDocument
from fastcrag.retrieval.pgstore import build_pg_index

pytestmark = pytest.mark.integration

RIVERS = ["Aldon", "Brisk", "Calder", "Dunmore", "Elwy", "Ferren", "Glass", "Hollow", "Isker", "Juno", "Kell", "Lune"]
GOODS = ["salt", "silk", "wool", "tin", "amber", "glass", "copper", "rye", "honey", "linen", "slate", "cider"]


def town(i: int) -> str:
    return f"{['North', 'South', 'East', 'West'][i % 4]}{RIVERS[i].lower()}ford"


def documents() -> list[SourceDocument]:
    return [
        SourceDocument(
            f"towns/{town(i)}.md",
            town(i),
            f"{town(i)} is a market town on the river {RIVERS[i]}. It was founded in {1650 + 13 * i} by wool "
            f"merchants. Its market is famous for {GOODS[i]}, traded there every Thursday since the charter.",
        )
        for i in range(len(RIVERS))
    ]


def questions(path: Path) -> Path:
    rows: list[dict[str, object]] = []
    for i in range(len(RIVERS)):
        rows.append({"question": f"In which year was {town(i)} founded?", "answers": [str(1650 + 13 * i)]})
        rows.append({"question": f"What is the market of {town(i)} famous for?", "sources": [f"towns/{town(i)}.md"]})
    rows += [{"question": f"Who is the current mayor of {town(i)}?", "answerable": False} for i in range(6)]
    path.write_text("".join(json.dumps(r) + "\n" for r in rows), encoding="utf-8")
    return path


@pytest.fixture(scope="module")
def corpus(tmp_path_factory: pytest.TempPathFactory) -> Path:
    folder = tmp_path_factory.mktemp("towns")
    for d in documents():
        (folder / Path(d.source).name).write_text(f"# {d.title}\n\n{d.text}\n", encoding="utf-8")
    return folder


def test_fit_on_a_faiss_index_installs_and_ask_uses_it(
    tmp_path: Path, corpus: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    index = tmp_path / "index"
    assert main(["index", str(corpus), "--index", str(index)]) == 0
    q = tmp_path / "q.jsonl"
    rows = [json.loads(line) for line in questions(q).read_text(encoding="utf-8").splitlines()]
    for row in rows:  # sources as this index names them (absolute paths of the files)
        if "sources" in row:
            row["sources"] = [str((corpus / Path(s).name).resolve()) for s in row["sources"]]
    q.write_text("".join(json.dumps(r) + "\n" for r in rows), encoding="utf-8")
    out = tmp_path / "fit"
    capsys.readouterr()
    assert (
        main(["fit", "--questions", str(q), "--index", str(index), "--out", str(out), "--no-train", "--install"]) == 0
    )
    printed = capsys.readouterr().out
    assert f"FASTRAG_CALIBRATION={out / 'calibration.json'}" in printed
    cal = load_calibration(out / "calibration.json", expected_model=read_model_meta(PACKAGED_GRADER)["name"])
    assert cal.metrics["questions"]["questions"] == 30
    assert {"report.md", "scores.png", "threshold.png", "calibration.json"} <= {p.name for p in out.iterdir()}
    assert (out / "scores.png").read_bytes()[:8] == b"\x89PNG\r\n\x1a\n"

    # the index now carries its fit: `ask` uses its thresholds without any setting
    assert main(["ask", "In which year was Northaldonford founded?", "--index", str(index), "--json"]) == 0
    crag = json.loads(capsys.readouterr().out)["crag"]
    assert crag["thresholds"] == {
        "reranker_threshold": cal.reranker_threshold,
        "crag_upper": cal.crag_upper,
        "condition_factor": cal.condition_factor,
    }


def test_fit_fine_tunes_within_its_budget(tmp_path: Path, corpus: Path, capsys: pytest.CaptureFixture[str]) -> None:
    index = tmp_path / "index"
    assert main(["index", str(corpus), "--index", str(index)]) == 0
    q = questions(tmp_path / "q.jsonl")
    rows = [json.loads(line) for line in q.read_text(encoding="utf-8").splitlines() if "sources" not in line]
    q.write_text("".join(json.dumps(r) + "\n" for r in rows * 2), encoding="utf-8")  # answers only, 36 lines
    out = tmp_path / "fit"
    args = ["fit", "--questions", str(q), "--index", str(index), "--out", str(out), "--train", "--minutes", "0.3"]
    assert main([*args, "--quiet"]) == 0  # no --data-root: no replay mix, said before the work
    printed = capsys.readouterr().out
    assert "replays no training mix" in printed
    report = (out / "report.md").read_text(encoding="utf-8")
    assert "fitted" in report and "training pairs" in report
    cal = json.loads((out / "calibration.json").read_text(encoding="utf-8"))
    assert "fitted" in cal["metrics"]["held_out"]
    if cal["metrics"]["fitted_grader_kept"]:  # kept only when it beats the base on the held-out part
        assert (out / "grader" / "model.onnx").is_file() and f"FASTRAG_RERANKER={out / 'grader'}" in printed
    else:
        assert not (out / "grader").exists() and "the base grader is kept" in report
        assert (out / "rejected-grader" / "model.onnx").is_file()


def test_fit_on_a_postgres_collection_installs_in_its_record(
    tmp_path: Path, postgres_url: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    build_pg_index(documents(), postgres_url, default_embeddings(), collection="towns", progress=False)
    out = tmp_path / "fit"
    q = questions(tmp_path / "q.jsonl")
    args = ["fit", "--questions", str(q), "--store", postgres_url, "--collection", "towns", "--out", str(out)]
    assert main([*args, "--no-train", "--install", "--quiet"]) == 0
    cal = load_calibration(out / "calibration.json")
    assert "Postgres collection towns" in cal.data

    # every entry point over that collection now uses the fit, without FASTRAG_CALIBRATION
    monkeypatch.setenv("XDG_CACHE_HOME", str(tmp_path / "cache"))
    parts = Components(Settings(store=postgres_url, collection="towns"))
    fit = parts.index_fit()
    assert fit is not None and fit.grader is None and str(tmp_path / "cache") in str(fit.calibration)
    assert parts.calibration().thresholds() == cal.thresholds()

    bad = main(["fit", "--questions", str(q), "--store", postgres_url, "--collection", "nope", "--out", str(out)])
    assert bad == 2 and (out / "calibration.json").is_file()  # a failed run leaves the earlier output as it was


def test_a_label_free_fit_on_the_real_grader_draws_its_thresholds_from_the_corpus(tmp_path: Path) -> None:
    folder = tmp_path / "harbours"
    folder.mkdir()
    for i in range(40):
        river, goods = RIVERS[i % len(RIVERS)], GOODS[(i * 5) % len(GOODS)]
        name = f"Port {river} {i}"
        (folder / f"port-{i}.md").write_text(
            f"# {name}\n\n{name} is a harbour at the mouth of the river {river}, rebuilt in {1700 + 7 * i} "
            "after a storm. "
            f"Its quay handles {goods} and timber, shipped to the coastal towns every spring by the harbour board. "
            f"The lighthouse of {name} was lit for the first time in {1800 + 3 * i} by the keeper's guild.\n",
            encoding="utf-8",
        )
    index, out = tmp_path / "index", tmp_path / "fit"
    assert main(["index", str(folder), "--index", str(index)]) == 0
    assert main(["fit", "--index", str(index), "--out", str(out), "--pseudo", "40", "--quiet", "--install"]) == 0
    cal = load_calibration(out / "calibration.json")
    assert cal.sample is not None and cal.sample.labelled == 0 and (cal.sample.pseudo or 0) >= 20
    assert cal.data.startswith("label-free") and cal.metrics["intervals"]["reranker_threshold"]
    held = cal.metrics["held_out"]["base, label-free thresholds"]
    # the real grader tells a sentence's evidence from its twin (the sentence cut): the thresholds decline twins.
    # The 26 pseudo-questions are drawn in the order of their chunk ids, which carry the chunker's version: measured
    # AUC 0.813 (recall 0.65) with chunker 2's ids and 0.797 (0.62) with chunker 3's, on the same grader and code.
    assert held["auc_answerable_vs_gold_removed"] > 0.75 and held["abstention_recall"] >= 0.5
    assert Components(Settings(index_dir=index)).calibration().reranker_threshold == cal.reranker_threshold
