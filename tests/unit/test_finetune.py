"""Rebuilding trainable weights from an int8 ONNX grader, and the fine-tune API, on tiny random BERTs."""

from __future__ import annotations

import json
import shutil
from pathlib import Path
from typing import Any

import pytest

torch = pytest.importorskip("torch")
transformers = pytest.importorskip("transformers")

from fastcrag.training.data import Pair  # noqa: E402
from fastcrag.training.network import has_reader, load_network  # noqa: E402

TINY = {"hidden_size": 32, "num_hidden_layers": 2, "num_attention_heads": 2, "intermediate_size": 64}
FACTS = [
    ("Who designed the Eiffel Tower?", "The Eiffel Tower was designed by the company of Gustave Eiffel.", "Eiffel"),
    ("What do plants release?", "Photosynthesis releases oxygen as a by-product.", "oxygen"),
    ("What enforces ownership in Rust?", "Rust's borrow checker enforces ownership at compile time.", "borrow checker"),
    ("When did the Berlin Wall fall?", "The Berlin Wall fell on 9 November 1989.", "9 November 1989"),
    ("What is the capital of Australia?", "Canberra is the capital city of Australia.", "Canberra"),
]


def _tokenizer() -> Any:
    from fastcrag.retrieval.embeddings import packaged_minilm_path

    return transformers.AutoTokenizer.from_pretrained(str(packaged_minilm_path()), local_files_only=True)


def _perturb(model: Any, seed: int) -> None:
    """Random values everywhere (a fresh model has LayerNorms of ones and zero biases, all alike)."""
    gen = torch.Generator().manual_seed(seed)
    with torch.no_grad():
        for p in model.parameters():
            p.add_(torch.randn(p.shape, generator=gen) * 0.05)


def tiny_classifier(folder: Path, seed: int = 0) -> Path:
    """A randomly initialised one-logit BERT classifier (hidden 32, 2 layers) saved as a Hugging Face folder."""
    torch.manual_seed(seed)
    config = transformers.BertConfig(num_labels=1, architectures=["BertForSequenceClassification"], **TINY)
    model = transformers.BertForSequenceClassification(config)
    _perturb(model, seed)
    model.save_pretrained(str(folder))
    _tokenizer().save_pretrained(str(folder))
    return folder


def tiny_reader(folder: Path, seed: int = 0) -> Path:
    """A randomly initialised tiny grader-reader (encoder + relevance and span heads) with a grade fusion."""
    from fastcrag.training.model import build_model, save_model

    torch.manual_seed(seed)
    encoder_dir = folder.parent / f"{folder.name}-encoder"
    transformers.BertModel(transformers.BertConfig(**TINY), add_pooling_layer=False).save_pretrained(str(encoder_dir))
    model = build_model(encoder_dir)
    _perturb(model, seed)
    save_model(model, _tokenizer(), folder, {"relevance": 1.2, "span": 0.3, "bias": -0.4})
    return folder


def onnx_grader(model_dir: Path, dest: Path, name: str) -> Path:
    """Export as the packaged grader is exported (int8), keeping the tiny config beside it for the rebuild."""
    from fastcrag.training.train import export_grader

    export_grader(model_dir, dest, name=name)
    shutil.copyfile(model_dir / "config.json", dest / "config.json")
    return dest


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
    from fastcrag.training.weights import read_onnx_weights, trainable_grader

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
    from fastcrag.training.weights import WeightsError, trainable_grader

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


def _user_pairs() -> list[Pair]:
    out = []
    for i, (q, p, a) in enumerate(FACTS):
        for j, (_, other, _) in enumerate(FACTS):
            label = 1.0 if i == j else 0.0
            out.append(Pair(q, p if i == j else other, label, "user", f"g{i}", a if i == j else ""))
        out += [Pair(q, p + " It is well known.", 1.0, "user", f"g{i}"), Pair(q, "Nothing here.", 0.0, "user", "x")]
        out += [Pair(q, f"{p} Also {FACTS[(i + 1) % 5][1]}", 1.0, "user", f"g{i}")]
    return out  # 40 pairs


def test_fine_tune_runs_checkpoints_resumes_and_exports(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    from fastcrag.grading.reranker import load_reranker
    from fastcrag.training import train
    from fastcrag.training.finetune import fine_tune

    grader = onnx_grader(tiny_classifier(tmp_path / "src"), tmp_path / "tiny-grader", "tiny-grader")
    pairs = _user_pairs()
    assert len(pairs) == 40
    out = tmp_path / "run"
    save = train._save_checkpoint

    def interrupted(path: Path, model: Any, optimizer: Any, step: int, elapsed: float) -> None:
        save(path, model, optimizer, step, elapsed)
        if step == 4:
            raise Interrupted  # the run stops after its second checkpoint

    monkeypatch.setattr(train, "_save_checkpoint", interrupted)
    kw: dict[str, Any] = {"minutes": 0.5, "data_root": tmp_path / "no-data", "progress": False}
    kw |= {"batch_size": 8, "max_epochs": 2, "checkpoint_every": 2, "threads": 1}
    with pytest.raises(Interrupted):
        fine_tune(grader, pairs, out, **kw)
    assert json.loads((out / "checkpoint" / "state.json").read_text())["step"] == 4
    assert (out / "base-weights" / "model.safetensors").is_file() and not (out / "export").exists()

    monkeypatch.setattr(train, "_save_checkpoint", save)
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
    from fastcrag.training.finetune import fine_tune

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
    from fastcrag.training.finetune import fine_tune

    with pytest.raises(ValueError, match="at least one"):
        fine_tune(tmp_path, [], tmp_path / "run", minutes=1)
    with pytest.raises(ValueError, match=r"\[0, 1\]"):
        fine_tune(tmp_path, [Pair("q", "p", 2.0, "user", "g")], tmp_path / "run", minutes=1)
    with pytest.raises(FileNotFoundError):
        fine_tune(tmp_path / "nothing", [Pair("q", "p", 1.0, "user", "g")], tmp_path / "run", minutes=1)
