"""Pairs SQuAD's questions do not teach the grader; tried on the CPU, not kept (lab/RESULTS.md, 2026-12-06).

- A question that carries its asker's situation: a preamble (a sentence of another paragraph of the same article, in
  one of a few framings: "I was reading that ...", "I'm working on something about <title>.") before the question,
  against its own paragraph (1) and against a paragraph of the same article without the answer (0);
- the same word in another sense: the question against a paragraph of another article that holds the question's
  rarest word (0), the way "What does abort do?" meets git-merge's `--abort`.

SQuAD 1.1 train articles of the pool's dev split are left out. Then v4 trained on them beside a smaller pool:

    python lab/experiments/grader_aug_pairs.py OUT/aug.jsonl
    python -m lab unpack-grader --out OUT/v4-torch
    python -m lab train-reranker --output OUT/run --base-model OUT/v4-torch --user-data OUT/aug.jsonl \
        --squad-questions 6000 --max-pairs 30000 --max-length 192 --max-minutes 25 --lr 2e-5 \
        --export OUT/export --name fastcrag-grader-reader-minilm-l6-aug
    python -m lab calibrate --reranker OUT/export --out OUT/calibration.json
"""

from __future__ import annotations

import json
import random
import re
import sys
from collections import Counter
from pathlib import Path

from fastcrag.fitting.mix import Article, is_dev_group, load_squad
from lab.data import SHARED_DATA

PREAMBLES, OTHER_SENSE = 4500, 4500
_WORD = re.compile(r"[A-Za-z][A-Za-z0-9'-]{2,}")
_SENTENCE = re.compile(r"(?<=[.!?])\s+(?=[A-Z])")
_STOP = frozenset(
    "what which who whom whose when where why how does did the and for are was were has have had with that this from "
    "into about than then they them their there these those been being its can could would should will may might must "
    "not but any all some such other another more most many much few each very also just only over under after before "
    "during between your you our is it's shall do".split()
)
_FRAMES = (
    "I was reading that {s}",
    "{s}",
    "I know that {s}",
    "Context: {s}",
    "I'm reading about {t}. {s}",
    "I'm working on something about {t}.",
)


def preamble(article: Article, avoid: int, rng: random.Random) -> str | None:
    """A sentence of another paragraph of the article, framed as the asker's situation; None when there is none."""
    others = [i for i in range(len(article.paragraphs)) if i != avoid]
    if not others:
        return None
    sentences = [s for s in _SENTENCE.split(article.paragraphs[rng.choice(others)]) if 6 <= len(s.split()) <= 28]
    if not sentences:
        return None
    s, frame = rng.choice(sentences).strip(), rng.choice(_FRAMES)
    if frame.startswith(("I was", "I know")) and not s[:2].isupper():
        s = s[0].lower() + s[1:]
    text = frame.format(s=s, t=article.title.replace("_", " "))
    return text if text.endswith((".", "!", "?")) else text + "."


def main(out: Path, seed: int = 7) -> None:
    """Write the pairs as JSONL (`question`, `passage`, `label`, `answer`, `group`)."""
    rng = random.Random(seed)
    articles = load_squad(SHARED_DATA / "train" / "squad11-train" / "train-v1.1.from_explorer.json.gz")
    articles = [a for a in articles if not is_dev_group(f"squad11:{a.title}", 5.0)]
    paragraphs = [(ai, pi) for ai, a in enumerate(articles) for pi in range(len(a.paragraphs))]
    words = [{w.lower() for w in _WORD.findall(articles[ai].paragraphs[pi])} for ai, pi in paragraphs]
    df = Counter(w for ws in words for w in ws)
    holding: dict[str, list[int]] = {}
    for k, ws in enumerate(words):
        for w in ws:
            if 2 <= df[w] <= 60:
                holding.setdefault(w, []).append(k)
    questions = [(ai, q) for ai, a in enumerate(articles) for q in a.questions if not q.impossible and q.answers]
    rng.shuffle(questions)
    rows, n_pre, n_other = [], 0, 0
    for ai, q in questions[: 2 * PREAMBLES]:
        a, answer = articles[ai], q.answers[0]
        group = f"aug:{a.title}"
        pre = preamble(a, q.paragraph, rng)
        if pre and n_pre < PREAMBLES:
            asked = f"{pre} {q.question}"
            rows.append(
                {"question": asked, "passage": a.paragraphs[q.paragraph], "label": 1, "answer": answer, "group": group}
            )
            without = [p for i, p in enumerate(a.paragraphs) if i != q.paragraph and answer.lower() not in p.lower()]
            if without:
                rows.append({"question": asked, "passage": rng.choice(without), "label": 0, "group": group})
            n_pre += 1
        rare = [w.lower() for w in _WORD.findall(q.question) if w.lower() not in _STOP and df[w.lower()] >= 2]
        if rare and n_other < OTHER_SENSE:
            elsewhere = [k for k in holding.get(min(rare, key=lambda w: df[w]), []) if paragraphs[k][0] != ai]
            if elsewhere:
                oa, op = paragraphs[rng.choice(elsewhere)]
                rows.append(
                    {"question": q.question, "passage": articles[oa].paragraphs[op], "label": 0, "group": group}
                )
                n_other += 1
    rng.shuffle(rows)
    out.parent.mkdir(parents=True, exist_ok=True)
    out.write_text("".join(json.dumps(r) + "\n" for r in rows), encoding="utf-8")
    print(f"{len(rows)} pairs: {n_pre} questions with a preamble, {n_other} other-sense negatives -> {out}")


if __name__ == "__main__":
    main(Path(sys.argv[1]))
