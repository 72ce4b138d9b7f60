"""FLARE mode against one retrieval with the same chat model, on MedQuAD's long answers (outputs under --out).

    python -m lab.scripts.flare_measure --out /tmp/flare/medquad            # 30 questions, SmolLM2-135M in process
    python -m lab.scripts.flare_measure --out /tmp/flare/small --questions 5 # a quick look
    python -m lab.scripts.flare_measure --out /tmp/flare/medquad --threshold 0.2
    python -m lab.scripts.flare_measure --logprob-cost    # llama.cpp: what reading log-probabilities costs

Corpus: a seeded sample of MedQuAD foci (`lab.scripts.fit_trial.medquad`: foci with two or more answered question
types, no two sharing a focus name or UMLS concept); every answer of a sampled focus is a document, so each question
has its own answer document and its focus's other answers (same focus, other question types) as neighbours. One
question per focus, whose answer has at least `MIN_REFERENCE_SENTENCES` sentences; that answer is the reference.

Variants, all through the graph in FLARE mode with the same chat model, prompt and first retrieval:

- `one retrieval`: `flare_threshold` 0: every sentence is confident, so the first retrieval's passages are all the
  model sees (the drafts are the same as the FLARE rows' first drafts).
- `flare masked` and `flare question`: active retrieval at the threshold, the query formed each way.

The threshold is the packaged calibration's unless `--threshold` names one. The one-retrieval row also prints the
threshold at which `--uncertain-share` of its sentences would be uncertain (from their token probabilities): how the
packaged `flare_threshold` was drawn, on another seed.

Columns: answered (not abstained); sentences per answer (in brackets, those with content: `CONTENT_WORDS` words or
more); supported (the share of answer sentences whose grader score against the best-scoring passage the answer cites
is at least `reranker_threshold`; every variant cites every passage of its context; in brackets, among sentences
with content: the grader scores a sentence with nothing in it high against any passage); ROUGE-L F1 against the
reference answer (an abstention scores 0); latency per answer (mean, P50; the questions run interleaved, each under
every variant in turn, llama.cpp's prompt cache emptied before each); chat-model calls per answer (drafts and
questions: the cost that does not depend on the machine's load); active retrievals per answer and what they did.
Writes `flare.json` (every answer) and `flare.md`.
"""

from __future__ import annotations

import argparse
import os
import random
import re
import statistics
import sys
import time
from collections import Counter
from collections.abc import Sequence
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parents[2]
sys.path.insert(0, str(ROOT / "src"))  # the project's own code, installed or not

from fastcrag.config.settings import SMOLLM2_LLM  # noqa: E402
from fastcrag.fileio import write_json_atomic, write_text_atomic  # noqa: E402
from fastcrag.generation.flare import sentences_of  # noqa: E402
from lab.data import SHARED_DATA  # noqa: E402
from lab.scripts.fit_trial import medquad  # noqa: E402

CONTENT_WORDS = 5
"""A sentence with fewer words ("1.", "The answer to this question is:") says nothing to support."""
MIN_REFERENCE_SENTENCES = 3
"""A question is asked only when its reference answer is long-form: at least this many sentences."""
VARIANTS = ("one retrieval", "flare masked", "flare question")
_TOKEN = re.compile(r"\w+")


def rouge_l(candidate: str, reference: str) -> float:
    """ROUGE-L F1 (Lin 2004, beta 1) over lower-cased word tokens: the longest common subsequence's F-measure."""
    a, b = _TOKEN.findall(candidate.lower()), _TOKEN.findall(reference.lower())
    if not a or not b:
        return 0.0
    previous = [0] * (len(b) + 1)
    for x in a:
        current = [0]
        for j, y in enumerate(b, 1):
            current.append(previous[j - 1] + 1 if x == y else max(previous[j], current[j - 1]))
        previous = current
    lcs = previous[-1]
    if lcs == 0:
        return 0.0
    precision, recall = lcs / len(a), lcs / len(b)
    return 2 * precision * recall / (precision + recall)


def focus_of(name: str) -> str:
    """The focus of an answer document (`<source>-<focus id>-<n>-<question type>`)."""
    return "-".join(name.split("-")[:2])


def pick_questions(count: int, seed: int, data: Path) -> tuple[dict[str, str], list[tuple[str, str, str]]]:
    """The corpus (name -> text) and `count` (question, reference answer, answer document) triples, one per focus."""
    docs, questions = medquad(data, count * 3, seed)  # more foci than questions: some have no long answer
    by_focus: dict[str, list[Any]] = {}
    for q in questions:
        reference = docs[q.doc].partition("\n\n")[2]
        if len(sentences_of(reference, [])) >= MIN_REFERENCE_SENTENCES:
            by_focus.setdefault(focus_of(q.doc), []).append((q.question, reference, q.doc))
    rng = random.Random(seed)
    foci = sorted(by_focus)[: count * 2]
    rng.shuffle(foci)
    chosen = [rng.choice(by_focus[f]) for f in foci[:count]]
    keep = set(foci[:count])
    corpus = {name: text for name, text in docs.items() if focus_of(name) in keep}
    return corpus, chosen


def build_index(corpus: dict[str, str], folder: Path) -> None:
    """Index the corpus into a FAISS folder (once)."""
    from fastcrag.retrieval.indexing import build_index as build
    from fastcrag.retrieval.loaders import SourceDocument

    if folder.is_dir():
        return
    docs = [SourceDocument(source=f"medquad/{name}", title="", text=text) for name, text in sorted(corpus.items())]
    build(docs, folder, progress=False)


def is_content(sentence: str) -> bool:
    """Whether a sentence says something: at least `CONTENT_WORDS` words with a letter ("1.", "The answer is:" do not).

    The grader scores a query with nothing in it high against any passage, so "supported" counts such sentences too.
    """
    return sum(1 for w in _TOKEN.findall(sentence) if any(c.isalpha() for c in w)) >= CONTENT_WORDS


def supported(reranker: Any, sentences: Sequence[str], passages: Sequence[str], threshold: float) -> list[bool]:
    """Whether each sentence scores at least `threshold` against the best-scoring of `passages`."""
    if not passages:
        return [False] * len(sentences)
    return [max(reranker.score(s, list(passages))) >= threshold for s in sentences]


def word_minimum(sentence: Any) -> float:
    """The lowest probability among a drafted sentence's word tokens (1 when it has none)."""
    return min((p for t, p in zip(sentence["tokens"], sentence["probs"], strict=True) if _TOKEN.search(t)), default=1.0)


def summarise(records: Sequence[dict[str, Any]]) -> dict[str, Any]:
    """One variant's row."""
    answered = [r for r in records if not r["abstained"]]
    marks = [m for r in answered for m in r["supported"]]
    content = [m for r in answered for s, m in zip(r["sentences"], r["supported"], strict=True) if is_content(s)]
    latencies = [r["latency_s"] for r in records]
    actions = Counter(a["action"] for r in records for a in r["flare"])
    return {
        "questions": len(records),
        "answered": len(answered),
        "sentences_per_answer": statistics.fmean(len(r["sentences"]) for r in answered) if answered else 0.0,
        "supported": sum(marks) / len(marks) if marks else None,
        "content_sentences_per_answer": len(content) / len(answered) if answered else 0.0,
        "content_supported": sum(content) / len(content) if content else None,
        "rouge_l": statistics.fmean(r["rouge_l"] for r in records) if records else 0.0,
        "rouge_l_answered": statistics.fmean(r["rouge_l"] for r in answered) if answered else None,
        "latency_mean_s": statistics.fmean(latencies) if latencies else 0.0,
        "latency_p50_s": statistics.median(latencies) if latencies else 0.0,
        "retrievals_per_answer": statistics.fmean(len(r["flare"]) for r in records) if records else 0.0,
        "chat_calls_per_answer": statistics.fmean(r["chat_calls"] for r in records) if records else 0.0,
        "actions": dict(actions),
    }


def table(rows: dict[str, dict[str, Any]], threshold: float) -> str:
    """The markdown table of the rows."""
    lines = [
        f"flare_threshold {threshold:g}",
        "",
        "| variant | answered | sentences/answer (with content) | supported (content sentences) | ROUGE-L F1 (all / "
        "answered) | latency mean / P50 (s) | chat-model calls/answer | active retrievals/answer | actions |",
        "|---|---|---|---|---|---|---|---|---|",
    ]
    for name, r in rows.items():
        sup = "n/a" if r["supported"] is None else f"{r['supported']:.3f}"
        sup += " (n/a)" if r["content_supported"] is None else f" ({r['content_supported']:.3f})"
        answered_rouge = "n/a" if r["rouge_l_answered"] is None else f"{r['rouge_l_answered']:.3f}"
        actions = ", ".join(f"{k} {v}" for k, v in sorted(r["actions"].items())) or "-"
        lines.append(
            f"| {name} | {r['answered']}/{r['questions']} | {r['sentences_per_answer']:.2f} "
            f"({r['content_sentences_per_answer']:.2f}) | {sup} | "
            f"{r['rouge_l']:.3f} / {answered_rouge} | {r['latency_mean_s']:.1f} / {r['latency_p50_s']:.1f} | "
            f"{r['chat_calls_per_answer']:.2f} | {r['retrievals_per_answer']:.2f} | {actions} |"
        )
    return "\n".join(lines) + "\n"


def logprob_cost(repeats: int = 3) -> str:
    """One draft of SmolLM2 three ways: no log-probabilities, fastcrag's logits processor, llama-cpp-python's own.

    llama-cpp-python returns `logprobs` only from a model loaded with `logits_all` (every position's logits kept).
    """
    from llama_cpp import Llama

    from fastcrag.generation.chat import _ROLES, _TokenLogprobs, packaged_smollm2
    from fastcrag.generation.prompts import draft_messages

    passage = (
        "Liddle syndrome is an inherited form of high blood pressure (hypertension). This condition is characterized "
        "by severe hypertension that begins unusually early in life, often in childhood, although some affected "
        "individuals are not diagnosed until adulthood. "
    ) * 3
    messages = draft_messages("What is Liddle syndrome?", [{"text": passage, "source": f"d{i}"} for i in range(3)], [])
    payload = [{"role": _ROLES.get(m.type, "user"), "content": str(m.content)} for m in messages]
    options: dict[str, Any] = {"messages": payload, "max_tokens": 64, "temperature": 0.0, "repeat_penalty": 1.3}
    path = str(packaged_smollm2())
    plain: Any = Llama(model_path=path, n_ctx=2048, n_threads=2, seed=0, verbose=False)
    full: Any = Llama(model_path=path, n_ctx=2048, n_threads=2, seed=0, verbose=False, logits_all=True)
    times: dict[str, list[float]] = {"no log-probabilities": [], "logits processor": [], "logits_all": []}
    usage: dict[str, Any] = {}
    for _ in range(repeats):
        for name, seconds in times.items():
            for model in (plain, full):
                model.reset()
            started = time.perf_counter()
            if name == "logits_all":
                out = full.create_chat_completion(**options, logprobs=True, top_logprobs=1)
            else:
                recorder = _TokenLogprobs() if name == "logits processor" else None
                out = plain.create_chat_completion(**options, logits_processor=[recorder] if recorder else None)
                if recorder is not None:
                    recorder.content(plain)
            seconds.append(time.perf_counter() - started)
            usage = dict(out["usage"])
    medians = ", ".join(f"{name} {statistics.median(v):.2f} s" for name, v in times.items())
    return (
        f"one draft ({usage['prompt_tokens']} prompt tokens, {usage['completion_tokens']} written), median of "
        f"{repeats}: {medians}"
    )


def main(argv: Sequence[str] | None = None) -> None:
    """Run the measurement."""
    p = argparse.ArgumentParser(prog="python -m lab.scripts.flare_measure", description=__doc__.split("\n")[0])
    p.add_argument("--out", type=Path, help="output folder (its index is reused)")
    p.add_argument("--logprob-cost", action="store_true", help="only time one draft with and without log-probabilities")
    p.add_argument("--data", type=Path, default=ROOT / SHARED_DATA)
    p.add_argument("--questions", type=int, default=30)
    p.add_argument("--seed", type=int, default=11)
    p.add_argument("--llm", default=SMOLLM2_LLM, help="the chat model (`provider:model`); %(default)s")
    p.add_argument("--max-new-tokens", type=int, default=96, help="per draft (%(default)s)")
    p.add_argument("--threshold", type=float, default=None, help="flare_threshold (default: the packaged one)")
    p.add_argument("--variants", default=",".join(VARIANTS), help="comma-separated, of: " + ", ".join(VARIANTS))
    p.add_argument("--uncertain-share", type=float, default=0.5, help="--calibrate's target share (%(default)s)")
    a = p.parse_args(argv)
    os.environ.setdefault("HF_HUB_OFFLINE", "1")
    if a.logprob_cost:
        print(logprob_cost())
        return
    if a.out is None:
        p.error("--out is required")
    variants = [v.strip() for v in a.variants.split(",") if v.strip()]
    if unknown := set(variants) - set(VARIANTS):
        raise SystemExit(f"unknown variants: {sorted(unknown)}")

    from langchain_core.runnables import RunnableConfig
    from langgraph.checkpoint.memory import InMemorySaver

    from fastcrag.components import Components
    from fastcrag.config.settings import Context, Settings
    from fastcrag.generation.chat import LlamaCppChat
    from fastcrag.graph.builder import build_graph

    out = a.out.resolve()
    out.mkdir(parents=True, exist_ok=True)
    started = time.perf_counter()
    corpus, asked = pick_questions(a.questions, a.seed, a.data)
    build_index(corpus, out / "index")
    print(f"{len(corpus)} answer documents, {len(asked)} questions; indexed in {time.perf_counter() - started:.0f} s")
    parts = Components(
        Settings(index_dir=out / "index", llm=a.llm, max_new_tokens=a.max_new_tokens, llm_timeout_s=300.0)
    )
    parts.warm_up()
    graph = build_graph(parts=parts, checkpointer=InMemorySaver())
    writer = parts.writer()
    drafted: list[Any] = []
    calls = Counter[str]()
    draft, span_question = writer.draft, writer.span_question

    def recording(question: str, passages: Any, prefix: Any) -> Any:
        calls["draft"] += 1
        sentences = draft(question, passages, prefix)
        drafted.extend(sentences)
        return sentences

    def counting(question: str, marked_sentence: str) -> str:
        calls["question"] += 1
        return span_question(question, marked_sentence)

    writer.draft = recording  # type: ignore[method-assign]
    writer.span_question = counting  # type: ignore[method-assign]
    llm = getattr(parts.generator(), "llm", None)

    def cold() -> None:
        """Forget llama.cpp's last prompt (the variants share their first draft's: a reused prefix is faster)."""
        if isinstance(llm, LlamaCppChat):
            llm._llama.get().reset()  # the lab may reach inside: the package never does

    cfg = parts.run_config(None)
    threshold = cfg.flare_threshold if a.threshold is None else a.threshold
    reranker = parts.reranker()
    contexts = {
        "one retrieval": Context(mode="flare", flare_threshold=0.0),
        "flare masked": Context(mode="flare", flare_query="masked", flare_threshold=threshold),
        "flare question": Context(mode="flare", flare_query="question", flare_threshold=threshold),
    }
    records: dict[str, list[dict[str, Any]]] = {}
    first_drafts: list[float] = []
    # interleaved (each question under every variant in turn), so that the load of a shared machine falls on all alike
    for i, (question, reference, name) in enumerate(asked):
        for variant in variants:
            rows = records.setdefault(variant, [])
            config: RunnableConfig = {"configurable": {"thread_id": f"{variant}-{i}"}}
            drafted.clear()
            calls.clear()
            cold()
            t0 = time.perf_counter()
            result: dict[str, Any] = graph.invoke({"question": question}, config, context=contexts[variant])
            latency = time.perf_counter() - t0
            if variant == "one retrieval":
                first_drafts.extend(word_minimum(s) for s in drafted)
            crag = result["crag"]
            abstained = crag["action"] == "abstain"
            sentences = [] if abstained else [s["text"] for s in sentences_of(result["answer"], [])]
            context = graph.get_state(config).values.get("context") or []
            rows.append(
                {
                    "question": question,
                    "doc": name,
                    "answer": result["answer"],
                    "abstained": abstained,
                    "failure": crag.get("failure"),
                    "sentences": sentences,
                    "supported": supported(reranker, sentences, [p["text"] for p in context], cfg.reranker_threshold),
                    "rouge_l": 0.0 if abstained else rouge_l(result["answer"], reference),
                    "latency_s": round(latency, 3),
                    "chat_calls": sum(calls.values()),
                    "flare": crag.get("flare") or [],
                    "flare_stop": crag.get("flare_stop"),
                    "cited": [c["chunk_id"] for c in result["citations"]],
                }
            )
            print(f"{i + 1:>3}/{len(asked)} {variant:>14} {latency:5.1f} s  {result['answer'][:90]!r}", flush=True)
    summary = {name: summarise(rows) for name, rows in records.items()}
    report = {
        "llm": a.llm,
        "questions": a.questions,
        "seed": a.seed,
        "max_new_tokens": a.max_new_tokens,
        "flare_threshold": threshold,
        "reranker_threshold": cfg.reranker_threshold,
        "documents": len(corpus),
        "summary": summary,
        "records": records,
        "minutes": round((time.perf_counter() - started) / 60, 1),
    }
    text = table(summary, threshold)
    if first_drafts:
        ordered = sorted(first_drafts)
        share = a.uncertain_share
        at = ordered[min(len(ordered) - 1, int(share * len(ordered)))]
        quantiles = {q: ordered[min(len(ordered) - 1, int(q * len(ordered)))] for q in (0.1, 0.25, 0.5, 0.75, 0.9)}
        report["first_draft_sentences"] = len(ordered)
        report["word_minimum_quantiles"] = quantiles
        report["calibrated_threshold"] = at
        below = sum(1 for v in ordered if v < threshold) / len(ordered)
        text += (
            f"\nFirst drafts: {len(ordered)} sentences; lowest word-token probability per sentence, quantiles "
            + ", ".join(f"{q:g}: {v:.3f}" for q, v in quantiles.items())
            + f". At flare_threshold {threshold:g}, {below:.0%} of them are uncertain; {share:.0%} would be at "
            f"{at:.3f}.\n"
        )
    write_json_atomic(out / "flare.json", report)
    write_text_atomic(out / "flare.md", text)
    print(text)
    print(f"{report['minutes']} minutes; {out / 'flare.json'}")


if __name__ == "__main__":
    main()
