"""Rebuild a grader's trainable torch weights from its ONNX export (int8 initializers dequantised per channel)."""

from __future__ import annotations

import hashlib
import os
import shutil
import time
from collections.abc import Callable, Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from fastcrag.modelmeta import read_model_meta, write_model_meta

#: Prefixes that export wrappers put before a parameter name (`export_onnx`'s `inner.`, the classifier's `hf.`).
_WRAPPER_PREFIXES = ("inner.", "hf.", "model.")
#: Ops that sit between a MatMul and the Add of its bias: the dequantising Cast and scale Mul of an int8 MatMul.
_PASS_THROUGH = {"Cast", "Mul"}
ORIGIN_INT8 = "dequantised from int8 ONNX"
ORIGIN_FP32 = "read from fp32 ONNX"


class WeightsError(ValueError):
    """The ONNX graph's weights cannot be mapped one to one onto the grader's torch parameters."""


@dataclass(frozen=True)
class OnnxWeights:
    """The weights found in an ONNX grader, under their torch names, in torch layout.

    Attributes:
        tensors: Parameter name (without wrapper prefixes) -> float32 array, Linear weights as (out, in).
        quantised: How many of them were stored as int8/uint8 and dequantised.
        outputs: The graph's output names (`logits`, and `start_logits`/`end_logits` for a reader).
    """

    tensors: dict[str, Any]
    quantised: int
    outputs: list[str]


def _dequantise(q: Any, scale: Any, zero_point: Any, axis: int | None) -> Any:
    """Dequantise: `scale * (q - zero_point)`, per tensor (`axis` None) or per channel along `axis`."""
    import numpy as np  # NumPy only when a graph is read

    values = q.astype(np.float32) - np.asarray(zero_point).astype(np.float32).reshape(_channel_shape(q, axis))
    return values * np.asarray(scale, dtype=np.float32).reshape(_channel_shape(q, axis))


def _channel_shape(q: Any, axis: int | None) -> tuple[int, ...]:
    if axis is None:
        return ()
    shape = [1] * q.ndim
    shape[axis] = q.shape[axis]
    return tuple(shape)


def _strip_wrappers(name: str) -> str:
    changed = True
    while changed:
        changed = False
        for prefix in _WRAPPER_PREFIXES:
            if name.startswith(prefix):
                name, changed = name[len(prefix) :], True
    return name


def _is_parameter_name(name: str) -> bool:
    """Whether an initializer carries a module parameter's name (`...weight`/`...bias`), not an exporter's id."""
    return not name.startswith(("onnx::", "/")) and name.rsplit(".", 1)[-1] in ("weight", "bias")


def read_onnx_weights(path: Path) -> OnnxWeights:
    """Read every weight of an ONNX grader under its torch name.

    Quantised initializers (`X_quantized`, `X_scale`, `X_zero_point`) are dequantised: per tensor when the scale is
    a scalar, else per channel (the output channel, axis 1, of a MatMul weight; a DequantizeLinear's `axis`).
    A weight the exporter renamed (`onnx::MatMul_NNN`) is named by following the graph from its MatMul (through
    the int8 path's Cast and Mul) to the Add of its bias: `...query.bias` names `...query.weight`. MatMul weights
    are stored (in, out) and `X_Transposed` weights were transposed by the quantiser: both are transposed back.

    Raises:
        WeightsError: a quantised or MatMul weight whose parameter cannot be found.
    """
    import onnx  # the onnx package (protobuf) only when a graph is read
    from onnx import numpy_helper

    model = onnx.load(str(path))
    graph = model.graph
    inits = {i.name: numpy_helper.to_array(i) for i in graph.initializer}
    consumers: dict[str, list[Any]] = {}
    for node in graph.node:
        for name in node.input:
            consumers.setdefault(name, []).append(node)

    def bias_after(node: Any) -> str | None:
        """The parameter name of the bias added to `node`'s output, following single-consumer Cast/Mul ops."""
        for _ in range(6):
            nxt = consumers.get(node.output[0], [])
            if len(nxt) != 1:
                return None
            node = nxt[0]
            if node.op_type == "Add":
                names = [i for i in node.input if i in inits and _is_parameter_name(i) and i.endswith(".bias")]
                return names[0] if len(names) == 1 else None
            if node.op_type not in _PASS_THROUGH:
                return None
        return None

    def matmul_weight_name(init: str) -> str:
        users = [n for n in consumers.get(init, []) if n.op_type in ("MatMul", "MatMulInteger") and n.input[1] == init]
        bias = bias_after(users[0]) if len(users) == 1 else None
        if bias is None:
            raise WeightsError(f"{path}: no bias Add follows the MatMul of {init!r}; cannot name its parameter")
        return bias[: -len("bias")] + "weight"

    def channel_axis(base: str, q: Any, scale: Any) -> int | None:
        if scale.size == 1:
            return None
        for node in consumers.get(base + "_quantized", []) + consumers.get(base + "_scale", []):
            if node.op_type == "MatMulInteger" and node.input[1] == base + "_quantized":
                axis = 1  # per output channel: the columns of the (in, out) weight
                break
            if node.op_type == "DequantizeLinear":
                axis = next((int(a.i) for a in node.attribute if a.name == "axis"), 1)
                break
        else:
            matches = [ax for ax, d in enumerate(q.shape) if d == scale.size]
            if len(matches) != 1:
                raise WeightsError(f"{path}: cannot tell the channel axis of {base!r} (shape {q.shape})")
            axis = matches[0]
        if q.shape[axis] != scale.size:
            raise WeightsError(f"{path}: {base!r} has {scale.size} scales for axis {axis} of shape {q.shape}")
        return axis

    out: dict[str, Any] = {}

    def put(name: str, value: Any, origin: str) -> None:
        key = _strip_wrappers(name)
        if key in out:
            raise WeightsError(f"{path}: two initializers map to {key!r} (the second: {origin!r})")
        out[key] = value

    used: set[str] = set()
    quantised = 0
    for name, q in inits.items():
        if not name.endswith("_quantized"):
            continue
        base = name[: -len("_quantized")]
        if base + "_scale" not in inits or base + "_zero_point" not in inits:
            continue
        scale, zero = inits[base + "_scale"], inits[base + "_zero_point"]
        value = _dequantise(q, scale, zero, channel_axis(base, q, scale))
        used |= {name, base + "_scale", base + "_zero_point"}
        quantised += 1
        if base.endswith("_Transposed"):
            put(base[: -len("_Transposed")], value.T.copy(), base)
        elif _is_parameter_name(base):
            put(base, value, base)
        else:
            put(matmul_weight_name(name), value.T.copy(), base)
    for name, value in inits.items():
        if name in used:
            continue
        if _is_parameter_name(name):
            put(name, value.astype("float32"), name)
        elif any(n.op_type == "MatMul" and n.input[1] == name for n in consumers.get(name, [])) and value.ndim == 2:
            put(matmul_weight_name(name), value.T.astype("float32"), name)
    return OnnxWeights(out, quantised, [o.name for o in graph.output])


def match_state_dict(found: Mapping[str, Any], expected: Mapping[str, Any]) -> dict[str, Any]:
    """Torch tensors for every entry of `expected` (a state dict) from `found` (`read_onnx_weights`' tensors).

    Raises:
        WeightsError: a parameter is missing from the graph, the graph holds a weight the network does not have,
            or a shape differs; the message lists them.
    """
    import torch  # torch only when weights are rebuilt

    missing = sorted(set(expected) - set(found))
    unexpected = sorted(set(found) - set(expected))
    shapes = [
        f"{k}: graph {tuple(found[k].shape)} vs network {tuple(expected[k].shape)}"
        for k in sorted(set(found) & set(expected))
        if tuple(found[k].shape) != tuple(expected[k].shape)
    ]
    if missing or unexpected or shapes:
        parts = []
        for label, items in (("missing from the graph", missing), ("not in the network", unexpected)):
            if items:
                parts.append(f"{len(items)} {label}: {', '.join(items[:8])}{' ...' if len(items) > 8 else ''}")
        if shapes:
            parts.append(f"{len(shapes)} shape mismatches: {'; '.join(shapes[:8])}")
        raise WeightsError("the ONNX weights do not fit the grader network: " + " | ".join(parts))
    return {k: torch.from_numpy(found[k].copy()).to(expected[k].dtype) for k in expected}


def _base_folder(grader_dir: Path) -> Path:
    """The folder whose config and tokenizer settings the network takes.

    The grader folder's own `config.json` when it has one, else the packaged all-MiniLM-L6-v2 (the base of
    fastcrag's graders).
    """
    if (grader_dir / "config.json").is_file():
        return grader_dir
    from fastcrag.retrieval.embeddings import packaged_minilm_path

    return Path(packaged_minilm_path())


def _build_target(base: Path, reader: bool) -> Any:
    """A freshly built network of the grader's kind on `base`'s config (its weights are all replaced)."""
    from transformers import AutoConfig, AutoModelForSequenceClassification  # only when weights are rebuilt

    from fastcrag.fitting.model import build_model
    from fastcrag.fitting.network import CLASSIFIER_ARCHITECTURE, wrap_classifier

    config = AutoConfig.from_pretrained(str(base), local_files_only=True)
    if reader:
        if any((base / f).is_file() for f in ("model.safetensors", "pytorch_model.bin")):
            return build_model(base)
        import tempfile

        from transformers import AutoModel

        with tempfile.TemporaryDirectory() as tmp:  # a config without weights: a random encoder to build on
            AutoModel.from_config(config, add_pooling_layer=False).save_pretrained(tmp)  # type: ignore[no-untyped-call]
            return build_model(tmp)
    config.num_labels = 1
    config.architectures = [CLASSIFIER_ARCHITECTURE]
    hf = AutoModelForSequenceClassification.from_config(config)  # type: ignore[no-untyped-call]
    return wrap_classifier(hf)


def _network_state(model: Any, reader: bool) -> dict[str, Any]:
    """The network's parameters under the names the graph uses (the classifier's without the wrapper's `hf.`)."""
    return dict(model.state_dict() if reader else model.hf.state_dict())


def _replace_folder(tmp: Path, dest: Path) -> None:
    """Move the finished `tmp` folder to `dest`, replacing an older `dest` only once the new one is complete."""
    old = dest.with_name(f".{dest.name}.old-{os.getpid()}")
    if dest.exists():
        dest.rename(old)
    tmp.rename(dest)
    shutil.rmtree(old, ignore_errors=True)


def trainable_grader(grader_dir: Path, dest: Path, *, log: Callable[[str], None] | None = None) -> Path:
    """Rebuild the torch weights of an ONNX grader folder and save them as a trainable Hugging Face folder.

    Every initializer of `model.onnx` is dequantised and mapped onto the network's parameters (strictly: each one
    accounted for). A one-logit grader becomes a `BertForSequenceClassification` folder (safetensors, config,
    tokenizer); a grader with the reader (answer-span) head (`"reader": true` in `fastcrag_model.json`, or
    `start_logits` among the graph's outputs) becomes a grader-reader folder (encoder, `heads.safetensors`, the
    grade fusion of its metadata). The config comes from the grader folder's `config.json`, else the packaged
    all-MiniLM-L6-v2's; the grader's `tokenizer.json` is kept. `fastcrag_model.json` names the source grader, and
    the folder is written beside `dest` and renamed into place.

    Args:
        grader_dir: A grader folder as shipped (`model.onnx`, `tokenizer.json`, `fastcrag_model.json`).
        dest: The folder to write.
        log: Called with one line per step and its time.

    Returns:
        `dest`.

    Raises:
        FileNotFoundError: `grader_dir` holds no `model.onnx`.
        WeightsError: the graph's weights do not fit the network one to one.
    """
    from tokenizers import Tokenizer  # the tokenizers and transformers packages only when weights are rebuilt
    from transformers import AutoTokenizer

    say = log or (lambda _line: None)
    grader_dir, dest = Path(grader_dir), Path(dest)
    onnx_path = grader_dir / "model.onnx"
    if not onnx_path.is_file():
        raise FileNotFoundError(f"{grader_dir}: no model.onnx (not an ONNX grader folder)")
    meta = read_model_meta(grader_dir)
    timings: dict[str, float] = {}
    t0 = time.perf_counter()
    weights = read_onnx_weights(onnx_path)
    timings["read_and_dequantise_s"] = time.perf_counter() - t0
    reader = bool(meta.get("reader")) or "start_logits" in weights.outputs
    if reader and not {"start_logits", "end_logits"} <= set(weights.outputs):
        raise WeightsError(f"{grader_dir}: marked as a reader but the graph has no start_logits/end_logits outputs")
    say(
        f"read {len(weights.tensors)} weights ({weights.quantised} dequantised) from {onnx_path} "
        f"in {timings['read_and_dequantise_s']:.1f}s"
    )

    t0 = time.perf_counter()
    base = _base_folder(grader_dir)
    model = _build_target(base, reader)
    state = match_state_dict(weights.tensors, _network_state(model, reader))
    target = model if reader else model.hf
    target.load_state_dict(state, strict=True)
    timings["build_and_load_s"] = time.perf_counter() - t0
    say(
        f"built the {'grader-reader' if reader else 'classifier'} on {base} and loaded its weights "
        f"in {timings['build_and_load_s']:.1f}s"
    )

    t0 = time.perf_counter()
    tokenizer = AutoTokenizer.from_pretrained(str(base), local_files_only=True)
    own = grader_dir / "tokenizer.json"
    if own.is_file() and Tokenizer.from_file(str(own)).get_vocab() != tokenizer.get_vocab():
        raise WeightsError(f"{own}: its vocabulary differs from the base tokenizer's ({base})")
    tmp = dest.with_name(f".{dest.name}.tmp-{os.getpid()}")
    shutil.rmtree(tmp, ignore_errors=True)
    dest.parent.mkdir(parents=True, exist_ok=True)
    try:
        from fastcrag.fitting.network import save_network

        save_network(model, tokenizer, tmp, meta.get("grade") if reader else None)
        if own.is_file():
            shutil.copyfile(own, tmp / "tokenizer.json")  # the grader's own file: its export copies it again
        timings["save_s"] = time.perf_counter() - t0
        source = str(meta.get("name", grader_dir.name))
        origin = ORIGIN_INT8 if weights.quantised else ORIGIN_FP32
        write_model_meta(
            tmp,
            {
                "name": f"{source}-torch",
                "source_grader": {
                    "name": source,
                    "path": str(grader_dir.resolve()),
                    "format": meta.get("format"),
                    "sha1": file_sha1(onnx_path),
                },
                "origin": origin,
                "architecture": "grader-reader" if reader else "BertForSequenceClassification",
                "reader": reader,
                "max_length": int(meta.get("max_length", 256)),
                **({"train_max_length": meta["train_max_length"]} if "train_max_length" in meta else {}),
                "base_config": str(base),
                "rebuild_seconds": {k: round(v, 2) for k, v in timings.items()},
            },
        )
        _replace_folder(tmp, dest)
    except BaseException:
        shutil.rmtree(tmp, ignore_errors=True)
        raise
    say(f"saved {dest} in {timings['save_s']:.1f}s ({origin})")
    return dest


def trainable_once(grader_dir: Path, dest: Path, *, log: Callable[[str], None] | None = None) -> float:
    """`trainable_grader` into `dest`, unless `dest` already holds the weights rebuilt from this very `model.onnx`.

    Returns:
        Seconds spent rebuilding (0 when `dest` was reused).
    """
    src = rebuilt_from(dest) if (dest / "config.json").is_file() else None
    if src is not None and src.get("sha1") == file_sha1(grader_dir / "model.onnx"):
        return 0.0
    t0 = time.perf_counter()
    trainable_grader(grader_dir, dest, log=log)
    return time.perf_counter() - t0


def file_sha1(path: Path) -> str:
    """SHA-1 of a file's bytes (a grader's `model.onnx` identifies the weights rebuilt from it)."""
    digest = hashlib.sha1()
    with path.open("rb") as f:
        for block in iter(lambda: f.read(1 << 20), b""):
            digest.update(block)
    return digest.hexdigest()


def rebuilt_from(folder: Path) -> dict[str, Any] | None:
    """The `source_grader` entry of a folder written by `trainable_grader`, or None for any other folder."""
    meta = read_model_meta(folder)
    src = meta.get("source_grader")
    return dict(src) if isinstance(src, dict) and meta.get("origin") in (ORIGIN_INT8, ORIGIN_FP32) else None
