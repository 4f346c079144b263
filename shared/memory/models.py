"""What the memory room answers and reads: memories and messages as clients see them, a
memory search, a user deleted or exported, the timeline of a user's beliefs."""

from __future__ import annotations

import datetime as dt
from typing import Any, Literal

from pydantic import BaseModel, Field

from shared.db.models import Fact, Message
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

    @classmethod
    def of(cls, message: Message, session_external_id: str) -> MessageRef:
        return cls(
            message_id=message.id,
            external_id=message.external_id,
            session_id=session_external_id,
            role=message.role,
            speaker=message.speaker,
            content=message.content,
            created_at=message.created_at,
        )


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


# current: believed now · ending: believed now that the value stopped ("Rex passed away") ·
# superseded: replaced by a new value · ended: stopped by an ending · retired: taken back
# without a successor (a replay's rebuild) · quarantined: held back by the injection guard.
BeliefState = Literal["current", "ending", "superseded", "ended", "retired", "quarantined"]


class BeliefChange(BaseModel):
    """What ended a value: the fact that took its place, and the message that said it."""

    memory_id: str = Field(description="the fact that superseded or ended the value")
    content: str = Field(description="that fact's sentence")
    is_ending: bool = Field(description="true: it said the value stopped; false: a new value")
    message: MessageRef | None = Field(
        description="the message it was first said in (null: that message was deleted)"
    )


class BeliefValue(BaseModel):
    """One value a slot held, and for how long."""

    memory_id: str
    value: str = Field(description="the slot's value: the city, the employer, the pet's name")
    content: str = Field(description="the fact's sentence")
    state: BeliefState
    began_at: dt.datetime = Field(
        description="since when it holds: the date the person gave (valid_from), else when "
        "it was first said"
    )
    ended_at: dt.datetime | None = Field(description="when it stopped being believed (valid_to)")
    confidence: float
    mention_count: int
    extractor: str
    model: str | None
    quarantine_reason: str | None = None
    said_in: MessageRef | None = Field(
        description="the message it was first said in (null: that message was deleted)"
    )
    ended_by: BeliefChange | None = Field(
        default=None, description="what superseded or ended it; null while it holds"
    )


class BeliefSlot(BaseModel):
    """A slot (`identity/employer`, `fact/pet:rex`, `preference/about:jazz`) over time."""

    slot: str
    type: str
    current: str | None = Field(
        description="the value believed now; null when it ended or none is believed"
    )
    changed_at: dt.datetime = Field(description="when the slot last gained or lost a value")
    values: list[BeliefValue] = Field(description="oldest first")


class BeliefTimeline(BaseModel):
    """A user's beliefs per slot, the slot changed most recently first. Facts without a slot
    (a general note) have no timeline: read them with GET /memories."""

    data: list[BeliefSlot]
    count: int
