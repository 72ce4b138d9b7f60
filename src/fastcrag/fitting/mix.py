"""The packaged grader's training mix: (question, passage, label) pairs from SQuAD, BEIR and QA sets, and its pools."""

from __future__ import annotations

import gzip
import hashlib
import json
import random
import re
import tarfile
import xml.etree.ElementTree as ET
from collections.abc import Iterable, Iterator, Sequence
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import Any

from fastcrag.datasets import read_qrels, read_queries
from fastcrag.retrieval.text import split_sentences  # the refine node's strips: train on what it scores

#: Folders of the data folder's `train/` (`--data-root`) whose licences allow shipping weights trained on them.
PERMISSIVE_FOLDERS = ("squad11-train", "squad2-train-first10", "selqa", "medquad", "covidqa", "pubmedqa")
#: WikiQA-style groups that overlap the evaluation articles; dropped wherever a title matches.
EXCLUDED_TITLES = frozenset({"Jacksonville, Florida", "Packet switching", "Packet_switching"})

_WORD_RE = re.compile(r"\w+", re.UNICODE)
_ENTITY_RE = re.compile(r"\b(?:[A-Z][\w'-]+(?:\s+(?:of|the|de|von|van)?\s*[A-Z][\w'-]+)*|\d[\d,.]*)\b")
_AUX_RE = re.compile(r"^(.*?)\b(is|was|are|were|did|does|do|can|could|has|had|have|will|would|should)\b\s+(.*)$")
_NEGATED = {"can": "can't", "will": "won't", "do": "don't"}


@dataclass(frozen=True)
class Pair:
    """One labelled training example.

    Attributes:
        question: The query.
        passage: The passage or sentence it is scored against.
        label: 1.0 when the passage contains the answer, else 0.0.
        source: Where the pair came from and how it was made (e.g. `squad11:own`).
        group: The document it belongs to; train/dev splits never share a group.
        answer: For a positive, the answer phrase as it stands in the passage (trains the reader head); empty
            when the answer is not a span of the passage (answer-sentence data) or the pair is a negative.
    """

    question: str
    passage: str
    label: float
    source: str
    group: str
    answer: str = ""


@dataclass
class QAItem:
    """One SQuAD-style question with its paragraph index inside an article."""

    question: str
    answers: list[str]
    paragraph: int
    impossible: bool = False
    qid: str = ""


@dataclass
class Article:
    """A SQuAD-style article: title, paragraphs and the questions asked about them."""

    title: str
    paragraphs: list[str]
    questions: list[QAItem] = field(default_factory=list)


@dataclass
class PoolConfig:
    """Sizes and mix of the pool.

    Every answerable SQuAD question gives its own paragraph as a positive; the `p_*` shares say how often it
    also gives each other kind of pair. Lengths run from a one-sentence snippet to a two-paragraph chunk.

    Attributes:
        squad_questions: SQuAD 1.1 questions used (0: all of them).
        p_deleted: Own paragraph with the answer sentence deleted (0).
        p_same_article: The most word-overlapping same-article paragraph without the answer (0).
        p_random: A random other-article paragraph (0).
        p_snippet: A one- or two-sentence snippet holding the answer (1) and one of the paragraph without it (0).
        p_relation: A one- or two-sentence snippet from elsewhere in the article sharing the question's words,
            without the answer: same entity, another relation or event (0).
        p_perturbed: The own paragraph or answer snippet with a date, number, ordinal, quarter or entity that the
            question asks about changed to another value (0): the passage now speaks of another year or entity.
        p_swap: An entity-swapped or negated question against its own paragraph (0).
        p_chunk: Own paragraph joined with a neighbouring one, as a long chunk (1).
        squad2_unanswerable_repeat: Times each SQuAD 2.0 unanswerable (own paragraph, 0) is repeated.
        selqa_questions: SelQA questions sampled (answer sentences = 1, two other section sentences = 0).
        medquad_questions: MedQuAD questions (answer = 1, another question type's answer on the focus = 0).
        covidqa_questions: COVID-QA questions (answer chunk = 1, another chunk of the paper = 0).
        pubmedqa_questions: PubMedQA questions (conclusion = 1, abstract = 1, other abstract = 0).
        scifact_positive_repeat: Times each SciFact train (claim, relevant abstract) pair is repeated.
        scifact_hard_negatives: TF-IDF-nearest non-relevant abstracts per SciFact train claim.
        max_words: Passages are cut to this many words (the model sees at most max_length tokens anyway).
        dev_percent: Percentage of documents (by hash of their group) held out as the dev split.
    """

    squad_questions: int = 0
    p_deleted: float = 0.5
    p_same_article: float = 0.5
    p_random: float = 0.1
    p_snippet: float = 0.5
    p_relation: float = 0.5
    p_perturbed: float = 0.6
    p_swap: float = 0.3
    p_chunk: float = 0.1
    squad2_unanswerable_repeat: int = 4
    selqa_questions: int = 2375
    medquad_questions: int = 3000
    covidqa_questions: int = 1380
    pubmedqa_questions: int = 1000
    scifact_positive_repeat: int = 2
    scifact_hard_negatives: int = 3
    max_words: int = 200
    dev_percent: float = 5.0


# --------------------------------------------------------------------------------------------- text helpers


def clip_words(text: str, max_words: int) -> str:
    """Keep the first `max_words` whitespace-separated words of `text`."""
    words = text.split()
    return text if len(words) <= max_words else " ".join(words[:max_words])


def is_dev_group(group: str, dev_percent: float) -> bool:
    """Whether a document belongs to the dev split: a stable hash of its group name, never random."""
    h = int(hashlib.sha1(group.encode("utf-8")).hexdigest()[:8], 16) % 10000
    return h < dev_percent * 100


def _norm(text: str) -> str:
    return " ".join(text.lower().split())


def contains_any(passage: str, answers: Iterable[str]) -> bool:
    """Whether any non-empty answer string occurs in the passage (case and whitespace insensitive)."""
    p = _norm(passage)
    return any(a.strip() and _norm(a) in p for a in answers)


def answer_sentence_index(sentences: Sequence[str], answers: Sequence[str]) -> int | None:
    """Index of the first sentence holding an answer string, or None when no single sentence holds one."""
    for i, s in enumerate(sentences):
        if contains_any(s, answers):
            return i
    return None


def _tokens(text: str) -> set[str]:
    return {w for w in _WORD_RE.findall(text.lower()) if len(w) > 2}


def _overlap(a: set[str], b: set[str]) -> float:
    return len(a & b) / (1 + len(a | b)) if a else 0.0


def swap_question(question: str, article: Article, paragraph: str, rng: random.Random) -> str | None:
    """Make an unanswerable variant of a question for its own paragraph.

    An entity or number of the question is replaced by one from elsewhere in the article that the paragraph
    does not mention; failing that, the first auxiliary verb is negated ("did" -> "didn't").

    Returns:
        The new question, or None when neither edit applies.
    """
    ents = [m for m in _ENTITY_RE.finditer(question) if m.start() > 0]
    if ents:
        pool: list[str] = []
        para_norm = _norm(paragraph)
        for other in article.paragraphs:
            if other is paragraph:
                continue
            pool.extend(m.group(0) for m in _ENTITY_RE.finditer(other) if m.start() > 0)
        m = rng.choice(ents)
        is_num = m.group(0)[0].isdigit()
        candidates = [
            c
            for c in set(pool)
            if c != m.group(0) and c[0].isdigit() == is_num and _norm(c) not in para_norm and len(c) > 2
        ]
        if candidates:
            new = rng.choice(sorted(candidates))
            return question[: m.start()] + new + question[m.end() :]
    aux = _AUX_RE.match(question)
    if aux and " not " not in question and "n't" not in question:
        verb = aux.group(2)
        negated = _NEGATED.get(verb, verb + "n't")
        return f"{aux.group(1)}{negated} {aux.group(3)}"
    return None


# ------------------------------------------------------------------------------------------------ readers


def open_text(path: Path) -> str:
    """The text of a file, gunzipped when it ends in `.gz`."""
    if path.suffix == ".gz":
        with gzip.open(path, "rt", encoding="utf-8") as f:
            return f.read()
    return path.read_text(encoding="utf-8")


def iter_jsonl(path: Path) -> Iterator[dict[str, Any]]:
    """The rows of a JSONL file (`.gz` or plain), blank lines skipped."""
    for line in open_text(path).split("\n"):  # not splitlines(): JSON strings may hold U+2028 or U+0085
        if line.strip():
            yield json.loads(line)


def load_squad(path: Path) -> list[Article]:
    """Read a SQuAD v1/v2 JSON file (optionally gzipped) into articles."""
    raw = json.loads(open_text(path))
    articles: list[Article] = []
    for art in raw["data"]:
        title = str(art.get("title", "")).strip()
        a = Article(title=title, paragraphs=[])
        for p in art.get("paragraphs", []):
            a.paragraphs.append(str(p["context"]))
            idx = len(a.paragraphs) - 1
            for qa in p.get("qas", []):
                answers = [str(x["text"]) for x in qa.get("answers", [])]
                impossible = bool(qa.get("is_impossible", False)) or not answers
                a.questions.append(QAItem(str(qa["question"]).strip(), answers, idx, impossible, str(qa.get("id", ""))))
        articles.append(a)
    return articles


def load_beir(folder: Path, split: str) -> tuple[dict[str, str], dict[str, str], dict[str, set[str]]]:
    """Read a BEIR folder: corpus (`title text`), queries and the positive qrels of one split.

    Returns:
        (corpus id -> text, query id -> text, query id -> relevant corpus ids) for queries in the split.
    """
    corpus_path = next(p for p in (folder / "corpus.jsonl.gz", folder / "corpus.jsonl") if p.exists())
    corpus = {
        str(d["_id"]): (str(d.get("title", "")) + ". " + str(d.get("text", ""))).strip(". ")
        for d in iter_jsonl(corpus_path)
    }
    qpath = next(p for p in (folder / "queries.jsonl", folder / "queries.jsonl.gz") if p.exists())
    queries = read_queries(qpath)
    qrels: dict[str, set[str]] = {}
    for q, rels in read_qrels(folder / "qrels" / f"{split}.tsv").items():
        if positive := {d for d, r in rels.items() if r > 0}:
            qrels[q] = positive
    return corpus, {q: queries[q] for q in qrels if q in queries}, qrels


# ---------------------------------------------------------------------------------------------- generators


def _nearest_negative(
    qtok: set[str], article: Article, own: int, answers: Sequence[str], toks: list[set[str]]
) -> str | None:
    best, best_score = None, -1.0
    for j, para in enumerate(article.paragraphs):
        if j == own or contains_any(para, answers):
            continue
        s = _overlap(qtok, toks[j])
        if s > best_score:
            best, best_score = para, s
    return best


_QUARTERS = ("first", "second", "third", "fourth")
_ORDINAL_RE = re.compile(r"\b(\d+)(st|nd|rd|th)\b")
_NUMBER_RE = re.compile(r"\b\d[\d,]*(?:\.\d+)?\b")
_QUARTER_RE = re.compile(r"\b(Q[1-4])\b|\b(first|second|third|fourth) quarter\b", re.IGNORECASE)


def _other_number(token: str, rng: random.Random) -> str:
    """Another number of the same shape: a year moves by 1-15 years, other numbers by 10-60%."""
    digits = token.replace(",", "")
    try:
        value = float(digits)
    except ValueError:
        return token
    if "." not in digits and 1000 <= value <= 2100:
        return str(int(value) + rng.choice([-1, 1]) * rng.randint(1, 15))
    if "." in digits:
        return f"{value * rng.uniform(1.1, 1.6):.{len(digits.split('.')[1])}f}"
    new = int(value) + rng.randint(1, 5)
    if value > 9:
        scaled = round(value * rng.choice([rng.uniform(0.4, 0.9), rng.uniform(1.1, 1.6)]))
        new = scaled if scaled != value else new
    return f"{new:,}" if "," in token else str(new)


def _ordinal(n: int) -> str:
    return f"{n}{'th' if 10 <= n % 100 <= 20 else {1: 'st', 2: 'nd', 3: 'rd'}.get(n % 10, 'th')}"


_ENTITY_CACHE: dict[int, tuple[Article, frozenset[str]]] = {}


def _article_entities(article: Article) -> frozenset[str]:
    """Named entities of an article (capitalised phrases not opening a paragraph), computed once per article."""
    hit = _ENTITY_CACHE.get(id(article))
    if hit is None or hit[0] is not article:
        ents = frozenset(
            m.group(0)
            for para in article.paragraphs
            for m in _ENTITY_RE.finditer(para)
            if m.start() > 0 and not m.group(0)[0].isdigit() and len(m.group(0)) > 2
        )
        if len(_ENTITY_CACHE) > 2048:
            _ENTITY_CACHE.clear()
        hit = _ENTITY_CACHE[id(article)] = (article, ents)
    return hit[1]


def perturb_passage(
    question: str, passage: str, answers: Sequence[str], article: Article, rng: random.Random
) -> str | None:
    """The passage with something the question asks about changed, so that it no longer answers it.

    A date, number, ordinal (edition), quarter or named entity that the question and the passage share (and that
    is not part of the answer) is replaced everywhere in the passage: by another value of the same shape for
    numbers, ordinals and quarters, or by another entity of the article that the passage does not mention. The
    passage then speaks of another year, edition or entity: on topic, but not the answer.

    Returns:
        The perturbed passage, or None when the question and passage share nothing that can be changed.
    """
    q_norm = _norm(question)
    ans_norm = [_norm(a) for a in answers if a.strip()]
    targets: list[tuple[str, str]] = []
    for m in _QUARTER_RE.finditer(passage):
        tok = m.group(0)
        if _norm(tok) in q_norm:
            if m.group(1):
                new = f"Q{rng.choice([i for i in range(1, 5) if f'Q{i}' != tok.upper()])}"
            else:
                word = m.group(2).lower()
                new = rng.choice([w for w in _QUARTERS if w != word]) + " quarter"
            targets.append((tok, new))
    for m in _ORDINAL_RE.finditer(passage):
        tok = m.group(0)
        if _norm(tok) in q_norm:
            n = int(m.group(1))
            targets.append((tok, _ordinal(max(1, n + rng.choice([-2, -1, 1, 2, 3])))))
    for m in _NUMBER_RE.finditer(passage):
        tok = m.group(0)
        if re.search(rf"\b{re.escape(tok)}\b", question) and (other := _other_number(tok, rng)) != tok:
            targets.append((tok, other))
    if not targets:
        p_norm = _norm(passage)
        shared = {
            m.group(0)
            for m in _ENTITY_RE.finditer(question)
            if m.start() > 0 and not m.group(0)[0].isdigit() and len(m.group(0)) > 2 and _norm(m.group(0)) in p_norm
        }
        if shared:
            pool = {c for c in _article_entities(article) if _norm(c) not in p_norm and _norm(c) not in q_norm}
            if pool:
                targets.append((rng.choice(sorted(shared)), rng.choice(sorted(pool))))
    targets = [(old, new) for old, new in targets if old != new and not any(_norm(old) in a for a in ans_norm)]
    if not targets:
        return None
    old, new = rng.choice(targets)
    out = re.sub(rf"(?<!\w){re.escape(old)}(?!\w)", new, passage)
    # the old value must be gone; an answer that vanished with it means the edit hit the answer itself
    answer_lost = contains_any(passage, answers) and not contains_any(out, answers)
    if out == passage or contains_any(out, [old]) or answer_lost:
        return None
    return out


def sentence_windows(sentences: Sequence[str]) -> list[tuple[int, int]]:
    """(start, end) sentence ranges of every one- and two-sentence snippet, in reading order."""
    n = len(sentences)
    return [(i, j) for i in range(n) for j in (i + 1, i + 2) if j <= n]


def article_snippets(article: Article) -> list[tuple[int, str, set[str]]]:
    """Every one- and two-sentence snippet of an article: (paragraph index, text, word set)."""
    out = []
    for j, para in enumerate(article.paragraphs):
        sents = split_sentences(para)
        for a, b in sentence_windows(sents):
            text = " ".join(sents[a:b])
            out.append((j, text, _tokens(text)))
    return out


def _relation_snippet(
    qtok: set[str], snippets: Sequence[tuple[int, str, set[str]]], own: int, answers: Sequence[str], rng: random.Random
) -> str | None:
    """One of the three snippets of other paragraphs sharing most question words, without the answer."""
    ranked = sorted(
        ((_overlap(qtok, toks), text) for j, text, toks in snippets if j != own and qtok & toks),
        key=lambda t: -t[0],
    )
    best = [text for _, text in ranked[:10] if not contains_any(text, answers)][:3]
    return rng.choice(best) if best else None


def _answer_in(passage: str, answers: Sequence[str]) -> str:
    """The first answer that stands in the passage (the reader's span target), else empty."""
    return next((a for a in answers if a.strip() and _norm(a) in _norm(passage)), "")


def squad_pairs(
    articles: Sequence[Article],
    cfg: PoolConfig,
    rng: random.Random,
    *,
    source: str = "squad",
    n_questions: int | None = None,
    skip_ids: set[str] | None = None,
) -> list[Pair]:
    """Answerability pairs from SQuAD articles (see `PoolConfig` for the kinds and their shares).

    Positives carry their answer phrase for the reader head. Unanswerable (SQuAD 2.0) questions give their
    own paragraph = 0, repeated.
    """
    skip_ids = skip_ids or set()
    out: list[Pair] = []
    items = [(a, q) for a in articles for q in a.questions if q.qid not in skip_ids or not q.qid]
    answerable = [(a, q) for a, q in items if not q.impossible]
    rng.shuffle(answerable)
    if n_questions is not None:
        answerable = answerable[:n_questions]
    tok_cache: dict[int, list[set[str]]] = {}
    snippet_cache: dict[int, list[tuple[int, str, set[str]]]] = {}
    mw = cfg.max_words
    for a, q in answerable:
        para = a.paragraphs[q.paragraph]
        grp = f"{source}:{a.title}"
        qtok = _tokens(q.question)

        def add(passage: str, label: float, kind: str, q: QAItem = q, grp: str = grp) -> None:
            text = clip_words(passage, mw)
            answer = _answer_in(text, q.answers) if label >= 0.5 else ""
            if label < 0.5 or answer:  # a positive whose answer was clipped away is no positive
                out.append(Pair(q.question, text, label, f"{source}:{kind}", grp, answer))

        add(para, 1.0, "own")
        sents = split_sentences(para)
        ai = answer_sentence_index(sents, q.answers)
        if ai is not None and len(sents) > 1 and rng.random() < cfg.p_deleted:
            rest = " ".join(s for i, s in enumerate(sents) if i != ai)
            if not contains_any(rest, q.answers):
                add(rest, 0.0, "deleted")
        if rng.random() < cfg.p_same_article and len(a.paragraphs) > 1:
            if id(a) not in tok_cache:
                tok_cache[id(a)] = [_tokens(p) for p in a.paragraphs]
            toks = tok_cache[id(a)]
            neg = _nearest_negative(qtok, a, q.paragraph, q.answers, toks)
            if neg is not None:
                add(neg, 0.0, "same_article")
        if rng.random() < cfg.p_random and len(articles) > 1:
            other = rng.choice(articles)
            if other is not a and other.paragraphs:
                add(rng.choice(other.paragraphs), 0.0, "random")
        snippet = ""
        if ai is not None and rng.random() < cfg.p_snippet:
            windows = [(x, y) for x, y in sentence_windows(sents) if x <= ai < y]
            x, y = rng.choice(windows)
            snippet = " ".join(sents[x:y])
            add(snippet, 1.0, "snippet_pos")
            others = [s for s in sents if not contains_any(s, q.answers)]
            if others:
                add(rng.choice(others), 0.0, "snippet_neg")
        if rng.random() < cfg.p_relation and len(a.paragraphs) > 1:
            if id(a) not in snippet_cache:
                snippet_cache[id(a)] = article_snippets(a)
            snippets = snippet_cache[id(a)]
            rel = _relation_snippet(qtok, snippets, q.paragraph, q.answers, rng)
            if rel is not None:
                add(rel, 0.0, "relation")
        if rng.random() < cfg.p_perturbed:
            base = snippet if snippet and rng.random() < 0.5 else para
            changed = perturb_passage(q.question, base, q.answers, a, rng)
            if changed is not None:
                add(changed, 0.0, "perturbed")
        if rng.random() < cfg.p_swap:
            swapped = swap_question(q.question, a, para, rng)
            if swapped is not None and swapped != q.question:
                out.append(Pair(swapped, clip_words(para, mw), 0.0, f"{source}:swap", grp))
        if rng.random() < cfg.p_chunk and len(a.paragraphs) > 1:
            j = q.paragraph + 1 if q.paragraph + 1 < len(a.paragraphs) else q.paragraph - 1
            pieces = [para, a.paragraphs[j]] if j > q.paragraph else [a.paragraphs[j], para]
            add(" ".join(pieces), 1.0, "chunk")
    for a, q in items:
        if q.impossible:
            grp = f"{source}:{a.title}"
            para = clip_words(a.paragraphs[q.paragraph], mw)
            out.extend(
                Pair(q.question, para, 0.0, f"{source}:unanswerable", grp)
                for _ in range(cfg.squad2_unanswerable_repeat)
            )
    return out


def selqa_pairs(paths: Sequence[Path], n_questions: int, rng: random.Random) -> list[Pair]:
    """SelQA answer-sentence selection: answer sentences = 1, two other sentences of the section = 0."""
    rows: list[dict[str, Any]] = []
    for p in paths:
        rows.extend(json.loads(open_text(p)))
    rows = [r for r in rows if str(r.get("article", "")) not in EXCLUDED_TITLES]
    rng.shuffle(rows)
    out: list[Pair] = []
    for r in rows[:n_questions]:
        cands = [str(c) for c in r["candidates"]]
        pos = {int(i) for i in r["answers"]}
        grp = f"selqa:{r.get('article', '')}"
        q = str(r["question"])
        out.extend(Pair(q, cands[i], 1.0, "selqa:pos", grp) for i in sorted(pos) if i < len(cands))
        negs = [c for i, c in enumerate(cands) if i not in pos]
        out.extend(Pair(q, c, 0.0, "selqa:neg", grp) for c in rng.sample(negs, min(2, len(negs))))
    return out


def medquad_pairs(tar_path: Path, n_questions: int, rng: random.Random, max_words: int) -> list[Pair]:
    """MedQuAD: (question, its answer) = 1; an answer to a different question type on the same focus = 0."""
    docs: list[tuple[str, list[tuple[str, str, str]]]] = []
    with tarfile.open(tar_path, "r:gz") as tar:
        for member in tar:
            if not member.isfile() or not member.name.endswith(".xml"):
                continue
            f = tar.extractfile(member)
            if f is None:
                continue
            try:
                root = ET.fromstring(f.read())
            except ET.ParseError:
                continue
            qas: list[tuple[str, str, str]] = []
            for qa in root.iter("QAPair"):
                qn, an = qa.find("Question"), qa.find("Answer")
                if qn is None or an is None or not (an.text or "").strip():
                    continue
                qas.append(((qn.text or "").strip(), qn.get("qtype", ""), " ".join((an.text or "").split())))
            if qas:
                docs.append((member.name, qas))
    rng.shuffle(docs)
    out: list[Pair] = []
    count = 0
    for name, qas in docs:
        if count >= n_questions:
            break
        q, qtype, ans = rng.choice(qas)
        grp = f"medquad:{name}"
        out.append(Pair(q, clip_words(ans, max_words), 1.0, "medquad:pos", grp))
        negs = [a for (qq, t, a) in qas if t != qtype and qq != q and a != ans]
        if negs:
            out.append(Pair(q, clip_words(rng.choice(negs), max_words), 0.0, "medquad:same_focus", grp))
        count += 1
    return out


def chunk_words(text: str, size: int) -> list[str]:
    """Split a long text into consecutive chunks of about `size` words, cut at sentence ends."""
    chunks: list[str] = []
    cur: list[str] = []
    n = 0
    for s in split_sentences(text):
        w = len(s.split())
        if cur and n + w > size:
            chunks.append(" ".join(cur))
            cur, n = [], 0
        cur.append(s)
        n += w
    if cur:
        chunks.append(" ".join(cur))
    return chunks


def covidqa_pairs(path: Path, n_questions: int, rng: random.Random, chunk: int = 110) -> list[Pair]:
    """COVID-QA: the chunk of the paper holding the answer = 1; another chunk without it = 0."""
    out: list[Pair] = []
    items: list[tuple[str, list[str], QAItem]] = []
    for a in load_squad(path):
        for q in a.questions:
            if not q.impossible:
                items.append((a.title, chunk_words(a.paragraphs[q.paragraph], chunk), q))
    rng.shuffle(items)
    for title, chunks, q in items[:n_questions]:
        pos = [c for c in chunks if contains_any(c, q.answers)]
        negs = [c for c in chunks if not contains_any(c, q.answers)]
        if not pos:
            continue
        grp = f"covidqa:{title}"
        out.append(Pair(q.question, pos[0], 1.0, "covidqa:pos", grp, _answer_in(pos[0], q.answers)))
        if negs:
            out.append(Pair(q.question, rng.choice(negs), 0.0, "covidqa:neg", grp))
    return out


def pubmedqa_pairs(path: Path, n_questions: int, rng: random.Random, max_words: int) -> list[Pair]:
    """PubMedQA PQA-L: (question, conclusion) = 1, (question, abstract) = 1, another abstract = 0."""
    raw: dict[str, dict[str, Any]] = json.loads(open_text(path))
    ids = sorted(raw)
    rng.shuffle(ids)
    out: list[Pair] = []
    for pmid in ids[:n_questions]:
        r = raw[pmid]
        q = str(r["QUESTION"])
        grp = f"pubmedqa:{pmid}"
        ctx = r["CONTEXTS"]
        abstract = " ".join(ctx) if isinstance(ctx, list) else str(ctx)
        out.append(Pair(q, clip_words(str(r["LONG_ANSWER"]), max_words), 1.0, "pubmedqa:conclusion", grp))
        out.append(Pair(q, clip_words(abstract, max_words), 1.0, "pubmedqa:abstract", grp))
        other = raw[rng.choice(ids)]
        if other is not r:
            octx = other["CONTEXTS"]
            otext = " ".join(octx) if isinstance(octx, list) else str(octx)
            out.append(Pair(q, clip_words(otext, max_words), 0.0, "pubmedqa:other", grp))
    return out


def tfidf_neighbours(queries: Sequence[str], docs: Sequence[str], k: int) -> list[list[int]]:
    """Indices of the `k` documents nearest each query by TF-IDF cosine (scikit-learn, sparse)."""
    import numpy as np
    from sklearn.feature_extraction.text import TfidfVectorizer

    vec = TfidfVectorizer(sublinear_tf=True, stop_words="english", min_df=1)
    dm = vec.fit_transform(docs)
    qm = vec.transform(queries)
    sims = (qm @ dm.T).toarray()
    k = min(k, len(docs))
    top = np.argpartition(-sims, k - 1, axis=1)[:, :k]
    order = np.take_along_axis(sims, top, axis=1).argsort(axis=1)[:, ::-1]
    return [[int(i) for i in row] for row in np.take_along_axis(top, order, axis=1)]


def beir_pairs(
    folder: Path,
    split: str,
    rng: random.Random,
    *,
    positive_repeat: int = 1,
    hard_negatives: int = 4,
    max_words: int = 200,
    source: str = "beir",
) -> list[Pair]:
    """BEIR qrels: (query, relevant doc) = 1; TF-IDF-nearest non-relevant docs and one random doc = 0.

    The group is the query id, so a query's pairs never straddle the train/dev split.
    """
    corpus, queries, qrels = load_beir(folder, split)
    doc_ids = sorted(corpus)
    docs = [corpus[d] for d in doc_ids]
    qids = sorted(queries)
    neigh = tfidf_neighbours([queries[q] for q in qids], docs, hard_negatives + 10) if qids else []
    out: list[Pair] = []
    for qid, nn in zip(qids, neigh, strict=True):
        q = queries[qid]
        grp = f"{source}:{qid}"
        for d in sorted(qrels[qid]):
            if d in corpus:
                out.extend(
                    Pair(q, clip_words(corpus[d], max_words), 1.0, f"{source}:pos", grp) for _ in range(positive_repeat)
                )
        negs = [doc_ids[i] for i in nn if doc_ids[i] not in qrels[qid]][:hard_negatives]
        negs.append(rng.choice(doc_ids))
        out.extend(
            Pair(q, clip_words(corpus[d], max_words), 0.0, f"{source}:neg", grp) for d in negs if d not in qrels[qid]
        )
    return out


# ------------------------------------------------------------------------------------------------ the pool


def squad11_articles(data_root: Path) -> list[Article]:
    """The SQuAD 1.1 train articles of `data_root/train/squad11-train`."""
    return load_squad(data_root / "train" / "squad11-train" / "train-v1.1.from_explorer.json.gz")


def scifact_train_pairs(data_root: Path, cfg: PoolConfig, rng: random.Random) -> list[Pair]:
    """SciFact *train* claims with their relevant abstracts and hard negatives (none when the data is absent)."""
    if not (data_root / "scifact" / "qrels" / "train.tsv").exists():
        return []
    return beir_pairs(
        data_root / "scifact",
        "train",
        rng,
        positive_repeat=cfg.scifact_positive_repeat,
        hard_negatives=cfg.scifact_hard_negatives,
        max_words=cfg.max_words,
        source="scifact",
    )


def mix_pairs(
    data_root: Path, cfg: PoolConfig, rng: random.Random, *, include_scifact_train: bool = True
) -> tuple[list[Pair], set[str]]:
    """The pairs of the packaged mix's sources under `data_root`, before the dev split.

    Args:
        data_root: The shared data folder (holding `train/` and `scifact/`).
        cfg: Sizes and mix.
        rng: The random source of every choice (shared with what the caller draws next).
        include_scifact_train: Add SciFact *train* qrels (never test) as claim/abstract pairs.

    Returns:
        (pairs, the groups that always train: the few SQuAD 2.0 unanswerables are too precious to hold out).
    """
    pairs: list[Pair] = []
    force_train: set[str] = set()
    train = data_root / "train"
    sq11 = squad11_articles(data_root)
    sq11 = [a for a in sq11 if a.title not in EXCLUDED_TITLES]
    pairs += squad_pairs(sq11, cfg, rng, source="squad11", n_questions=cfg.squad_questions or None)
    sq2 = load_squad(train / "squad2-train-first10" / "train-v2.0.json")
    force_train |= {f"squad11:{a.title}" for a in sq2}
    # Answerable SQuAD 2.0 questions duplicate SQuAD 1.1; keep only the unanswerables from it.
    for a in sq2:
        a.questions = [q for q in a.questions if q.impossible]
    pairs += squad_pairs(sq2, cfg, rng, source="squad11", n_questions=0)
    pairs += selqa_pairs(sorted((train / "selqa").glob("selqa-ass-*.json")), cfg.selqa_questions, rng)
    pairs += medquad_pairs(train / "medquad" / "medquad.tar.gz", cfg.medquad_questions, rng, cfg.max_words)
    pairs += covidqa_pairs(train / "covidqa" / "200423_covidQA.json", cfg.covidqa_questions, rng)
    pairs += pubmedqa_pairs(train / "pubmedqa" / "ori_pqal.json", cfg.pubmedqa_questions, rng, cfg.max_words)
    if include_scifact_train:
        pairs += scifact_train_pairs(data_root, cfg, rng)
    return pairs, force_train


def build_pool(
    data_root: Path, cfg: PoolConfig, seed: int, *, include_scifact_train: bool = True
) -> tuple[list[Pair], list[Pair]]:
    """The train and dev pools of the packaged mix (`mix_pairs`), split by document group with `is_dev_group`."""
    rng = random.Random(seed)
    pairs, force_train = mix_pairs(data_root, cfg, rng, include_scifact_train=include_scifact_train)
    return split_pool(pairs, cfg.dev_percent, rng, force_train=force_train)


def split_pool(
    pairs: Sequence[Pair], dev_percent: float, rng: random.Random, *, force_train: Iterable[str] = ()
) -> tuple[list[Pair], list[Pair]]:
    """Split pairs into shuffled (train, dev) lists by document group; `force_train` groups always train."""
    keep = set(force_train)
    dev_of = {g: g not in keep and is_dev_group(g, dev_percent) for g in {p.group for p in pairs}}
    train = [p for p in pairs if not dev_of[p.group]]
    dev = [p for p in pairs if dev_of[p.group]]
    rng.shuffle(train)
    rng.shuffle(dev)
    return train, dev


def write_pairs(path: Path, pairs: Iterable[Pair]) -> None:
    """Write pairs as JSONL."""
    path.parent.mkdir(parents=True, exist_ok=True)
    with path.open("w", encoding="utf-8") as f:
        for p in pairs:
            f.write(json.dumps(asdict(p), ensure_ascii=False) + "\n")


def read_pairs(path: Path) -> list[Pair]:
    """Read pairs written by `write_pairs`."""
    return [
        Pair(
            str(r["question"]),
            str(r["passage"]),
            float(r["label"]),
            str(r["source"]),
            str(r["group"]),
            str(r.get("answer", "")),
        )
        for r in iter_jsonl(path)
    ]
