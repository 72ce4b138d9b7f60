"""Rebuilding trainable weights from an int8 ONNX grader, and the fine-tune API, on tiny random BERTs."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest

torch = pytest.importorskip("torch")
transformers = pytest.importorskip("transformers")

from fastcrag.fitting.mix import Pair  # noqa: E402
from fastcrag.fitting.network import has_reader, load_network  # noqa: E402

from tiny_graders import FACTS, _tokenizer, _user_pairs, onnx_grader, tiny_classifier, tiny_reader  # noqa: E402


def _relevance(model: Any, tokenizer: Any, pairs: list[tuple[str, str]]) -> list[float]:
    enc = tokenizer([q for q, _ in pairs], [p for _, p in pairs], padding=True, return_tensors="pt")
    model.eval()
    with torch.inference_mode():
        rel, _, _ = model(enc["input_ids"], enc["attention_mask"], enc["token_type_ids"])
    return [float(x) for x in rel]


def _pairs() -> list[tuple[str, str]]:
    return [(q, p) for q, _, _ in FACTS for _, p, _ in FACTS]


@pytest.mark.parametrize("kind", ["classifier", "reader"])
def test_rebuilt_weights_match_the_source_within_quantisation(tmp_path: Path, kind: str) -> None:
    from fastcrag.fitting.weights import read_onnx_weights, trainable_grader

    src = (tiny_classifier if kind == "classifier" else tiny_reader)(tmp_path / "src")
    grader = onnx_grader(src, tmp_path / "grader", f"tiny-{kind}")
    out = trainable_grader(grader, tmp_path / "rebuilt")

    meta = json.loads((out / "fastcrag_model.json").read_text())
    assert meta["origin"] == "dequantised from int8 ONNX" and meta["source_grader"]["name"] == f"tiny-{kind}"
    assert meta["reader"] is (kind == "reader")
    assert not list(tmp_path.glob(".rebuilt*")), "the temporary folder is renamed into place"
    original, rebuilt = load_network(src), load_network(out)
    assert has_reader(rebuilt) is (kind == "reader")
    a, b = dict(original.named_parameters()), dict(rebuilt.named_parameters())
    assert a.keys() == b.keys()
    weights = read_onnx_weights(grader / "model.onnx")
    assert weights.quantised > 0
    for name, value in a.items():
        # Vectors stay fp32 in the export: equal up to float printing. A matrix is rounded to int8 steps of
        # max|w| / 127, so each weight moves by at most half a step, 1/254 of max|w| (measured: 0.00394x); 1/100 leaves
        # 2.5x that, far below what a weight mapped to the wrong tensor would miss by.
        tol = 1e-6 if value.dim() == 1 else float(value.abs().max()) / 100
        assert torch.allclose(value, b[name], atol=tol), name
    tok = _tokenizer()
    x, y = _relevance(original, tok, _pairs()), _relevance(rebuilt, tok, _pairs())
    # The same rounding, carried through the forward pass: measured at most 0.0061 (reader) and 0.0005 (classifier) on
    # ATen's AVX2 and default paths alike; 0.05 leaves 8x for other kernels. No training here: both nets are seeded.
    assert max(abs(u - v) for u, v in zip(x, y, strict=True)) < 0.05
    if kind == "reader":
        assert json.loads((out / "grade_fusion.json").read_text()) == {"relevance": 1.2, "span": 0.3, "bias": -0.4}


def test_rebuild_refuses_a_graph_that_does_not_fit(tmp_path: Path) -> None:
    from fastcrag.fitting.weights import WeightsError, trainable_grader

    grader = onnx_grader(tiny_classifier(tmp_path / "src"), tmp_path / "grader", "tiny")
    config = json.loads((grader / "config.json").read_text())
    (grader / "config.json").write_text(json.dumps({**config, "num_hidden_layers": 3}))
    with pytest.raises(WeightsError, match="missing from the graph"):
        trainable_grader(grader, tmp_path / "rebuilt")
    assert not (tmp_path / "rebuilt").exists()
    with pytest.raises(FileNotFoundError):
        trainable_grader(tmp_path / "src", tmp_path / "rebuilt")


class Interrupted(Exception):
    """Stands for a run killed between two steps."""


def test_fine_tune_runs_checkpoints_resumes_and_exports(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    from fastcrag.fitting import train_loop
    from fastcrag.fitting.finetune import fine_tune
    from fastcrag.grading.reranker import load_reranker

    grader = onnx_grader(tiny_classifier(tmp_path / "src"), tmp_path / "tiny-grader", "tiny-grader")
    pairs = _user_pairs()
    assert len(pairs) == 40
    out = tmp_path / "run"
    save = train_loop._save_checkpoint

    def interrupted(path: Path, model: Any, optimizer: Any, step: int, elapsed: float) -> None:
        save(path, model, optimizer, step, elapsed)
        if step == 4:
            raise Interrupted  # the run stops after its second checkpoint

    monkeypatch.setattr(train_loop, "_save_checkpoint", interrupted)
    kw: dict[str, Any] = {"minutes": 0.5, "data_root": tmp_path / "no-data", "progress": False}
    kw |= {"batch_size": 8, "max_epochs": 2, "checkpoint_every": 2, "threads": 1}
    with pytest.raises(Interrupted):
        fine_tune(grader, pairs, out, **kw)
    assert json.loads((out / "checkpoint" / "state.json").read_text())["step"] == 4
    assert (out / "base-weights" / "model.safetensors").is_file() and not (out / "export").exists()

    monkeypatch.setattr(train_loop, "_save_checkpoint", save)
    result = fine_tune(grader, pairs, out, **kw)
    assert result.resumed_at == 4 and result.steps == 10 and result.pairs_seen == 80
    assert result.timings["weights_s"] == 0.0, "the rebuilt base weights are reused"
    assert result.replay == 0 and any("no replay" in n for n in result.notes)
    assert result.name.startswith("tiny-grader-fit-") and len(result.name) == len("tiny-grader-fit-") + 8
    logged = [json.loads(x)["step"] for x in (out / "train_log.jsonl").read_text().splitlines()]
    assert logged == [2, 6, 8, 10]  # killed after writing step 4's checkpoint, before logging it
    meta = json.loads((result.export / "fastcrag_model.json").read_text())
    assert meta["name"] == result.name and meta["format"].startswith("onnx-int8") and meta["reader"] is False
    assert meta["fit"]["steps"] == 10 and meta["base_model"] == "tiny-grader"
    scores = load_reranker(str(result.export)).score(FACTS[0][0], [p for _, p, _ in FACTS])
    assert len(scores) == 5 and all(0.0 <= s <= 1.0 for s in scores)

    again = fine_tune(grader, pairs, out, **kw)  # nothing left to train: same export, not redone
    # export_s is a clock, not a float kernel: an export (ONNX trace + int8 quantisation) takes seconds, reusing one ~0
    assert again.steps == 10 and again.name == result.name and again.timings["export_s"] < 1.0
    other = fine_tune(grader, pairs[:20], out, **kw)  # other pairs: the old run is forgotten
    assert other.resumed_at == 0 and other.name != result.name and any("afresh" in n for n in other.notes)


def test_fine_tune_keeps_the_reader_head(tmp_path: Path) -> None:
    from fastcrag.fitting.finetune import fine_tune

    base = tiny_reader(tmp_path / "reader")
    result = fine_tune(
        base,
        _user_pairs(),
        tmp_path / "run",
        minutes=0.5,
        replay=0,
        progress=False,
        batch_size=8,
        max_epochs=1,
        threads=1,
    )
    meta = json.loads((result.export / "fastcrag_model.json").read_text())
    assert result.reader and meta["reader"] is True and meta["grade"] == {"relevance": 1.2, "span": 0.3, "bias": -0.4}
    assert result.steps == 5 and result.name.startswith("reader-fit-")


def test_fine_tune_rejects_bad_input(tmp_path: Path) -> None:
    from fastcrag.fitting.finetune import fine_tune

    with pytest.raises(ValueError, match="at least one"):
        fine_tune(tmp_path, [], tmp_path / "run", minutes=1)
    with pytest.raises(ValueError, match=r"\[0, 1\]"):
        fine_tune(tmp_path, [Pair("q", "p", 2.0, "user", "g")], tmp_path / "run", minutes=1)
    with pytest.raises(FileNotFoundError):
        fine_tune(tmp_path / "nothing", [Pair("q", "p", 1.0, "user", "g")], tmp_path / "run", minutes=1)
