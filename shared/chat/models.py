"""What a chat turn takes and answers: the request bodies and the response of POST /v1/chat."""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

from pydantic import BaseModel, Field

from shared.inputs import (
    MAX_BUDGET_TOKENS,
    MAX_COMPLETION_TOKENS,
    Identifier,
    NonBlankText,
    RequestModel,
)
from shared.records.ingest import NewMessage
from shared.records.models import MessageIn


@dataclass(frozen=True)
class ChatTurnIn:
    """What a chat request asks for, from POST /v1/chat or /v1/chat/completions."""

    user_external_id: str
    session_external_id: str
    message: NewMessage  # the new user message: stored, and the context's query
    model: str | None = None
    temperature: float | None = None
    max_tokens: int | None = None
    budget_tokens: int | None = None
    # /v1/chat/completions: the client's own conversation, sent as given with the memory
    # system message added; None → the session history tiermem stored is sent.
    client_messages: list[dict[str, Any]] | None = None
    options: dict[str, Any] = field(default_factory=dict)  # passed to the chat model as is


class ChatIn(RequestModel):
    """The body of POST /v1/chat."""

    user_id: Identifier
    session_id: Identifier
    message: MessageIn | NonBlankText
    model: str | None = Field(default=None, min_length=1, max_length=200)  # default: chat.model
    stream: bool = False
    budget_tokens: int | None = Field(default=None, ge=0, le=MAX_BUDGET_TOKENS)
    temperature: float | None = Field(default=None, ge=0, le=2)
    max_tokens: int | None = Field(default=None, ge=1, le=MAX_COMPLETION_TOKENS)

    def to_turn(self) -> ChatTurnIn:
        m = MessageIn(content=self.message) if isinstance(self.message, str) else self.message
        return ChatTurnIn(
            user_external_id=self.user_id,
            session_external_id=self.session_id,
            message=NewMessage.of(m, "user"),
            model=self.model,
            temperature=self.temperature,
            max_tokens=self.max_tokens,
            budget_tokens=self.budget_tokens,
        )


class Usage(BaseModel):
    prompt_tokens: int
    completion_tokens: int
    total_tokens: int


class ContextStats(BaseModel):
    """What tiermem put in front of the chat model."""

    token_count: int
    memories: int
    earlier_messages: int
    history: int  # stored session messages sent (0 when the client sends its own)


class ChatPublic(BaseModel):
    """The answer of POST /v1/chat (and the final event of its stream)."""

    reply: str
    model: str
    finish_reason: str | None
    user_id: str
    session_id: str
    message_ids: list[str]  # the user's message, then the reply's when one was stored
    job_id: str | None  # the turn's extraction run (GET /v1/jobs/{id})
    usage: Usage
    context: ContextStats
    # The message's external_id was stored and answered before: this is the stored reply,
    # no model was called and nothing was stored (a client resending what it lost).
    duplicate: bool = False
