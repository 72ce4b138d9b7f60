"""A grader whose grade of a pair does not depend on the pairs batched beside it: fixed activation scales.

The packaged grader is dynamically int8-quantised: each `DynamicQuantizeLinear` draws its activation scale from the
whole padded batch, so a pair grades differently beside other pairs (lab/RESULTS.md, 2026-12-07, session 9). This
script rewrites a grader folder's `model.onnx` so that each `DynamicQuantizeLinear` becomes a `QuantizeLinear` with
a fixed scale and zero point drawn from the activations of real calls (the graph's candidates and `refine`'s sentence
strips for written questions of training manuals, graded as the grader grades them, in length-sorted batches). The
int8 weights are kept byte for byte; only where an activation's scale comes from changes.

    python -m lab.scripts.static_grader build --grader DIR --docs NAME=INDEX --out DIR [--rule p90] [--questions N]
    python -m lab.scripts.static_grader compare --grader DIR --grader DIR ... --docs NAME=INDEX [--questions N]

`build` draws the ranges from the first N written questions of each manual (`lab/questions/reworded/docs-NAME.jsonl`)
and writes a grader folder (model, tokenizer, metadata). The rule picks each tensor's range from the per-call
extremes: `max` the widest seen, `pNN` that percentile of the per-call minima and maxima (values outside saturate).
`compare` grades the candidates and strips of the *last* N questions of each manual (not those ranges were drawn
from) with each grader, batched and one pair at a time, against the first grader's network with float activations (its
int8 weights dequantised) and prints how far each lies from it: mean and largest difference, how often
the best candidate and the band (the packaged thresholds) differ.
"""

from __future__ import annotations

import argparse
import json
import shutil
import tempfile
from collections import defaultdict
from collections.abc import Iterable, Sequence
from pathlib import Path
from typing import Any, NamedTuple

import numpy as np
import onnx
from onnx import TensorProto, helper, numpy_helper

from fastcrag.components import Components
from fastcrag.config.settings import Settings
from fastcrag.grading.bands import band_of
from fastcrag.grading.onnx_grader import OnnxCrossEncoderReranker
from fastcrag.retrieval.text import sectioned, titled

QUESTIONS = Path(__file__).resolve().parents[1] / "questions" / "reworded"
DEPTH, STRIPPED = 10, 6
"""As the graph grades: the first pass's top 10, and the sentence strips of the first six for `refine`."""
SIZES = {"batched": 32, "one at a time": 1}
"""Pairs per call: the grader's batch before it was measured graded alone, and one pair."""


def strips_of(texts: Sequence[str]) -> list[str]:
    """The sentence strips `refine` grades of the first `STRIPPED` texts, each under its section's title."""
    return [titled(section, s) for t in texts[:STRIPPED] for section, s in sectioned(t)]


def _quantisers(model: onnx.ModelProto) -> list[onnx.NodeProto]:
    return [n for n in model.graph.node if n.op_type == "DynamicQuantizeLinear"]


class _Int8MatMul(NamedTuple):
    """One `DynamicQuantizeLinear(x) -> MatMulInteger(x_q, W_q, x_zp, W_zp) -> Cast -> Mul(by x_scale * W_scale)`."""

    quantiser: onnx.NodeProto
    matmul: onnx.NodeProto
    mul: onnx.NodeProto
    w_scale: str  # the initializer holding W_scale
    after: list[onnx.NodeProto]  # the nodes that read the Mul's output


def _int8_matmuls(g: onnx.GraphProto) -> list[_Int8MatMul]:
    """Every int8 MatMul of the exporter's dynamic pattern, in graph order."""
    inits = {i.name for i in g.initializer}
    producer = {o: n for n in g.node for o in n.output}
    readers: dict[str, list[onnx.NodeProto]] = defaultdict(list)
    for n in g.node:
        for i in n.input:
            readers[i].append(n)
    found = []
    for n in g.node:
        if n.op_type != "MatMulInteger":
            continue
        quant = producer[n.input[0]]
        assert quant.op_type == "DynamicQuantizeLinear", quant.op_type
        (cast,) = readers[n.output[0]]
        (mul,) = readers[cast.output[0]]
        scales = producer[next(i for i in mul.input if i != cast.output[0])]
        w_scale = next(i for i in scales.input if i in inits)
        found.append(_Int8MatMul(quant, n, mul, w_scale, readers[mul.output[0]]))
    return found


def _copy(model: onnx.ModelProto) -> onnx.ModelProto:
    m = onnx.ModelProto()
    m.CopyFrom(model)
    return m


def _rewritten(m: onnx.ModelProto, replace: dict[str, onnx.NodeProto | None]) -> onnx.ModelProto:
    """`m` with the nodes named in `replace` swapped in place (None: dropped), and what nothing reads pruned."""
    g = m.graph
    nodes = [replace.get(n.name, n) for n in g.node]
    del g.node[:]
    g.node.extend(n for n in nodes if n is not None)
    needed = {o.name for o in g.output}
    keep: list[onnx.NodeProto] = []
    for node in reversed(list(g.node)):
        if any(o in needed for o in node.output):
            keep.append(node)
            needed.update(node.input)
    del g.node[:]
    g.node.extend(reversed(keep))
    inits = [i for i in g.initializer if i.name in needed]
    del g.initializer[:]
    g.initializer.extend(inits)
    return m


def float_reference(model: onnx.ModelProto) -> onnx.ModelProto:
    """The same network with float activations: each int8 MatMul `MatMul(x, (W_q - W_zp) * W_scale)`."""
    m = _copy(model)
    inits = {i.name: numpy_helper.to_array(i) for i in m.graph.initializer}
    replace: dict[str, onnx.NodeProto | None] = {}  # the final Mul's name -> its MatMul
    for mm in _int8_matmuls(m.graph):
        _, w_q, _, w_zero = mm.matmul.input
        w = (inits[w_q].astype(np.float32) - inits[w_zero].astype(np.float32)) * inits[mm.w_scale]
        name = w_q + "_float"
        m.graph.initializer.append(numpy_helper.from_array(w.astype(np.float32), name))
        x = mm.quantiser.input[0]
        replace[mm.mul.name] = helper.make_node("MatMul", [x, name], [mm.mul.output[0]], name=mm.matmul.name + "_float")
    return _rewritten(m, replace)


def with_ranges(model: onnx.ModelProto) -> onnx.ModelProto:
    """The model with each quantiser's input min and max as extra outputs (after the model's own)."""
    m = _copy(model)
    for q in _quantisers(m):
        for op in ("ReduceMin", "ReduceMax"):
            out = f"{q.input[0]}_{op}"
            m.graph.node.append(helper.make_node(op, [q.input[0]], [out], keepdims=0))
            m.graph.output.append(helper.make_tensor_value_info(out, TensorProto.FLOAT, []))
    return m


def static(model: onnx.ModelProto, ranges: dict[str, tuple[float, float]]) -> onnx.ModelProto:
    """The model with fixed activation scales, as fast as the dynamic one.

    Each quantiser becomes `QuantizeLinear` with the scale and zero point its range gives (uint8, as the dynamic op
    computes them: the range widened to hold 0); each `MatMulInteger -> Cast -> Mul (-> Add of a bias)` after it
    becomes ONNX Runtime's fused `MatMulIntegerToFloat`, what it fuses the dynamic pattern into.
    """
    m = _copy(model)
    g = m.graph
    inits = {i.name for i in g.initializer}
    matmuls = _int8_matmuls(g)  # before the fixed scales become initializers beside the weights' own
    replace: dict[str, onnx.NodeProto | None] = {}  # None: dropped
    for n in _quantisers(m):
        lo, hi = ranges[n.input[0]]
        lo, hi = min(lo, 0.0), max(hi, 0.0)
        scale = np.float32((hi - lo) / 255.0)
        zero = np.uint8(np.clip(np.round(-lo / scale), 0, 255))
        g.initializer.append(numpy_helper.from_array(np.array(scale, dtype=np.float32), n.output[1]))
        g.initializer.append(numpy_helper.from_array(np.array(zero, dtype=np.uint8), n.output[2]))
        replace[n.name] = helper.make_node("QuantizeLinear", [n.input[0], *n.output[1:]], [n.output[0]], name=n.name)
    for mm in matmuls:
        a, w, a_zero, w_zero = mm.matmul.input
        inputs, out = [a, w, mm.quantiser.output[1], mm.w_scale, a_zero, w_zero], mm.mul.output[0]
        if len(mm.after) == 1 and mm.after[0].op_type == "Add" and any(i in inits for i in mm.after[0].input):
            (add,) = mm.after  # the layer's bias: fused as the op's seventh input
            inputs.append(next(i for i in add.input if i in inits))
            out = add.output[0]
            replace[add.name] = None
        op = helper.make_node("MatMulIntegerToFloat", inputs, [out], name=mm.matmul.name, domain="com.microsoft")
        replace[mm.mul.name] = op
    if not any(o.domain == "com.microsoft" for o in m.opset_import):
        m.opset_import.append(helper.make_opsetid("com.microsoft", 1))
    return _rewritten(m, replace)


def grader_folder(src: Path, model: onnx.ModelProto, out: Path, suffix: str, note: dict[str, Any]) -> Path:
    """A grader folder, written atomically: `src`'s tokenizer and metadata (`note` added, `-suffix` named), `model`."""
    out.parent.mkdir(parents=True, exist_ok=True)
    tmp = Path(tempfile.mkdtemp(dir=out.parent, prefix=f".{out.name}."))
    shutil.copy(src / "tokenizer.json", tmp / "tokenizer.json")
    meta = json.loads((src / "fastcrag_model.json").read_text())
    meta = {**meta, **note, "name": f"{meta.get('name', src.name)}-{suffix}"}
    (tmp / "fastcrag_model.json").write_text(json.dumps(meta, indent=2) + "\n")
    onnx.save(model, str(tmp / "model.onnx"))
    if out.exists():
        shutil.rmtree(out)
    tmp.rename(out)
    return out


def _calls(specs: list[str], count: int, last: bool) -> list[tuple[str, list[str], list[str]]]:
    """(question, candidates, strips) for the first (or last) `count` written questions of each NAME=INDEX."""
    calls = []
    for spec in specs:
        name, index = spec.split("=", 1)
        lines = (QUESTIONS / f"docs-{name}.jsonl").read_text().splitlines()
        rows = [r for r in map(json.loads, filter(None, lines)) if r.get("question")]  # skipped sections have none
        rows = rows[-count:] if last else rows[:count]
        retriever = Components(Settings(index_dir=Path(index))).retriever()
        for row in rows:
            texts = [d.page_content for d in retriever.search(row["question"], k=DEPTH)[0]]
            calls.append((row["question"], texts, strips_of(texts)))
    return calls


def activation_ranges(
    src: Path, model: onnx.ModelProto, calls: Iterable[tuple[str, Sequence[str]]], rule: str
) -> tuple[dict[str, tuple[float, float]], int]:
    """Each quantiser's input range by `rule` over the grader's own calls (as it batches them), and the calls seen.

    `rule`: `max` the widest range seen; `pNN` that percentile of the per-call maxima (and of the minima, mirrored).
    """
    names = [q.input[0] for q in _quantisers(model)]
    seen: dict[str, list[tuple[float, float]]] = defaultdict(list)
    with tempfile.TemporaryDirectory() as tmp:
        folder = grader_folder(src, with_ranges(model), Path(tmp) / "g", "ranges", {})
        probe = OnnxCrossEncoderReranker(folder, cache_size=0)
        runtime = probe._runtime.get()
        session = runtime.session

        class Recording:
            def run(self, outputs: Any, feeds: dict[str, Any]) -> list[Any]:
                res = session.run(outputs, feeds)
                extra = res[len(res) - 2 * len(names) :]
                for k, name in enumerate(names):
                    seen[name].append((float(extra[2 * k]), float(extra[2 * k + 1])))
                return list(res)

        object.__setattr__(runtime, "session", Recording())
        for question, texts in calls:
            probe.score(question, texts)
    ranges = {}
    for name in names:
        lows, highs = np.array(seen[name]).T
        if rule == "max":
            ranges[name] = (float(lows.min()), float(highs.max()))
        else:
            p = float(rule.removeprefix("p"))
            ranges[name] = (float(np.percentile(lows, 100 - p)), float(np.percentile(highs, p)))
    return ranges, len(seen[names[0]])


def build(args: argparse.Namespace) -> int:
    """Write a grader folder with fixed activation ranges (or float activations, `--rule float`)."""
    (src,) = map(Path, args.grader)
    model = onnx.load(str(src / "model.onnx"))
    if args.rule == "float":
        print(grader_folder(src, float_reference(model), Path(args.out), "float", {"activations": "float"}))
        return 0
    if not args.docs:
        raise SystemExit("build: --docs NAME=INDEX is needed to draw the activation ranges")
    calls = [(q, texts) for q, t, s in _calls(args.docs, args.questions, last=False) for texts in (t, s)]
    ranges, seen = activation_ranges(src, model, calls, args.rule)
    note = {"activation_ranges": {"rule": args.rule, "calls": seen}}
    out = grader_folder(src, static(model, ranges), Path(args.out), "static", note)
    print(f"{len(ranges)} quantisers fixed from {seen} calls ({args.rule}): {out}")
    return 0


def compare(args: argparse.Namespace) -> int:
    """Print each grader's distance from float activations, batched and one pair at a time."""
    first = Path(args.grader[0])
    cal = Components(Settings()).calibration()
    lo, hi = cal.reranker_threshold, cal.crag_upper
    if not args.docs:
        raise SystemExit("compare: --docs NAME=INDEX is needed")
    calls = _calls(args.docs, args.questions, last=True)
    with tempfile.TemporaryDirectory() as tmp:
        ref_dir = grader_folder(
            first, float_reference(onnx.load(str(first / "model.onnx"))), Path(tmp) / "ref", "float", {}
        )
        ref = OnnxCrossEncoderReranker(ref_dir, cache_size=0)
        truth = [(np.array(ref.score(q, t)), np.array(ref.score(q, s))) for q, t, s in calls]
        for spec in args.grader:
            for size in SIZES.values():
                g = OnnxCrossEncoderReranker(spec, batch_size=size, cache_size=0)
                diffs, best, band = [], 0, 0
                for (q, t, s), (rt, rs) in zip(calls, truth, strict=True):
                    gt, gs = np.array(g.score(q, t)), np.array(g.score(q, s))
                    diffs += np.abs(np.concatenate([gt - rt, gs - rs])).tolist()
                    best += int(np.argmax(gt) != np.argmax(rt))
                    band += int(band_of(float(gt.max()), lo, hi) != band_of(float(rt.max()), lo, hi))
                print(
                    f"{spec} batch {size}: against float activations, mean |diff| {np.mean(diffs):.4f}, "
                    f"p95 {np.percentile(diffs, 95):.4f}, max {np.max(diffs):.4f}; best candidate differs "
                    f"{best}/{len(calls)}, band {band}/{len(calls)}",
                    flush=True,
                )
    return 0


def main() -> int:
    """`build` or `compare`."""
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    sub = ap.add_subparsers(required=True)
    b = sub.add_parser("build")
    b.add_argument("--rule", default="p90", help="max; pNN: that percentile of the per-call extremes; float: none")
    b.add_argument("--out", required=True)
    b.set_defaults(func=build)
    c = sub.add_parser("compare")
    c.set_defaults(func=compare)
    for p in (b, c):
        p.add_argument("--grader", action="append", required=True)
        p.add_argument("--docs", action="append", default=[], help="NAME=INDEX: docs-NAME.jsonl asked of INDEX")
        p.add_argument("--questions", type=int, default=60)
    args = ap.parse_args()
    return int(args.func(args))


if __name__ == "__main__":
    raise SystemExit(main())
