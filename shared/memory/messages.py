"""Stored messages as clients see them: a history search hit, a memory's source."""

from __future__ import annotations

import datetime as dt

from pydantic import BaseModel, Field


class MessageRef(BaseModel):
    """A stored message as clients see it: a history search hit, a memory's source."""

    message_id: str
    external_id: str | None
    session_id: str  # the client's session id
    role: str
    speaker: str | None
    content: str
    created_at: dt.datetime


class MessageHit(MessageRef):
    """An earlier message found by history search (keyword + meaning, fused)."""

    # Why it was found. score: what the hits are ordered by — keyword_score +
    # history_vector_weight × vector_score (+ history_speaker_bonus when speaker_named);
    # reciprocal rank fusion of the ranks when SQL full-text answers instead of the engine.
    score: float
    keyword_rank: int | None = None  # its rank by words (BM25), None: not among the best
    vector_rank: int | None = None  # its rank by meaning
    keyword_score: float | None = None  # BM25 over the best candidate's, 0-1
    vector_score: float | None = None  # cosine similarity to the query
    speaker_named: bool = False  # the query names who said it
    # With `around=n`: up to n messages on each side in its session, oldest first, so a
    # client can show the exchange rather than a lone line.
    before: list[MessageRef] = Field(default_factory=list)
    after: list[MessageRef] = Field(default_factory=list)


class MessageHitsPublic(BaseModel):
    """What history search answers: the hits, best first, and how many."""

    data: list[MessageHit]
    count: int
