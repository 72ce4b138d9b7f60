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
    args = parser.parse_args()

    from fastcrag.config.settings import Context, Settings
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
    for label, context in (("CRAG on", Context()), ("CRAG off", Context(crag_enabled=False))):
        stages: dict[str, list[float]] = {}
        actions: Counter[str] = Counter()
        for q in QUESTIONS:
            out = graph.invoke({"question": q}, context=context)
            actions[out["crag"]["action"]] += 1
            timings = out["crag"]["timings"]
            for stage, ms in timings.items():
                stages.setdefault(stage, []).append(ms)
            stages.setdefault("retrieval_total_ms", []).append(
                timings["retrieve_ms"] + timings["rerank_ms"] + timings["crag_ms"]
            )
        p50 = "  ".join(f"{k}={statistics.median(v):.1f}" for k, v in stages.items())
        print(f"{label}: P50 over {len(QUESTIONS)} questions: {p50}")
        print(f"{label}: actions {dict(actions)}")


if __name__ == "__main__":
    main()
