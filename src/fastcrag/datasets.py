"""Labelled question sets (SQuAD v1/v2 JSON, plain or gzipped) and BEIR queries and qrels."""

from __future__ import annotations

import csv
import gzip
import json
import random
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Literal

from fastcrag.retrieval.loaders import SourceDocument

QuestionClass = Literal["answerable", "unanswerable", "off_corpus"]


def read_qrels(path: Path) -> dict[str, dict[str, int]]:
    """BEIR qrels TSV (`query-id  corpus-id  score`, header optional) as {query: {doc: relevance}}."""
    qrels: dict[str, dict[str, int]] = {}
    with path.open(encoding="utf-8") as fh:
        for i, row in enumerate(csv.reader(fh, delimiter="\t")):
            if len(row) < 3 or (i == 0 and not row[2].strip().lstrip("-").isdigit()):
                continue
            qrels.setdefault(row[0], {})[row[1]] = int(row[2])
    return qrels


def read_queries(path: Path) -> dict[str, str]:
    """BEIR queries JSONL (`_id`, `text`), plain or gzipped."""
    opener = gzip.open if path.name.endswith(".gz") else open
    out: dict[str, str] = {}
    with opener(path, "rt", encoding="utf-8") as fh:
        for line in fh:
            if line.strip():
                row = json.loads(line)
                out[str(row["_id"])] = str(row["text"])
    return out


@dataclass(frozen=True)
class LabelledQuestion:
    """A question, its class, its gold answers, and the paragraph (source key) that holds them."""

    question: str
    kind: QuestionClass
    answers: tuple[str, ...]
    source: str
    title: str


def _files(path: Path) -> list[Path]:
    if path.is_dir():
        return sorted(p for p in path.iterdir() if p.name.endswith((".json", ".json.gz")))
    if path.is_file():
        return [path]
    raise FileNotFoundError(f"no such SQuAD file or folder: {path}")


def read_squad(path: Path) -> dict[str, Any]:
    """Merge the `data` arrays of every SQuAD JSON file at `path` (a file or a folder)."""
    articles: list[Any] = []
    for file in _files(path):
        opener = gzip.open if file.name.endswith(".gz") else open
        with opener(file, "rt", encoding="utf-8") as fh:
            articles.extend(json.load(fh)["data"])
    if not articles:
        raise ValueError(f"no SQuAD articles in {path}")
    return {"data": articles}


def squad_corpus_and_questions(
    squad: dict[str, Any],
) -> tuple[list[SourceDocument], list[LabelledQuestion]]:
    """Paragraphs as documents (source `Title#n`) and every question, answerable or not."""
    docs: list[SourceDocument] = []
    questions: list[LabelledQuestion] = []
    for article in squad["data"]:
        title = str(article["title"])
        for n, paragraph in enumerate(article["paragraphs"]):
            source = f"{title}#{n}"
            docs.append(SourceDocument(source, title.replace("_", " "), str(paragraph["context"])))
            for qa in paragraph["qas"]:
                impossible = bool(qa.get("is_impossible"))
                answers = tuple(dict.fromkeys(a["text"] for a in qa.get("answers", []) if a.get("text")))
                kind: QuestionClass = "unanswerable" if impossible or not answers else "answerable"
                questions.append(LabelledQuestion(str(qa["question"]), kind, answers, source, title))
    return docs, questions


def off_corpus_questions(squad: dict[str, Any], exclude_titles: set[str]) -> list[LabelledQuestion]:
    """Answerable questions of articles outside the corpus, relabelled `off_corpus` (the corpus cannot answer)."""
    _, questions = squad_corpus_and_questions(squad)
    return [
        LabelledQuestion(q.question, "off_corpus", q.answers, q.source, q.title)
        for q in questions
        if q.kind == "answerable" and q.title not in exclude_titles
    ]


def distractor_documents(squad: dict[str, Any], exclude_titles: set[str], n: int, seed: int) -> list[SourceDocument]:
    """The paragraphs of `n` seeded articles of `squad` outside `exclude_titles`, as extra corpus documents.

    They make the corpus big enough for first-pass retrieval to miss: a question's own article competes with
    articles it was not asked of.
    """
    if n <= 0:
        return []
    articles = [a for a in squad["data"] if str(a["title"]) not in exclude_titles]
    chosen = random.Random(seed).sample(articles, min(n, len(articles)))
    docs, _ = squad_corpus_and_questions({"data": chosen})
    return docs


def question_pools(squad: Path, off_corpus: Path) -> tuple[list[SourceDocument], dict[str, list[LabelledQuestion]]]:
    """The corpus paragraphs of `squad`, and its questions by class (off-corpus ones from articles outside it)."""
    docs, questions = squad_corpus_and_questions(read_squad(squad))
    titles = {q.title for q in questions}
    pools = {
        "answerable": [q for q in questions if q.kind == "answerable"],
        "unanswerable": [q for q in questions if q.kind == "unanswerable"],
        "off_corpus": off_corpus_questions(read_squad(off_corpus), titles),
    }
    return docs, pools


def sample(questions: list[LabelledQuestion], n: int, seed: int) -> list[LabelledQuestion]:
    """A seeded sample of at most `n` questions (order kept stable for a given seed)."""
    if n >= len(questions):
        return list(questions)
    return random.Random(seed).sample(questions, n)
