"""What tiermem believes *now*: the active memories after whole labelled conversations, with
changes, endings, negations, corrections, multi-clause sentences, hedges and small talk.

    python -m bench.bench_beliefs [--data bench/data/beliefs.jsonl] [--llm offline|scripted]
                                  [--only ID ...] [--batch N]

The set (bench/data/beliefs.jsonl, written for this bench, no dataset copied) is one
conversation per line: one user's messages in order, each with its session date, the user's
`speaker` name (null: the API's default, facts say "the user"; `introduces` then names
the self-introduction the messages make), `tags` naming what it exercises, and what memory
should hold once the last message is processed:
- `expect_active`: facts that must be active at the end (recall);
- `expect_gone`: facts that were true earlier (or looked true) and must NOT be active at
  the end, e.g. the employer after "I just quit Siemens" (stale beliefs), with `ended_by`
  giving, per entry, the index of the message that ends (or corrects) it;
- `accept` (optional): facts tolerated in the active set but not required.
Each fact is a list of keys matched as in shared/extraction/scoring.py (`normalise`,
`key_matches`: case-folded, a key matches where one of its `|` alternatives starts a word;
the fact matches when its content holds every key). A key starting with `!` is negative:
the fact must hold none of its alternatives. So ["siemens", "!quit|left|former"] is the
belief "works at Siemens", while "Lena quit Siemens" states the ending: such a fact, which
matches an `expect_gone` entry's positive keys and one of its negative ones, is history (the
ending, or a dated event such as "moved to Stavanger in May 2023") and tolerated.

Each message goes through the product path in-process, as a live chat would: one
transcript line stored by `shared.flows.import_transcripts.import_lines` (what `tiermem
import` and POST /v1/import run), then `shared.flows.extract_turn.run_extraction` of its
run (the worker's task: extractor, embeddings, the writer's merge and supersede), before
the next message. With `--batch N` (the LLM path, ADR 0024) the runs wait and N of a
conversation's turns are extracted in one call as the Nth is stored; what waits at its end is
extracted then, before scoring.
One fresh data folder per run (SQLite, the in-memory vector store, default settings but
for TIERMEM_* variables in the environment, which still apply); each conversation is its
own user. The extractor is the offline rules (no LLM configured) or,
with `--llm scripted`, the LLM path against tests/scripted_llm.py started in-process with
`offline_facts=True` (it answers each prompt with the facts the offline rules find in its
turn: the real client, prompt, JSON schema and validation, so its numbers match the offline
row when the path loses nothing; they say nothing of a model).

Scoring of the user's active memories (`shared.memory.reader.list_memories`, quarantined
facts left out since they never reach a prompt), each fact in this order:
- *stale* when it matches an `expect_gone` entry (a belief that should have ended);
- *junk* when it is a tautology ("Chloe's name is Chloe");
- *right* when it matches an `expect_active` entry;
- *tolerated* when it matches an `accept` entry or is history (above);
- *junk* otherwise.
Active-set precision = (right + tolerated) / active facts; recall = `expect_active` entries
matched by a right fact / entries; stale rate = `expect_gone` entries matched by some active
fact / entries. Per tag (a conversation counts under each of its tags) and overall. For the
conversations with a self-introduction, the share of active facts that name the user by
the introduced name rather than "the user" is reported apart. The exit status is 0 whatever
the scores (a measurement, not a test).

Three sets: `beliefs.jsonl` (54 conversations, looked at while the rules were written),
`beliefs_dev2.jsonl` (23) and `beliefs_holdout.jsonl` (22), written later by someone who had
not read the rules; dev2 was then used for development, the held-out set only measured.

Results: printed, and written to bench/results/beliefs.md (beliefs-scripted.md for
`--llm scripted`; `--output` for the other sets).
"""

from __future__ import annotations

import argparse
import contextlib
import datetime as dt
import json
import logging
import re
import sys
import tempfile
import time
from collections import Counter
from collections.abc import Iterator, Sequence
from dataclasses import dataclass, field
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

from sqlmodel import Session, select

from bench._common import RESULTS_DIR, command_line, machine_line, write_results
from bench.batched import QUIET_S, TurnExtraction
from shared.config import Settings
from shared.db.migrate import upgrade_to_head
from shared.db.models import ExtractionRun, Tenant
from shared.extraction.scoring import entry_matches, key_matches, normalise
from shared.flows.import_transcripts import import_lines
from shared.memory.models import MemoryPublic
from shared.memory.reader import list_memories
from shared.records.models import TranscriptLine
from shared.records.tenancy import ensure_dev_tenant
from shared.records.users import find_user
from shared.runtime import Runtime

DATA = Path(__file__).parent / "data" / "beliefs.jsonl"
PROG = "python -m bench.bench_beliefs"
Entry = list[str]  # keys, each "alt1|alt2|...", a leading "!" for a negative key

_TAUTOLOGY = re.compile(r"^(?:the )?([\w' ]+?)'s name is (?:the )?\1\b")


# -- data ------------------------------------------------------------------------------------


@dataclass(frozen=True)
class Said:
    date: dt.date
    text: str
    reply: str | None = None  # the assistant's answer to it (casual-chat sets)


@dataclass(frozen=True)
class Conversation:
    id: str
    tags: list[str]
    speaker: str | None
    introduces: str | None
    messages: list[Said]
    expect_active: list[Entry]
    expect_gone: list[Entry]
    ended_by: list[int]  # per expect_gone entry: the message index that ends it
    accept: list[Entry]
    note: str
    forbid: list[Entry] = field(default_factory=list)  # never to be stored (hypotheticals...)
    # One chat thread (one session) for the whole conversation, as a chat app keeps it;
    # else one session per date. Casual-chat sets (messages with replies) are threads.
    thread: bool = False


def load(path: Path) -> list[Conversation]:
    conversations: list[Conversation] = []
    seen: set[str] = set()
    for number, line in enumerate(path.read_text().splitlines(), 1):
        if not line.strip():
            continue
        raw = json.loads(line)
        where = f"{path}:{number}"
        if raw["id"] in seen:
            raise ValueError(f"{where}: duplicate id {raw['id']!r}")
        seen.add(raw["id"])
        if not raw.get("tags") or not raw.get("messages"):
            raise ValueError(f"{where}: a conversation needs tags and messages")
        entries = {
            k: [list(e) for e in raw.get(k, [])]
            for k in ("expect_active", "expect_gone", "accept", "forbid")
        }
        for entry in (e for es in entries.values() for e in es):
            if any(not isinstance(k, str) or not k.strip("! ") for k in entry):
                raise ValueError(f"{where}: an entry needs non-empty string keys: {entry!r}")
            if not positive(entry):
                raise ValueError(f"{where}: an entry needs a positive key: {entry!r}")
        said = [
            Said(dt.date.fromisoformat(m["date"]), m["text"], m.get("reply"))
            for m in raw["messages"]
        ]
        if any(b.date < a.date for a, b in zip(said, said[1:], strict=False)):
            raise ValueError(f"{where}: messages must be in date order")
        ended_by = list(raw.get("ended_by", []))
        if len(ended_by) != len(entries["expect_gone"]) or not all(
            isinstance(i, int) and 0 <= i < len(said) for i in ended_by
        ):
            raise ValueError(f"{where}: ended_by needs a message index per expect_gone entry")
        conversations.append(
            Conversation(
                id=raw["id"],
                tags=list(raw["tags"]),
                speaker=raw.get("speaker"),
                introduces=raw.get("introduces"),
                messages=said,
                expect_active=entries["expect_active"],
                expect_gone=entries["expect_gone"],
                ended_by=ended_by,
                accept=entries["accept"],
                note=raw.get("note", ""),
                forbid=entries["forbid"],
                thread=bool(raw.get("thread", any(m.reply for m in said))),
            )
        )
    return conversations


# -- matching --------------------------------------------------------------------------------


def positive(entry: Entry) -> Entry:
    return [k for k in entry if not k.startswith("!")]


def negative(entry: Entry) -> Entry:
    return [k[1:] for k in entry if k.startswith("!")]


def matches(entry: Entry, content: str) -> bool:
    """`content` is normalised: every positive key is in it and no negative one."""
    return entry_matches(positive(entry), content) and not any(
        key_matches(k, content) for k in negative(entry)
    )


def states_ending(entry: Entry, content: str) -> bool:
    """The positive keys of a gone entry with one of its negative keys: the ending itself
    (or a past event), history rather than a belief."""
    return entry_matches(positive(entry), content) and any(
        key_matches(k, content) for k in negative(entry)
    )


def is_tautology(content: str) -> bool:
    return bool(_TAUTOLOGY.match(content))


# -- running ---------------------------------------------------------------------------------


@dataclass(frozen=True)
class Belief:
    type: str
    content: str
    said_in: str  # the newest source message's text
    verdict: str  # right, tolerated, stale, junk
    why: str = ""  # "tautology"; for a stale fact, the index of the gone entry it matches


@dataclass
class Outcome:
    conversation: Conversation
    beliefs: list[Belief]
    found: list[bool]  # per expect_active entry
    still_active: list[bool]  # per expect_gone entry
    written: int  # every fact row of the user, active or not
    superseded: int  # rows with valid_to set
    quarantined: int  # active rows the injection guard holds back (left out above)
    skipped: int  # messages the extractor skipped (small talk)
    extractors: set[str]  # what wrote the user's facts ("offline", "llm")
    ended: list[tuple[str, str]]  # (superseded fact, the fact that superseded it)
    forbidden: list[bool] = field(default_factory=list)  # per forbid entry: stored and active
    runs: RunStats = field(default_factory=lambda: RunStats())


@dataclass
class RunStats:
    """What the user's extraction runs report: items, tokens and time, summed."""

    runs: int = 0
    items: int = 0  # the items the model's replies held
    valid: int = 0  # kept as they came
    repaired: int = 0  # kept after the server filled in or fixed a field
    dropped: int = 0  # invalid (their meaning missing)
    dropped_runs: int = 0  # runs whose every item was dropped
    # Runs whose first reply was all dropped, asked again (ADR 0031): then facts kept, or
    # the model answered that the turn states none (a `done` with 0 facts).
    asked_again: int = 0
    asked_again_kept: int = 0
    asked_again_none: int = 0
    value_checks: int = 0
    values_changed: int = 0
    failed_runs: int = 0
    prompt_tokens: int = 0
    completion_tokens: int = 0
    llm_s: float = 0.0
    # Why items were dropped, by kind (the reason up to its specifics in parentheses).
    reasons: Counter[str] = field(default_factory=Counter)

    def add(self, other: RunStats) -> None:
        for name in self.__dataclass_fields__:
            setattr(self, name, getattr(self, name) + getattr(other, name))


def run_stats(session: Session, user_id: str) -> RunStats:
    stats = RunStats()
    for run in session.exec(select(ExtractionRun).where(ExtractionRun.user_id == user_id)):
        stats.runs += 1
        kept = run.facts_extracted
        stats.valid += kept - run.facts_repaired
        stats.repaired += run.facts_repaired
        stats.dropped += run.facts_invalid
        stats.items += kept + run.facts_invalid
        stats.dropped_runs += run.status == "dropped"
        stats.asked_again += run.asked_again
        stats.asked_again_kept += run.asked_again and kept > 0
        stats.asked_again_none += run.asked_again and run.status == "done" and kept == 0
        stats.value_checks += run.ending_checks
        stats.values_changed += run.values_changed
        stats.failed_runs += run.status == "failed"
        stats.prompt_tokens += run.prompt_tokens
        stats.completion_tokens += run.completion_tokens
        stats.llm_s += run.llm_ms / 1000
        stats.reasons.update(reason.split(" (")[0] for reason in run.dropped_reasons or [])
    return stats


def make_runtime(
    folder: Path,
    llm_base_url: str | None,
    model: str | None = None,
    *,
    llm: dict[str, Any] | None = None,
    extraction: dict[str, Any] | None = None,
) -> tuple[Runtime, str]:
    """`llm` and `extraction`: settings over the defaults (bench_llm_cost's batches)."""
    # A real model on a CPU takes seconds a turn, far past the default timeout.
    real = {"model": model, "timeout_s": 600} if model else {}
    settings = Settings(
        _env_file=None,
        data_dir=folder / "data",
        database_url=None,
        redis_url=None,
        qdrant={"in_memory": True},
        llm={"base_url": llm_base_url, **real, **(llm or {})},
        extraction=extraction or {},
    )
    upgrade_to_head(settings)
    runtime = Runtime(settings)
    with Session(runtime.engine) as session:
        ensure_dev_tenant(session=session, settings=settings)
        session.commit()
        tenant_id = session.exec(select(Tenant.id)).one()
    return runtime, tenant_id


def import_message(runtime: Runtime, tenant_id: str, conv: Conversation, i: int) -> list[str]:
    """The conversation's message `i` (and the assistant's reply to it) stored as transcript
    lines; returns the extraction runs it made."""
    said = conv.messages[i]
    when = datetime.combine(said.date, dt.time(12), tzinfo=UTC) + dt.timedelta(minutes=i)
    session_id = conv.id if conv.thread else f"{conv.id}-{said.date.isoformat()}"
    line = {"user_id": conv.id, "session_id": session_id, "external_id": f"{conv.id}-{i}"}
    lines = [
        TranscriptLine.model_validate(
            {**line, "role": "user", "content": said.text, "speaker": conv.speaker,
             "created_at": when.isoformat()}
        )
    ]  # fmt: skip
    if said.reply:
        answered = when + dt.timedelta(seconds=30)
        lines.append(
            TranscriptLine.model_validate(
                {**line, "external_id": f"{conv.id}-{i}-reply", "role": "assistant",
                 "content": said.reply, "created_at": answered.isoformat()}
            )
        )  # fmt: skip
    with Session(runtime.engine) as session:
        summary = import_lines(
            session=session, settings=runtime.settings, tenant_id=tenant_id, lines=lines
        )
    return list(summary.run_ids)


def run_conversation(runtime: Runtime, tenant_id: str, conv: Conversation) -> Outcome:
    # With --batch N the turns wait and N are extracted together; the rest at the end.
    extraction = TurnExtraction(runtime)
    outcomes = [
        outcome
        for i in range(len(conv.messages))
        for run_id in import_message(runtime, tenant_id, conv, i)
        for outcome in extraction.extract(run_id)
    ]
    skipped = sum(o.status == "skipped" for o in outcomes + extraction.flush())
    with Session(runtime.engine) as session:
        user = find_user(session=session, tenant_id=tenant_id, user_external_id=conv.id)
        every = list_memories(session=session, user=user, include_superseded=True, limit=1000)
        active = list_memories(session=session, user=user, quarantined=False, limit=1000).data
        stats = run_stats(session, user.id)
    outcome = score(conv, active, every.data, skipped=skipped)
    outcome.runs = stats
    return outcome


def judge(conv: Conversation, content: str) -> tuple[str, str]:
    for i, entry in enumerate(conv.expect_gone):
        if matches(entry, content):
            return "stale", str(i)
    if any(matches(e, content) for e in conv.forbid):
        return "junk", "forbidden"
    if is_tautology(content):
        return "junk", "tautology"
    if any(matches(e, content) for e in conv.expect_active):
        return "right", ""
    if any(matches(e, content) for e in conv.accept):
        return "tolerated", ""
    if any(states_ending(e, content) for e in conv.expect_gone):
        return "tolerated", "history"
    return "junk", ""


def score(
    conv: Conversation,
    active: Sequence[MemoryPublic],
    every: Sequence[MemoryPublic],
    *,
    skipped: int,
) -> Outcome:
    """`active`: what is scored; `every`: all the user's facts, superseded ones too."""
    beliefs = []
    for m in sorted(active, key=lambda m: (m.first_seen_at, m.content)):
        verdict, why = judge(conv, normalise(m.content))
        said_in = m.sources[-1].content if m.sources else ""
        beliefs.append(Belief(m.type, m.content, said_in, verdict, why))
    right = [normalise(b.content) for b in beliefs if b.verdict == "right"]
    contents = [normalise(b.content) for b in beliefs]
    by_id = {m.id: m.content for m in every}
    return Outcome(
        conversation=conv,
        beliefs=beliefs,
        found=[any(matches(e, c) for c in right) for e in conv.expect_active],
        still_active=[any(matches(e, c) for c in contents) for e in conv.expect_gone],
        forbidden=[any(matches(e, c) for c in contents) for e in conv.forbid],
        written=len(every),
        superseded=sum(not m.active for m in every),
        quarantined=sum(m.active and m.quarantine_reason is not None for m in every),
        skipped=skipped,
        extractors={m.extractor for m in every},
        ended=[
            (m.content, by_id.get(m.superseded_by or "", "—"))
            for m in sorted(every, key=lambda m: (m.first_seen_at, m.content))
            if not m.active
        ],
    )


# -- tallies ---------------------------------------------------------------------------------


@dataclass
class Tally:
    conversations: int = 0
    messages: int = 0
    active: int = 0
    right: int = 0
    tolerated: int = 0
    stale: int = 0
    expected: int = 0
    found: int = 0
    gone: int = 0
    still_active: int = 0
    written: int = 0
    superseded: int = 0
    forbid: int = 0
    forbidden: int = 0

    def add(self, o: Outcome) -> None:
        self.conversations += 1
        self.messages += len(o.conversation.messages)
        self.active += len(o.beliefs)
        self.right += sum(b.verdict == "right" for b in o.beliefs)
        self.tolerated += sum(b.verdict == "tolerated" for b in o.beliefs)
        self.stale += sum(b.verdict == "stale" for b in o.beliefs)
        self.expected += len(o.found)
        self.found += sum(o.found)
        self.gone += len(o.still_active)
        self.still_active += sum(o.still_active)
        self.written += o.written
        self.superseded += o.superseded
        self.forbid += len(o.forbidden)
        self.forbidden += sum(o.forbidden)

    @property
    def junk(self) -> int:
        return self.active - self.right - self.tolerated - self.stale


def ratio(num: int, den: int) -> str:
    return f"{num / den:.3f}" if den else "–"


def tallies_by_tag(outcomes: Sequence[Outcome]) -> dict[str, Tally]:
    tags = sorted({t for o in outcomes for t in o.conversation.tags})
    tallies = {t: Tally() for t in tags}
    total = Tally()
    for o in outcomes:
        total.add(o)
        for t in o.conversation.tags:
            tallies[t].add(o)
    return {"all": total, **tallies}


# -- report ----------------------------------------------------------------------------------


def _cell(text: str) -> str:
    return text.replace("|", "\\|").replace("\n", " ")


def summary_table(tallies: dict[str, Tally]) -> str:
    rows = [
        "| tag | convs | msgs | active | right (tol.) | stale | junk | **precision** "
        "| expected | found | **recall** | gone | still active | **stale rate** |",
        "|---|--:|--:|--:|--:|--:|--:|--:|--:|--:|--:|--:|--:|--:|",
    ]
    for name, t in tallies.items():
        label = f"**{name}**" if name == "all" else name
        rows.append(
            f"| {label} | {t.conversations} | {t.messages} | {t.active} | {t.right} "
            f"({t.tolerated}) | {t.stale} | {t.junk} | {ratio(t.right + t.tolerated, t.active)} "
            f"| {t.expected} | {t.found} | {ratio(t.found, t.expected)} | {t.gone} "
            f"| {t.still_active} | {ratio(t.still_active, t.gone)} |"
        )
    return "\n".join(rows)


def type_table(outcomes: Sequence[Outcome]) -> str:
    counts: dict[str, dict[str, int]] = {}
    for b in (b for o in outcomes for b in o.beliefs):
        row = counts.setdefault(b.type, {"right": 0, "tolerated": 0, "stale": 0, "junk": 0})
        row[b.verdict] += 1
    rows = [
        "| fact type | active | right | tolerated | stale | junk | precision |",
        "|---|--:|--:|--:|--:|--:|--:|",
    ]
    for name, c in sorted(counts.items()):
        n = sum(c.values())
        rows.append(
            f"| {name} | {n} | {c['right']} | {c['tolerated']} | {c['stale']} | {c['junk']} "
            f"| {ratio(c['right'] + c['tolerated'], n)} |"
        )
    return "\n".join(rows)


def conversation_table(outcomes: Sequence[Outcome]) -> str:
    rows = [
        "| conversation | tags | msgs | active | right (tol.) | stale | junk | found "
        "| still active |",
        "|---|---|--:|--:|--:|--:|--:|--:|--:|",
    ]
    for o in outcomes:
        v = [b.verdict for b in o.beliefs]
        rows.append(
            f"| {o.conversation.id} | {', '.join(o.conversation.tags)} "
            f"| {len(o.conversation.messages)} | {len(v)} | {v.count('right')} "
            f"({v.count('tolerated')}) | {v.count('stale')} | {v.count('junk')} "
            f"| {sum(o.found)}/{len(o.found)} | {sum(o.still_active)}/{len(o.still_active)} |"
        )
    return "\n".join(rows)


def best_message(conv: Conversation, entry: Entry) -> str:
    """The conversation's message holding most of the entry's positive keys (the latest of
    equals): where a missed fact was said."""
    best, best_hits = "", 0
    for said in conv.messages:
        hits = sum(key_matches(k, normalise(said.text)) for k in positive(entry))
        if hits and hits >= best_hits:
            best, best_hits = said.text, hits
    return best


def stale_list(outcomes: Sequence[Outcome]) -> str:
    rows = [
        "| conversation | type | stale belief | gone (keys) | said in | should have ended it |",
        "|---|---|---|---|---|---|",
    ]
    for o in outcomes:
        conv = o.conversation
        for b in o.beliefs:
            if b.verdict != "stale":
                continue
            i = int(b.why)
            ender = conv.messages[conv.ended_by[i]].text
            rows.append(
                f"| {conv.id} | {b.type} | {_cell(b.content)} "
                f"| {_cell(' + '.join(positive(conv.expect_gone[i])))} "
                f"| {_cell(b.said_in)} | {_cell(ender)} |"
            )
    return "\n".join(rows) if len(rows) > 2 else "(none)"


def active_list(outcomes: Sequence[Outcome]) -> str:
    rows = ["| conversation | verdict | type | active fact |", "|---|---|---|---|"]
    for o in outcomes:
        for b in o.beliefs:
            why = f" ({b.why})" if b.why and b.verdict != "stale" else ""
            rows.append(
                f"| {o.conversation.id} | {b.verdict}{why} | {b.type} | {_cell(b.content)} |"
            )
    return "\n".join(rows) if len(rows) > 2 else "(none)"


def ended_list(outcomes: Sequence[Outcome]) -> str:
    rows = ["| conversation | superseded fact | superseded by |", "|---|---|---|"]
    for o in outcomes:
        for old, new in o.ended:
            rows.append(f"| {o.conversation.id} | {_cell(old)} | {_cell(new)} |")
    return "\n".join(rows) if len(rows) > 2 else "(none)"


def junk_list(outcomes: Sequence[Outcome]) -> str:
    rows = ["| conversation | type | junk fact | said in |", "|---|---|---|---|"]
    for o in outcomes:
        for b in o.beliefs:
            if b.verdict == "junk":
                mark = " *(tautology)*" if b.why == "tautology" else ""
                rows.append(
                    f"| {o.conversation.id} | {b.type} | {_cell(b.content)}{mark} "
                    f"| {_cell(b.said_in)} |"
                )
    return "\n".join(rows) if len(rows) > 2 else "(none)"


def missed_list(outcomes: Sequence[Outcome]) -> str:
    rows = ["| conversation | expected keys | said in |", "|---|---|---|"]
    for o in outcomes:
        for entry, found in zip(o.conversation.expect_active, o.found, strict=True):
            if not found:
                said = best_message(o.conversation, entry) or "—"
                rows.append(f"| {o.conversation.id} | {_cell(' + '.join(entry))} | {_cell(said)} |")
    return "\n".join(rows) if len(rows) > 2 else "(none)"


def naming_line(outcomes: Sequence[Outcome]) -> str:
    named = [o for o in outcomes if o.conversation.introduces]
    if not named:
        return "(no conversation with a self-introduction)"
    facts = by_name = the_user = 0
    for o in named:
        name = normalise(o.conversation.introduces or "")
        for b in o.beliefs:
            content = normalise(b.content)
            facts += 1
            by_name += key_matches(name, content)
            the_user += key_matches("the user", content)
    return (
        f"{len(named)} conversations without a speaker name in which the user introduces "
        f"themself: {facts} active facts, {by_name} name the user by the introduced name, "
        f'{the_user} say "the user" ({ratio(by_name, facts)} named).'
    )


def llm_line(outcomes: Sequence[Outcome], total: Tally) -> str:
    """What the extraction runs say: the items the model returned and what became of them,
    and what a turn cost."""
    stats = RunStats()
    for o in outcomes:
        stats.add(o.runs)
    turns = max(1, stats.runs)
    return (
        f"Extraction runs: {stats.runs} turns; items returned {stats.items}: valid "
        f"{stats.valid}, repaired {stats.repaired}, dropped {stats.dropped}; runs that kept "
        f"none of their items (`dropped`) {stats.dropped_runs}, failed {stats.failed_runs}; "
        f"asked again after a reply of dropped items {stats.asked_again} (then kept facts "
        f"{stats.asked_again_kept}, answered none {stats.asked_again_none}); known values "
        f"asked for now {stats.value_checks}, changed by the answer {stats.values_changed}. "
        f"Dropped because: {_reasons(stats.reasons)}. "
        f"Per turn: {stats.llm_s / turns:.2f} s in the LLM, {stats.prompt_tokens / turns:.0f} "
        f"prompt + {stats.completion_tokens / turns:.0f} completion tokens. "
        f"Forbidden facts stored (hypotheticals, questions, the assistant's words): "
        f"{total.forbidden} of {total.forbid}."
    )


def _reasons(reasons: Counter[str]) -> str:
    return "; ".join(f"{why} {n}" for why, n in reasons.most_common()) or "—"


def report(
    outcomes: Sequence[Outcome], *, argv: Sequence[str] | None, extractor: str, data: str,
    elapsed_s: float,
) -> str:  # fmt: skip
    tallies = tallies_by_tag(outcomes)
    total = tallies["all"]
    quarantined = sum(o.quarantined for o in outcomes)
    skipped = sum(o.skipped for o in outcomes)
    writers = ", ".join(sorted({e for o in outcomes for e in o.extractors})) or "none"
    return "\n".join(
        [
            "# Beliefs: the active memories after whole conversations",
            "",
            f"`{command_line(PROG, argv)}` — {datetime.now(UTC):%Y-%m-%d %H:%M} UTC",
            "",
            machine_line(),
            "",
            f"{len(outcomes)} conversations, {total.messages} user messages from `{data}`, "
            f"through import_lines + run_extraction in-process with {extractor}; "
            f"{elapsed_s:.1f} s ({1000 * elapsed_s / max(1, total.messages):.0f} ms per message). "
            f"{total.written} facts written (by the {writers} extractor), "
            f"{total.superseded} of them superseded; "
            f"{skipped} messages skipped as small talk; {quarantined} active facts "
            "quarantined (left out). Precision = (right + tolerated) / active; recall = "
            "expected facts found active; stale rate = facts that should have ended and are "
            "still active (see the module docstring). A conversation counts under each of its "
            "tags.",
            "",
            summary_table(tallies),
            "",
            llm_line(outcomes, total),
            "",
            "## Active facts by type",
            "",
            type_table(outcomes),
            "",
            "## Named after a self-introduction",
            "",
            naming_line(outcomes),
            "",
            f"## Stale beliefs ({total.stale})",
            "",
            stale_list(outcomes),
            "",
            f"## Superseded by the writer ({total.superseded})",
            "",
            ended_list(outcomes),
            "",
            f"## Junk active facts ({total.junk})",
            "",
            junk_list(outcomes),
            "",
            f"## Missed expectations ({total.expected - total.found})",
            "",
            missed_list(outcomes),
            "",
            "## Per conversation",
            "",
            conversation_table(outcomes),
            "",
            f"## Every active fact ({total.active})",
            "",
            active_list(outcomes),
            "",
        ]
    )


@contextlib.contextmanager
def extractor_endpoint(
    kind: str, model: str = "local", *, like_llama_cpp: bool = False
) -> Iterator[tuple[str | None, str]]:
    """(the LLM base URL or None, what the report calls the extractor). `kind` is offline,
    scripted, or the URL of a real OpenAI-compatible server (bench/real_llm.py starts one).
    `like_llama_cpp`: the scripted server refuses json_schema as llama-cpp-python's does, so
    calls carry the schema as they do behind it (json_object+schema, the schema in the
    prompt too)."""
    if kind == "offline":
        yield None, "the offline rule-based extractor (no LLM configured)"
        return
    if kind != "scripted":
        yield kind, f"the LLM path against the real model `{model}` served at {kind}"
        return
    from tests.scripted_llm import ScriptedLLM

    llm = ScriptedLLM(offline_facts=True).start()
    if like_llama_cpp:
        llm.reject_json_schema(500)
    try:
        yield (
            llm.base_url,
            (
                "the LLM path against the scripted OpenAI-compatible server "
                "(tests/scripted_llm.py, in-process), which answers each turn with the facts "
                "the offline rules find in it"
                + (", refusing json_schema as llama-cpp-python's server does" * like_llama_cpp)
            ),
        )
    finally:
        llm.stop()


def main(argv: Sequence[str] | None = None) -> None:
    parser = argparse.ArgumentParser(prog=PROG, description=(__doc__ or "").splitlines()[0])
    parser.add_argument("--data", type=Path, default=DATA, help="the labelled JSONL set")
    parser.add_argument(
        "--llm",
        default="offline",
        help="offline, scripted, or the base URL of a real OpenAI-compatible server",
    )
    parser.add_argument("--model", default="local", help="the model name, with --llm URL")
    parser.add_argument("--only", nargs="+", metavar="ID", help="only these conversations")
    parser.add_argument(
        "--batch",
        type=int,
        default=1,
        help="TIERMEM_EXTRACTION__BATCH_TURNS: N turns of a conversation in one LLM call",
    )
    parser.add_argument("--output", type=Path, default=None)
    args = parser.parse_args(argv)
    kind = args.llm if args.llm in ("offline", "scripted") else "llm"
    output = args.output or RESULTS_DIR / (
        "beliefs.md" if kind == "offline" else f"beliefs-{kind}.md"
    )
    logging.basicConfig(level=logging.WARNING)

    conversations = load(args.data)
    if args.only:
        conversations = [c for c in conversations if c.id in set(args.only)]
    outcomes: list[Outcome] = []
    with (
        extractor_endpoint(args.llm, args.model) as (base_url, extractor),
        tempfile.TemporaryDirectory(prefix="tiermem-beliefs-") as folder,
    ):
        runtime, tenant_id = make_runtime(
            Path(folder),
            base_url,
            args.model if kind == "llm" else None,
            extraction={"batch_turns": args.batch, "batch_quiet_s": QUIET_S},
        )
        try:
            started = time.perf_counter()
            outcomes = [run_conversation(runtime, tenant_id, c) for c in conversations]
            elapsed_s = time.perf_counter() - started
        finally:
            runtime.close()

    try:
        data_name = str(args.data.resolve().relative_to(Path.cwd()))
    except ValueError:
        data_name = str(args.data)
    text = report(outcomes, argv=argv, extractor=extractor, data=data_name, elapsed_s=elapsed_s)
    print(text)
    write_results(output, text)
    sys.exit(0)


if __name__ == "__main__":
    main()
