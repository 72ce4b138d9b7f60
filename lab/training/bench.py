"""Quality (AUC, nDCG@10, strip accuracy) and speed (P50/P95) benchmarks of graders against baselines."""

from __future__ import annotations

import json
import os
import random
import re
import statistics
import time
from collections.abc import Callable, Sequence
from functools import partial
from pathlib import Path
from typing import Any

from fastcrag.fitting.mix import (
    Article,
    answer_sentence_index,
    contains_any,
    load_beir,
    load_squad,
    read_pairs,
    sentence_windows,
    squad11_articles,
)
from fastcrag.grading.onnx_grader import OnnxCrossEncoderReranker
from fastcrag.grading.reranker import CrossEncoderReranker, default_reranker_spec, load_reranker
from fastcrag.measures import auc, ndcg_at_k, percentile
from fastcrag.retrieval.embeddings import SentenceTransformerEmbeddings, packaged_minilm_path
from fastcrag.retrieval.loaders import python_reference
from fastcrag.retrieval.text import split_sentences
from lab.training.pool import heldout_squad_articles

os.environ.setdefault("HF_HUB_OFFLINE", "1")
os.environ.setdefault("TRANSFORMERS_OFFLINE", "1")

_TOKEN_RE = re.compile(r"\w+")
#: The blocks of `quality_benchmark`, in the order they run.
SECTIONS = ("squad2", "strip", "scifact")


# ------------------------------------------------------------------------------------------------ metrics


def bm25_tokens(text: str) -> list[str]:
    """Lower-cased word tokens minus English stop words, for BM25."""
    from sklearn.feature_extraction.text import ENGLISH_STOP_WORDS

    return [t for t in _TOKEN_RE.findall(text.lower()) if t not in ENGLISH_STOP_WORDS]


def _bm25(docs: Sequence[str]) -> Any:
    from rank_bm25 import BM25Okapi

    return BM25Okapi([bm25_tokens(d) or ["_"] for d in docs], k1=0.9, b=0.4)


# ------------------------------------------------------------------------------------------------ quality


def _sample(items: Sequence[Any], n: int, seed: int) -> list[Any]:
    items = list(items)
    random.Random(seed).shuffle(items)
    return items[:n]


def _first10_titles(data_root: Path) -> set[str]:
    path = data_root / "train" / "squad2-train-first10" / "train-v2.0.json"
    return {a.title for a in load_squad(path)} if path.exists() else set()


def _cached_embeddings(emb: Any, texts: list[str], cache: Path | None) -> Any:
    """Embed texts, reusing an `.npy` cache keyed by the texts' hash (no pickle)."""
    import hashlib

    import numpy as np

    key = hashlib.sha1("\x1e".join(texts).encode("utf-8")).hexdigest()[:16]
    if cache is not None:
        path = cache / f"emb-{emb.name}-{key}.npy"
        if path.exists():
            return np.load(path, allow_pickle=False)
    vecs = emb.encode(texts)
    if cache is not None:
        cache.mkdir(parents=True, exist_ok=True)
        np.save(path, vecs, allow_pickle=False)
    return vecs


def _logit(p: Any) -> Any:
    import numpy as np

    q = np.clip(np.asarray(p, dtype=np.float64), 1e-6, 1 - 1e-6)
    return np.log(q / (1 - q))


def fit_fusion(reranker: Any, emb: Any, pairs_path: Path) -> tuple[float, float, float]:
    """Fit sigmoid(a * logit(grader) + b * cosine + c) by logistic regression on labelled held-out pairs.

    `pairs_path` is a training run's `pool/dev.jsonl` (documents never trained on); the cosine is the
    bi-encoder's, which retrieval already computes. Returns (a, b, c).
    """
    import numpy as np
    from sklearn.linear_model import LogisticRegression

    pairs = read_pairs(pairs_path)
    ce = np.concatenate([reranker.score(p.question, [p.passage]) for p in pairs])
    q = emb.encode([p.question for p in pairs])
    d = emb.encode([p.passage for p in pairs])
    x = np.stack([_logit(ce), (q * d).sum(axis=1)], axis=1)
    y = np.asarray([p.label for p in pairs])
    lr = LogisticRegression(C=10.0).fit(x, y)
    a, b = (float(v) for v in lr.coef_[0])
    return a, b, float(lr.intercept_[0])


def fused(scores: Sequence[float], cosines: Sequence[float], w: tuple[float, float, float]) -> list[float]:
    """The fused score of `fit_fusion`'s weights for grader scores and bi-encoder cosines."""
    import numpy as np

    z = w[0] * _logit(scores) + w[1] * np.asarray(cosines, dtype=np.float64) + w[2]
    return [float(v) for v in 1 / (1 + np.exp(-z))]


def snippet_windows(text: str) -> list[str]:
    """Every single sentence and every pair of adjacent sentences of `text`, in reading order.

    A text of n sentences gives 2n - 1 windows (one sentence gives itself); an empty text gives none.
    """
    sents = split_sentences(text)
    return [" ".join(sents[a:b]) for a, b in sentence_windows(sents)]


def gold_removed_candidates(paragraphs: Sequence[str], gold: int, answers: Sequence[str]) -> list[int]:
    """Indices of an article's paragraphs other than `gold` that hold none of the gold answer strings."""
    return [i for i, p in enumerate(paragraphs) if i != gold and not contains_any(p, answers)]


def _candidate_scores(
    rerankers: dict[str, Any],
    fusion: dict[str, tuple[float, float, float]],
    queries: Sequence[str],
    texts: Sequence[Sequence[str]],
    cosines: Sequence[Any],
    label: str,
    progress: Callable[[str], None],
) -> dict[str, list[list[float]]]:
    """Every candidate's score per column: the bi-encoder cosine, each grader and, with fusion, its `+bi`.

    `texts[i]` are query i's candidates (never empty) and `cosines[i]` their bi-encoder cosines.
    """
    out: dict[str, list[list[float]]] = {"bi-encoder": [[float(c) for c in cs] for cs in cosines]}
    for spec, rr in rerankers.items():
        t0 = time.time()
        raw = [[float(v) for v in rr.score(q, list(ts))] for q, ts in zip(queries, texts, strict=True)]
        out[rr.name] = raw
        if spec in fusion:
            out[f"{rr.name}+bi"] = [fused(sc, cs, fusion[spec]) for sc, cs in zip(raw, cosines, strict=True)]
        progress(f"  {rr.name}: {label} scored in {time.time() - t0:.0f}s")
    return out


def quality_benchmark(
    graders: Sequence[str],
    data_root: Path,
    *,
    fusion_pairs: Path | None = None,
    per_class: int = 400,
    scifact_depth: int = 100,
    scifact_claims: int = 0,
    threads: int = 2,
    dev_percent: float = 5.0,
    seed: int = 0,
    cache_dir: Path | None = Path("runs/cache"),
    progress: Callable[[str], None] = print,
    sections: Sequence[str] = SECTIONS,
) -> dict[str, dict[str, float]]:
    """Print and return the quality table: rows = measures, columns = baselines and graders.

    Measures: (1) squad2-dev, corpus = its paragraphs, bi-encoder top-20 reranked, score = top score: AUC
    answerable vs off-corpus (held-out SQuAD 1.1 articles of the dev split), AUC answerable vs
    unanswerable, AUC answerable vs gold-removed (the same answerable questions asked of their own
    article without the gold paragraph: candidates = the bi-encoder's top 20 of the article's other
    paragraphs that hold no gold answer string, so every candidate is on topic and none answers), gold
    paragraph first; (2) snippets: the same four classes, each question's first 5 candidate paragraphs
    cut into windows of one or two adjacent sentences (`snippet_windows`), score = top snippet score,
    AUC answerable vs unanswerable, vs gold-removed and vs off-corpus; (3) strip scoring: share of
    held-out SQuAD 1.1 questions whose answer sentence ranks first among its paragraph's sentences (cut by the
    refine node's splitter; `strip_questions`);
    (4) SciFact test nDCG@10 reranking the bi-encoder's top `scifact_depth`. The bi-encoder column
    scores by cosine (top cosine over the candidates or snippets). With `fusion_pairs` (a training run's
    `pool/dev.jsonl`), each grader also gets a `+bi` column: its logit and the bi-encoder cosine
    combined by `fit_fusion`. `sections` picks the blocks measured: `squad2` (paragraphs and snippets),
    `strip` and `scifact` (all three by default).

    Raises:
        ValueError: an unknown section.
    """
    import torch  # the bi-encoder baseline runs on torch; loaded when the benchmark runs

    torch.set_num_threads(threads)
    os.environ.setdefault("FASTRAG_ORT_THREADS", str(threads))
    specs = list(graders) or [default_reranker_spec()]
    rerankers = {spec: load_reranker(spec) for spec in specs}
    table: dict[str, dict[str, float]] = {}
    emb = SentenceTransformerEmbeddings()
    t_start = time.time()
    fusion: dict[str, tuple[float, float, float]] = {}
    if fusion_pairs is not None:
        for spec, rr in rerankers.items():
            fusion[spec] = fit_fusion(rr, emb, fusion_pairs)
            progress(
                f"  {rr.name}+bi: sigmoid({fusion[spec][0]:.3f}*logit + {fusion[spec][1]:.3f}*cos "
                f"+ {fusion[spec][2]:.3f}) fitted on {fusion_pairs}"
            )
    cols = ["bi-encoder", "BM25"]
    for spec, rr in rerankers.items():
        cols += [rr.name, f"{rr.name}+bi"] if spec in fusion else [rr.name]

    unknown = sorted(set(sections) - set(SECTIONS))
    if unknown:
        raise ValueError(f"unknown section(s) {', '.join(unknown)}; choose from {', '.join(SECTIONS)}")
    sq11 = squad11_articles(data_root)
    held: list[Article] = heldout_squad_articles(sq11, dev_percent, _first10_titles(data_root))
    if "squad2" in sections:
        _squad2_rows(table, rerankers, fusion, emb, data_root, held, cols, per_class, seed, cache_dir, progress)
    if "strip" in sections:
        name, row = _strip_row(rerankers, fusion, emb, held, per_class, seed)
        table[name] = row
    if "scifact" in sections:
        name, row = _scifact_row(rerankers, fusion, emb, data_root, scifact_depth, scifact_claims, cache_dir, progress)
        table[name] = row

    print_table(table, cols)
    progress(f"quality benchmark took {time.time() - t_start:.0f}s")
    return table


def strip_questions(articles: Sequence[Article], n: int, seed: int) -> list[tuple[str, list[str], int]]:
    """The strip-scoring sample: (question, its paragraph's sentences, index of the answer sentence).

    The articles' questions are shuffled by `seed` first and the first `n` whose answer stands in one sentence of
    a paragraph of two or more sentences are kept, so a change of sentence splitter keeps nearly the same
    questions. Sentences are cut by the refine node's splitter (`fastcrag.retrieval.text.split_sentences`).
    """
    items = [(item, a.paragraphs[item.paragraph]) for a in articles for item in a.questions]
    random.Random(seed).shuffle(items)
    out: list[tuple[str, list[str], int]] = []
    for item, paragraph in items:
        sents = split_sentences(paragraph)
        where = answer_sentence_index(sents, item.answers)
        if where is not None and len(sents) > 1:
            out.append((item.question, sents, where))
            if len(out) == n:
                break
    return out


def _squad2_rows(
    table: dict[str, dict[str, float]],
    rerankers: dict[str, Any],
    fusion: dict[str, tuple[float, float, float]],
    emb: Any,
    data_root: Path,
    held: Sequence[Article],
    cols: Sequence[str],
    per_class: int,
    seed: int,
    cache_dir: Path | None,
    progress: Callable[[str], None],
) -> None:
    """Add the squad2-dev paragraph and snippet rows to `table` (see `quality_benchmark`)."""
    import numpy as np

    dev_articles = load_squad(next((data_root / "squad2-dev").glob("*.json")))
    paras: list[str] = []
    gold_of: dict[tuple[int, int], int] = {}
    span_of: list[tuple[int, int]] = []  # global paragraph index -> its article's [start, end)
    for ai, a in enumerate(dev_articles):
        a0 = len(paras)
        for pi, p in enumerate(a.paragraphs):
            gold_of[(ai, pi)] = len(paras)
            paras.append(p)
        span_of += [(a0, len(paras))] * len(a.paragraphs)
    ans = [
        (q.question, gold_of[(ai, q.paragraph)], q.answers)
        for ai, a in enumerate(dev_articles)
        for q in a.questions
        if not q.impossible
    ]
    unans = [q.question for a in dev_articles for q in a.questions if q.impossible]
    off = [q.question for a in held for q in a.questions]
    ans = _sample(ans, per_class, seed)
    unans = _sample(unans, per_class, seed + 1)
    off = _sample(off, per_class, seed + 2)
    pvec = _cached_embeddings(emb, paras, cache_dir)
    queries = [q for q, _, _ in ans] + unans + off
    qvec = emb.encode(queries)
    sims = qvec @ pvec.T
    top20 = np.argsort(-sims, axis=1)[:, :20]
    # per scored row: its query's row in `sims` and its candidate paragraphs, best cosine first; the
    # gold-removed rows come last and reuse the answerable questions' rows
    q_row = list(range(len(queries)))
    cand_ids: list[list[int]] = [[int(j) for j in top20[i]] for i in range(len(queries))]
    for i, (_, g, answers) in enumerate(ans):
        a0, a1 = span_of[g]
        pool = np.asarray([a0 + k for k in gold_removed_candidates(paras[a0:a1], g - a0, answers)], dtype=np.int64)
        if pool.size:
            q_row.append(i)
            cand_ids.append([int(j) for j in pool[np.argsort(-sims[i, pool], kind="stable")][:20]])
    n_a, n_u, n_q = len(ans), len(unans), len(queries)
    n_g = len(q_row) - n_q
    classes = {
        "answerable": slice(0, n_a),
        "unanswerable": slice(n_a, n_a + n_u),
        "off-corpus": slice(n_a + n_u, n_q),
        "gold-removed": slice(n_q, n_q + n_g),
    }
    progress(
        f"squad2-dev: {len(paras)} paragraphs; {n_a} answerable, {n_u} unanswerable, {len(off)} off-corpus "
        f"questions from {len(held)} held-out SQuAD 1.1 articles; {n_g} gold-removed"
    )
    row_queries = [queries[r] for r in q_row]

    def aucs(scores: dict[str, list[list[float]]], prefix: str, negatives: Sequence[str]) -> None:
        tops = {col: [max(sc) for sc in per_q] for col, per_q in scores.items()}
        for neg in negatives:
            table[f"{prefix}AUC answerable vs {neg}"] = {
                col: auc(t[classes["answerable"]], t[classes[neg]]) for col, t in tops.items()
            }

    para_scores = _candidate_scores(
        rerankers,
        fusion,
        row_queries,
        [[paras[j] for j in c] for c in cand_ids],
        [sims[r, c] for r, c in zip(q_row, cand_ids, strict=True)],
        "squad2-dev paragraphs",
        progress,
    )
    aucs(para_scores, "squad2-dev ", ["off-corpus", "unanswerable", "gold-removed"])
    table["squad2-dev gold paragraph first (answerable)"] = {
        col: float(np.mean([cand_ids[i][int(np.argmax(per_q[i]))] == g for i, (_, g, _) in enumerate(ans)]))
        for col, per_q in para_scores.items()
    }
    print_table(table, [c for c in cols if c != "BM25"])  # the paragraph rows now: the later blocks take long

    # snippets: windows of one or two sentences of each row's first 5 candidate paragraphs
    snips: list[str] = []
    snip_ids: list[list[int]] = []  # paragraph index -> its windows' indices in `snips`
    for p in paras:
        w = snippet_windows(p) or [p]
        snip_ids.append(list(range(len(snips), len(snips) + len(w))))
        snips += w
    svec = _cached_embeddings(emb, snips, cache_dir)
    row_snips = [[s for j in c[:5] for s in snip_ids[j]] for c in cand_ids]
    progress(f"  snippets: {len(snips)} windows of {len(paras)} paragraphs")
    snip_scores = _candidate_scores(
        rerankers,
        fusion,
        row_queries,
        [[snips[s] for s in ids] for ids in row_snips],
        [svec[ids] @ qvec[r] for r, ids in zip(q_row, row_snips, strict=True)],
        "squad2-dev snippets",
        progress,
    )
    aucs(snip_scores, "snippets: ", ["unanswerable", "gold-removed", "off-corpus"])
    print_table({k: v for k, v in table.items() if k.startswith("snippets: ")}, [c for c in cols if c != "BM25"])


def _strip_row(
    rerankers: dict[str, Any],
    fusion: dict[str, tuple[float, float, float]],
    emb: Any,
    held: Sequence[Article],
    per_class: int,
    seed: int,
) -> tuple[str, dict[str, float]]:
    """The strip-scoring row: share of held-out questions whose answer sentence ranks first (see `strip_questions`)."""
    import numpy as np

    strips = strip_questions(held, per_class, seed + 3)
    row: dict[str, float] = {}
    strip_cos = []
    for q, sents, _ in strips:
        v = emb.encode([q, *sents])
        strip_cos.append(v[1:] @ v[0])
    row["bi-encoder"] = float(np.mean([int(np.argmax(c)) == k for c, (_, _, k) in zip(strip_cos, strips, strict=True)]))
    hits = []
    for q, sents, k in strips:
        bm = _bm25(sents).get_scores(bm25_tokens(q))
        hits.append(int(np.argmax(bm)) == k)
    row["BM25"] = float(np.mean(hits))
    for spec, rr in rerankers.items():
        raw = [rr.score(q, s) for q, s, _ in strips]
        row[rr.name] = float(np.mean([int(np.argmax(sc)) == k for sc, (_, _, k) in zip(raw, strips, strict=True)]))
        if spec in fusion:
            hits = [
                int(np.argmax(fused(sc, c, fusion[spec]))) == k
                for sc, c, (_, _, k) in zip(raw, strip_cos, strips, strict=True)
            ]
            row[f"{rr.name}+bi"] = float(np.mean(hits))
    return f"strip: answer sentence first ({len(strips)} held-out q)", row


def _scifact_row(
    rerankers: dict[str, Any],
    fusion: dict[str, tuple[float, float, float]],
    emb: Any,
    data_root: Path,
    scifact_depth: int,
    scifact_claims: int,
    cache_dir: Path | None,
    progress: Callable[[str], None],
) -> tuple[str, dict[str, float]]:
    """SciFact test nDCG@10 of reranking the bi-encoder's top `scifact_depth` (BM25 ranks the whole corpus)."""
    import numpy as np

    corpus, claims, qrels = load_beir(data_root / "scifact", "test")
    doc_ids = sorted(corpus)
    qids = sorted(claims, key=lambda x: int(x) if x.isdigit() else x)
    if scifact_claims:
        qids = qids[:scifact_claims]
    progress(f"scifact: {len(doc_ids)} abstracts, {len(qids)} test claims, reranking top {scifact_depth}")
    dvec = _cached_embeddings(emb, [corpus[d] for d in doc_ids], cache_dir)
    cvec = emb.encode([claims[q] for q in qids])
    csims = cvec @ dvec.T
    top = np.argsort(-csims, axis=1)[:, :scifact_depth]
    bm = _bm25([corpus[d] for d in doc_ids])
    sf: dict[str, float] = {}
    sf["bi-encoder"] = float(np.mean([ndcg_at_k([doc_ids[j] for j in top[i]], qrels[q]) for i, q in enumerate(qids)]))
    bm_scores = [bm.get_scores(bm25_tokens(claims[q])) for q in qids]
    sf["BM25"] = float(
        np.mean(
            [
                ndcg_at_k([doc_ids[j] for j in np.argsort(-s)[:10]], qrels[q])
                for s, q in zip(bm_scores, qids, strict=True)
            ]
        )
    )
    for spec, rr in rerankers.items():
        t0 = time.time()
        raw = [rr.score(claims[qid], [corpus[doc_ids[j]] for j in top[i]]) for i, qid in enumerate(qids)]
        variants = {rr.name: raw}
        if spec in fusion:
            variants[f"{rr.name}+bi"] = [fused(sc, csims[i, top[i]], fusion[spec]) for i, sc in enumerate(raw)]
        for col, all_scores in variants.items():
            vals = []
            for i, qid in enumerate(qids):
                order = np.argsort(-np.asarray(all_scores[i]), kind="stable")
                vals.append(ndcg_at_k([doc_ids[top[i][j]] for j in order], qrels[qid]))
            sf[col] = float(np.mean(vals))
        progress(f"  {rr.name}: scifact reranked in {time.time() - t0:.0f}s")
    return f"SciFact test nDCG@10 (rerank bi-encoder top {scifact_depth})", sf


def print_table(table: dict[str, dict[str, float]], cols: Sequence[str]) -> None:
    """Print a measures x columns table in Markdown; '-' where a column does not apply."""
    width = max(len(r) for r in table)
    w = {c: max(len(c), 5) for c in cols}
    print()
    print("| " + "measure".ljust(width) + " | " + " | ".join(c.rjust(w[c]) for c in cols) + " |")
    print("|" + "-" * (width + 2) + "|" + "|".join("-" * (w[c] + 2) for c in cols) + "|")
    for r, vals in table.items():
        cells = [f"{vals[c]:.3f}".rjust(w[c]) if c in vals else "-".rjust(w[c]) for c in cols]
        print("| " + r.ljust(width) + " | " + " | ".join(cells) + " |")
    print()


# -------------------------------------------------------------------------------------------------- speed


class _TorchBf16Reranker:
    """The sentence-transformers model run under bfloat16 autocast (timing variant)."""

    def __init__(self, path: Path, max_length: int = 256) -> None:

        self.inner = CrossEncoderReranker(path, max_length=max_length)
        self.name = self.inner.name + " [torch bf16]"

    def score(self, query: str, texts: Sequence[str]) -> list[float]:
        import torch

        with torch.autocast("cpu", dtype=torch.bfloat16):
            return self.inner.score(query, texts)


def _texts_of_length(tokenizer: Any, n_tokens: int, count: int) -> list[str]:
    """`count` different passages of `n_tokens` word pieces each, cut from the embedded Python-reference corpus.

    Every passage is distinct: the graders cache results per (query, passage), so repeated passages would be
    scored once and make the timing look faster than real reranking.
    """
    ids: list[int] = []
    for doc in python_reference():
        ids += tokenizer.encode(doc.text, add_special_tokens=False)
        if len(ids) >= n_tokens * count * 2:
            break
    step = max(n_tokens, (len(ids) - n_tokens) // max(1, count))
    out = list(dict.fromkeys(tokenizer.decode(ids[i * step : i * step + n_tokens]) for i in range(count)))
    if len(out) < count:
        raise ValueError(f"could not cut {count} distinct passages of {n_tokens} tokens")
    return out


def _time(fn: Callable[[], Any], repeats: int, warmup: int = 3) -> list[float]:
    for _ in range(warmup):
        fn()
    out = []
    for _ in range(repeats):
        t0 = time.perf_counter()
        fn()
        out.append((time.perf_counter() - t0) * 1000)
    return out


def speed_benchmark(
    torch_model: Path | None,
    onnx_dirs: Sequence[Path],
    *,
    candidates: int = 20,
    lengths: Sequence[int] = (128, 256),
    repeats: int = 30,
    threads: int = 2,
    pipeline_corpus: int = 10000,
) -> list[dict[str, Any]]:
    """Print P50/P95 latency (ms, tokenisation included) of reranking `candidates` passages of each length.

    Variants: the sentence-transformers fp32 path (and bf16 autocast) of `torch_model`, and each ONNX
    folder. A last table times the retrieval path: query embedding + FAISS flat search over
    `pipeline_corpus` vectors + reranking with each ONNX variant at the first length.
    """
    import faiss
    import numpy as np
    import torch
    from transformers import AutoTokenizer

    torch.set_num_threads(threads)
    faiss.omp_set_num_threads(threads)
    tok = AutoTokenizer.from_pretrained(str(packaged_minilm_path()), local_files_only=True)
    variants: list[tuple[str, Any]] = []
    if torch_model is not None:
        variants.append(("sentence-transformers fp32", CrossEncoderReranker(torch_model, max_length=512)))
        variants.append(("torch bf16 autocast", _TorchBf16Reranker(torch_model, max_length=512)))
    for d in onnx_dirs:
        r = OnnxCrossEncoderReranker(d, max_length=512, threads=threads, cache_size=0)
        variants.append((f"onnx {r.name} ({d.name})", r))
    query = "who agreed to swear fealty to the king of west francia?"
    rows: list[dict[str, Any]] = []
    print(
        f"\nreranking {candidates} candidates, {threads} threads, {repeats} runs after 3 warm-up, tokenisation included"
    )
    print("| variant | tokens | P50 ms | P95 ms |\n|---|---|---|---|")
    for n in lengths:
        texts = _texts_of_length(tok, n, candidates)
        for label, r in variants:
            ms = _time(partial(r.score, query, texts), repeats)
            row = {"variant": label, "tokens": n, "p50_ms": percentile(ms, 50), "p95_ms": percentile(ms, 95)}
            rows.append(row)
            print(f"| {label} | {n} | {row['p50_ms']:.0f} | {row['p95_ms']:.0f} |", flush=True)
    if onnx_dirs:
        emb = SentenceTransformerEmbeddings()
        rng = np.random.default_rng(0)
        base = rng.standard_normal((pipeline_corpus, 384)).astype(np.float32)
        base /= np.linalg.norm(base, axis=1, keepdims=True)
        index = faiss.IndexFlatIP(384)
        index.add(base)
        texts = _texts_of_length(tok, lengths[0], candidates)
        embed_ms = _time(lambda: index.search(emb.encode([query]), candidates), repeats)
        print(
            f"\nretrieval path at {lengths[0]} tokens: query embedding + FAISS flat search over "
            f"{pipeline_corpus} "
            f"vectors + rerank {candidates}"
        )
        print("| variant | embed+search P50 ms | total P50 ms | total P95 ms |\n|---|---|---|---|")
        for d in onnx_dirs:
            r = OnnxCrossEncoderReranker(d, max_length=512, threads=threads, cache_size=0)

            def full(r: OnnxCrossEncoderReranker = r) -> None:
                index.search(emb.encode([query]), candidates)
                r.score(query, texts)

            ms = _time(full, repeats)
            print(
                f"| {r.name} ({d.name}) | {statistics.median(embed_ms):.0f} | "
                f"{percentile(ms, 50):.0f} | {percentile(ms, 95):.0f} |"
            )
    return rows


def fidelity(reference: Any, variants: dict[str, Any], pairs: Sequence[tuple[str, str]]) -> dict[str, float]:
    """Pearson correlation of each variant's scores with the reference's on the same (query, text) pairs."""
    import numpy as np

    ref = np.asarray([reference.score(q, [t])[0] for q, t in pairs])
    out = {}
    for name, v in variants.items():
        got = np.asarray([v.score(q, [t])[0] for q, t in pairs])
        out[name] = float(np.corrcoef(ref, got)[0, 1])
    print(json.dumps(out, indent=2))
    return out
