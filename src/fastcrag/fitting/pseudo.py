"""Pseudo-questions made from the corpus alone, each with its gold-removed twin: a fit without labels or a chat model.

A pseudo-question is asked about one sentence of a sampled chunk: the evidence is every candidate that holds that
sentence (overlapping chunks and copies too), and its twin is the same first pass with that sentence cut out of them,
the rest of each chunk left in place: on topic, the answer gone, as a real near miss is. Two kinds:

- `cloze`: the sentence with one span asked about, cut to a window around it. The span is a defined term ("X is a
  Y": "What is X?"), a name, a year or a number, drawn at random among those the sentence holds.
- `ict` (inverse cloze): the sentence itself is the query, and the evidence is its chunk without it.

`fastcrag fit` draws the thresholds from them by the same rules as from labelled questions, once their grades are
brought down to a real question's: a cloze question shares most of its sentence's words, so its evidence grades
higher than a real question's evidence does. The packaged calibration measures that gap (`measure_shift`) on its own
corpus, where both kinds of question exist, and a label-free fit lowers the pseudo-questions' grades by it
(`shift_scores`) before drawing.
"""

from __future__ import annotations

import math
import random
import re
import sys
from collections.abc import Sequence
from dataclasses import dataclass, replace
from typing import Any

import numpy as np
from tqdm import tqdm

from fastcrag.fitting.calibrate import Observation
from fastcrag.fitting.labels import EXTRA_DEPTH, Candidate, Labelled
from fastcrag.fitting.questions import FitQuestion
from fastcrag.grading.onnx_grader import sigmoid
from fastcrag.retrieval.hybrid import RoutedSearch, chunk_key
from fastcrag.retrieval.structure import prose
from fastcrag.retrieval.text import body_sentences, normalise, split_sentences, split_title, titled

KINDS = ("cloze", "ict")
DEFAULT_KINDS = ("cloze",)
"""The kinds a fit makes unless told otherwise: chosen by measurement (lab/RESULTS.md, "Fit without labels")."""
MIN_WORDS, MAX_WORDS = 8, 45
"""A sentence asked about has this many words: shorter ones hold too little, longer ones are run-together text."""
WINDOW = 10
"""A cloze question keeps at most this many words on each side of the span it asks about."""
ICT_WORDS = 30
"""An inverse-cloze query is its sentence's first words, at most this many."""
MIN_TWIN_WORDS = 5
"""An evidence chunk with fewer words left once its sentence is cut leaves the twin (nothing on topic is left)."""
SAMPLE_FACTOR = 4
"""Chunks sampled per pseudo-question asked for (many hold no sentence to ask about)."""
PER_SOURCE = 0.05
"""At most this share of the pseudo-questions come from one source (at least 2), so that one long file does not
draw the thresholds alone."""

_YEAR = re.compile(r"(?<![\w.,/-])(1[5-9]\d{2}|20\d{2})(?![\w-]|,\d)")
_NUMBER = re.compile(r"(?<![\w.,/-])\d{1,3}(?:,\d{3})*(?:\.\d+)?(?:\s?(?:%|percent\b|per cent\b))?(?![\w-]|,\d)")
_NAME = re.compile(r"(?<!^)(?<![.!?]\s)\b(?:[A-Z][\w'-]*[a-z][\w'-]*|[A-Z]{2,})(?:\s+(?:of\s+|de\s+)?[A-Z][\w'-]+)*")
_DEFINITION = re.compile(
    r"^(?:The |A |An )?(?P<term>[^,;:()]{2,60}?) (?P<verb>is|are) (?P<rest>(?:a|an|the|one) .{6,})$"
)
_DEFINITION_LEADS = frozenset({"it", "this", "that", "these", "those", "there", "he", "she", "they", "which", "what"})


@dataclass(frozen=True)
class PseudoQuestion:
    """One pseudo-question: the query, the sentence it is answered by, the span asked about, and where it came from."""

    question: str
    sentence: str
    answer: str
    kind: str
    source: str


def _window(words: list[str], start: int, end: int, middle: list[str]) -> str:
    left, right = words[max(0, start - WINDOW) : start], words[end : end + WINDOW]
    text = " ".join([*left, *middle, *right]).rstrip(" .;:,!")
    return text[0].upper() + text[1:] + "?"


def cloze(sentence: str, rng: random.Random) -> tuple[str, str] | None:
    """A question about one span of `sentence` and that span, or None when it has none to ask about."""
    text = sentence.rstrip()
    options: list[tuple[str, str]] = []
    if (d := _DEFINITION.match(text)) and d["term"].split()[0].lower() not in _DEFINITION_LEADS:
        term = d["term"].strip()
        if len(term.split()) <= 6:
            options.append((f"What {d['verb']} {term}?", " ".join(d["rest"].split()[:8])))
    spans = [(m, "what year") for m in _YEAR.finditer(text)]
    spans += [(m, "how many") for m in _NUMBER.finditer(text) if not _YEAR.fullmatch(m.group())]
    spans += [(m, "what") for m in _NAME.finditer(text)]
    for match, wh in spans:
        before, after = text[: match.start()].split(), text[match.end() :].split()
        if len(before) + len(after) < 4:
            continue
        words = [*before, *after]
        options.append((_window(words, len(before), len(before), [wh]), match.group()))
    return rng.choice(options) if options else None


def _sentences(text: str) -> list[str]:
    out = []
    for strip in body_sentences(text):
        sentence = prose(strip)
        if sentence is not None and MIN_WORDS <= len(sentence.split()) <= MAX_WORDS and sentence[-1] in ".!?":
            out.append(sentence)
    return out


def make_pseudo_questions(
    chunks: Sequence[tuple[str, str]], n: int, seed: int, kinds: Sequence[str] = DEFAULT_KINDS
) -> list[PseudoQuestion]:
    """Up to `n` pseudo-questions from `(source, text)` chunks, one per chunk at most, `kinds` taken in turn.

    Raises:
        ValueError: an unknown kind.
    """
    if unknown := sorted(set(kinds) - set(KINDS)):
        raise ValueError(f"unknown pseudo-question kinds {unknown}; choose from {', '.join(KINDS)}")
    rng = random.Random(seed)
    cap = max(2, round(PER_SOURCE * n))
    per_source: dict[str, int] = {}
    out: list[PseudoQuestion] = []
    for source, text in chunks:
        if len(out) >= n:
            break
        if per_source.get(source, 0) >= cap or not (sentences := _sentences(text)):
            continue
        kind = kinds[len(out) % len(kinds)]
        sentence = rng.choice(sentences)
        if kind == "ict":
            made: tuple[str, str] | None = (" ".join(sentence.split()[:ICT_WORDS]), "")
        else:
            made = cloze(sentence, rng)
        if made is None:
            continue
        out.append(PseudoQuestion(made[0], sentence, made[1], kind, source))
        per_source[source] = per_source.get(source, 0) + 1
    return out


def sample_pseudo_questions(
    store: Any, n: int, seed: int, kinds: Sequence[str] = DEFAULT_KINDS
) -> list[PseudoQuestion]:
    """Up to `n` pseudo-questions from chunks sampled over `store` (`SAMPLE_FACTOR` chunks per question asked for)."""
    return make_pseudo_questions(store.sample_chunks(SAMPLE_FACTOR * n), n, seed, kinds)


def cut_sentence(text: str, sentence: str) -> str:
    """`text` without the strips that hold `sentence` (case and spacing aside), its title line kept."""
    key = normalise(sentence)
    title, body = split_title(text)
    kept = [s for s in split_sentences(body) if key not in normalise(s) and normalise(s) not in key]
    return titled(title, " ".join(kept))


def pseudo_first_pass(
    retriever: RoutedSearch, questions: Sequence[PseudoQuestion], top_k: int, progress: bool
) -> list[Labelled]:
    """Retrieve each pseudo-question as `ask` does and label its candidates, with its gold-removed twin.

    A candidate is evidence when it holds the question's sentence. The twin is the first pass with that sentence cut
    out of the evidence (a chunk left with too few words goes). An inverse-cloze question's evidence is graded with
    the sentence cut out as well: the query is that sentence, and the rest of its chunk is what answers it.
    """
    out = []
    for p in tqdm(questions, desc="first pass (pseudo-questions)", unit="q", file=sys.stderr, disable=not progress):
        docs, _ = retriever.search(p.question, k=top_k + EXTRA_DEPTH)
        key = normalise(p.sentence)
        candidates, twin = [], []
        for d in docs:
            meta, text = d.metadata or {}, str(d.page_content)
            chunk_id, source = chunk_key(text, meta), str(meta.get("source", ""))
            holds = key in normalise(text)
            cut = cut_sentence(text, p.sentence) if holds else text
            candidates.append(Candidate(chunk_id, source, cut if p.kind == "ict" else text, holds))
            if not holds or len(split_title(cut)[1].split()) >= MIN_TWIN_WORDS:
                twin.append(Candidate(chunk_id, source, cut, False))
        question = FitQuestion(0, p.question, answers=(p.answer or p.sentence,))
        out.append(Labelled(question, candidates, p.source, near_miss=twin))
    return out


def twin_pairs(items: Sequence[Labelled], top_k: int) -> list[tuple[str, str, float, str]]:
    """Training pairs from pseudo-questions: the best-ranked evidence chunk (1) and its twin (0).

    The twin is that chunk with the sentence cut out: the same words around it, the answer gone, which is what the
    grader must tell apart.
    """
    pairs: list[tuple[str, str, float, str]] = []
    for item in items:
        evidence = next((c for c in item.answerable_view(top_k) if c.evidence), None)
        twin = next((c for c in item.near_miss or [] if evidence and c.chunk_id == evidence.chunk_id), None)
        if evidence is None or twin is None:
            continue
        answer = item.question.answers[0] if item.question.answers[0] in evidence.text else ""
        pairs += [(item.question.question, evidence.text, 1.0, answer), (item.question.question, twin.text, 0.0, "")]
    return pairs


_EDGE = 1e-6
"""Grades are clipped this far from 0 and 1 before taking logits (a conditioned-out chunk grades 0)."""


def logit(p: float) -> float:
    """The log-odds of a grade, clipped `_EDGE` from 0 and 1 (`sigmoid`'s inverse)."""
    p = min(max(p, _EDGE), 1 - _EDGE)
    return math.log(p / (1 - p))


def measure_shift(real: Sequence[float], pseudo: Sequence[float]) -> float:
    """How much lower, in logits, real questions' evidence grades than pseudo-questions': the gap between the medians.

    `real` and `pseudo` are the top grades of answerable questions with their evidence retrieved, over one corpus.
    Never above 0: a pseudo-question is never taken to be harder than a real one.

    Raises:
        ValueError: either side is empty.
    """
    if not real or not pseudo:
        raise ValueError("measuring the pseudo-question shift needs real and pseudo-question grades")
    gap = float(np.median([logit(p) for p in real]) - np.median([logit(p) for p in pseudo]))
    return min(0.0, round(gap, 4))


def shift_scores(obs: Sequence[Observation], shift: float) -> list[Observation]:
    """`obs` with every top grade moved by `shift` logits (the order of the grades, and so AUCs, unchanged)."""
    if not shift:
        return list(obs)
    return [replace(o, top_score=sigmoid(logit(o.top_score) + shift)) for o in obs]
