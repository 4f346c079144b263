"""BM25 sparse vectors of message text, made in this process by Qdrant Edge's `Bm25` for every
engine (Edge, a server, memory), so a word is the same term everywhere (ADR 0013).

Its defaults: English stopwords, Snowball stemmer, k 1.2, b 0.75, avg_len 256 — a chat
message is ~12 terms, but an avg_len near that penalised the long messages that hold the
evidence (any@10 .710 → .681 on LoCoMo). A document's terms carry its BM25 term-frequency
weight; a query's each weigh 1; the engine multiplies by IDF (Modifier.Idf). Changing any
of this means recomputing every sparse vector: `tiermem reindex`.
"""

from __future__ import annotations

from functools import cache

import qdrant_edge as qe

from shared.vectors.base import SparseVector

# How much the words of the messages around count in a message's sparse vector: the one
# before (the question it answers) and the one after (the reply it got) — ADR 0014.
BEFORE_WEIGHT = 0.5
AFTER_WEIGHT = 0.3


@cache
def _bm25() -> qe.Bm25:
    return qe.Bm25()


def document_terms(text: str) -> SparseVector | None:
    """The sparse vector a message is stored with; None when it has no terms (stopwords,
    punctuation)."""
    return _sparse(_bm25().embed_document(text))


def blended_terms(text: str, before: str | None, after: str | None = None) -> SparseVector | None:
    """A message's terms plus, at BEFORE_WEIGHT, those of the message before it (the question
    it answers) and, at AFTER_WEIGHT, of the one after it: found by the words of its
    exchange, yet ranked below the message that said them."""
    merged: dict[int, float] = {}
    for words, weight in ((text, 1.0), (before, BEFORE_WEIGHT), (after, AFTER_WEIGHT)):
        found = document_terms(words) if words else None
        if found is not None:
            for index, value in zip(found.indices, found.values, strict=True):
                merged[index] = merged.get(index, 0.0) + weight * value
    return SparseVector(list(merged), list(merged.values())) if merged else None


def query_terms(text: str) -> SparseVector | None:
    """The sparse vector a search asks with; None when the query has no terms."""
    return _sparse(_bm25().embed_query(text))


def _sparse(vector: qe.SparseVector) -> SparseVector | None:
    if not vector.indices:
        return None
    return SparseVector(list(vector.indices), list(vector.values))
