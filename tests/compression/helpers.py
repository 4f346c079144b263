"""Compression test helpers: messages with exact token counts, scripted summarizers."""

from __future__ import annotations

import itertools
import random

from shared.compression.budget import line_cost
from shared.compression.offline import truncate_tokens
from shared.compression.spans import SeqRange
from shared.compression.summary import SummaryOutput, SummaryRequest
from shared.compression.tiers import Entry, TierState
from shared.memory.names import message_label
from shared.tokens import count_tokens

WORDS = [
    "project",
    "budget",
    "deadline",
    "server",
    "team",
    "plan",
    "option",
    "review",
    "release",
    "client",
    "design",
    "test",
    "meeting",
    "draft",
    "number",
    "report",
    "schedule",
    "feature",
    "migration",
    "database",
    "cache",
    "queue",
]
DECISION = "We decided to use PostgreSQL for the billing service."


def text_of(n_words: int, seed: int) -> str:
    rng = random.Random(seed)
    return " ".join(rng.choice(WORDS) for _ in range(max(1, n_words))) + "."


def message(seq: int, text: str, *, session_id: str = "s", role: str | None = None) -> Entry:
    role = role or ("user" if seq % 2 == 0 else "assistant")
    speaker = "Ana" if role == "user" else None
    label = message_label(role, speaker, "Ana")
    mid = f"m{seq}"
    return Entry(
        id=mid,
        kind="message",
        role=role,
        speaker=speaker,
        label=label,
        text=text,
        tokens=count_tokens(text),
        cost=line_cost(label, text),
        level=0,
        spans=(SeqRange(session_id, seq, seq, mid, mid),),
        position=seq,
    )


def state_of(texts: list[str], *, session_id: str = "s") -> TierState:
    return TierState(
        chat_id=session_id,
        current=tuple(message(i, t, session_id=session_id) for i, t in enumerate(texts)),
    )


class WellBehaved:
    """Keeps to the asked length: the start of the input, cut to 80 % of max_tokens."""

    name = "llm"

    def __init__(self) -> None:
        self.calls = 0

    def summarize(self, request: SummaryRequest) -> SummaryOutput:
        self.calls += 1
        joined = " ".join(i.text for i in request.items)
        text = truncate_tokens(joined, max(1, int(request.max_tokens * 0.8)))
        return SummaryOutput(
            text=text,
            summarizer="llm",
            model="scripted",
            llm_calls=1,
            prompt_tokens=count_tokens(joined),
            completion_tokens=count_tokens(text),
        )


class Misbehaving:
    """Answers too long, empty, with an error, or raises, in a fixed rotation."""

    name = "llm"
    MODES = ("too_long", "empty", "error", "raise", "whitespace", "ok")

    def __init__(self, modes: tuple[str, ...] = MODES) -> None:
        self._modes = itertools.cycle(modes)
        self.calls = 0

    def summarize(self, request: SummaryRequest) -> SummaryOutput:
        self.calls += 1
        mode = next(self._modes)
        joined = " ".join(i.text for i in request.items)
        if mode == "too_long":
            return SummaryOutput(text=joined + " and more " * 20, summarizer="llm", llm_calls=1)
        if mode == "empty":
            return SummaryOutput(text="", summarizer="llm", llm_calls=1)
        if mode == "whitespace":
            return SummaryOutput(text="  \n ", summarizer="llm", llm_calls=1)
        if mode == "error":
            return SummaryOutput(
                text="", summarizer="llm", llm_calls=2, error="llm_malformed_output: not JSON"
            )
        if mode == "raise":
            raise RuntimeError("summarizer crashed")
        return WellBehaved().summarize(request)
