"""Core figures: model load times, embedded-index build throughput, per-stage P50 and action mix (CRAG on/off)."""

from __future__ import annotations

import argparse
import statistics
import tempfile
import time
from collections import Counter
from pathlib import Path

QUESTIONS = [
    "How does the with statement work?",
    "What does the yield keyword do?",
    "How are default argument values evaluated?",
    "What is the difference between is and ==?",
    "How do I define a class?",
    "What does the global statement do?",
    "How does try/finally behave when the try block returns?",
    "What is a lambda expression?",
    "How does slicing work on sequences?",
    "What does the assert statement do?",
    "How do f-strings format values?",
    "What are the augmented assignment statements?",
    "How does the import statement find modules?",
    "What does the nonlocal statement do?",
    "Who won the 2018 FIFA World Cup?",
    "What is the boiling point of water at sea level?",
    "Who painted the Mona Lisa?",
    "What is the capital of Australia?",
    "How many moons does Jupiter have?",
    "When did the Berlin Wall fall?",
]


def main() -> None:
    """Print the figures."""
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("--llm", default=None, help="generator (default: FASTRAG_LLM)")
    parser.add_argument("--cold", action="store_true", help="also time `fastcrag ask` and `fastcrag serve` cold")
    args = parser.parse_args()

    from fastcrag.config.settings import Context, Settings
    from fastcrag.evaluation.bench import retrieval_total
    from fastcrag.generation.chat import packaged_smollm2
    from fastcrag.grading.reranker import default_reranker_spec, load_reranker
    from fastcrag.graph.builder import build_graph
    from fastcrag.retrieval.embeddings import SentenceTransformerEmbeddings
    from fastcrag.retrieval.indexing import build_index, ensure_default_index
    from fastcrag.retrieval.loaders import python_reference

    t = time.perf_counter()
    embedder = SentenceTransformerEmbeddings()
    embedder.embed_query("load")
    print(f"load embedder: {time.perf_counter() - t:.2f} s")
    t = time.perf_counter()
    reranker = load_reranker(default_reranker_spec())
    reranker.score("load", ["load"])
    print(f"load reranker ({reranker.name}): {time.perf_counter() - t:.2f} s")
    t = time.perf_counter()
    from llama_cpp import Llama

    Llama(model_path=str(packaged_smollm2()), n_ctx=2048, verbose=False)
    print(f"load LLM (SmolLM2-135M-Instruct GGUF): {time.perf_counter() - t:.2f} s")

    with tempfile.TemporaryDirectory() as tmp:
        report = build_index(python_reference(), Path(tmp), embeddings=embedder, progress=False)
    print(
        f"index build (embedded corpus): {report.chunks_added} chunks in {report.seconds:.1f} s = "
        f"{report.chunks_per_second:.1f} chunks/s"
    )

    ensure_default_index()
    settings = Settings(llm=args.llm) if args.llm else Settings()
    graph = build_graph(settings=settings)
    graph.parts.warm_up()  # type: ignore[attr-defined]
    clear_cache = getattr(graph.parts.reranker(), "clear_cache", lambda: None)  # type: ignore[attr-defined]
    variants = {"CRAG on": Context(), "CRAG off": Context(crag_enabled=False)}
    stages: dict[str, dict[str, list[float]]] = {label: {} for label in variants}
    actions: dict[str, Counter[str]] = {label: Counter() for label in variants}
    for q in QUESTIONS:  # interleaved, so that both variants see the same machine load
        for label, context in variants.items():
            clear_cache()  # each run pays its own forward passes, as a new question does
            out = graph.invoke({"question": q}, context=context)
            actions[label][out["crag"]["action"]] += 1
            timings = out["crag"]["timings"]
            for stage, ms in timings.items():
                stages[label].setdefault(stage, []).append(ms)
            stages[label].setdefault("retrieval_total_ms", []).append(retrieval_total(timings))
    for label in variants:
        p50 = "  ".join(f"{k}={statistics.median(v):.1f}" for k, v in stages[label].items())
        print(f"{label}: P50 over {len(QUESTIONS)} questions: {p50}")
        print(f"{label}: actions {dict(actions[label])}")
    if args.cold:
        cold_start(args.llm or "extractive")


def cold_start(llm: str, repeats: int = 3) -> None:
    """`fastcrag ask` end to end in a new process, and `fastcrag serve` start to its first answer.

    Both on a warm file cache: one discarded run first, then the median of `repeats`.
    """
    import json
    import os
    import socket
    import subprocess
    import sys
    import urllib.request

    fastcrag = [sys.executable, "-m", "fastcrag.cli"]
    env = {**os.environ, "HF_HUB_OFFLINE": "1"}
    asks = []
    for i in range(repeats + 1):
        t = time.perf_counter()
        subprocess.run([*fastcrag, "ask", QUESTIONS[i], "--llm", llm], env=env, check=True, capture_output=True)
        asks.append(time.perf_counter() - t)
    ask_s = statistics.median(asks[1:])
    print(f"cold start: `fastcrag ask --llm {llm}` to the answer, median of {repeats}: {ask_s:.2f} s")

    serves = []
    for i in range(repeats + 1):
        with socket.socket() as sock:
            sock.bind(("127.0.0.1", 0))
            port = sock.getsockname()[1]
        t = time.perf_counter()
        proc = subprocess.Popen(
            [*fastcrag, "serve", "--port", str(port), "--workers", "1"],
            env={**env, "FASTRAG_LLM": llm},
            stdout=subprocess.DEVNULL,
            stderr=subprocess.DEVNULL,
        )
        body = json.dumps({"assistant_id": "crag", "input": {"question": QUESTIONS[i]}}).encode()
        try:
            while True:
                try:
                    req = urllib.request.Request(
                        f"http://127.0.0.1:{port}/runs/wait", body, {"content-type": "application/json"}
                    )
                    with urllib.request.urlopen(req, timeout=120) as resp:
                        json.load(resp)
                    break
                except OSError:
                    if proc.poll() is not None or time.perf_counter() - t > 300:
                        raise RuntimeError("fastcrag serve did not answer") from None
                    time.sleep(0.05)
            serves.append(time.perf_counter() - t)
        finally:
            proc.terminate()
            proc.wait(timeout=60)
    serve_s = statistics.median(serves[1:])
    print(f"cold start: `fastcrag serve` start to the first answer, median of {repeats}: {serve_s:.2f} s")


if __name__ == "__main__":
    main()
