"""The extractor contract: one chat turn in, at most N validated typed facts out."""

from __future__ import annotations

import datetime as dt
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any, Literal, Protocol

from pydantic import ValidationError

from shared.extraction.repair import repair_item
from shared.extraction.schemas import TypedFact, typed_fact_adapter


@dataclass(frozen=True)
class TurnInput:
    user_message: str
    assistant_message: str | None
    session_date: dt.datetime  # the turn's created_at; relative dates resolve against it
    user_speaker: str = "User"  # the person facts are about, named in every fact's content
    assistant_speaker: str = "Assistant"
    # Context for the LLM extractor, never a source of facts: the session's messages before
    # this turn (speaker, text; oldest first) and the person's active facts nearest it.
    earlier_messages: tuple[tuple[str, str], ...] = ()
    known_facts: tuple[KnownFact, ...] = ()


@dataclass(frozen=True)
class KnownFact:
    """An active fact shown to the extractor, with the names its slot uses."""

    type: str
    content: str
    attribute: str | None = None  # identity/fact attribute, preference/decision topic, goal
    value: str | None = None
    id: str | None = None  # the stored fact: what an ending that names it retires
    ended: bool = False  # the fact states that something ended ("Ana quit Siemens.")
    slot: str | None = None  # the stored fact's belief slot ("employer"), when it has one
    sentiment: str | None = None  # a preference's: likes, dislikes, prefers or avoids
    status: str | None = None  # a goal's: active, achieved or abandoned


# The API's default speaker names, case-folded: no name to put in a fact.
GENERIC_SPEAKERS = ("user", "the user")


def is_generic_speaker(name: str | None) -> bool:
    """No name to put in a fact: no speaker, or the API's default one."""
    return not name or name.strip().lower() in GENERIC_SPEAKERS


@dataclass
class ExtractionResult:
    facts: list[TypedFact]  # valid, at most max_facts, highest confidence first
    extractor: Literal["llm", "offline"]
    extractor_version: str
    model: str | None = None
    prompt_hash: str | None = None
    items_returned: int = 0  # the items the reply held, before validation
    dropped_invalid: int = 0  # items whose meaning was missing or unreadable
    dropped_low_confidence: int = 0
    dropped_over_limit: int = 0  # valid items beyond max_facts (lowest confidence)
    repaired: int = 0  # kept after the server filled in or fixed a field
    skipped_reason: str | None = None  # e.g. "small_talk": no extraction was attempted
    prompt_tokens: int = 0
    completion_tokens: int = 0
    llm_ms: float = 0.0
    # The LLM call's response_format, and why json_object when json_schema was configured.
    response_format: str | None = None
    response_format_note: str | None = None
    # Turns read by the LLM call this result came from (ADR 0024): above 1, the call read
    # several turns of the session and the tokens and llm_ms above are this turn's share.
    batch_size: int = 1
    # Of dropped_invalid: items that only restated the earlier conversation shown as context.
    dropped_repeats: int = 0
    # Known facts the turn's endings name (shared.extraction.endings): the writer retires them.
    endings_linked: int = 0
    # Known facts the reply touched whose value the model was asked for now (ADR 0032), and
    # of them the ones whose new value (or "none") the person's own words gave: each
    # replaced or ended by a fact of this run.
    ending_checks: int = 0
    values_changed: int = 0
    # The items dropped, each as (its content, why): the run keeps the whys, asking again
    # tells the model both.
    rejected: list[tuple[str, str]] = field(default_factory=list)
    # When every item of the model's first reply was dropped and it was asked again in the
    # same conversation (ADR 0031): that first reply's result. This result is the final
    # reply's; the run counts both replies' items, tokens and reasons.
    first_reply: ExtractionResult | None = None

    @property
    def invalid_reasons(self) -> list[str]:
        return [reason for _, reason in self.rejected]

    @property
    def all_dropped(self) -> bool:
        """The reply held items and validation kept none of them: never a quiet "done". A
        reply that only restated the earlier conversation said nothing new: that is a
        "done" with 0 facts, its reasons kept on the run, not a failure to act on."""
        said_nothing_new = self.dropped_invalid == self.dropped_repeats
        return self.items_returned > 0 and not self.facts and not said_nothing_new


class Extractor(Protocol):
    kind: Literal["llm", "offline"]
    version: str

    def extract(self, turn: TurnInput) -> ExtractionResult: ...


@dataclass
class Validated:
    """Validation's outcome for one reply's items."""

    facts: list[TypedFact]  # valid, at most max_facts, highest confidence first
    dropped_invalid: int = 0  # items whose meaning was missing or unreadable
    dropped_low_confidence: int = 0  # the model's own "guessing" (below min_confidence)
    dropped_over_limit: int = 0  # valid items beyond max_facts (lowest confidence)
    repaired: int = 0  # kept after a field was filled in or fixed (shared.extraction.repair)
    dropped_repeats: int = 0  # of dropped_invalid: the earlier conversation restated
    rejected: list[tuple[str, str]] = field(default_factory=list)  # (content, why) per drop

    @property
    def reasons(self) -> list[str]:
        """Why items were dropped, in order."""
        return [reason for _, reason in self.rejected]

    def reject(self, item: Any, reason: str) -> None:
        content = item.get("content") if isinstance(item, dict) else item
        self.rejected.append((content if isinstance(content, str) else "", reason))


@dataclass(frozen=True)
class Rejection:
    """Why a valid item is not kept (shared.extraction.checks). `nothing_new`: it restates
    the conversation before the turn, so a reply of nothing else is not a failed reading."""

    reason: str
    nothing_new: bool = False


def validate_items(
    items: list[Any],
    *,
    max_facts: int,
    min_confidence: float,
    subject: str | None = None,
    review: Callable[[TypedFact], TypedFact | Rejection] | None = None,
) -> Validated:
    """Repair, then validate raw items against the six schemas; keep the `max_facts` most
    confident. `subject` (the person the request names) is set on every item; `review`
    returns the valid item to keep (rewritten counts as repaired) or why it is still not
    kept (shared.extraction.checks)."""
    out = Validated(facts=[])
    valid: list[tuple[TypedFact, bool]] = []
    for raw in items:
        item, changes = repair_item(raw, subject=subject)
        try:
            fact = typed_fact_adapter.validate_python(item)
        except ValidationError as exc:
            first = exc.errors()[0]
            loc = ".".join(str(p) for p in first["loc"])
            out.reject(item, f"{loc}: {first['msg']}")
            out.dropped_invalid += 1
            continue
        if review is not None:
            reviewed = review(fact)
            if isinstance(reviewed, Rejection):
                out.reject(fact.content, reviewed.reason)
                out.dropped_invalid += 1
                out.dropped_repeats += reviewed.nothing_new
                continue
            if reviewed is not fact:
                fact, changes = reviewed, [*changes, "content"]
        if fact.confidence < min_confidence:
            out.reject(fact.content, f"confidence {fact.confidence:.2f} below {min_confidence:.2f}")
            out.dropped_low_confidence += 1
            continue
        valid.append((fact, bool(changes)))
    valid.sort(key=lambda pair: pair[0].confidence, reverse=True)
    kept = valid[:max_facts]
    out.facts = [fact for fact, _ in kept]
    out.repaired = sum(1 for _, repaired in kept if repaired)
    out.dropped_over_limit = len(valid) - len(kept)
    return out
