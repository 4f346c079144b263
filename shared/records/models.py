"""What the records room takes and answers: a turn, a transcript's lines and an import,
as the API, the MCP tools and the CLI send them, and what storing them answers; a tenant's
users and a user's sessions as the memory browser lists them."""

from __future__ import annotations

import datetime as dt
from typing import Literal

from pydantic import BaseModel, Field

from shared.inputs import Identifier, NonBlankText, RequestModel, Timestamp

Role = Literal["user", "assistant", "system", "tool"]


class MessageIn(RequestModel):
    content: NonBlankText
    speaker: str | None = Field(default=None, max_length=100)
    external_id: Identifier | None = None
    created_at: Timestamp | None = None


class TurnIn(RequestModel):
    """One exchange: the user's message and, usually, the assistant's reply."""

    user_id: Identifier
    user_message: MessageIn | NonBlankText
    assistant_message: MessageIn | NonBlankText | None = None
    created_at: Timestamp | None = None


class TranscriptLine(RequestModel):
    """One message of an existing transcript (`tiermem import` and POST /v1/import)."""

    user_id: Identifier = Field(validation_alias="user_id")
    session_id: Identifier
    role: Role
    content: NonBlankText
    speaker: str | None = Field(default=None, max_length=100)
    created_at: Timestamp | None = None
    external_id: Identifier | None = None


class ImportIn(RequestModel):
    messages: list[TranscriptLine] = Field(min_length=1, max_length=1000)


class ImportAccepted(BaseModel):
    stored: int
    duplicates: int
    job_ids: list[str]


class TurnAccepted(BaseModel):
    """The answer to a stored turn: its messages and the extraction job queued for it."""

    session_id: str
    user_id: str
    message_ids: list[str]
    job_id: str | None  # None when the turn had no user message to extract from
    status: str
    extractor: str
    duplicate: bool = False


class UserSummary(BaseModel):
    """A user of the tenant as the memory browser lists them: the id and how much is stored."""

    user_id: str = Field(description="the user's id in your system")
    created_at: dt.datetime = Field(description="when tiermem first stored a turn of theirs")
    sessions: int = Field(description="their sessions")
    messages: int = Field(description="their stored messages, every session")
    memories_active: int = Field(description="facts believed now (not superseded or ended)")
    last_message_at: dt.datetime | None = Field(
        description="when their newest stored message was said; null: none stored"
    )


class UserList(BaseModel):
    """A page of the tenant's users, most recently active first, and how many match."""

    data: list[UserSummary]
    count: int


class SessionSummary(BaseModel):
    """One of a user's sessions: its id, its messages and when it was last written."""

    session_id: str = Field(description="the session's id in your system")
    parent_session_id: str | None = Field(
        description="the session it continues (POST /v1/sessions/{id}/continue), by its id"
    )
    created_at: dt.datetime
    updated_at: dt.datetime = Field(description="when a message was last stored in it")
    messages: int = Field(description="its stored messages")


class SessionList(BaseModel):
    """A page of a user's sessions, most recently written first, and how many there are."""

    data: list[SessionSummary]
    count: int
