"""What the memory room answers and reads: memories and messages as clients see them, a
memory search, a user deleted or exported."""

from __future__ import annotations

import datetime as dt
from typing import Any

from pydantic import BaseModel, Field

from shared.db.models import Fact
from shared.extraction.schemas import FactType
from shared.inputs import RequestModel

# How many messages a history hit shows before and after it, at most (`around`).
MAX_AROUND = 5


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


class MemoryPublic(BaseModel):
    id: str
    type: str
    content: str
    subject: str
    slot: str | None
    details: dict[str, Any]
    tags: list[str]
    confidence: float
    mention_count: int
    active: bool
    valid_from: dt.datetime | None
    valid_to: dt.datetime | None
    superseded_by: str | None
    quarantine_reason: str | None = None  # set → never injected into a prompt
    source_session_ids: list[str]
    source_message_ids: list[str]
    extractor: str
    extractor_version: str
    model: str | None
    first_seen_at: dt.datetime
    last_seen_at: dt.datetime
    score: float | None = None
    # The newest MAX_SOURCES of source_message_ids, as messages (a deleted one is left out).
    sources: list[MessageRef] = Field(default_factory=list)

    @classmethod
    def of(
        cls, row: Fact, score: float | None = None, sources: list[MessageRef] | None = None
    ) -> MemoryPublic:
        data = row.model_dump()
        data["active"] = row.valid_to is None
        data["score"] = score
        data["sources"] = sources or []
        return cls.model_validate(data)


class MemoriesPublic(BaseModel):
    data: list[MemoryPublic]
    count: int


class SearchIn(RequestModel):
    """A memory search: the body of POST /v1/users/{id}/memories/search, MCP's search_memories."""

    query: str = Field(min_length=1, max_length=4000)
    k: int = Field(default=10, ge=1, le=100)
    types: list[FactType] = Field(default_factory=list)
    min_score: float | None = Field(default=None, ge=-1.0, le=1.0)


class UserDeleted(BaseModel):
    deleted: dict[str, int] = Field(description="SQL rows removed, per table")
    disk_reclaimed: str = Field(
        description="when the disk their vectors held is freed (they are unsearchable now)"
    )


class SessionExported(BaseModel):
    session_id: str
    created_at: dt.datetime
    parent_session_id: str | None


class MessageExported(BaseModel):
    id: str
    session_id: str | None
    seq: int
    role: str
    speaker: str | None
    content: str
    created_at: dt.datetime
    external_id: str | None
    extraction_status: str


class SessionMessagesPublic(BaseModel):
    """A page of one session's stored messages, in the order asked (`seq` is their order)."""

    data: list[MessageExported]
    count: int


class UserExport(BaseModel):
    user_id: str
    exported_at: dt.datetime
    sessions: list[SessionExported]
    messages: list[MessageExported]
    memories: list[MemoryPublic]
