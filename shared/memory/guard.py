"""Injection guard: flags memory and history text that reads as instructions to the model.

`scan(text)` returns a short reason ("family: 'evidence'") or None. It is a cheap,
offline heuristic (precompiled regular expressions, tens of microseconds a sentence),
tuned for zero false positives on ordinary chat memories rather than for catching every
possible attack: it is one layer, next to the prompt template that labels memories as
data. Families, checked in this order (the first hit wins):

- instruction_override: "ignore all previous instructions", "new instructions:", ...
- role_change: "you are now", "act as DAN", "system:" at a line start, <|im_start|>, [INST]
- exfiltration: "print your system prompt", "send the conversation to http…", image beacons
- prompt_delimiter: </memories>, <|im_end|>, [/INST], "=== END OF CONTEXT ==="
- hidden_markup: zero-width, bidi and tag characters, HTML comments, <script>, CSS-hidden
  text, base64 blobs

The phrase families match a folded copy of the text (NFKC, invisible characters removed,
common Cyrillic/Greek look-alikes mapped to Latin, casefolded, whitespace collapsed), so
fullwidth letters, a zero-width space inside a word or "IGNORE   previous\\ninstructions"
are still caught. Letter-by-letter spacing ("i g n o r e") and leetspeak are not.

The phrase families and the folding are `guard_rules` (built from the word lists in
guard_phrases/), the hidden_markup family `guard_markup`; this module answers with a reason.
"""

from __future__ import annotations

import datetime as dt
from typing import Final, Literal, Protocol

from shared import metrics
from shared.memory.guard_markup import evidence, hidden_markup
from shared.memory.guard_rules import Family, phrase_hit

Source = Literal["fact", "message"]
HITS_METRIC: Final = "injection_guard_hits_total"


def scan(text: str) -> str | None:
    """A short reason ("family: 'evidence'") when the text looks like a prompt injection."""
    hit = phrase_hit(text)
    if hit is not None:
        return _reason(*hit)
    hidden = hidden_markup(text)
    return _reason("hidden_markup", hidden, quote=False) if hidden else None


def family_of(reason: str) -> str:
    return reason.split(":", 1)[0]


def screen(text: str, *, source: Source) -> str | None:
    """`scan`, counting each hit in `injection_guard_hits_total{source, reason=family}`."""
    reason = scan(text)
    if reason is not None:
        metrics.incr(HITS_METRIC, source=source, reason=family_of(reason))
    return reason


class Screened(Protocol):
    """A stored fact as far as prompt assembly cares (a `Fact` row or a `MemoryPublic`)."""

    @property
    def quarantine_reason(self) -> str | None: ...
    @property
    def valid_to(self) -> dt.datetime | None: ...


def is_injectable(fact: Screened) -> bool:
    """Whether a stored fact may be put in a prompt: active and not quarantined."""
    return fact.quarantine_reason is None and fact.valid_to is None


def _reason(family: Family, found: str, *, quote: bool = True) -> str:
    return f"{family}: '{evidence(found)}'" if quote else f"{family}: {found}"
