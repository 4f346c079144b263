"""The shapes the API shows and accepts for tiers, runs, per-session settings and continuations."""

from __future__ import annotations

import datetime as dt
from typing import Any

from pydantic import BaseModel, Field

from shared.config import CompressionSettings
from shared.inputs import Identifier, RequestModel

# The CompressionSettings fields a session may override; the rest are per deployment.
SESSION_FIELDS = (
    "enabled",
    "context_limit_tokens",
    "trigger_ratio",
    "target_ratio",
    "current_share",
    "topics_share",
    "bulks_share",
    "pin_head",
)


class CompressionSettingsIn(RequestModel):
    """PUT /v1/sessions/{id}/compression: the session's overrides (omitted → the default)."""

    enabled: bool | None = None
    context_limit_tokens: int | None = Field(default=None, ge=64, le=10_000_000)
    trigger_ratio: float | None = Field(default=None, gt=0, le=1)
    target_ratio: float | None = Field(default=None, gt=0, lt=1)
    current_share: float | None = Field(default=None, ge=0, le=1)
    topics_share: float | None = Field(default=None, ge=0, le=1)
    bulks_share: float | None = Field(default=None, ge=0, le=1)
    pin_head: bool | None = None


class SessionSettingsView(BaseModel):
    enabled: bool
    context_limit_tokens: int
    trigger_ratio: float
    target_ratio: float
    current_share: float
    topics_share: float
    bulks_share: float
    pin_head: bool

    @classmethod
    def of(cls, cfg: CompressionSettings) -> SessionSettingsView:
        return cls(**{k: getattr(cfg, k) for k in SESSION_FIELDS})


class CompressionSettingsPublic(BaseModel):
    session_id: str
    effective: SessionSettingsView
    overrides: dict[str, Any]  # what this session sets; the rest comes from the deployment


class SpanPublic(BaseModel):
    session_id: str  # the client's session id (a parent's, for a continued session's seed)
    first_seq: int
    last_seq: int
    first_message_id: str
    last_message_id: str


class TierEntryPublic(BaseModel):
    id: str  # a tier entry's id; for a current or head message, the message id
    kind: str  # message | summary
    level: int  # 0 verbatim, 1 topic summary, 2+ bulk
    role: str
    speaker: str | None
    text: str
    tokens: int  # of the text
    cost_tokens: int  # of its line in the context
    message_count: int
    spans: list[SpanPublic]
    summarizer: str | None = None
    model: str | None = None
    created_by_run: str | None = None
    span_end_at: dt.datetime | None = None


class TierPublic(BaseModel):
    name: str  # head | bulks | topics | current
    budget_tokens: int | None  # None for the pinned head (outside the split)
    tokens: int
    fits: bool
    entries: list[TierEntryPublic]


class TiersPublic(BaseModel):
    session_id: str
    version: int
    context_limit_tokens: int
    trigger_tokens: int
    target_tokens: int
    total_tokens: int  # the history section as the context renders it (header included)
    tiers: list[TierPublic]  # head, bulks, topics, current: the order the context shows
    partition_ok: bool  # every message covered by exactly one entry of exactly one tier
    problems: list[str] = Field(default_factory=list)
    last_run_id: str | None = None


class CompactIn(RequestModel):
    focus: str | None = Field(default=None, max_length=2000)


class CompressionRunPublic(BaseModel):
    id: str
    session_id: str
    trigger: str
    focus: str | None
    status: str
    error: str | None
    attempts: int
    iterations: int
    tokens_before: int
    tokens_after: int
    target_tokens: int
    llm_calls: int
    fallbacks: int
    prompt_tokens: int
    completion_tokens: int
    summarizer: str | None
    version_before: int | None
    version_after: int | None
    steps: list[dict[str, Any]]
    llm_ms: float
    engine_ms: float
    duration_ms: float
    created_at: dt.datetime
    started_at: dt.datetime | None
    finished_at: dt.datetime | None


class CompressionRunList(BaseModel):
    data: list[CompressionRunPublic]
    count: int


class ContinueIn(RequestModel):
    session_id: Identifier | None = None  # the new session's id; default: generated


class ContinuePublic(BaseModel):
    session_id: str
    parent_session_id: str
    user_id: str
    seeded_entries: int
    seeded_tokens: int


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
