"""`fastcrag_model.json`: one reader for every model folder, one writer for every export."""

from __future__ import annotations

from pathlib import Path

import pytest

from fastcrag.grading.onnx_grader import OnnxCrossEncoderReranker
from fastcrag.grading.reranker import PACKAGED_GRADER, _model_name
from fastcrag.modelmeta import META_FILE, ModelMetaError, read_model_meta, write_model_meta
from fastcrag.retrieval.embeddings import PACKAGED_EMBEDDER, PER_TEXT, OnnxEmbeddings


def test_written_meta_reads_back(tmp_path: Path) -> None:
    meta = {"name": "grader-x", "max_length": 128, "grade": {"relevance": 1.0, "span": 0.5, "bias": 0.0}}
    path = write_model_meta(tmp_path, meta)
    assert path == tmp_path / META_FILE
    assert path.read_text(encoding="utf-8").endswith("}\n")
    assert read_model_meta(tmp_path) == meta


def test_missing_meta_is_empty_unless_required(tmp_path: Path) -> None:
    assert read_model_meta(tmp_path) == {}
    with pytest.raises(FileNotFoundError, match=META_FILE):
        read_model_meta(tmp_path, required=True)


def test_invalid_meta_names_the_file(tmp_path: Path) -> None:
    (tmp_path / META_FILE).write_text("{name: oops", encoding="utf-8")
    with pytest.raises(ModelMetaError, match=rf"{META_FILE}: not valid JSON"):
        read_model_meta(tmp_path)
    (tmp_path / META_FILE).write_text("[1, 2]", encoding="utf-8")
    with pytest.raises(ModelMetaError, match="expected a JSON object"):
        read_model_meta(tmp_path)


def test_every_reader_uses_the_packaged_names() -> None:
    grader = read_model_meta(PACKAGED_GRADER, required=True)
    assert _model_name(PACKAGED_GRADER) == grader["name"]
    assert OnnxCrossEncoderReranker(PACKAGED_GRADER).name == grader["name"]
    embedder = read_model_meta(PACKAGED_EMBEDDER, required=True)
    onnx = OnnxEmbeddings(PACKAGED_EMBEDDER)
    # indexes record the model's name with how it embeds: each text alone
    assert (onnx.name, onnx.dimension) == (embedder["name"] + PER_TEXT, embedder["dimension"])


def test_a_broken_meta_file_leaves_the_folder_name(tmp_path: Path) -> None:
    folder = tmp_path / "my-grader"
    folder.mkdir()
    (folder / META_FILE).write_text("not json", encoding="utf-8")
    assert _model_name(folder) == "my-grader"
    with pytest.raises(ModelMetaError, match="my-grader"):
        OnnxCrossEncoderReranker(folder)
