"""The shapes of an assembled context (GET /v1/sessions/{id}/context, and /v1/chat)."""

from __future__ import annotations

import datetime as dt

from pydantic import BaseModel, Field

from shared.compression.models import HistoryEntry
from shared.memory.models import MessageHit


class ContextMemory(BaseModel):
    id: str
    type: str
    content: str
    date: dt.date  # when it was (last) said
    score: float  # the blended rank score


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
