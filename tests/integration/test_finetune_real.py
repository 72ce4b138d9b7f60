"""The packaged grader's rebuilt torch weights score like its int8 ONNX; fine-tuning it with a replay (real model)."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import numpy as np
import pytest

from fastcrag.fitting.mix import Pair
from fastcrag.grading.onnx_grader import OnnxCrossEncoderReranker
from fastcrag.grading.reranker import PACKAGED_GRADER

from conftest import SHARED_DATA

pytestmark = pytest.mark.integration

DATA_ROOT = SHARED_DATA
ROOT = Path(__file__).resolve().parents[2]
FACTS = [
    ("Who designed the Eiffel Tower?", "The Eiffel Tower was designed by the company of Gustave Eiffel."),
    ("What do plants release in photosynthesis?", "Photosynthesis releases oxygen as a by-product."),
    ("What enforces ownership in Rust?", "Rust's borrow checker enforces ownership rules at compile time."),
    ("When did the Berlin Wall fall?", "The Berlin Wall fell on 9 November 1989."),
    ("What is the capital of Australia?", "Canberra is the capital city of Australia."),
    ("How many legs does a spider have?", "Spiders have eight legs and two body segments."),
    ("What metal is liquid at room temperature?", "Mercury is a metal that is liquid at room temperature."),
    ("Who wrote Hamlet?", "Hamlet is a tragedy written by William Shakespeare."),
]
PAIRS = [(q, p) for q, _ in FACTS for _, p in FACTS]  # 64 pairs: 8 answering, 56 not
PACKAGED_GRADER_NAME = json.loads((PACKAGED_GRADER / "fastcrag_model.json").read_text())["name"]


def _onnx_scores(folder: Path) -> np.ndarray:
    grader = OnnxCrossEncoderReranker(folder, cache_size=0)
    return np.asarray([s for q, _ in FACTS for s in grader.score(q, [p for _, p in FACTS])])


def _torch_scores(folder: Path) -> np.ndarray:
    import torch
    from transformers import AutoTokenizer

    from fastcrag.fitting.network import load_network

    model, tok = load_network(folder).eval(), AutoTokenizer.from_pretrained(str(folder))
    enc = tok([q for q, _ in PAIRS], [p for _, p in PAIRS], padding=True, truncation=True, return_tensors="pt")
    with torch.inference_mode():
        rel, _, _ = model(enc["input_ids"], enc["attention_mask"], enc["token_type_ids"])
    return torch.sigmoid(rel).numpy()


def test_unpacked_grader_scores_like_the_shipped_onnx_and_re_exports_to_it(tmp_path: Path) -> None:
    from fastcrag.fitting.export import export_grader

    out = tmp_path / "grader-torch"
    run = subprocess.run(
        [sys.executable, "-m", "lab", "unpack-grader", "--out", str(out)],
        cwd=ROOT,  # the lab is a folder of the repository, not an installed package
        capture_output=True,
        text=True,
        timeout=900,
    )
    assert run.returncode == 0, run.stdout[-2000:] + run.stderr[-2000:]
    meta = json.loads((out / "fastcrag_model.json").read_text())
    assert meta["origin"] == "dequantised from int8 ONNX" and meta["source_grader"]["name"] == PACKAGED_GRADER_NAME
    shipped, rebuilt = _onnx_scores(PACKAGED_GRADER), _torch_scores(out)
    r = float(np.corrcoef(shipped, rebuilt)[0, 1])
    print(
        f"torch vs shipped ONNX on {len(PAIRS)} pairs: Pearson {r:.5f}, "
        f"max |diff| {np.abs(shipped - rebuilt).max():.4f}"
    )
    # Dequantised fp32 weights against the int8 graph that rounds activations too: measured Pearson 0.99901 (max
    # |diff| 0.072) on ATen's AVX2 and default paths alike; no training, so nothing to seed. 0.99 asks for the same
    # ordering of 64 pairs, with room for another CPU's int8 kernels; a weight mapped wrongly falls far below it.
    assert r >= 0.99

    again = export_grader(out, tmp_path / "re-export", name="re-export")
    re_scores = _onnx_scores(again)
    r2 = float(np.corrcoef(shipped, re_scores)[0, 1])
    print(f"re-export vs shipped ONNX: Pearson {r2:.5f}, max |diff| {np.abs(shipped - re_scores).max():.4f}")
    # Re-quantising the rebuilt weights gives back the shipped graph: measured Pearson 1.00000, max |diff| 0.0000.
    assert r2 >= 0.99


@pytest.mark.skipif(not (DATA_ROOT / "train" / "squad11-train").is_dir(), reason="no shared training data")
def test_fine_tune_the_packaged_grader_with_a_replay(tmp_path: Path) -> None:
    from fastcrag.fitting.finetune import REPLAY_FAMILIES, fine_tune
    from fastcrag.grading.reranker import load_reranker

    pairs = [
        Pair(q, p, 1.0 if i == j else 0.0, "user", f"g{i}")
        for i, (q, _) in enumerate(FACTS)
        for j, (_, p) in enumerate(FACTS)
    ][:24]
    result = fine_tune(PACKAGED_GRADER, pairs, tmp_path / "run", minutes=0.25, data_root=DATA_ROOT, progress=False)
    assert result.replay == len(pairs) and not result.notes
    replay = [json.loads(x) for x in (tmp_path / "run" / "pool" / "replay.jsonl").read_text().splitlines()]
    assert {r["source"].split(":")[0] for r in replay} <= REPLAY_FAMILIES
    assert result.name.startswith(f"{PACKAGED_GRADER_NAME}-fit-") and result.steps >= 1
    scores = load_reranker(str(result.export)).score(FACTS[0][0], [p for _, p in FACTS])
    # An order, not a tolerance: the run is seeded (TrainConfig.seed), but a time budget sets how many steps it takes
    # on this CPU, so only what must hold after any number of them is asked.
    assert int(np.argmax(scores)) == 0, "still finds the answering passage"
