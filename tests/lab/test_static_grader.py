"""Fixed activation scales (`lab.scripts.static_grader`) on the packaged grader's weights (marked `integration`)."""

from __future__ import annotations

from pathlib import Path

import numpy as np
import onnx
import pytest

from fastcrag.grading.onnx_grader import OnnxCrossEncoderReranker
from fastcrag.grading.reranker import PACKAGED_GRADER
from lab.scripts.static_grader import activation_ranges, float_reference, grader_folder, static

pytestmark = pytest.mark.integration

QUESTION = "How do I redirect a user to another page?"
PASSAGES = [
    "To redirect a user to another endpoint, use the redirect() function; to abort a request early with an error "
    "code, use the abort() function.",
    "Flask provides a redirect helper. " * 12,
    "Blueprints can expose a folder with static files by providing the path to the folder on the filesystem.",
    "The application context keeps track of the application-level data during a request, CLI command, or other "
    "activity. Rather than passing the application around to each function, the current_app and g proxies are "
    "accessed instead. " * 3,
    "Yes.",
]


def grades(folder: Path, passages: list[str]) -> np.ndarray:
    return np.array(OnnxCrossEncoderReranker(folder, cache_size=0).score(QUESTION, passages))


def test_fixed_scales_grade_a_pair_alike_beside_any_pairs_and_near_the_dynamic_grades(tmp_path: Path) -> None:
    src = Path(PACKAGED_GRADER)
    model = onnx.load(str(src / "model.onnx"))
    ranges, calls = activation_ranges(src, model, [(QUESTION, PASSAGES), (QUESTION, PASSAGES[2:])], "max")
    assert calls >= 2 and all(lo < 0 < hi for lo, hi in ranges.values())
    fixed = static(model, ranges)
    assert not any(n.op_type == "DynamicQuantizeLinear" for n in fixed.graph.node)
    folder = grader_folder(src, fixed, tmp_path / "static", "static", {})

    alone = np.array([grades(folder, [p])[0] for p in PASSAGES])  # the dynamic export moves these by up to 0.005
    np.testing.assert_allclose(grades(folder, PASSAGES), alone, rtol=0, atol=1e-6)
    np.testing.assert_allclose(grades(folder, PASSAGES[::-1]), alone[::-1], rtol=0, atol=1e-6)
    dynamic = grades(src, PASSAGES)
    assert np.abs(alone - dynamic).max() < 0.1 and np.argmax(alone) == np.argmax(dynamic) == 0


def test_float_activations_keep_the_grades_and_their_order(tmp_path: Path) -> None:
    src = Path(PACKAGED_GRADER)
    folder = grader_folder(src, float_reference(onnx.load(str(src / "model.onnx"))), tmp_path / "float", "float", {})
    exact, dynamic = grades(folder, PASSAGES), grades(src, PASSAGES)
    assert np.abs(exact - dynamic).max() < 0.1
    assert np.argsort(-exact)[:2].tolist() == np.argsort(-dynamic)[:2].tolist()
