"""The shapes of an assembled context (GET /v1/sessions/{id}/context, and /v1/chat)."""

from __future__ import annotations

import datetime as dt

from pydantic import BaseModel, Field


class ContextMemory(BaseModel):
    id: str
    type: str
    content: str
    date: dt.date  # when it was (last) said
    score: float  # the blended rank score


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


class HistoryEntry(BaseModel):
    """One entry of the session's own history: a verbatim message of the `current` tier
    (topic and bulk summaries arrive with tiered compression)."""

    tier: str = "current"
    message_id: str
    role: str
    speaker: str | None
    content: str
    created_at: dt.datetime
    tokens: int


class ChatMessage(BaseModel):
    role: str
    content: str


class ContextPublic(BaseModel):
    user_id: str
    session_id: str
    query: str
    budget_tokens: int
    token_count: int  # of `system_prompt`; never above budget_tokens
    section_tokens: dict[str, int] = Field(default_factory=dict)
    memories: dict[str, list[ContextMemory]]  # grouped by type, newest first within a type
    earlier_messages: list[MessageHit]
    history: list[HistoryEntry]
    quarantined: int = 0  # memories/messages held back by the injection guard
    # memories left out because a newer memory contradicts them (shared.memory.beliefs):
    # the same slot with two values, an ending beside what it ended, liked and disliked
    contradictions_dropped: int = 0
    system_prompt: str  # everything above as one ready system prompt
    # For chat calls: a system message (memories + earlier messages) followed by the
    # session history as role messages; append the new user message.
    messages: list[ChatMessage]
