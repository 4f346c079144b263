"""Precision and recall of the offline (rule-based) fact extractor on a labelled set of chat
messages: which facts a good memory keeps from each message, and what junk is added.

    python -m bench.bench_offline_facts [--data bench/data/offline_facts.jsonl]
                                        [--llm URL [--model M]] [--limit N]

The set (bench/data/offline_facts.jsonl, written for this bench, no dataset copied) is one
user message per line: casual chat between friends or with an assistant, each with its
speaker, session date and the facts it should leave behind. Groups: `event` (activities
and events told in past, present perfect or progressive, often with a relative date),
`profile` (job, city, family, pets, likes, diet, languages), `nothing` (small talk,
questions, compliments, opinions about the world or the other person, hypotheticals,
negated events, other people's doings, bare feelings, vague "I did that too", sarcasm) and
`mixed` (kept and unkept sentences in one message).

Each message goes through `OfflineExtractor(ExtractionSettings()).extract` as the worker
runs it: the small-talk prefilter, the rules, schema validation, the per-turn limit and the
minimum confidence; the line's speaker is the user's name and its session date (noon UTC)
the turn's date. Only the user's message is read (no assistant reply). With `--llm URL`
the same messages go through the LLM extractor instead (the real openai client, prompt,
structured-output ladder, repair and validation) against that OpenAI-compatible server
(`python -m bench.real_llm` serves a real 1.5B model); the report then adds seconds and
prompt/completion tokens per message and the items the model returned, repaired and
dropped. `--limit N` scores the first N messages only (a real model on 2 CPUs takes
~10-20 s a message).

Scoring. A line's `expect` lists the facts to keep, each as a list of keys; `accept`
(optional) lists facts that are tolerated but not required (a detail, or a fact about a
relative in reported speech). A key may offer alternatives split by `|` ("quit|left").
Text and keys are normalised (case-folded, curly quotes straightened, dashes and hyphens as
spaces, whitespace collapsed) and a key matches where it starts a word, so "finish" also
matches "finished" but "ran" does not match "orange". A fact *matches* an entry when its
content holds every key of it.
- A fact is *right* when it matches an `expect` entry, *tolerated* when it matches only an
  `accept` entry, otherwise *junk*. Precision = (right + tolerated) / extracted.
- An `expect` entry is *found* when some fact of the message matches it.
  Recall = found / expected.
- Date keys ("9 march 2024", "february 2024", "december") are where the date is the point.
  The "dates ignored" columns score again without them, so a fact about the right event
  with no date (or a wrong one) shows there as right; the junk list marks such facts.
The `nothing` group expects nothing: its recall is empty and any fact but a tolerated one
is junk. The exit status is 0 whatever the scores (a measurement, not a test).

Results: printed, and written to bench/results/offline_facts.md.
"""

from __future__ import annotations

import argparse
import datetime as dt
import json
import re
import sys
import time
import unicodedata
from collections.abc import Sequence
from dataclasses import dataclass, field
from datetime import UTC, datetime
from pathlib import Path

from bench._common import RESULTS_DIR, command_line, machine_line, write_results
from shared.config import ExtractionSettings, LLMSettings
from shared.extraction.base import Extractor, TurnInput
from shared.extraction.llm_extractor import LLMExtractor
from shared.extraction.offline import VERSION, OfflineExtractor

DATA = Path(__file__).parent / "data" / "offline_facts.jsonl"
RESULTS = RESULTS_DIR / "offline_facts.md"
GROUPS = ("event", "profile", "nothing", "mixed")
PROG = "python -m bench.bench_offline_facts"

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


# -- data ------------------------------------------------------------------------------------


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


# -- scoring ---------------------------------------------------------------------------------


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


def ratio(num: int, den: int) -> str:
    return f"{num / den:.3f}" if den else "–"


# -- report ----------------------------------------------------------------------------------


def summary_table(tallies: dict[str, Tally]) -> str:
    rows = [
        "| group | messages | expected | extracted | right (tolerated) | junk | msgs with junk "
        "| precision | recall | precision, dates ignored | recall, dates ignored |",
        "|---|--:|--:|--:|--:|--:|--:|--:|--:|--:|--:|",
    ]
    for name, t in tallies.items():
        label = f"**{name}**" if name == "all" else name
        rows.append(
            f"| {label} | {t.messages} | {t.expected} | {t.extracted} | {t.right} "
            f"({t.tolerated}) | {t.junk} | {t.with_junk} "
            f"| {ratio(t.right + t.tolerated, t.extracted)} | {ratio(t.found, t.expected)} "
            f"| {ratio(t.right_no_dates, t.extracted)} | {ratio(t.found_no_dates, t.expected)} |"
        )
    return "\n".join(rows)


def type_table(total: Tally) -> str:
    rows = ["| fact type | extracted | junk |", "|---|--:|--:|"]
    for name, (extracted, junk) in sorted(total.types.items()):
        rows.append(f"| {name} | {extracted} | {junk} |")
    return "\n".join(rows)


def _cell(text: str) -> str:
    return text.replace("|", "\\|").replace("\n", " ")


def _dated(f: Fact) -> str:
    return f" (valid_from {f.valid_from})" if f.valid_from else ""


def junk_list(scored: list[Scored]) -> str:
    rows = ["| id | group | type | junk fact | message |", "|---|---|---|---|---|"]
    for s in scored:
        for f in s.facts:
            if f.verdict != "junk":
                continue
            mark = " *(right but for the date)*" if f.verdict_no_dates != "junk" else ""
            rows.append(
                f"| {s.message.id} | {s.message.group} | {f.type} "
                f"| {_cell(f.content)}{_dated(f)}{mark} | {_cell(s.message.text)} |"
            )
    return "\n".join(rows) if len(rows) > 2 else "(none)"


def missed_list(scored: list[Scored]) -> str:
    rows = [
        "| id | group | expected keys | message | extracted instead |",
        "|---|---|---|---|---|",
    ]
    for s in scored:
        for entry, found in zip(s.message.expect, s.found, strict=True):
            if found:
                continue
            got = "; ".join(f"{f.content}{_dated(f)}" for f in s.facts)
            if not got and s.skipped:
                got = f"(skipped: {s.skipped})"
            rows.append(
                f"| {s.message.id} | {s.message.group} | {_cell(' + '.join(entry))} "
                f"| {_cell(s.message.text)} | {_cell(got) or '—'} |"
            )
    return "\n".join(rows) if len(rows) > 2 else "(none)"


def cost_line(cost: LLMCost) -> str:
    per = max(1, cost.calls)
    return (
        f"LLM calls: {cost.calls} (messages the prefilter let through), "
        f"{cost.seconds / per:.1f} s, {cost.prompt_tokens / per:.0f} prompt and "
        f"{cost.completion_tokens / per:.0f} completion tokens per call; items the model "
        f"returned {cost.returned}, repaired {cost.repaired}, dropped {cost.dropped}."
    )


def main(argv: Sequence[str] | None = None) -> None:
    parser = argparse.ArgumentParser(prog=PROG, description=(__doc__ or "").splitlines()[0])
    parser.add_argument("--data", type=Path, default=DATA, help="the labelled JSONL set")
    parser.add_argument("--output", type=Path, default=None)
    parser.add_argument(
        "--llm", default="offline", help="offline, or the base URL of an OpenAI-compatible server"
    )
    parser.add_argument("--model", default="local", help="the model name, with --llm URL")
    parser.add_argument("--limit", type=int, default=None, help="only the first N messages")
    args = parser.parse_args(argv)

    messages = load(args.data)[: args.limit]
    extractor: Extractor
    cost: LLMCost | None = None
    if args.llm == "offline":
        extractor, label = OfflineExtractor(ExtractionSettings()), f"Extractor `{VERSION}`"
    else:
        # A real model on a CPU takes seconds a message, far past the default timeout.
        llm = LLMSettings(base_url=args.llm, model=args.model, timeout_s=600)
        extractor, cost = LLMExtractor(llm, ExtractionSettings()), LLMCost()
        label = f"The LLM extractor `{extractor.version}` against `{args.model}` at {args.llm}"
    started = time.perf_counter()
    scored = [score(m, extractor, cost) for m in messages]
    elapsed_ms = 1000 * (time.perf_counter() - started)

    tallies = {g: Tally() for g in GROUPS if any(m.group == g for m in messages)}
    total = Tally()
    for s in scored:
        tallies[s.message.group].add(s)
        total.add(s)
    tallies["all"] = total

    try:
        data_name = str(args.data.resolve().relative_to(Path.cwd()))
    except ValueError:
        data_name = str(args.data)
    text = "\n".join(
        [
            "# Offline fact extractor: precision and recall on a labelled chat set",
            "",
            f"`{command_line(PROG, argv)}` — {datetime.now(UTC):%Y-%m-%d %H:%M} UTC",
            "",
            machine_line(),
            "",
            f"{label} with default ExtractionSettings (prefilter on), "
            f"{len(messages)} messages from `{data_name}`, "
            f"{elapsed_ms / max(1, len(messages)):.2f} ms per message. A fact is right when its "
            "content holds every key of an expected entry, tolerated when it holds those of "
            "an `accept` entry, junk otherwise; precision = (right + tolerated) / extracted, "
            'recall = expected entries found / expected. "Dates ignored" drops the date keys '
            "(see the module docstring).",
            "",
            summary_table(tallies),
            "",
            *([cost_line(cost), ""] if cost else []),
            "## Extracted facts by type",
            "",
            type_table(total),
            "",
            f"## Junk facts ({total.junk})",
            "",
            junk_list(scored),
            "",
            f"## Missed expectations ({total.expected - total.found})",
            "",
            missed_list(scored),
            "",
        ]
    )
    print(text)
    output = args.output or (RESULTS if cost is None else RESULTS_DIR / "offline_facts-llm.md")
    write_results(output, text)
    sys.exit(0)


if __name__ == "__main__":
    main()
