"""`crag_upper` judged by what refinement changes in the answers (lab/RESULTS.md, 2026-12-07, session 11).

`lab calibrate` draws `crag_upper` as the lowest grade above which the best sentence strip lies in another chunk than
the best chunk for at most 10% of SQuAD's questions; that share runs flat near 10% over a wide band of grades, so the
rule moves by about 0.1 between two halves of its sample. What a user sees is the answer. Each question that passes
grading goes one of two ways, `generate` (graded at or above crag_upper) or `refine`; nothing else the graph does
depends on crag_upper at the default `grade_batch` (all candidates graded in one batch). So two runs, one with every
passing question routed to `generate` (crag_upper at reranker_threshold) and one to `refine` (crag_upper 1.0), give
every question's answer under any crag_upper: the one its routing grade picks.

    python -m lab.experiments.upper_by_answers routes --out DIR [--calibration FILE]
        # DIR/generate.json, DIR/refine.json: the calibration with crag_upper at either end
    fastcrag eval docs ... --calibration DIR/generate.json --out RUN_G; the same with refine.json --out RUN_R
    python -m lab.experiments.upper_by_answers compose --run RUN_G:RUN_R [--run ...] --at 0.8 0.870151 ...
        # each `fastcrag eval docs` / `eval abstention` folder pair's outcomes at each crag_upper
    python -m lab.experiments.upper_by_answers observe --out FILE [--per-class 200]
        # `lab calibrate`'s SQuAD sample, both routes, in one process (resumable)
    python -m lab.experiments.upper_by_answers choose FILE [--resamples 1000]
        # its truthfulness by crag_upper, the outcomes refinement changes by grade, and `lowest_best`'s spread
"""

from __future__ import annotations

import argparse
import itertools
import json
import time
from collections import Counter
from collections.abc import Sequence
from pathlib import Path
from typing import Any

import numpy as np

from fastcrag.components import Components
from fastcrag.config.calibration import load_calibration
from fastcrag.config.settings import Context, Settings
from fastcrag.evaluation.abstention import score_response
from fastcrag.evaluation.runlog import ResultLog
from fastcrag.evaluation.scoring import TRUTH_POINTS
from fastcrag.fileio import write_text_atomic
from fastcrag.grading.reranker import CachingReranker, calibration_for, default_reranker_spec, load_reranker
from fastcrag.graph.builder import build_graph
from lab.calibrate import squad_sample
from lab.data import CHUNK_OVERLAP, CHUNK_TOKENS, OFF_CORPUS, PER_CLASS, SEED, SQUAD

Record = dict[str, Any]
Routed = list[tuple[Record, Record]]
"""Per question, its record routed to `generate` and to `refine`."""


def route_calibrations(calibration: Path | None, out: Path) -> None:
    """Write `out/generate.json` and `out/refine.json`: `calibration` (the packaged one when None) at either end."""
    cal = load_calibration(calibration)
    for name, upper in (("generate", cal.reranker_threshold), ("refine", 1.0)):
        routed = cal.model_copy(update={"crag_upper": upper})
        write_text_atomic(out / f"{name}.json", routed.model_dump_json(indent=2) + "\n")


def composed(routed: Routed, upper: float) -> list[Record]:
    """Each question's record under `upper`: the `generate` one when its routing grade reaches `upper`, else `refine`.

    Raises:
        ValueError: a question's routing grade differs between the runs (they did not share retrieval and grades).
    """
    out = []
    for gen, ref in routed:
        if gen.get("top_score") != ref.get("top_score"):
            raise ValueError(f"{gen.get('key')}: routing grade {gen.get('top_score')} vs {ref.get('top_score')}")
        out.append(gen if (gen.get("top_score") or 0.0) >= upper else ref)
    return out


def summary(records: Sequence[Record]) -> str:
    """What the records say: substance / right page first / abstained (`eval docs`) or truthfulness (others)."""
    if records and "substance" in records[0]:
        counts = [sum(bool(r[k]) for r in records) for k in ("substance", "topic_first", "abstained")]
        return "substance / first / abstained {} / {} / {}".format(*counts)
    n = Counter(r["outcome"] for r in records)
    points = sum(TRUTH_POINTS[o] * k for o, k in n.items()) / max(1, len(records))
    return f"truthfulness {points:+.4f} (correct / wrong / abstained {n['correct']} / {n['wrong']} / {n['abstained']})"


def gains(gen: Record, ref: Record) -> dict[str, int]:
    """What refining the question changes against answering it at once, per measure (refine minus generate)."""
    if "substance" in gen:
        return {m: int(ref[k]) - int(gen[k]) for m, k in (("substance", "substance"), ("first", "topic_first"))}
    return {"points": TRUTH_POINTS[ref["outcome"]] - TRUTH_POINTS[gen["outcome"]]}


def by_grade(routed: Routed, lower: float, bins: int = 5) -> None:
    """Print, per quantile bin of the passing questions' grades, the questions refining gains and loses per measure."""
    passing = [(g, r) for g, r in routed if (g.get("top_score") or 0.0) >= lower]
    if not passing:
        return
    grades = np.array([g["top_score"] for g, _ in passing])
    for lo, hi in itertools.pairwise(np.quantile(grades, np.linspace(0, 1, bins + 1))):
        inside = [gains(g, r) for g, r in passing if lo <= g["top_score"] <= hi]
        moved = ", ".join(f"{m} +{sum(d[m] > 0 for d in inside)} -{sum(d[m] < 0 for d in inside)}" for m in inside[0])
        print(f"  grades {lo:.3f}-{hi:.3f} ({len(inside)} questions), refined rather than answered at once: {moved}")


def read_log(path: Path) -> tuple[dict[str, Any], list[Record]]:
    """A result log's configuration and its records (a line cut short is skipped)."""
    header, *lines = path.read_text(encoding="utf-8").splitlines()
    records = []
    for line in lines:
        try:
            records.append(json.loads(line))
        except ValueError:
            continue
    return json.loads(header)["config"], records


def paired_runs(generate: Path, refine: Path) -> Routed:
    """Two eval folders' records paired by key (questions in both only)."""
    gen = {r["key"]: r for r in read_log(generate / "results.jsonl")[1]}
    ref = {r["key"]: r for r in read_log(refine / "results.jsonl")[1]}
    return [(gen[k], ref[k]) for k in gen if k in ref]


def compose(runs: Sequence[str], at: Sequence[float]) -> None:
    """Print each run pair's outcomes and AMBIGUOUS count at each `at` value, then all pairs' together."""
    pairs = {spec: paired_runs(*(Path(p) for p in spec.split(":", 1))) for spec in runs}
    if len(pairs) > 1:
        pairs["all"] = [p for routed in pairs.values() for p in routed]
    for name, routed in pairs.items():
        print(f"{name} ({len(routed)} questions)")
        for upper in at:
            records = composed(routed, upper)
            refined = sum(r["band"] == "AMBIGUOUS" for r in records)
            print(f"  crag_upper {upper:.4f}: {summary(records)}; AMBIGUOUS {refined}")
    name, routed = list(pairs.items())[-1]  # all pairs together, where there are several
    print(f"by grade, questions graded at or above {min(at):.4f} ({name}):")
    by_grade(routed, min(at))


def observe(out: Path, per_class: int, settings: Settings) -> None:
    """Run the graph over `lab calibrate`'s SQuAD sample, each question routed both ways; append to `out`."""
    grader = CachingReranker(load_reranker(settings.reranker or default_reranker_spec()))
    cal = load_calibration(calibration_for(settings.calibration, settings.reranker), expected_model=grader.name)
    *_, chosen, store = squad_sample(SQUAD, OFF_CORPUS, per_class, SEED, CHUNK_TOKENS, CHUNK_OVERLAP)
    config = {"grader": grader.name, "calibration": cal.model_dump(), "per_class": per_class, "seed": SEED}
    log = ResultLog(out, config)
    graph = build_graph(parts=Components(settings, store, grader, "extractive", cal))
    contexts = {"generate": Context(crag_upper=cal.reranker_threshold), "refine": Context(crag_upper=1.0)}
    started = time.perf_counter()
    for i, q in enumerate(chosen, 1):
        for route, context in contexts.items():
            if (key := f"{q.kind}|{q.question}|{route}") not in log:
                result = graph.invoke({"question": q.question}, context=context)
                record = score_response(result, q.kind, q.answers, settings.abstain_message, q.source)
                log.add(key, record | {"question": q.question, "route": route})
        if i % 50 == 0:
            print(f"{i} of {len(chosen)} questions, {time.perf_counter() - started:.0f} s", flush=True)


def observed(records: Sequence[Record]) -> Routed:
    """`observe`'s records paired per question (questions with both routes only)."""
    by_route: dict[str, dict[str, Record]] = {"generate": {}, "refine": {}}
    for rec in records:
        question, route = rec["key"].rsplit("|", 1)
        by_route[route][question] = rec
    return [(g, by_route["refine"][q]) for q, g in by_route["generate"].items() if q in by_route["refine"]]


def truthfulness_at(routed: Routed, upper: float) -> float:
    """Mean points (+1 correct, 0 abstained, -1 wrong) of the answers under `upper`."""
    return float(np.mean([TRUTH_POINTS[r["outcome"]] for r in composed(routed, upper)]))


def lowest_best(routed: Routed, candidates: np.ndarray) -> float:
    """The lowest candidate value whose truthfulness is the best over `routed`."""
    values = np.array([truthfulness_at(routed, t) for t in candidates])
    return float(candidates[int(np.argmax(values >= values.max() - 1e-12))])


def choose(path: Path, resamples: int) -> None:
    """Print truthfulness by crag_upper, the outcomes refinement changes by grade, and `lowest_best`'s spread."""
    config, records = read_log(path)
    threshold = float(config["calibration"]["reranker_threshold"])
    routed = observed(records)
    print(f"{len(routed)} questions, {dict(Counter(g['kind'] for g, _ in routed))}")
    passing = sorted(s for g, _ in routed if (s := g.get("top_score") or 0.0) >= threshold)
    if not passing:
        print("no question passes reranker_threshold: crag_upper changes no answer")
        return
    for q in (0.0, 0.25, 0.5, 0.75, 0.9):
        t = passing[int(q * (len(passing) - 1))]
        print(f"  crag_upper {t:.4f} (passing quantile {q:.2f}): {summary(composed(routed, t))}")
    print(f"  crag_upper {config['calibration']['crag_upper']:.4f} (as calibrated): ", end="")
    print(summary(composed(routed, config["calibration"]["crag_upper"])))
    print(f"  crag_upper 1.0 (all refine): {summary(composed(routed, 1.0))}")
    by_grade(routed, threshold)
    candidates = np.unique([threshold, *passing, 1.0])
    rng = np.random.default_rng(SEED)
    boot = [
        lowest_best([routed[i] for i in rng.integers(0, len(routed), len(routed))], candidates)
        for _ in range(resamples)
    ]
    drawn = lowest_best(routed, candidates)
    print(
        f"lowest_best: {drawn:.4f} ({summary(composed(routed, drawn))}); bootstrap median {np.median(boot):.4f}, "
        f"5-95% {np.percentile(boot, 5):.4f}-{np.percentile(boot, 95):.4f}"
    )


def main() -> int:
    """Routes, compose, observe or choose."""
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    sub = ap.add_subparsers(dest="cmd", required=True)
    rt = sub.add_parser("routes")
    rt.add_argument("--out", type=Path, required=True)
    rt.add_argument("--calibration", type=Path)
    co = sub.add_parser("compose")
    co.add_argument("--run", action="append", required=True, help="GENERATE_RUN:REFINE_RUN (eval output folders)")
    co.add_argument("--at", type=float, nargs="+", required=True)
    ob = sub.add_parser("observe")
    ob.add_argument("--out", type=Path, required=True)
    ob.add_argument("--per-class", type=int, default=PER_CLASS)
    ch = sub.add_parser("choose")
    ch.add_argument("file", type=Path)
    ch.add_argument("--resamples", type=int, default=1000)
    args = ap.parse_args()
    if args.cmd == "routes":
        route_calibrations(args.calibration, args.out)
    elif args.cmd == "compose":
        compose(args.run, args.at)
    elif args.cmd == "observe":
        observe(args.out, args.per_class, Settings())
    else:
        choose(args.file, args.resamples)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
