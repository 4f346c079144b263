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

# How much the words of the message before count in a message's sparse vector.
CONTEXT_WEIGHT = 0.5


@cache
def _bm25() -> qe.Bm25:
    return qe.Bm25()


def document_terms(text: str) -> SparseVector | None:
    """The sparse vector a message is stored with; None when it has no terms (stopwords,
    punctuation)."""
    return _sparse(_bm25().embed_document(text))


def blended_terms(
    text: str, context: str | None, *, weight: float = CONTEXT_WEIGHT
) -> SparseVector | None:
    """A message's terms plus, at `weight`, those of the text before it (the question it
    answers): found by the question's words, yet ranked below the message that said them."""
    own = document_terms(text)
    around = document_terms(context) if context else None
    if around is None:
        return own
    merged = dict(zip(own.indices, own.values, strict=True)) if own else {}
    for index, value in zip(around.indices, around.values, strict=True):
        merged[index] = merged.get(index, 0.0) + weight * value
    return SparseVector(list(merged), list(merged.values()))


def query_terms(text: str) -> SparseVector | None:
    """The sparse vector a search asks with; None when the query has no terms."""
    return _sparse(_bm25().embed_query(text))


def _sparse(vector: qe.SparseVector) -> SparseVector | None:
    if not vector.indices:
        return None
    return SparseVector(list(vector.indices), list(vector.values))
