"""A few-label trial of `fastcrag fit`, end to end through the graph (written under runs/, never committed).

The protocol: label a few questions of a corpus, fit, then ask other questions of the same corpus, half of them
with their answer taken out of the index (only near misses left: the other snippets of the same article, or the same
paper without the sentences that state the answer). A fit is worth having when the graph then declines those while
it still answers the rest.

    python -m lab.scripts.fit_trial squad-snippets --out runs/trial-squad     # SQuAD 2.0 dev as 1-2 sentence snippets
    python -m lab.scripts.fit_trial squad-numbers --out runs/trial-numbers    # near misses state another number
    python -m lab.scripts.fit_trial covidqa --out runs/trial-covidqa          # COVID-QA papers in 128-token chunks
    python -m lab.scripts.fit_trial medquad --out runs/trial-medquad          # MedQuAD: an answer per document
    python -m lab.scripts.fit_trial selqa --out runs/trial-selqa              # SelQA: Wikipedia sections
    python -m lab.scripts.fit_trial pubmedqa --out runs/trial-pubmedqa        # PubMedQA: abstracts with conclusions
    python -m lab.scripts.fit_trial medquad --out runs/trial-medquad --rows base,notrain,plain
    python -m lab.scripts.fit_trial squad-snippets --out runs/trial-squad --minutes 5   # also a fit that fine-tunes
    python -m lab.scripts.fit_trial squad-numbers --out runs/trial-numbers --naming     # also labels naming conditions
    python -m lab.scripts.fit_trial summary runs/trial-medquad runs/trial-selqa         # one table over trials

Steps: pick the questions (seeded; `--fit` to fit on, `--test` to ask, half of which lose their evidence), write the
corpus as text files and index it with `fastcrag index`, run the fits of the chosen rows, then ask every test
question through the graph under each row. Writes `trial.md` and `trial.json` (with every answer's record).

Rows (`--rows`; default base, notrain, labelfree, pseudo, plain): `base` (the packaged calibration, or
FASTRAG_CALIBRATION); `notrain` (`fit` on the --fit labelled questions alone, `--pseudo 0`); `labelfree` (`fit`
without `--questions`: the fit makes its own pseudo-questions); `pseudo` (`fit --pseudo 200` on the labelled
questions: labels and pseudo-questions together); `plain` (plain RAG at the base calibration: no grading, no
abstention); `ict` (label-free, inverse-cloze pseudo-questions: `--pseudo-kinds ict`); `train` (`fit --train
--minutes M`) and `naming` (with --naming). A fit that fails skips its row with a message instead of ending the
trial.

Columns: abstention precision (the share of declined questions that were near misses), abstention recall (the share
of near misses declined), answerable answered, answerable answered right, and truthfulness (the mean over every
asked question of +1 for a right answer, 0 for a decline, -1 for a wrong one; an answered near miss is always wrong).

Corpora and their near misses (a near-miss question's evidence is taken out of the index; same-topic text stays):

- squad-snippets: SQuAD 2.0 dev paragraphs in two-sentence snippets; the near miss's snippet goes, the article's
  other snippets stay. squad-numbers: the snippet stays with the number the question names changed. covidqa: COVID-QA
  papers; the near miss's paper loses the sentences holding the answer.
- medquad: MedQuAD (the sources whose answers are published), a seeded sample of `--sample` foci (default 300) with
  at least two answered question types, no two sharing a focus name or UMLS concept (so no other focus answers the
  same question). A document per answer, titled with its focus; the near miss's answer document goes whole, the
  focus's other answers (its other question types) stay. Not airtight: an overview answer of the focus sometimes
  restates part of the removed one (its symptoms, its inheritance), and an answer quoting it still counts as wrong.
- selqa: SelQA answer-sentence selection (dev and test), a document per Wikipedia section (titled article: section;
  a seeded sample of `--sample` sections when given); the near miss's section stays without its answer sentences
  (only when at least two of its sentences remain).
- pubmedqa: PubMedQA PQA-L, a document per abstract (its sections, then its conclusion: the long answer). The near
  miss's abstract goes whole, and only abstracts that share two or more specific MeSH headings (each given to at most
  2% of the abstracts) with one other abstract are made near misses: a study of a related subject stays. The weakest
  near miss of the six (two studies sharing headings are often about different questions). Removing only the
  conclusion would not be a near miss: the results that stay are what PubMedQA asks a reader to answer from.

When an answer is right (`right`), per question:

- span questions (SQuAD, COVID-QA): a gold answer, normalised (SQuAD normalisation), stands in the answer on word
  boundaries.
- sentence questions (MedQuAD, SelQA, PubMedQA): the gold strings are the evidence's sentences (MedQuAD: the answer's
  sentences; SelQA: the positive sentences; PubMedQA: the conclusion's sentences), each of at least `MIN_GOLD_WORDS`
  words, no question, and (MedQuAD, PubMedQA) stated by no other document of the corpus, so boilerplate shared by
  many pages never makes an answer right. An answer is right when a gold sentence stands in it (as above), or when
  its first quoted sentence of at least `MIN_QUOTE_WORDS` words stands inside a gold sentence (the generator's
  sentence splitting may cut a gold sentence in two). Anything else answered is wrong.
"""

from __future__ import annotations

import argparse
import hashlib
import json
import math
import os
import random
import re
import subprocess
import sys
import tarfile
import time
import xml.etree.ElementTree as ET
from collections import Counter
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parents[2]
sys.path.insert(0, str(ROOT / "src"))  # the project's own code, installed or not

from fastcrag.evaluation.scoring import contains_gold, normalize_answer, summarize  # noqa: E402
from fastcrag.fileio import write_json_atomic, write_text_atomic  # noqa: E402
from fastcrag.grading.conditions import named_conditions  # noqa: E402
from fastcrag.retrieval.text import split_sentences  # noqa: E402
from lab.data import SHARED_DATA  # noqa: E402

CORPORA = ("squad-snippets", "squad-numbers", "covidqa", "medquad", "selqa", "pubmedqa")
MIN_GOLD_WORDS = 4
"""A sentence of the evidence shorter than this (a credit line, "Amasi") is no gold answer."""
MIN_QUOTE_WORDS = 5
"""An answer's quoted sentence shorter than this never makes it right by standing inside a gold sentence."""
MEDQUAD_FOCI = 300
"""MedQuAD foci sampled by default (about 1,200 answer documents)."""
MESH_SPECIFIC = 0.02
"""A MeSH heading given to at most this share of the PubMedQA abstracts names a subject (not Humans, Adult ...)."""
MESH_SHARED = 2
"""Specific MeSH headings a PubMedQA abstract shares with another one for the two to be about a related subject."""
PSEUDO = 200
"""Pseudo-questions added to the labels in the `pseudo` row."""


@dataclass
class Question:
    """A question of the trial corpus with its answers and the document that answers it.

    Attributes:
        question: The question.
        answers: Gold strings: answer spans, or (`sentences`) the evidence's sentences.
        doc: The name of the document that answers it.
        sentences: The answers are sentences: an answer quoting part of one is right too (`right`).
        near: Whether the question may be made a near miss (the corpus keeps same-topic text without its evidence).
        trimmed: The document's text as a near miss leaves it ("" to remove it), when the corpus says so.
    """

    question: str
    answers: tuple[str, ...]
    doc: str
    sentences: bool = False
    near: bool = True
    trimmed: str | None = None


def _norm(text: str) -> str:
    return " ".join(text.casefold().split())


def _slug(text: str, size: int = 40) -> str:
    return re.sub(r"[^A-Za-z0-9]+", "-", text).strip("-")[:size] or "doc"


def quoted_sentences(answer: str) -> list[str]:
    """The sentences an answer quotes: its paragraphs (span, then sentence) cut into sentences."""
    return [s for part in answer.split("\n\n") for s in split_sentences(part) if s.strip()]


def right(answer: str, q: Question) -> bool:
    """Whether an answer (not a decline) answers `q` right: the per-question rule of the module docstring."""
    if contains_gold(answer, q.answers):
        return True
    if not q.sentences:
        return False
    lead = next((s for s in quoted_sentences(answer) if len(normalize_answer(s).split()) >= MIN_QUOTE_WORDS), None)
    if lead is None:
        return False
    quote = f" {normalize_answer(lead)} "
    return any(quote in f" {normalize_answer(g)} " for g in q.answers)


def gold_sentences(text: str, shared: Counter[str] | None = None) -> tuple[str, ...]:
    """The sentences of `text` that can stand as gold answers.

    At least `MIN_GOLD_WORDS` words, not a question, and (with `shared`: how many documents state each normalised
    sentence) stated by one document only.
    """
    out: dict[str, None] = {}
    for s in split_sentences(text):
        norm = normalize_answer(s)
        if len(norm.split()) < MIN_GOLD_WORDS or s.rstrip().endswith("?"):
            continue
        if shared is not None and shared[norm] > 1:
            continue
        out[" ".join(s.split())] = None
    return tuple(out)


def squad_snippets(data: Path) -> tuple[dict[str, str], list[Question]]:
    """SQuAD 2.0 dev paragraphs cut into snippets of two sentences, each a document; answerable questions only."""
    docs: dict[str, str] = {}
    questions: list[Question] = []
    for file in sorted((data / "squad2-dev").glob("*.json")):
        for article in json.loads(file.read_text(encoding="utf-8"))["data"]:
            title = re.sub(r"[^A-Za-z0-9]+", "-", article["title"])[:40]
            for p, para in enumerate(article["paragraphs"]):
                sents = split_sentences(para["context"])
                snippets = [" ".join(sents[i : i + 2]) for i in range(0, len(sents), 2)]
                names = [f"{title}-{p:03d}-{k}" for k in range(len(snippets))]
                docs.update(zip(names, snippets, strict=True))
                for qa in para["qas"]:
                    answers = tuple(
                        dict.fromkeys(a["text"].strip() for a in qa.get("answers", []) if a["text"].strip())
                    )
                    home = [
                        n for n, s in zip(names, snippets, strict=True) if any(_norm(a) in _norm(s) for a in answers)
                    ]
                    if answers and not qa.get("is_impossible") and len(home) == 1:
                        questions.append(Question(qa["question"].strip(), answers, home[0]))
    return docs, questions


def covidqa(data: Path) -> tuple[dict[str, str], list[Question]]:
    """COVID-QA papers as documents (indexed in chunks), with their questions."""
    raw = json.loads((data / "train" / "covidqa" / "200423_covidQA.json").read_text(encoding="utf-8"))["data"]
    docs: dict[str, str] = {}
    questions: list[Question] = []
    for i, article in enumerate(raw):
        for para in article["paragraphs"]:
            name = f"{i:03d}-" + re.sub(r"[^A-Za-z0-9]+", "-", str(article.get("title") or "paper"))[:40]
            docs[name] = para["context"]
            for qa in para["qas"]:
                answers = tuple(dict.fromkeys(a["text"].strip() for a in qa["answers"] if a["text"].strip()))
                if answers:
                    questions.append(Question(qa["question"].strip(), answers, name))
    return docs, questions


@dataclass
class _Focus:
    """One MedQuAD focus document: its answered (question type, question, answer) triples."""

    key: str
    focus: str
    concepts: tuple[str, ...]
    pairs: list[tuple[str, str, str]]


def _medquad_focus(name: str, xml: bytes) -> _Focus | None:
    """A MedQuAD XML document as a focus with its answered pairs; None when it does not parse or has none."""
    try:
        root = ET.fromstring(xml)
    except ET.ParseError:
        return None
    focus = " ".join((root.findtext("Focus") or "").split())
    pairs = []
    for pair in root.iter("QAPair"):
        q, a = pair.find("Question"), pair.find("Answer")
        if q is None or a is None:
            continue
        question, answer = " ".join((q.text or "").split()), (a.text or "").strip()
        if question and answer:
            pairs.append((str(q.get("qtype") or "other"), question, answer))
    if not focus or not pairs:
        return None
    concepts = tuple(sorted({" ".join((c.text or "").split()) for c in root.iter("CUI") if c.text}))
    key = f"{Path(name).parent.name.split('_')[0]}-{root.get('id') or Path(name).stem}"
    return _Focus(key, focus, concepts, pairs)


def medquad_documents(foci: Sequence[_Focus]) -> tuple[dict[str, str], list[Question]]:
    """A document per answer, titled with its focus; each question's gold strings are its answer's own sentences.

    A question whose answer has no sentence of its own (stated by no other document) is left out. A focus's questions
    may be near misses when it has another answer document: its other question types stay in the index.
    """
    docs: dict[str, str] = {}
    owners: list[tuple[str, str, str, int]] = []  # (doc, question, answer, answered pairs of its focus)
    for f in foci:
        for k, (qtype, question, answer) in enumerate(f.pairs):
            name = f"{f.key}-{k + 1}-{_slug(qtype, 24)}"
            docs[name] = f"# {f.focus}\n\n{answer}"
            owners.append((name, question, answer, len(f.pairs)))
    shared: Counter[str] = Counter()
    for text in docs.values():
        shared.update({normalize_answer(s) for s in split_sentences(text)})
    questions = []
    for name, question, answer, siblings in owners:
        gold = gold_sentences(answer, shared)
        if gold:
            questions.append(Question(question, gold, name, sentences=True, near=siblings >= 2, trimmed=""))
    return docs, questions


def medquad(data: Path, sample: int = MEDQUAD_FOCI, seed: int = 7) -> tuple[dict[str, str], list[Question]]:
    """MedQuAD: a seeded sample of `sample` foci with two or more answered question types, a document per answer.

    No two foci of the sample share a focus name or a UMLS concept, so no other focus answers the same question.
    """
    path = data / "train" / "medquad" / "medquad.tar.gz"
    if not path.is_file():
        raise SystemExit(f"no MedQuAD archive at {path}")
    found: list[_Focus] = []
    with tarfile.open(path) as tar:
        for member in tar:
            if member.isfile() and member.name.endswith(".xml"):
                fh = tar.extractfile(member)
                focus = _medquad_focus(member.name, fh.read()) if fh is not None else None
                if focus is not None and len(focus.pairs) >= 2:
                    found.append(focus)
    found.sort(key=lambda f: f.key)
    random.Random(seed).shuffle(found)
    taken: set[str] = set()
    chosen: list[_Focus] = []
    for f in found:
        keys = {_norm(f.focus), *f.concepts}
        if keys & taken:
            continue
        taken |= keys
        chosen.append(f)
        if len(chosen) >= sample:
            break
    return medquad_documents(chosen)


def selqa_documents(rows: Sequence[Mapping[str, Any]]) -> tuple[dict[str, str], list[Question]]:
    """A document per Wikipedia section (titled article: section, a sentence a line); the positive sentences answer.

    The near miss keeps the section without the question's answer sentences, when two or more sentences remain.
    """
    docs: dict[str, str] = {}
    questions: list[Question] = []
    for row in rows:
        cands = [" ".join(str(c).split()) for c in row["candidates"]]
        title = f"{' '.join(str(row['article']).split())}: {' '.join(str(row['section']).split())}"
        digest = hashlib.sha256("\n".join([title, *cands]).encode()).hexdigest()[:8]
        name = f"{_slug(title, 48)}-{digest}"
        docs[name] = f"# {title}\n\n" + "\n\n".join(c for c in cands if c)
        picked = {int(i) for i in row["answers"] if 0 <= int(i) < len(cands)}
        gold = tuple(dict.fromkeys(cands[i] for i in sorted(picked) if gold_sentences(cands[i])))
        if not gold:
            continue
        golden = {_norm(g) for g in gold}
        left = [c for i, c in enumerate(cands) if i not in picked and c and _norm(c) not in golden]
        trimmed = f"# {title}\n\n" + "\n\n".join(left)
        questions.append(
            Question(" ".join(str(row["question"]).split()), gold, name, True, near=len(left) >= 2, trimmed=trimmed)
        )
    return docs, questions


def selqa(data: Path, sample: int = 0, seed: int = 7) -> tuple[dict[str, str], list[Question]]:
    """SelQA dev and test; a seeded sample of `sample` sections when given (0: every section)."""
    folder = data / "train" / "selqa"
    rows: list[Mapping[str, Any]] = []
    for part in ("dev", "test"):
        file = folder / f"selqa-ass-{part}.json"
        if not file.is_file():
            raise SystemExit(f"no SelQA file at {file}")
        rows.extend(json.loads(file.read_text(encoding="utf-8")))
    if sample:
        sections = sorted({(str(r["article"]), str(r["section"])) for r in rows})
        random.Random(seed).shuffle(sections)
        keep = set(sections[:sample])
        rows = [r for r in rows if (str(r["article"]), str(r["section"])) in keep]
    return selqa_documents(rows)


def pubmedqa_documents(records: Mapping[str, Mapping[str, Any]]) -> tuple[dict[str, str], list[Question]]:
    """A document per abstract (its sections, then its conclusion); the conclusion's own sentences answer.

    A question may be a near miss (its abstract removed whole) when its abstract shares `MESH_SHARED` specific MeSH
    headings (each given to at most `MESH_SPECIFIC` of the abstracts, and to two or more) with one other abstract:
    a study of a related subject stays.
    """
    docs: dict[str, str] = {}
    conclusions: dict[str, tuple[str, str, set[str]]] = {}
    frequency: Counter[str] = Counter()
    for pmid, rec in records.items():
        contexts = [" ".join(str(c).split()) for c in rec.get("CONTEXTS") or []]
        conclusion = " ".join(str(rec.get("LONG_ANSWER") or "").split())
        question = " ".join(str(rec.get("QUESTION") or "").split())
        if not question or not conclusion:
            continue
        name = f"pmid-{_slug(str(pmid), 16)}"
        docs[name] = "\n\n".join([*contexts, conclusion])
        mesh = {str(m) for m in rec.get("MESHES") or []}
        frequency.update(mesh)
        conclusions[name] = (question, conclusion, mesh)
    shared: Counter[str] = Counter()
    for text in docs.values():
        shared.update({normalize_answer(s) for s in split_sentences(text)})
    limit = max(2, int(MESH_SPECIFIC * len(docs)))
    specific = {name: {m for m in mesh if 2 <= frequency[m] <= limit} for name, (_, _, mesh) in conclusions.items()}
    holders: dict[str, set[str]] = {}
    for name, headings in specific.items():
        for m in headings:
            holders.setdefault(m, set()).add(name)
    questions = []
    for name, (question, conclusion, _) in conclusions.items():
        gold = gold_sentences(conclusion, shared)
        if gold:
            others = Counter(o for m in specific[name] for o in holders[m] if o != name)
            neighbour = max(others.values(), default=0) >= MESH_SHARED
            questions.append(Question(question, gold, name, sentences=True, near=neighbour, trimmed=""))
    return docs, questions


def pubmedqa(data: Path) -> tuple[dict[str, str], list[Question]]:
    """PubMedQA PQA-L: the 1,000 expert-labelled abstracts and their questions."""
    file = data / "train" / "pubmedqa" / "ori_pqal.json"
    if not file.is_file():
        raise SystemExit(f"no PubMedQA file at {file}")
    return pubmedqa_documents(json.loads(file.read_text(encoding="utf-8")))


def load(corpus: str, data: Path, sample: int, seed: int) -> tuple[dict[str, str], list[Question]]:
    """The documents and questions of a named corpus."""
    if corpus == "covidqa":
        return covidqa(data)
    if corpus == "medquad":
        return medquad(data, sample or MEDQUAD_FOCI, seed)
    if corpus == "selqa":
        return selqa(data, sample, seed)
    if corpus == "pubmedqa":
        return pubmedqa(data)
    return squad_snippets(data)


def perturbed(text: str, question: str, seed: int) -> str | None:
    """`text` with a number the question names changed (another year, quarter or edition); None when it has none.

    The near miss is about the same thing, under another condition: it answers another question.
    """
    asked = [n for n in re.findall(r"\b\d+\b", question) if re.search(rf"\b{n}\b", text)]
    if not asked:
        return None
    value = asked[0]
    other = str(int(value) + random.Random(f"{seed}:{question}").choice([-3, -2, -1, 1, 2, 3]))
    return re.sub(rf"\b{value}\b", other, text)


def without_answers(text: str, answers: Sequence[str]) -> str:
    """The document without the sentences that hold one of `answers` (the near miss left in the index)."""
    keep = [s for s in split_sentences(text) if not any(_norm(a) in _norm(s) for a in answers)]
    return "\n\n".join(keep)


def pick(
    docs: dict[str, str],
    questions: list[Question],
    n_fit: int,
    n_test: int,
    seed: int,
    whole: bool = False,
    numbers: bool = False,
) -> tuple[dict[str, str], list[Question], list[Question], list[Question]]:
    """The trial corpus and its fit, answerable-test and near-miss-test questions.

    A near-miss question's answer occurs in no other document; its own document loses the sentences holding it, or
    (`whole`, for a corpus of snippets) goes, or (`numbers`) stays with the number the question names changed
    (another year, quarter or edition: the snippet now answers another question), or becomes the question's own
    `trimmed` text when the corpus gives one (then one near miss per document). Only questions marked `near` become
    near misses. Fit and answerable questions keep their evidence in the trimmed corpus.
    """
    rng = random.Random(seed)
    pool = list(questions)
    rng.shuffle(pool)
    normed = [_norm(t) for t in docs.values()]
    where: dict[str, int] = {}
    for q in pool:
        key = _norm(q.answers[0])
        if key not in where:
            where[key] = sum(key in t for t in normed)
    near = [q for q in pool if q.near and where[_norm(q.answers[0])] == 1 and len(q.answers[0]) >= 3]
    if numbers:  # near misses under another condition: questions naming a number their snippet states
        near = [q for q in near if perturbed(docs[q.doc], q.question, seed) is not None]
    taken: set[str] = set()
    once = []
    for q in near:  # a corpus's own near-miss text is made for one question: one near miss per such document
        if q.trimmed is None or q.doc not in taken:
            once.append(q)
            taken.add(q.doc)
    near = once[: n_test // 2]
    corpus = dict(docs)
    for q in near:
        if numbers:
            corpus[q.doc] = perturbed(corpus[q.doc], q.question, seed) or corpus[q.doc]
        elif q.trimmed is not None:
            corpus[q.doc] = q.trimmed
        else:
            corpus[q.doc] = "" if whole else without_answers(corpus[q.doc], q.answers)
    near_ids = {id(q) for q in near}
    near_docs = {n.doc for n in near}
    rest = [
        q
        for q in pool
        if id(q) not in near_ids and q.doc not in near_docs and any(_norm(a) in _norm(corpus[q.doc]) for a in q.answers)
    ]
    used_docs: set[str] = set()
    fit: list[Question] = []
    for q in rest:  # fit questions: one per document, so that the test questions ask about other documents too
        if len(fit) < n_fit and q.doc not in used_docs:
            fit.append(q)
            used_docs.add(q.doc)
    answerable = [q for q in rest if q not in fit][: n_test - len(near)]
    return corpus, fit, answerable, near


def write_questions(path: Path, questions: Sequence[Question]) -> None:
    """A `fastcrag fit` questions file (`answers` labels)."""
    write_text_atomic(
        path, "".join(json.dumps({"question": q.question, "answers": list(q.answers)}) + "\n" for q in questions)
    )


def _run(cmd: list[str], log: Path, required: bool = True) -> bool:
    """Run a `fastcrag` command (this checkout's code), its output to `log`; a failure ends the trial if `required`."""
    print("$ " + " ".join(cmd), flush=True)
    env = {
        **os.environ,
        "PYTHONPATH": os.pathsep.join(p for p in [str(ROOT / "src"), os.environ.get("PYTHONPATH")] if p),
    }
    with log.open("a", encoding="utf-8") as fh:
        fh.write("$ " + " ".join(cmd) + "\n")
        fh.flush()
        done = subprocess.run(cmd, stdout=fh, stderr=subprocess.STDOUT, check=False, env=env)
    if done.returncode and required:
        raise SystemExit(f"failed ({done.returncode}): {' '.join(cmd)}; see {log}")
    return done.returncode == 0


def outcome(kind: str, record: Mapping[str, Any]) -> str:
    """A record's outcome: abstained, correct (an answerable question answered right) or wrong."""
    if record["declined"]:
        return "abstained"
    return "correct" if kind == "answerable" and record["right"] else "wrong"


def measure(records: Mapping[str, Sequence[Mapping[str, Any]]]) -> dict[str, Any]:
    """The trial's columns from the records of each kind (`answerable`, `near_miss`).

    Abstention precision (None when nothing was declined) and recall (None without near misses), the shares of
    answerable questions answered and answered right, truthfulness over every question (NaN when none).
    """
    ans, near = records.get("answerable", []), records.get("near_miss", [])
    flat = [
        {"kind": kind, "outcome": outcome(kind, r)}
        for kind in ("answerable", "near_miss")
        for r in records.get(kind, [])
    ]
    s = summarize(flat)

    def share(n: int, d: int) -> float | None:
        return round(n / d, 3) if d else None

    return {
        "abstention_precision": None if s.abstention_precision is None else round(s.abstention_precision, 3),
        "abstention_recall": None if s.abstention_recall is None else round(s.abstention_recall, 3),
        "answerable_answered": share(sum(not r["declined"] for r in ans), len(ans)),
        "answerable_right": share(sum(not r["declined"] and r["right"] for r in ans), len(ans)),
        "truthfulness": round(s.truthfulness, 3) if not math.isnan(s.truthfulness) else None,
        "near_miss_declined": share(sum(r["declined"] for r in near), len(near)),
        "asked": {"answerable": len(ans), "near_miss": len(near)},
    }


def ask_all(
    index: Path,
    reranker: str,
    calibration: Path | None,
    tests: list[tuple[str, Question]],
    plain: bool = False,
) -> dict[str, Any]:
    """Ask every test question through the graph (`plain`: as plain RAG); the columns and every record."""
    from fastcrag.config.settings import Settings
    from fastcrag.evaluation.abstention import variant_context
    from fastcrag.evaluation.scoring import is_abstention
    from fastcrag.graph.builder import build_graph

    settings = Settings()  # FASTRAG_RERANKER / FASTRAG_CALIBRATION name the base grader and its calibration
    settings = settings.model_copy(
        update={
            "index_dir": index,
            "reranker": reranker or settings.reranker,
            "calibration": calibration or settings.calibration,
            "llm": "extractive",
        }
    )
    graph = build_graph(settings=settings)
    context = variant_context("plain") if plain else None
    out: dict[str, list[dict[str, Any]]] = {"answerable": [], "near_miss": []}
    for kind, q in tests:
        result = graph.invoke({"question": q.question}, context=context)
        crag = result.get("crag") or {}
        answer = str(result.get("answer") or "")
        declined = is_abstention(answer, crag.get("action"), settings.abstain_message)
        out[kind].append(
            {
                "question": q.question,
                "answer": answer,
                "declined": declined,
                "right": not declined and kind == "answerable" and right(answer, q),
                "band": crag.get("band"),
                "action": crag.get("action"),
                "top_score": crag.get("top_score"),
            }
        )
    return {**measure(out), "records": out}


ROW_LABELS = {
    "base": "base calibration (FASTRAG_CALIBRATION or packaged)",
    "notrain": "fit on the labels alone (--pseudo 0)",
    "labelfree": "fit without labels",
    "ict": "fit without labels, inverse-cloze pseudo-questions",
    "pseudo": f"fit on the labels + {PSEUDO} pseudo-questions",
    "plain": "plain RAG (base calibration)",
    "train": "fit --minutes M (labels)",
    "naming": "fit on labels naming a condition",
}
DEFAULT_ROWS = ("base", "notrain", "labelfree", "pseudo", "plain")


def parse_rows(text: str | None, minutes: float, naming: bool) -> list[str]:
    """The rows to run: `--rows` (comma-separated), else every default row plus `train` / `naming` when asked for."""
    if text is None:
        return [*DEFAULT_ROWS, *(["train"] if minutes else []), *(["naming"] if naming else [])]
    rows = list(dict.fromkeys(r.strip() for r in text.split(",") if r.strip()))
    unknown = [r for r in rows if r not in ROW_LABELS]
    if unknown or not rows:
        raise SystemExit(
            f"--rows: unknown row(s) {', '.join(unknown) or '(none given)'}; rows: {', '.join(ROW_LABELS)}"
        )
    if "train" in rows and not minutes:
        raise SystemExit("--rows train needs --minutes M")
    return rows


def _fmt(value: float | None) -> str:
    return "n/a" if value is None else f"{value:.2f}"


TABLE_HEAD = [
    "| corpus (answerable + near misses) | row | abstention precision | abstention recall | answerable answered "
    "| answerable right | truthfulness |",
    "|---|---|---|---|---|---|---|",
]


def table_lines(corpus: str, rows: Mapping[str, Mapping[str, Any]]) -> list[str]:
    """One markdown table line per measured row."""
    lines = []
    for key, r in rows.items():
        n = r.get("asked") or {}
        cols = ("abstention_precision", "abstention_recall", "answerable_answered", "answerable_right", "truthfulness")
        lines.append(
            f"| {corpus} ({n.get('answerable', '?')} + {n.get('near_miss', '?')}) | {r.get('label') or key} | "
            + " | ".join(_fmt(r.get(c)) for c in cols)
            + " |"
        )
    return lines


def read_trial(folder: Path) -> tuple[str, dict[str, dict[str, Any]], dict[str, str]]:
    """A trial folder's corpus, measured rows and skipped rows (reason); an older trial.json is re-measured."""
    file = folder / "trial.json"
    if not file.is_file():
        raise SystemExit(f"{folder}: no trial.json (not a trial folder, or the trial did not finish)")
    try:
        data = json.loads(file.read_text(encoding="utf-8"))
    except json.JSONDecodeError as exc:
        raise SystemExit(f"{file}: not JSON ({exc})") from None
    if isinstance(data, dict) and "rows" in data:
        return str(data.get("corpus") or folder.name), dict(data["rows"]), dict(data.get("skipped") or {})
    rows = {}
    for label, result in data.items():  # the older layout: label -> figures and records
        if isinstance(result, dict) and "records" in result:
            rows[label] = {"label": label, **measure(result["records"])}
    return folder.name, rows, {}


def summary(folders: Sequence[Path]) -> str:
    """One markdown table over several trial folders, then the rows each skipped."""
    lines: list[str] = list(TABLE_HEAD)
    notes: list[str] = []
    for folder in folders:
        corpus, rows, skipped = read_trial(folder)
        lines.extend(table_lines(corpus, rows))
        notes.extend(f"- {corpus}: {ROW_LABELS.get(k, k)} skipped ({why})" for k, why in skipped.items())
    return "\n".join([*lines, *([""] if notes else []), *notes])


SWEEP = tuple(round(0.30 + 0.05 * i, 2) for i in range(14))
"""`reranker_threshold` values `sweep` tries (0.30 ... 0.95)."""


def sweep(folder: Path) -> dict[str, Any]:
    """Truthfulness against `reranker_threshold` in a trial folder (its `base` and `plain` rows).

    Each question counts as answered when its top grade in the `base` row reaches the threshold, and as right or
    wrong as plain RAG answered it (grading alone: no refinement, no reader floor); every answered near miss is
    wrong. Also the label-free fit's threshold (`fit-labelfree/calibration.json`) when there is one.
    """
    corpus, rows, _ = read_trial(folder)
    if not {"base", "plain"} <= set(rows):
        raise SystemExit(f"{folder}: sweep needs the base and plain rows (--rows base,plain,...)")
    base, plain = rows["base"]["records"], rows["plain"]["records"]
    pairs = [(kind, b, p) for kind in ("answerable", "near_miss") for b, p in zip(base[kind], plain[kind], strict=True)]
    curve = {}
    for t in SWEEP:
        answered = [(kind, p) for kind, b, p in pairs if (b.get("top_score") or 0.0) >= t]
        score = sum(1 if kind == "answerable" and p["right"] else -1 for kind, p in answered)
        curve[t] = round(score / max(1, len(pairs)), 3)
    fitted = folder / "fit-labelfree" / "calibration.json"
    label_free = json.loads(fitted.read_text(encoding="utf-8"))["reranker_threshold"] if fitted.is_file() else None
    return {"corpus": corpus, "curve": curve, "label_free": label_free}


def sweep_lines(folders: Sequence[Path]) -> list[str]:
    """One markdown table: truthfulness at each swept threshold, per trial folder, its peak and the label-free fit's."""
    head = [
        "| corpus | " + " | ".join(f"{t:.2f}" for t in SWEEP) + " | peak | label-free |",
        "|---" * (len(SWEEP) + 3) + "|",
    ]
    lines = []
    for folder in folders:
        r = sweep(folder)
        peak = max(r["curve"], key=lambda t: (r["curve"][t], t))
        lines.append(
            f"| {r['corpus']} | "
            + " | ".join(f"{v:.2f}" for v in r["curve"].values())
            + f" | {peak:.2f} ({r['curve'][peak]:.2f}) | {_fmt(r['label_free'])} |"
        )
    return [*head, *lines]


def _fits(
    a: argparse.Namespace,
    rows: list[str],
    out: Path,
    questions: list[Question],
    corpus: dict[str, str],
    fit_qs: list[Question],
    asked: set[str],
    log: Path,
) -> tuple[dict[str, Path | None], dict[str, str]]:
    """Run the fits of the chosen rows: row -> its fit folder (None: base calibration); skipped rows -> why."""
    index, labels = out / "index", out / "fit-questions.jsonl"
    fits: dict[str, Path | None] = {}
    skipped: dict[str, str] = {}
    runs: list[tuple[str, Path, list[str], bool]] = []  # (row, folder, arguments, required)
    for row in rows:
        if row in ("base", "plain"):
            fits[row] = None
        elif row == "notrain":
            runs.append((row, out / "fit-notrain", ["--questions", str(labels), "--pseudo", "0"], True))
        elif row == "labelfree":
            runs.append((row, out / "fit-labelfree", [], False))
        elif row == "ict":
            runs.append((row, out / "fit-ict", ["--pseudo-kinds", "ict"], False))
        elif row == "pseudo":
            runs.append((row, out / "fit-pseudo", ["--questions", str(labels), "--pseudo", str(PSEUDO)], False))
        elif row == "train":
            train = ["--questions", str(labels), "--train", "--minutes", str(a.minutes), "--data-root", str(a.data)]
            runs.append((row, out / "fit-train", train, True))  # the shared data's packaged mix is replayed
        elif row == "naming":
            naming = [
                q
                for q in questions
                if named_conditions(q.question)
                and q.question not in asked
                and any(_norm(x) in _norm(corpus.get(q.doc, "")) for x in q.answers)
            ]
            write_questions(out / "fit-naming.jsonl", [*naming, *fit_qs[: max(0, a.fit - len(naming))]])
            runs.append(
                (row, out / "fit-naming", ["--questions", str(out / "fit-naming.jsonl"), "--pseudo", "0"], True)
            )
    for row, folder, extra, required in runs:
        if not (folder / "calibration.json").is_file():
            cmd = [sys.executable, "-m", "fastcrag.cli", "fit", "--index", str(index), "--out", str(folder), "--quiet"]
            if not _run([*cmd, *extra], log, required):
                skipped[row] = f"`fastcrag fit {' '.join(extra)}` failed; see {log.name}"
                print(f"skipping row {row}: {skipped[row]}", flush=True)
                continue
        fits[row] = folder
    return fits, skipped


def trial(argv: Sequence[str] | None = None) -> None:
    """Run one trial (the command line without `summary`)."""
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("corpus", choices=CORPORA)
    p.add_argument("--data", type=Path, default=SHARED_DATA)
    p.add_argument("--out", type=Path, required=True)
    p.add_argument("--fit", type=int, default=40, help="labelled questions to fit on")
    p.add_argument("--test", type=int, default=60, help="questions asked after the fit (half of them near misses)")
    p.add_argument("--rows", help=f"comma-separated rows to run (default: all); rows: {', '.join(ROW_LABELS)}")
    p.add_argument(
        "--sample", type=int, default=0, help=f"medquad: foci ({MEDQUAD_FOCI}); selqa: sections (all); else unused"
    )
    p.add_argument("--minutes", type=float, default=0.0, help="also fit with a fine-tune of this many minutes")
    p.add_argument(
        "--naming",
        action="store_true",
        help="also fit on labels naming a year, ordinal, quarter or month: every such answerable question of the "
        "corpus whose evidence stays in it and that is not asked, topped up to --fit with the fit questions",
    )
    p.add_argument("--seed", type=int, default=7)
    a = p.parse_args(argv)
    rows = parse_rows(a.rows, a.minutes, a.naming)
    os.environ.setdefault("HF_HUB_OFFLINE", "1")
    started = time.perf_counter()
    docs, questions = load(a.corpus, a.data, a.sample, a.seed)
    corpus, fit_qs, answerable, near = pick(
        docs, questions, a.fit, a.test, a.seed, whole=a.corpus == "squad-snippets", numbers=a.corpus == "squad-numbers"
    )
    out = a.out.resolve()
    (out / "corpus").mkdir(parents=True, exist_ok=True)
    for name, text in corpus.items():
        if text.strip():
            write_text_atomic(out / "corpus" / f"{name}.txt", text)
    write_questions(out / "fit-questions.jsonl", fit_qs)
    print(
        f"{len(corpus)} documents; {len(fit_qs)} to fit; {len(answerable)} answerable and {len(near)} near-miss asked"
    )
    log = out / "trial.log"
    if not (out / "index").is_dir():
        _run([sys.executable, "-m", "fastcrag.cli", "index", str(out / "corpus"), "--index", str(out / "index")], log)
    asked = {q.question for q in [*answerable, *near]}
    fits, skipped = _fits(a, rows, out, questions, corpus, fit_qs, asked, log)
    tests = [("answerable", q) for q in answerable] + [("near_miss", q) for q in near]
    results: dict[str, Any] = {}
    for row in rows:
        if row not in fits:
            continue
        folder = fits[row]
        grader = str(folder / "grader") if folder is not None and (folder / "grader").is_dir() else ""
        calibration = folder / "calibration.json" if folder is not None else None
        label = f"fit --minutes {a.minutes:g} (labels)" if row == "train" else ROW_LABELS[row]
        t0 = time.perf_counter()
        results[row] = {"label": label, **ask_all(out / "index", grader, calibration, tests, plain=row == "plain")}
        results[row]["seconds"] = round(time.perf_counter() - t0, 1)
        results[row]["thresholds"] = (
            {
                k: json.loads(calibration.read_text())[k]
                for k in ("reranker_threshold", "crag_upper", "reader_threshold")
            }
            if calibration
            else None
        )
    wall = round(time.perf_counter() - started, 1)
    lines = [
        f"{a.corpus}: fit on {len(fit_qs)} questions, asked {len(answerable)} answerable and {len(near)} near-miss "
        f"({len(corpus)} documents; {wall:.0f} s)",
        "",
        *TABLE_HEAD,
        *table_lines(a.corpus, results),
        *([""] if skipped else []),
        *(f"- {ROW_LABELS[k]} skipped ({why})" for k, why in skipped.items()),
    ]
    report = {
        "corpus": a.corpus,
        "fit": len(fit_qs),
        "documents": len(corpus),
        "seconds": wall,
        "rows": results,
        "skipped": skipped,
    }
    write_text_atomic(out / "trial.md", "\n".join(lines) + "\n")
    write_json_atomic(out / "trial.json", report)
    print("\n".join(lines))


def main(argv: Sequence[str] | None = None) -> None:
    """Command line: a trial, `summary RUNDIR...` (one markdown table over trial folders), or `sweep RUNDIR...`."""
    args = list(sys.argv[1:] if argv is None else argv)
    if args[:1] == ["summary"]:
        p = argparse.ArgumentParser(prog="fit_trial summary", description="One markdown table over trial folders.")
        p.add_argument("folders", nargs="+", type=Path, help="trial folders (`--out` of earlier trials)")
        print(summary(p.parse_args(args[1:]).folders))
        return
    if args[:1] == ["sweep"]:
        p = argparse.ArgumentParser(
            prog="fit_trial sweep", description="Truthfulness against reranker_threshold over trial folders."
        )
        p.add_argument("folders", nargs="+", type=Path, help="trial folders with the base and plain rows")
        print("\n".join(sweep_lines(p.parse_args(args[1:]).folders)))
        return
    trial(args)


if __name__ == "__main__":
    main()
