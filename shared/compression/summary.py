"""The summarizer contract: what the loop asks for (items, level, a max length) and gets back."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Literal, Protocol

Level = Literal["topic", "bulk"]


@dataclass(frozen=True)
class SummaryItem:
    label: str  # who said it ("Ana", "Assistant") or "Summary" for an earlier summary
    text: str
    kind: Literal["message", "summary"] = "message"


@dataclass(frozen=True)
class SummaryRequest:
    """Summarize `items` (oldest first) to at most `max_tokens` tokens of text.

    `level` is where the result goes: "topic" (messages grouped by topic, medium detail)
    or "bulk" (the oldest history compressed hard, only what still matters).
    """

    level: Level
    items: tuple[SummaryItem, ...]
    max_tokens: int
    focus: str | None = None


@dataclass(frozen=True)
class SummaryOutput:
    text: str
    summarizer: str  # "llm" | "offline"
    model: str | None = None
    llm_calls: int = 0
    prompt_tokens: int = 0
    completion_tokens: int = 0
    # Set when the summarizer failed (LLM error, unusable reply): the loop falls back.
    error: str | None = None


class Summarizer(Protocol):
    name: str

    def summarize(self, request: SummaryRequest) -> SummaryOutput: ...
