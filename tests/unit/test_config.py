"""Settings, per-run resolution and calibration validation."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
from pydantic import ValidationError

from fastcrag.config.calibration import PACKAGED_CALIBRATION, CalibrationError, load_calibration
from fastcrag.config.settings import Context, Settings, resolve


def write(tmp_path: Path, payload: object) -> Path:
    path = tmp_path / "calibration.json"
    path.write_text(payload if isinstance(payload, str) else json.dumps(payload), encoding="utf-8")
    return path


GOOD = {"reranker_model": "m", "reranker_threshold": 0.3, "crag_upper": 0.7}


def test_packaged_calibration_is_valid() -> None:
    cal = load_calibration()
    assert 0 <= cal.reranker_threshold <= cal.crag_upper <= 1
    assert cal.reranker_model and cal.data and cal.objective and cal.created


@pytest.mark.parametrize(
    ("payload", "needle"),
    [
        ('{"reranker_model": "m", "reranker_threshold": NaN, "crag_upper": 0.7}', "NaN"),
        ({**GOOD, "reranker_threshold": -0.1}, "greater than or equal"),
        ({**GOOD, "crag_upper": 1.5}, "less than or equal"),
        ({**GOOD, "crag_upper": 0.2}, "must be >= reranker_threshold"),
        ({"reranker_threshold": 0.3, "crag_upper": 0.7}, "reranker_model"),
        ("{not json", "invalid calibration"),
    ],
)
def test_invalid_calibration_is_a_clear_error_naming_the_file(tmp_path: Path, payload: object, needle: str) -> None:
    path = write(tmp_path, payload)
    with pytest.raises(CalibrationError) as err:
        load_calibration(path)
    assert str(path) in str(err.value) and needle in str(err.value)


def test_calibration_for_another_model_is_refused(tmp_path: Path) -> None:
    path = write(tmp_path, GOOD)
    with pytest.raises(CalibrationError, match=r"made for reranker 'm'.*'other'"):
        load_calibration(path, expected_model="other")
    assert load_calibration(path, expected_model="m").thresholds() == (0.3, 0.7)


def test_missing_calibration(tmp_path: Path) -> None:
    with pytest.raises(CalibrationError, match="not found"):
        load_calibration(tmp_path / "nope.json")


def test_settings_from_environment(monkeypatch: pytest.MonkeyPatch, tmp_path: Path) -> None:
    monkeypatch.setenv("FASTRAG_CRAG_ENABLED", "false")
    monkeypatch.setenv("FASTRAG_CRAG_MAX_REWRITES", "0")
    monkeypatch.setenv("FASTRAG_CRAG_STRIP_MIN_TOKENS", "3")
    monkeypatch.setenv("FASTRAG_INDEX_DIR", str(tmp_path))
    monkeypatch.setenv("FASTRAG_LLM", "extractive")
    monkeypatch.setenv("FASTRAG_PLAIN", "true")
    monkeypatch.setenv("FASTRAG_EF_SEARCH", "400")
    s = Settings()
    assert s.plain is True and Settings.model_fields["plain"].description
    assert s.ef_search == 400
    assert (s.crag_enabled, s.crag_max_rewrites, s.crag_strip_min_tokens) == (False, 0, 3)
    assert s.index_dir == tmp_path and s.llm == "extractive"
    monkeypatch.setenv("FASTRAG_CRAG_MAX_REWRITES", "-1")
    with pytest.raises(ValidationError):
        Settings()
    monkeypatch.setenv("FASTRAG_CRAG_MAX_REWRITES", "0")
    monkeypatch.setenv("FASTRAG_EF_SEARCH", "5000")  # pgvector caps hnsw.ef_search at 1000
    with pytest.raises(ValidationError):
        Settings()


def test_chunk_overlap_must_be_below_size() -> None:
    with pytest.raises(ValidationError):
        Settings(chunk_tokens=32, chunk_overlap=32)


def test_resolve_applies_context_over_settings_and_calibration() -> None:
    s = Settings(crag_max_rewrites=1, top_n=3)
    cfg = resolve(s, (0.3, 0.7), Context(crag_upper=0.8, top_n=5))
    assert (cfg.reranker_threshold, cfg.crag_upper, cfg.top_n, cfg.crag_max_rewrites) == (0.3, 0.8, 5, 1)
    assert resolve(s, (0.3, 0.7), {"crag_enabled": False, "unknown": 1}).crag_enabled is False
    assert resolve(s, (0.3, 0.7), None).crag_upper == 0.7
    assert s.plain is False and resolve(s, (0.3, 0.7), None).plain is False
    plain = resolve(s, (0.3, 0.7), Context(crag_enabled=False, plain=True))
    assert plain.plain and plain.plain_rag
    assert not resolve(s, (0.3, 0.7), {"plain": True}).plain_rag  # CRAG on: plain has no effect
    assert resolve(Settings(crag_enabled=False, plain=True), (0.3, 0.7), {"plain": False}).plain_rag is False
    with pytest.raises(ValueError, match="thresholds"):
        resolve(s, (0.3, 0.7), Context(reranker_threshold=0.9))


def test_packaged_file_path_is_inside_the_package() -> None:
    assert PACKAGED_CALIBRATION.parent.name == "config"


def test_a_gguf_model_without_the_llamacpp_extra_is_a_one_line_error(
    monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    import importlib.util

    from fastcrag.cli import main
    from fastcrag.generation import chat

    real = importlib.util.find_spec
    monkeypatch.setattr(chat.importlib.util, "find_spec", lambda name: None if name == "llama_cpp" else real(name))
    with pytest.raises(ValueError, match=r"needs the `llamacpp` extra.*install.sh --llamacpp"):
        chat.load_chat_model("llamacpp:SmolLM2-135M-Instruct")
    assert main(["ask", "--llm", "llamacpp:SmolLM2-135M-Instruct", "What is a list?"]) == 2
    err = capsys.readouterr().err.strip()
    assert len(err.splitlines()) == 1 and "fastcrag[llamacpp]" in err


def test_a_grader_folder_or_packaged_name_brings_its_own_calibration(tmp_path: Path) -> None:
    from fastcrag.components import Components
    from fastcrag.grading.reranker import PACKAGED_GRADER, grader_folder, own_calibration, packaged_graders

    assert packaged_graders()["fastcrag-grader-reader-minilm-l6-v6"] == PACKAGED_GRADER
    assert own_calibration(str(PACKAGED_GRADER)) is None  # the default's thresholds live in config/calibration.json
    folder = tmp_path / "my-grader"
    folder.mkdir()
    (folder / "model.onnx").write_bytes(b"not loaded: the session opens on first use")
    (folder / "fastcrag_model.json").write_text(json.dumps({"name": "my-grader"}))
    own = json.loads(PACKAGED_CALIBRATION.read_text()) | {"reranker_model": "my-grader", "crag_upper": 0.9}
    (folder / "calibration.json").write_text(json.dumps(own))
    assert grader_folder(str(folder)) == folder and own_calibration(str(folder)) == folder / "calibration.json"
    assert grader_folder("no-such-grader") is None and own_calibration("no-such-grader") is None
    assert Components(Settings(reranker=str(folder))).calibration().crag_upper == 0.9
    named = Settings(reranker=str(folder), calibration=PACKAGED_CALIBRATION)  # a named calibration wins, and is checked
    with pytest.raises(CalibrationError, match="made for reranker"):
        Components(named).calibration()


def test_the_distilled_grader_ships_as_an_option_with_its_calibration() -> None:
    from fastcrag.components import Components
    from fastcrag.grading.reranker import MODELS, packaged_graders

    name = "fastcrag-grader-reader-minilm-l3-distilled"
    assert set(packaged_graders()) == {"fastcrag-grader-reader-minilm-l6-v6", name}  # not the embedder
    parts = Components(Settings(reranker=name))
    assert parts.reranker().name == name and parts.calibration().reranker_model == name
    assert parts.calibration() == load_calibration(MODELS / "grader-l3" / "calibration.json")
