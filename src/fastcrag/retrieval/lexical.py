"""The lexical side of retrieval: BM25 over stemmed words, stored as sparse NumPy arrays (no pickle)."""

from __future__ import annotations

import re
import zipfile
from collections import Counter
from collections.abc import Sequence
from functools import lru_cache
from pathlib import Path
from typing import Any

import numpy as np
import Stemmer

FILE = "lexical.npz"
K1, B = 0.9, 0.4  # BM25 parameters that suit short passages (Anserini's defaults)
_WORD = re.compile(r"\w+", re.UNICODE)

# English function words: they carry no topic, and BM25 spends its matching budget on what does.
STOP_WORDS = frozenset(
    """a about above after again against all am an and any are aren't as at be because been before being below
    between both but by can cannot could did do does doing done down during each either else ever every few for
    from further had has have having he her here hers herself him himself his how however i if in into is it its
    itself just least less let like many may me might more most much must my myself neither no nor not now of
    off on once only or other ought our ours ourselves out over own per perhaps please quite rather same shall
    she should since so some such than that the their theirs them themselves then there these they this those
    though through thus to too under until up upon us very via was we were what whatever when where whether which
    while who whom whose why will with within without would yet you your yours yourself yourselves""".split()
)


class LexicalIndexError(RuntimeError):
    """The lexical index file is missing, damaged or out of step with the chunk store; the message names it."""


@lru_cache(maxsize=1)
def _stemmer() -> Any:
    return Stemmer.Stemmer("english")


def words(text: str) -> list[str]:
    """Lower-cased word tokens minus stop words, in order (not stemmed)."""
    return [w for w in _WORD.findall(text.casefold()) if w not in STOP_WORDS]


def terms(text: str) -> list[str]:
    """BM25 terms of a text: `words`, Snowball-stemmed."""
    return list(_stemmer().stemWords(words(text)))


def _idf(df: int, n: int) -> float:
    """BM25 inverse document frequency of a term held by `df` of `n` rows (Lucene's, never negative)."""
    return float(np.log1p((n - df + 0.5) / (df + 0.5)))


class LexicalIndex:
    """BM25 over a list of texts: a term x document matrix of BM25 weights (CSR), row per vocabulary term."""

    def __init__(self, vocab: Sequence[str], indptr: Any, indices: Any, weights: Any, rows: int) -> None:
        """Wrap the arrays; use `build` or `load` rather than calling this directly."""
        self.vocab = {t: i for i, t in enumerate(vocab)}  # insertion order is row order
        self.indptr = np.asarray(indptr, dtype=np.int64)
        self.indices = np.asarray(indices, dtype=np.int32)
        self.weights = np.asarray(weights, dtype=np.float32)
        self.rows = int(rows)

    @classmethod
    def build(cls, texts: Sequence[str]) -> LexicalIndex:
        """Index `texts` (one row each, in order)."""
        postings: dict[str, list[tuple[int, int]]] = {}
        lengths = np.zeros(len(texts), dtype=np.float32)
        for row, text in enumerate(texts):
            counts = Counter(terms(text))
            lengths[row] = sum(counts.values())
            for term, tf in counts.items():
                postings.setdefault(term, []).append((row, tf))
        n = len(texts)
        avg = float(lengths.mean()) if n and lengths.sum() else 1.0
        vocab = sorted(postings)
        indptr = np.zeros(len(vocab) + 1, dtype=np.int64)
        indices: list[int] = []
        weights: list[float] = []
        for i, term in enumerate(vocab):
            plist = postings[term]
            idf = _idf(len(plist), n)
            docs = np.fromiter((r for r, _ in plist), dtype=np.int32, count=len(plist))
            freqs = np.fromiter((t for _, t in plist), dtype=np.float32, count=len(plist))
            norm = K1 * (1.0 - B + B * lengths[docs] / avg)
            indices.extend(docs.tolist())
            weights.extend((idf * freqs * (K1 + 1.0) / (freqs + norm)).tolist())
            indptr[i + 1] = len(indices)
        return cls(vocab, indptr, indices, weights, n)

    def __len__(self) -> int:
        return self.rows

    def idf(self, word: str) -> float:
        """BM25 inverse document frequency of a word (stemmed here); 0 for a word the index does not hold."""
        i = self.vocab.get(_stemmer().stemWord(word.casefold()))
        if i is None:
            return 0.0
        return _idf(int(self.indptr[i + 1] - self.indptr[i]), self.rows)

    def scores(self, query: str) -> np.ndarray:
        """BM25 score of every row for `query` (zeros when no query term is indexed)."""
        out = np.zeros(self.rows, dtype=np.float32)
        for term in set(terms(query)):
            i = self.vocab.get(term)
            if i is not None:
                lo, hi = self.indptr[i], self.indptr[i + 1]
                np.add.at(out, self.indices[lo:hi], self.weights[lo:hi])
        return out

    def search(self, query: str, k: int) -> list[tuple[int, float]]:
        """The top `k` rows with a positive score, best first: (row, score)."""
        scores = self.scores(query)
        hits = np.flatnonzero(scores > 0)
        if hits.size == 0 or k <= 0:
            return []
        if hits.size > k:
            hits = hits[np.argpartition(-scores[hits], k - 1)[:k]]
        order = hits[np.argsort(-scores[hits], kind="stable")]
        return [(int(r), float(scores[r])) for r in order]

    def save(self, path: Path) -> None:
        """Write the index as one `.npz` of plain arrays (the caller makes the folder swap atomic)."""
        with open(path, "wb") as fh:
            np.savez(
                fh,
                vocab=np.asarray(list(self.vocab), dtype=np.str_),
                indptr=self.indptr,
                indices=self.indices,
                weights=self.weights,
                rows=np.asarray([self.rows], dtype=np.int64),
            )

    @classmethod
    def load(cls, path: Path, rows: int) -> LexicalIndex:
        """Read an index written by `save`, checking it covers exactly `rows` chunks.

        Raises:
            LexicalIndexError: the file is missing, damaged, or indexes another number of chunks.
        """
        try:
            with np.load(path, allow_pickle=False) as data:
                index = cls(data["vocab"].tolist(), data["indptr"], data["indices"], data["weights"], data["rows"][0])
        except FileNotFoundError:
            raise LexicalIndexError(f"lexical index {path} is missing; rebuild the index") from None
        except (OSError, ValueError, KeyError, IndexError, EOFError, zipfile.BadZipFile) as exc:
            raise LexicalIndexError(f"lexical index {path} is damaged ({type(exc).__name__}); rebuild it") from None
        bad_shape = len(index.indptr) != len(index.vocab) + 1 or len(index.indices) != len(index.weights)
        if bad_shape or (len(index.indices) and int(index.indices.max()) >= index.rows):
            raise LexicalIndexError(f"lexical index {path} is damaged (inconsistent arrays); rebuild it")
        if index.rows != rows:
            raise LexicalIndexError(
                f"lexical index {path} is out of step: it indexes {index.rows} chunks, the chunk store holds {rows}"
            )
        return index
