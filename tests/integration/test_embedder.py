"""The int8 ONNX embedder against the fp32 sentence-transformers one: same space, same order, refused across indexes;
a text's int8 vector the same alone and in any batch."""

from __future__ import annotations

from pathlib import Path

import numpy as np
import pytest

from fastcrag.retrieval.embeddings import PER_TEXT, OnnxEmbeddings, SentenceTransformerEmbeddings, load_embeddings
from fastcrag.retrieval.store import FaissStore, IndexLoadError

pytestmark = pytest.mark.integration

TEXTS = [
    "The with statement wraps the execution of a block with methods defined by a context manager.",
    "Bananas are yellow.",
    "A lambda expression creates an anonymous function that can be used wherever a function object is required, "
    "for instance as the key of a sort, and it is evaluated when the expression is evaluated.",
    "Generators produce values lazily with yield.",
]


def test_int8_vectors_are_unit_length_in_order_and_agree_with_fp32() -> None:
    int8, fp32 = load_embeddings("onnx-int8"), load_embeddings("sentence-transformers")
    assert isinstance(int8, OnnxEmbeddings) and isinstance(fp32, SentenceTransformerEmbeddings)
    assert int8.name != fp32.name and int8.dimension == fp32.dimension == 384
    a, b = int8.encode(TEXTS), fp32.encode(TEXTS)  # texts of different lengths: batched sorted, returned in order
    assert a.shape == b.shape == (len(TEXTS), 384)
    # Vectors are normalised in float32: measured 1.8e-7 off unit length; 1e-4 is float32 rounding with room to spare.
    assert np.allclose(np.linalg.norm(a, axis=1), 1.0, atol=1e-4)
    # int8 weights and activations against fp32: measured cosine 0.987 at the least (AVX2 and ATen's default path
    # alike); 0.97 leaves room for another CPU's int8 kernels and is far above unrelated texts (at most 0.29 here).
    assert ((a * b).sum(axis=1) > 0.97).all()

    # Each row is its own text's vector, and the same bit for bit as the text alone or in another batch: each text
    # is embedded alone, so int8 activations are scaled by the text itself, never by its batch-mates or padding.
    # (Each comparison embeds afresh: an embedder keeps the vectors of texts it has embedded.)
    def fresh() -> OnnxEmbeddings:
        return OnnxEmbeddings(int8.path)  # type: ignore[attr-defined]

    assert all(np.array_equal(a[i], fresh().encode([t])[0]) for i, t in enumerate(TEXTS))
    assert np.array_equal(fresh().encode([*TEXTS[::-1], "Another text.", "x"])[: len(TEXTS)], a[::-1])
    assert np.array_equal(np.asarray(fresh().embed_query(TEXTS[1]), dtype=np.float32), a[1])  # a query as a passage
    assert int8.encode([]).shape == (0, 384)


def test_int8_vectors_do_not_depend_on_threads() -> None:
    """One thread or several (a Ray actor runs one; a process one per CPU) give the same vectors, bit for bit."""
    folder = load_embeddings("onnx-int8").path  # type: ignore[attr-defined]
    one, many = OnnxEmbeddings(folder, threads=1), OnnxEmbeddings(folder, threads=3)
    assert one.name == many.name and one.name.endswith(PER_TEXT)
    assert np.array_equal(one.encode(TEXTS * 2), many.encode(TEXTS * 2))


def test_a_text_embedded_again_is_read_from_the_kept_vectors() -> None:
    """A run embeds its question for the search and again for the answer's check: the model runs for it once."""
    folder = load_embeddings("onnx-int8").path  # type: ignore[attr-defined]
    embedder = OnnxEmbeddings(folder, threads=2)
    first = embedder.encode(TEXTS)
    session = embedder._runtime.get().session
    calls: list[int] = []
    run = session.run
    session.run = lambda *a, **k: calls.append(1) or run(*a, **k)  # type: ignore[method-assign]
    again = embedder.encode([TEXTS[1], TEXTS[0], "A text not seen before."])
    assert len(calls) == 1  # only the new text ran
    assert np.array_equal(again[:2], first[[1, 0]])
    assert np.array_equal(again[2], OnnxEmbeddings(folder).encode(["A text not seen before."])[0])


def test_an_index_built_with_one_embedder_is_refused_by_the_other(tmp_path: Path) -> None:
    int8, fp32 = load_embeddings("onnx-int8"), load_embeddings("sentence-transformers")
    FaissStore.from_texts(TEXTS, int8).save(tmp_path / "ix")
    with pytest.raises(IndexLoadError, match=r"embedder.*set FASTRAG_EMBEDDER=onnx-int8 \(the default\)"):
        FaissStore.load(tmp_path / "ix", fp32)
    assert len(FaissStore.load(tmp_path / "ix", int8)) == len(TEXTS)
    FaissStore.from_texts(TEXTS, fp32).save(tmp_path / "fp32")  # an index from before int8 became the default
    with pytest.raises(IndexLoadError, match="set FASTRAG_EMBEDDER=sentence-transformers to read it"):
        FaissStore.load(tmp_path / "fp32", load_embeddings(""))


def test_unknown_embedder_spec_is_a_clear_error() -> None:
    with pytest.raises(ValueError, match="not 'onnx-int8'"):
        load_embeddings("no-such-embedder")


def test_a_model_without_segment_ids_is_fed_only_its_inputs(tmp_path: Path) -> None:
    """An embedder folder whose graph takes no `token_type_ids` (MPNet, RoBERTa exports) embeds; it was refused."""
    import shutil

    import onnx
    from onnx import TensorProto, helper

    # sentence_embedding = the unit vector of (mean token id, token count): enough to tell texts apart
    ids = helper.make_tensor_value_info("input_ids", TensorProto.INT64, ["batch", "sequence"])
    mask = helper.make_tensor_value_info("attention_mask", TensorProto.INT64, ["batch", "sequence"])
    out = helper.make_tensor_value_info("sentence_embedding", TensorProto.FLOAT, ["batch", 2])
    nodes = [
        helper.make_node("Cast", ["input_ids"], ["f_ids"], to=TensorProto.FLOAT),
        helper.make_node("Cast", ["attention_mask"], ["f_mask"], to=TensorProto.FLOAT),
        helper.make_node("ReduceMean", ["f_ids"], ["mean"], axes=[1], keepdims=1),
        helper.make_node("ReduceSum", ["f_mask"], ["count"], axes=[1], keepdims=1),
        helper.make_node("Concat", ["mean", "count"], ["pair"], axis=1),
        helper.make_node("LpNormalization", ["pair"], ["sentence_embedding"], axis=1, p=2),
    ]
    graph = helper.make_graph(nodes, "no-segments", [ids, mask], [out])
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", 11)])
    onnx.save(model, str(tmp_path / "model.onnx"))
    packaged = load_embeddings("onnx-int8").path  # type: ignore[attr-defined]
    shutil.copyfile(packaged / "tokenizer.json", tmp_path / "tokenizer.json")
    (tmp_path / "fastcrag_model.json").write_text('{"name": "no-segments", "dimension": 2}')
    embedder = load_embeddings(str(tmp_path))
    assert isinstance(embedder, OnnxEmbeddings)
    vectors = embedder.encode(TEXTS)
    assert vectors.shape == (len(TEXTS), 2) and np.allclose(np.linalg.norm(vectors, axis=1), 1.0, atol=1e-5)
    assert len({tuple(v) for v in vectors.round(6)}) == len(TEXTS)
