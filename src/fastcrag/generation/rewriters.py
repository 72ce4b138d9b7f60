"""The keyword rewrite: a search query made without a language model, for when the chat model cannot rewrite.

It keeps what identifies the question (quoted phrases, entities, numbers, content words), drops question words
and stop words, and adds a few expansion terms from the first pass's best candidates (pseudo-relevance
feedback). The result is a bag of search terms, meant for lexical search.
"""

from __future__ import annotations

import math
import re
from collections import Counter
from collections.abc import Callable, Sequence

from fastcrag.retrieval.lexical import STOP_WORDS

#: Words that ask rather than describe: they never help a search.
QUESTION_WORDS = frozenset(
    """what which who whom whose when where why how whats does do did is are was were can could should would
    will explain describe tell show give list name define definition meaning mean means example examples use used
    using way ways difference differences kind type happen happens""".split()
)
_QUOTED = re.compile(r"[\"“”„«»]([^\"“”„«»]{1,200})[\"“”„«»]")
_TOKEN = re.compile(r"[\w][\w.+#-]*[\w+#]|\w", re.UNICODE)
FEEDBACK_PASSAGES = 3
EXPANSIONS = 3


def _keep(token: str) -> bool:
    low = token.casefold()
    if low in STOP_WORDS or low in QUESTION_WORDS or (len(low) == 1 and low.isalpha()):
        return False
    return any(ch.isalnum() for ch in low)


def keywords(question: str) -> list[str]:
    """Quoted phrases (quoted), then the question's other kept tokens in order, each once.

    A quoted phrase without a letter or a digit (`":"`) is no keyword: nothing to search for.
    """
    phrases = [f'"{p.strip()}"' for p in _QUOTED.findall(question) if any(ch.isalnum() for ch in p)]
    rest = _QUOTED.sub(" ", question)
    seen = {p.casefold() for p in phrases}
    out = list(dict.fromkeys(phrases))
    for token in _TOKEN.findall(rest):
        if _keep(token) and token.casefold() not in seen:
            seen.add(token.casefold())
            out.append(token)
    return out


def expansion_terms(
    feedback: Sequence[str],
    exclude: Sequence[str],
    idf: Callable[[str], float] | None = None,
    n: int = EXPANSIONS,
) -> list[str]:
    """The `n` words that best characterise the feedback passages and are not already in the query.

    A word's weight is (passages holding it) x log(1 + its count) x its idf (1 without an index); words in only one
    of several passages are left out, so one passage's oddities do not steer the search.
    """
    if n <= 0 or not feedback:
        return []
    excluded = {w.casefold() for e in exclude for w in _TOKEN.findall(e)}
    counts: Counter[str] = Counter()
    holders: Counter[str] = Counter()
    for text in feedback:
        tokens = [t.casefold() for t in _TOKEN.findall(text)]
        tokens = [t for t in tokens if len(t) > 2 and t.isalpha() and _keep(t) and t not in excluded]
        counts.update(tokens)
        holders.update(set(tokens))
    need = 2 if len(feedback) > 1 else 1
    weight = {
        w: holders[w] * (1.0 + math.log(counts[w])) * (idf(w) if idf else 1.0) for w in counts if holders[w] >= need
    }
    ranked = sorted((w for w in weight if weight[w] > 0), key=lambda w: (-weight[w], w))
    return ranked[:n]


def keyword_rewrite(
    question: str,
    feedback: Sequence[str] = (),
    idf: Callable[[str], float] | None = None,
    expansions: int = EXPANSIONS,
) -> str:
    """The keyword query for `question` ('' when it has no keywords).

    Its keywords, then expansion terms from the first `FEEDBACK_PASSAGES` of `feedback` (passages, best first).
    """
    kept = keywords(question)
    extra = expansion_terms(list(feedback)[:FEEDBACK_PASSAGES], [question], idf, expansions) if kept else []
    return " ".join([*kept, *extra])
