"""The extractor contract: one chat turn in, at most N validated typed facts out."""

from __future__ import annotations

import datetime as dt
from dataclasses import dataclass, field
from typing import Any, Literal, Protocol

from pydantic import ValidationError

from shared.extraction.schemas import TypedFact, typed_fact_adapter


@dataclass(frozen=True)
class TurnInput:
    user_message: str
    assistant_message: str | None
    session_date: dt.datetime  # the turn's created_at; relative dates resolve against it
    user_speaker: str = "User"  # the person facts are about, named in every fact's content
    assistant_speaker: str = "Assistant"


def is_generic_speaker(name: str | None) -> bool:
    """No name to put in a fact: no speaker, or the API's default one."""
    return not name or name.strip().lower() in ("user", "the user")


@dataclass
class ExtractionResult:
    facts: list[TypedFact]  # valid, at most max_facts, highest confidence first
    extractor: Literal["llm", "offline"]
    extractor_version: str
    model: str | None = None
    prompt_hash: str | None = None
    dropped_invalid: int = 0  # items that failed their type's schema
    dropped_over_limit: int = 0  # valid items beyond max_facts (lowest confidence)
    skipped_reason: str | None = None  # e.g. "small_talk": no extraction was attempted
    prompt_tokens: int = 0
    completion_tokens: int = 0
    llm_ms: float = 0.0
    # The LLM call's response_format, and why json_object when json_schema was configured.
    response_format: str | None = None
    response_format_note: str | None = None
    invalid_reasons: list[str] = field(default_factory=list)


class Extractor(Protocol):
    kind: Literal["llm", "offline"]
    version: str

    def extract(self, turn: TurnInput) -> ExtractionResult: ...


def validate_items(
    items: list[Any], *, max_facts: int, min_confidence: float
) -> tuple[list[TypedFact], int, int, list[str]]:
    """Validate raw items against the six schemas; keep the `max_facts` most confident.

    Returns (facts, dropped_invalid, dropped_over_limit, reasons). Items below
    `min_confidence` count as invalid: they are not stored.
    """
    valid: list[TypedFact] = []
    reasons: list[str] = []
    for item in items:
        try:
            fact = typed_fact_adapter.validate_python(item)
        except ValidationError as exc:
            first = exc.errors()[0]
            loc = ".".join(str(p) for p in first["loc"])
            reasons.append(f"{loc}: {first['msg']}")
            continue
        if fact.confidence < min_confidence:
            reasons.append(f"confidence {fact.confidence:.2f} below {min_confidence:.2f}")
            continue
        valid.append(fact)
    valid.sort(key=lambda f: f.confidence, reverse=True)
    kept = valid[:max_facts]
    return kept, len(items) - len(valid), len(valid) - len(kept), reasons
