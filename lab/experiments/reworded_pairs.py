"""Grader pairs whose questions are worded as people word them (lab/RESULTS.md, 2026-12-06, session 5).

The grader's pool asks as its sources ask: SQuAD's annotators, with the paragraph in front of them, and templates
over documentation headings ("What does CREATE TABLE do?"). A person asks otherwise: with an example, other verbs,
their situation first, vaguer, in their own terms. `lab/questions/reworded/` holds questions written that way by
hand, each for an item this script draws, never from an evaluation set:

- `squad-R.jsonl`: a SQuAD 1.1 train question (articles outside the pool's dev split) reworded in one of five ways
  (`example`, `verb`, `longer`, `vaguer`, `own-terms`: the paraphrase probe's kinds), kept with its article and
  the question's place among the article's questions, not SQuAD's text;
- `docs-NAME.jsonl`: a question a newcomer asks of a section of a manual no evaluation set uses (PostgreSQL's, the
  documentation the grader is trained on, round 0; Django's, round 1; SQLAlchemy's, round 2), `plain`, with the
  asker's `situation` first, or in their `own-terms`, kept with its page and section title; `skip` where the
  section's lead answers nothing a person asks (a page's footer or paging line read as a lead among them: the
  draw takes what the loader reads). Two sections of one page under one heading share their item's question (the
  first draw drew one such pair twice; one question is kept).

    python -m lab.experiments.reworded_pairs draw OUT_DIR --round R --docs NAME=DIR   # the items, 8 files of each kind
    python -m lab.experiments.reworded_pairs pairs OUT.jsonl --round R ... --docs NAME=DIR ...   # pairs for --user-data
    python -m lab.experiments.reworded_pairs questions OUT.jsonl --docs NAME=DIR [--size 120 --seed 20261207]

DIR is `bash scripts/fetch_docs_corpus.sh --corpus NAME DIR` (postgresql, django, sqlalchemy); round R draws the SQuAD
items after those of the rounds before it. The pairs: a reworded SQuAD question against its own paragraph and its answer
sentence (1, with the answer for the reader's span), a paragraph of the article without the answer and another sentence
of its paragraph (0); a newcomer's question against its section as `lab.scripts.docs_pairs` pairs a templated one (the
lead and the opening 1, a side sentence 0.3, a row or code 0, a neighbouring subject's lead 0, a random page's lead 0).
With `--cross` and two manuals or more, each newcomer's question is also paired against the section of every other
manual whose lead the embedder places nearest it (0, where their cosine is below `CROSS_BELOW`): a question asked of the
wrong manual, as the off-corpus check asks it. Groups keep an article's or a page's pairs on one side of the pool's dev
split.
"""

from __future__ import annotations

import argparse
import json
import random
import re
from pathlib import Path
from typing import Any

from fastcrag.fileio import write_text_atomic
from fastcrag.fitting.mix import Article, is_dev_group, load_squad
from fastcrag.retrieval.text import titled
from lab.data import SHARED_DATA
from lab.scripts.docs_pairs import Topic, collect, make_pairs

HERE = Path(__file__).resolve().parent.parent / "questions" / "reworded"
SQUAD = SHARED_DATA / "train" / "squad11-train" / "train-v1.1.from_explorer.json.gz"
FILES, PER_FILE, SEED = 8, 150, 20261206
LEAD_WORDS = (12, 90)
CROSS_BELOW = 0.55  # the embedder's cosine above which another manual's section may well answer (they share topics)
_SENTENCE = re.compile(r"(?<=[.!?])\s+(?=[A-Z])")


def _train_articles() -> list[Article]:
    return [a for a in load_squad(SQUAD) if not is_dev_group(f"squad11:{a.title}", 5.0)]


def _answer_sentence(article: Article, paragraph: int, answer: str) -> str | None:
    return next((s for s in _SENTENCE.split(article.paragraphs[paragraph]) if answer in s), None)


def _with_lead(topics: list[Topic]) -> list[Topic]:
    """The sections whose lead is long enough to answer with and short enough to read as one answer."""
    return [t for t in topics if LEAD_WORDS[0] <= len(t.lead.split()) <= LEAD_WORDS[1]]


def _topic_key(t: Topic) -> str:
    return f"{t.page}#{t.title}"


def section_page(key: str) -> str:
    """The page of a written question's section key (`_topic_key`'s `page#title`)."""
    return key.split("#", 1)[0]


def draw(out: Path, squad_round: int, corpus: Path) -> None:
    """The items to word: one SQuAD question per (article, answer sentence), one section per page mostly."""
    rng = random.Random(SEED)
    articles = _train_articles()
    items: list[dict[str, Any]] = []
    for a in articles:
        for n, q in enumerate(a.questions):
            if not q.impossible and q.answers and (s := _answer_sentence(a, q.paragraph, q.answers[0])):
                item = {"article": a.title, "question_index": n, "question": q.question, "answer": q.answers[0]}
                items.append(item | {"sentence": s})
    rng.shuffle(items)
    seen: set[tuple[str, str]] = set()
    squad = []
    for it in items:
        if (key := (it["article"], it["sentence"][:40])) not in seen:
            seen.add(key)
            squad.append(it)
    topics = _with_lead(collect(corpus))
    rng.shuffle(topics)
    pages: set[str] = set()
    docs = []
    for t in topics:
        if t.page in pages and rng.random() < 0.7:
            continue
        pages.add(t.page)
        docs.append({"id": _topic_key(t), "section": t.title, "passage": t.lead})
    out.mkdir(parents=True, exist_ok=True)
    squad = squad[squad_round * FILES * PER_FILE :]
    prefix = "sq" if squad_round == 0 else f"sq{squad_round}"
    for k in range(FILES):
        part = squad[k * PER_FILE : (k + 1) * PER_FILE]
        rows = [
            {"id": f"{prefix}-{k}-{i:03d}", **it, "title": it["article"].replace("_", " ")} for i, it in enumerate(part)
        ]
        write_text_atomic(out / f"squad-{k}.jsonl", "".join(json.dumps(r, ensure_ascii=False) + "\n" for r in rows))
        part_docs = docs[k * PER_FILE : (k + 1) * PER_FILE]
        write_text_atomic(out / f"docs-{k}.jsonl", "".join(json.dumps(r, ensure_ascii=False) + "\n" for r in part_docs))


def squad_pairs(rounds: list[int], rng: random.Random) -> list[dict[str, object]]:
    """The reworded SQuAD questions' pairs, of the rounds named."""
    articles = {a.title: a for a in _train_articles()}
    rows: list[dict[str, object]] = []
    lines = [line for r in rounds for line in (HERE / f"squad-{r}.jsonl").open(encoding="utf-8")]
    for line in lines:
        r = json.loads(line)
        a, q = articles[r["article"]], r["reworded"]
        asked = a.questions[int(r["question_index"])]
        p, answer = asked.paragraph, asked.answers[0]
        group = f"reworded:{a.title}"
        sentence = _answer_sentence(a, p, answer)
        rows.append({"question": q, "passage": a.paragraphs[p], "label": 1, "answer": answer, "group": group})
        if sentence:
            rows.append({"question": q, "passage": sentence, "label": 1, "answer": answer, "group": group})
            others = [s for s in _SENTENCE.split(a.paragraphs[p]) if answer not in s and len(s.split()) >= 6]
            if others:
                rows.append({"question": q, "passage": rng.choice(others), "label": 0, "group": group})
        without = [x for i, x in enumerate(a.paragraphs) if i != p and answer.lower() not in x.lower()]
        if without:
            rows.append({"question": q, "passage": rng.choice(without), "label": 0, "group": group})
    return rows


def written_questions(name: str) -> dict[str, str]:
    """Manual `name`'s written questions by section key (skipped sections left out)."""
    rows = (json.loads(line) for line in (HERE / f"docs-{name}.jsonl").open(encoding="utf-8"))
    return {r["id"]: r["question"] for r in rows if r["question"]}


def _group(name: str, page: str) -> str:
    # PostgreSQL's groups keep the name v6 was trained with, so its pairs rebuild byte for byte
    return f"reworded-docs:{page}" if name == "postgresql" else f"reworded-{name}:{page}"


def written_topics(name: str, topics: list[Topic]) -> list[tuple[str, Topic]]:
    """Manual `name`'s written questions with the section each asks of (`topics`: the manual's, as `collect` reads)."""
    written = written_questions(name)
    return [(written[_topic_key(t)], t) for t in topics if _topic_key(t) in written]


def docs_pairs(name: str, topics: list[Topic], rng: random.Random) -> list[dict[str, object]]:
    """The newcomers' questions of manual `name` (its `topics`), paired as `lab.scripts.docs_pairs` pairs one."""
    asked = {_topic_key(t): q for q, t in written_topics(name, topics)}
    rows = make_pairs([t for t in topics if _topic_key(t) in asked], rng, ask=lambda t, _rng: asked[_topic_key(t)])
    for r in rows:
        r["group"] = _group(name, str(r["group"]))
    return rows


def cross_pairs(manuals: dict[str, list[Topic]]) -> list[dict[str, object]]:
    """Each newcomer's question against the nearest section lead (packaged embedder) of every other manual: 0.

    Left out where that lead's cosine reaches `CROSS_BELOW`: the training manuals all speak of databases, and above it
    the other manual often answers ("What is a check constraint?" against PostgreSQL's glossary, 0.84).
    """
    import numpy as np

    from fastcrag.retrieval.embeddings import default_embeddings

    embed = default_embeddings()
    leads = {}
    for name, topics in manuals.items():
        kept = _with_lead(topics)
        leads[name] = (kept, np.asarray(embed.embed_documents([titled(t.title, t.lead) for t in kept])))
    rows: list[dict[str, object]] = []
    for name, topics in manuals.items():
        pairs = written_topics(name, topics)
        questions, asked = [q for q, _ in pairs], [t for _, t in pairs]
        vectors = np.asarray(embed.embed_documents(questions))
        for other, (kept, matrix) in leads.items():
            if other == name or not kept:
                continue
            scores = vectors @ matrix.T
            for t, q, best, cosine in zip(asked, questions, scores.argmax(axis=1), scores.max(axis=1), strict=True):
                if cosine >= CROSS_BELOW:
                    continue
                near = kept[int(best)]
                passage = titled(near.title, near.lead)
                rows.append(
                    {
                        "question": q,
                        "passage": passage,
                        "label": 0.0,
                        "group": _group(name, t.page),
                        "kind": "other-manual",
                    }
                )
    return rows


def question_set(name: str, size: int, seed: int) -> list[dict[str, object]]:
    """`size` of manual `name`'s written questions drawn at random, as a `fastcrag eval docs` question set.

    A development measure of what reads the manual (the loader, the first pass), never of a grader trained on these
    questions; only the right page (first, cited) and abstention are meant to be read: the key term is a placeholder.
    """
    written = written_questions(name)
    drawn = random.Random(seed).sample(sorted(written), size)
    return [
        {
            "id": f"{name[:2]}-{n:03d}",
            "question": written[key],
            "sources": [section_page(key)],
            "sentence": "",
            "key_terms": [name],
            "kind": "explain",
            "category": "written",
        }
        for n, key in enumerate(drawn)
    ]


def main() -> int:
    """`draw` the items, write the `pairs` of the written questions, or a `questions` set of one manual's."""
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("command", choices=["draw", "pairs", "questions"])
    ap.add_argument("out")
    ap.add_argument("--round", type=int, action="append", default=[], help="SQuAD rewordings of this round")
    ap.add_argument("--docs", action="append", default=[], help="NAME=DIR: a manual as fetch_docs_corpus.sh fetches it")
    ap.add_argument("--repeat", type=int, default=1, help="write each pair this many times (weight in the pool)")
    ap.add_argument("--cross", action="store_true", help="pair each manual's questions with the other manuals' nearest")
    ap.add_argument("--size", type=int, default=120, help="questions: how many to draw")
    ap.add_argument("--seed", type=int, default=20261207, help="questions: the draw's seed")
    args = ap.parse_args()
    manuals = [(name, Path(folder)) for name, folder in (d.split("=", 1) for d in args.docs)]
    if args.command == "questions":
        if len(manuals) != 1:
            ap.error("questions needs one --docs NAME=DIR")
        rows = question_set(manuals[0][0], args.size, args.seed)
        write_text_atomic(Path(args.out), "".join(json.dumps(r, ensure_ascii=False) + "\n" for r in rows))
        return 0
    if args.command == "draw":
        if not manuals:
            ap.error("draw needs --docs NAME=DIR")
        draw(Path(args.out), (args.round or [0])[0], manuals[0][1])
        return 0
    rng = random.Random(SEED)
    rows = squad_pairs(args.round or [0], rng)
    topics = {name: collect(folder) for name, folder in manuals}
    for name, found in topics.items():
        rows += docs_pairs(name, found, rng)
    if args.cross:
        rows += cross_pairs(topics)
    rows = [r for r in rows for _ in range(args.repeat)]
    rng.shuffle(rows)
    write_text_atomic(Path(args.out), "".join(json.dumps(r, ensure_ascii=False) + "\n" for r in rows))
    print(f"{len(rows)} pairs ({sum(r['label'] == 1 for r in rows)} positive) -> {args.out}")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
