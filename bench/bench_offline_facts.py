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
import sys
import time
from collections.abc import Sequence
from datetime import UTC, datetime
from pathlib import Path

from bench._common import RESULTS_DIR, command_line, machine_line, write_results
from shared.config import ExtractionSettings, LLMSettings
from shared.extraction.base import Extractor
from shared.extraction.llm_extractor import LLMExtractor
from shared.extraction.offline import VERSION, OfflineExtractor
from shared.extraction.scoring import (
    GROUPS,
    Fact,
    LLMCost,
    Scored,
    Tally,
    load,
    score,
)

DATA = Path(__file__).parent / "data" / "offline_facts.jsonl"
RESULTS = RESULTS_DIR / "offline_facts.md"
PROG = "python -m bench.bench_offline_facts"


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
