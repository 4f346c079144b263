"""What the records room takes and answers: a turn, a transcript's lines and an import,
as the API, the MCP tools and the CLI send them, and what storing them answers."""

from __future__ import annotations

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
