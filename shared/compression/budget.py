"""Tier budgets from a session's settings, and what an entry costs in the rendered context."""

from __future__ import annotations

import math
from dataclasses import dataclass
from functools import lru_cache
from typing import Literal

from shared.config import CompressionSettings
from shared.tokens import count_tokens

Tier = Literal["head", "bulks", "topics", "current"]
SplitTier = Literal["current", "topics", "bulks"]
SPLIT_TIERS: tuple[SplitTier, ...] = ("current", "topics", "bulks")
# The order the context shows them in, oldest first.
DISPLAY_ORDER: tuple[Tier, ...] = ("head", "bulks", "topics", "current")

# How the context renders the session's history (shared/context/templates.py shows them with
# the rest of the prompt): the tier budgets are paid in these lines' tokens.
HISTORY_HEADER = "## This conversation so far"
HISTORY_LINE = "{speaker}: {content}"

# How a summary is introduced in the context (the "speaker" of its line). One label for
# both summary tiers: moving an entry between them then never changes its cost.
SUMMARY_LABEL = "Earlier (summary)"
SUMMARY_ROLE = "system"


def _floor(x: float) -> int:
    # 0.3 * 1000 is 300.00000000000006 in floating point; shares must not lose a token to it.
    return math.floor(x + 1e-9)


@lru_cache(maxsize=1)
def header_cost() -> int:
    """The context's history header and its newline: reserved out of the target."""
    return count_tokens(HISTORY_HEADER) + 1


def line_cost(label: str, text: str) -> int:
    """Tokens of one history line as the context renders it, with its newline: the context
    packs lines separated by newlines, which BPE never merges across."""
    return count_tokens(HISTORY_LINE.format(speaker=label, content=text)) + 1


@lru_cache(maxsize=64)
def label_overhead(label: str) -> int:
    """What a line costs beyond its text (planning only; entries are counted exactly)."""
    return line_cost(label, "")


@dataclass(frozen=True)
class Budget:
    """Token budgets of one session. `target` holds the header, the pinned head and the
    three split tiers; the shares split what the header and the head leave."""

    limit: int
    trigger: int
    target: int
    reserve: int
    head: int
    split: int
    current: int
    topics: int
    bulks: int

    def of(self, tier: SplitTier) -> int:
        return {"current": self.current, "topics": self.topics, "bulks": self.bulks}[tier]


def make_budget(cfg: CompressionSettings, *, head_cost: int) -> Budget:
    limit = cfg.context_limit_tokens
    target = _floor(limit * cfg.target_ratio)
    reserve = header_cost()
    split = max(0, target - reserve - head_cost)
    return Budget(
        limit=limit,
        trigger=_floor(limit * cfg.trigger_ratio),
        target=target,
        reserve=reserve,
        head=head_cost,
        split=split,
        current=_floor(split * cfg.current_share),
        topics=_floor(split * cfg.topics_share),
        bulks=_floor(split * cfg.bulks_share),
    )


def head_allowance(cfg: CompressionSettings) -> int:
    """The most a pinned head may cost; a longer first exchange goes through the tiers."""
    return _floor(_floor(cfg.context_limit_tokens * cfg.target_ratio) * cfg.head_max_share)
