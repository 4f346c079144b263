"""Scoring extracted facts against a labelled set of chat messages: which facts each
message should leave behind (`expect`), which are tolerated (`accept`), and which are junk.

The rules are in bench/bench_offline_facts.py's docstring; they live here, outside bench/,
so that tests/extraction/offline/test_labelled.py guards the same numbers the bench prints.
"""

from __future__ import annotations

import datetime as dt
import json
import re
import time
import unicodedata
from dataclasses import dataclass, field
from datetime import UTC, datetime
from pathlib import Path

from shared.extraction.base import Extractor, TurnInput

GROUPS = ("event", "profile", "nothing", "mixed")
_MONTHS = "january|february|march|april|may|june|july|august|september|october|november|december"
_DATE_KEY = re.compile(rf"^(?:(?:\d{{1,2}} )?(?:{_MONTHS})(?: \d{{4}})?|\d{{4}})$")
_QUOTES = str.maketrans({"‘": "'", "’": "'", "‛": "'", "“": '"', "”": '"', "„": '"'})
_DASHES = re.compile(r"[-‐‑‒–—―]+")

Entry = list[str]  # keys, each "alt1|alt2|..."


def normalise(text: str) -> str:
    text = unicodedata.normalize("NFC", text).translate(_QUOTES).casefold()
    return " ".join(_DASHES.sub(" ", text).split())


def key_matches(key: str, content: str) -> bool:
    """`content` is normalised; the key matches where one of its alternatives starts a word."""
    return any(
        re.search(rf"(?<!\w){re.escape(alt)}", content)
        for alt in (normalise(a) for a in key.split("|"))
        if alt
    )


def entry_matches(entry: Entry, content: str, *, dates: bool = True) -> bool:
    keys = [k for k in entry if dates or not is_date_key(k)]
    return all(key_matches(k, content) for k in keys)


def is_date_key(key: str) -> bool:
    return all(_DATE_KEY.match(normalise(alt)) for alt in key.split("|"))


@dataclass(frozen=True)
class Message:
    id: str
    group: str
    speaker: str
    session_date: dt.date
    text: str
    expect: list[Entry]
    accept: list[Entry]
    note: str


def load(path: Path) -> list[Message]:
    messages: list[Message] = []
    seen: set[str] = set()
    for number, line in enumerate(path.read_text().splitlines(), 1):
        if not line.strip():
            continue
        raw = json.loads(line)
        where = f"{path}:{number}"
        if raw.get("group") not in GROUPS:
            raise ValueError(f"{where}: group {raw.get('group')!r} is not one of {GROUPS}")
        if raw["id"] in seen:
            raise ValueError(f"{where}: duplicate id {raw['id']!r}")
        seen.add(raw["id"])
        expect = [list(e) for e in raw.get("expect", [])]
        accept = [list(e) for e in raw.get("accept", [])]
        for entry in expect + accept:
            if not entry or any(not isinstance(k, str) or not k.strip() for k in entry):
                raise ValueError(f"{where}: an entry needs non-empty string keys: {entry!r}")
        if (raw["group"] == "nothing") != (not expect):
            raise ValueError(f"{where}: only (and every) 'nothing' line has an empty expect")
        messages.append(
            Message(
                id=raw["id"],
                group=raw["group"],
                speaker=raw["speaker"],
                session_date=dt.date.fromisoformat(raw["session_date"]),
                text=raw["text"],
                expect=expect,
                accept=accept,
                note=raw.get("note", ""),
            )
        )
    return messages


@dataclass(frozen=True)
class Fact:
    type: str
    content: str
    valid_from: dt.date | None
    verdict: str  # right, tolerated, junk
    verdict_no_dates: str


@dataclass
class Scored:
    message: Message
    facts: list[Fact]
    found: list[bool]  # per expect entry
    found_no_dates: list[bool]
    skipped: str | None  # e.g. "small_talk"


def verdict(content: str, message: Message, *, dates: bool) -> str:
    if any(entry_matches(e, content, dates=dates) for e in message.expect):
        return "right"
    if any(entry_matches(e, content, dates=dates) for e in message.accept):
        return "tolerated"
    return "junk"


@dataclass
class LLMCost:
    """What the LLM path spent over the messages (all zero for the offline rules)."""

    calls: int = 0
    seconds: float = 0.0
    prompt_tokens: int = 0
    completion_tokens: int = 0
    returned: int = 0
    repaired: int = 0
    dropped: int = 0


def score(message: Message, extractor: Extractor, cost: LLMCost | None = None) -> Scored:
    noon = datetime.combine(message.session_date, dt.time(12), tzinfo=UTC)
    started = time.perf_counter()
    result = extractor.extract(
        TurnInput(message.text, None, session_date=noon, user_speaker=message.speaker)
    )
    if cost is not None and result.skipped_reason is None:
        cost.calls += 1
        cost.seconds += time.perf_counter() - started
        cost.prompt_tokens += result.prompt_tokens
        cost.completion_tokens += result.completion_tokens
        cost.returned += result.items_returned
        cost.repaired += result.repaired
        cost.dropped += result.dropped_invalid + result.dropped_low_confidence
    facts = []
    for f in result.facts:
        content = normalise(f.content)
        facts.append(
            Fact(
                f.type,
                f.content,
                f.valid_from,
                verdict(content, message, dates=True),
                verdict(content, message, dates=False),
            )
        )
    contents = [normalise(f.content) for f in facts]
    return Scored(
        message,
        facts,
        [any(entry_matches(e, c) for c in contents) for e in message.expect],
        [any(entry_matches(e, c, dates=False) for c in contents) for e in message.expect],
        result.skipped_reason,
    )


@dataclass
class Tally:
    messages: int = 0
    extracted: int = 0
    right: int = 0
    tolerated: int = 0
    right_no_dates: int = 0  # right or tolerated once date keys are dropped
    expected: int = 0
    found: int = 0
    found_no_dates: int = 0
    with_junk: int = 0  # messages with at least one junk fact
    types: dict[str, list[int]] = field(default_factory=dict)  # type → [extracted, junk]

    def add(self, s: Scored) -> None:
        self.messages += 1
        self.extracted += len(s.facts)
        self.right += sum(f.verdict == "right" for f in s.facts)
        self.tolerated += sum(f.verdict == "tolerated" for f in s.facts)
        self.right_no_dates += sum(f.verdict_no_dates != "junk" for f in s.facts)
        self.expected += len(s.found)
        self.found += sum(s.found)
        self.found_no_dates += sum(s.found_no_dates)
        self.with_junk += any(f.verdict == "junk" for f in s.facts)
        for f in s.facts:
            counts = self.types.setdefault(f.type, [0, 0])
            counts[0] += 1
            counts[1] += f.verdict == "junk"

    @property
    def junk(self) -> int:
        return self.extracted - self.right - self.tolerated
