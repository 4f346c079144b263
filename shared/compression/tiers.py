"""A session's tiers as the compression loop sees them: the entries of each tier, whether
they fit the budget, and the steps and numbers of a run that changes them."""

from __future__ import annotations

import datetime as dt
import uuid
from dataclasses import dataclass, field
from typing import Any, Literal

from shared.compression.budget import SPLIT_TIERS, Budget, SplitTier, Tier, make_budget
from shared.compression.spans import Span
from shared.config import CompressionSettings

StepKind = Literal["pin_head", "summarize", "move"]
# Statuses of a run: done (every tier fits), cannot_fit (reported, not looped), partial
# (hit max_iterations; the next run continues), stale (another run moved the state on),
# below_trigger / disabled (nothing to do).
Status = Literal["done", "cannot_fit", "partial", "stale", "below_trigger", "disabled"]


class StaleState(Exception):
    """Raised by an `on_step` hook: the stored state moved on since this run read it."""


@dataclass(frozen=True)
class Entry:
    """A message (verbatim) or a summary, as it sits in one tier."""

    id: str
    kind: Literal["message", "summary"]
    role: str
    speaker: str | None
    label: str  # the speaker the context shows for it
    text: str
    tokens: int  # of `text`
    cost: int  # of its rendered line
    level: int  # 0 verbatim, 1 topic summary, 2+ bulk
    spans: Span
    position: int
    message_count: int = 1
    span_end_at: dt.datetime | None = None
    summarizer: str | None = None
    model: str | None = None
    created_by_run: str | None = None


@dataclass(frozen=True)
class TierState:
    chat_id: str  # the session's internal id
    head: tuple[Entry, ...] = ()
    bulks: tuple[Entry, ...] = ()
    topics: tuple[Entry, ...] = ()
    current: tuple[Entry, ...] = ()
    head_decided: bool = False

    def entries(self, tier: Tier) -> tuple[Entry, ...]:
        entries: tuple[Entry, ...] = getattr(self, tier)
        return entries

    def cost(self, tier: Tier) -> int:
        return sum(e.cost for e in self.entries(tier))

    def history_cost(self, reserve: int) -> int:
        """What the context's history section costs: header, head and the three tiers."""
        body = sum(self.cost(t) for t in ("head", "bulks", "topics", "current"))
        return reserve + body if body else 0

    def spans_in_order(self) -> list[Span]:
        return [e.spans for t in ("head", "bulks", "topics", "current") for e in self.entries(t)]


@dataclass(frozen=True)
class Step:
    """One persisted change: `removed` left `source`, `added` arrived in `dest`."""

    index: int
    kind: StepKind
    source: Tier
    dest: Tier
    removed: tuple[Entry, ...]
    added: tuple[Entry, ...]
    before: TierState
    after: TierState
    record: dict[str, Any]


@dataclass
class RunStats:
    status: Status = "done"
    detail: str | None = None
    iterations: int = 0  # summarize and move steps (the head decision is not one)
    tokens_before: int = 0
    tokens_after: int = 0
    target: int = 0
    trigger: int = 0
    llm_calls: int = 0
    fallbacks: int = 0
    prompt_tokens: int = 0
    completion_tokens: int = 0
    summarizer_input_tokens: int = 0
    summarizer_output_tokens: int = 0
    summarizer_ms: float = 0.0
    persist_ms: float = 0.0
    engine_ms: float = 0.0  # everything but the summarizer calls
    total_ms: float = 0.0
    steps: list[dict[str, Any]] = field(default_factory=list)


@dataclass(frozen=True)
class CompressionResult:
    state: TierState
    stats: RunStats
    budget: Budget


def new_entry_id() -> str:
    return str(uuid.uuid4())


def budget_for(state: TierState, cfg: CompressionSettings) -> Budget:
    return make_budget(cfg, head_cost=state.cost("head"))


def needs_compression(state: TierState, cfg: CompressionSettings) -> bool:
    budget = budget_for(state, cfg)
    return state.history_cost(budget.reserve) > budget.trigger


def over_budget(state: TierState, budget: Budget) -> list[SplitTier]:
    return [t for t in SPLIT_TIERS if state.cost(t) > budget.of(t)]
