"""LLM cost per stored turn, side by side: tiermem's extraction and mem0 2.2.1's
`add(infer=True)` on the same turns, both counted by one token-counting server (issue 25).

    python -m bench.bench_llm_cost --llm http://127.0.0.1:8765/v1 --model local
                                   [--data bench/data/casual_chat.jsonl] [--limit N]
                                   [--side both|tiermem|mem0] [--output PATH]
                                   [--batch 1,4] [--batch-max-tokens N] [--llm-max-tokens N]

The turns are the first `--limit` user messages of a labelled casual-chat set (whole
conversations in order, the last one cut; all of them without `--limit`), each with the
assistant's reply where the set has one. A real model on a CPU takes ~10-30 s a call: keep
`--limit` near 12. `--llm scripted` runs both sides against tests/scripted_llm.py instead,
refusing json_schema as llama-cpp-python's server does (its usage is characters / 4, not a
tokenizer, and its replies are the offline rules' facts: it checks the plumbing and compares
prompt sizes, and says nothing of a model's completions).

Both sides talk to one `bench.token_proxy.TokenProxy` on 127.0.0.1 in front of `--llm`, one
side after the other, and the proxy records every chat completion each side asked for: HTTP
status, the prompt and completion tokens the server reported (its own tokenizer, its own
chat template), seconds, and the response_format asked for. Every call counts: tiermem's
structured-output discovery (a json_schema request the server refuses, once per process and
server), a repair call, a client's retry, and a request the server refused.
- tiermem: in-process as bench.bench_beliefs runs a turn, with its LLM settings pointed at the
  proxy: `import_message` (the user message and its reply as transcript lines, as
  `tiermem import` stores them), then `shared.flows.extract_turn.run_extraction` of its run
  (extraction, embedding, the writer's merge and supersede). One data folder (SQLite, the
  in-memory vector store), one user per conversation, one session per conversation.
- mem0 2.2.1: in-process `Memory.add([{user}, {assistant}], user_id=…, infer=True)` per turn,
  one mem0 user per conversation, with its defaults (prompts, temperature 0.1, max_tokens
  2000, the openai client's two retries), its LLM the `openai` provider at the proxy, embedded
  Qdrant on a folder and tiermem's ONNX MiniLM as its embedder (bench.mem0_runner). A turn
  whose add() raised, or during which mem0 logged an error (it logs a reply it cannot parse
  and goes on with no memories), is listed with the reason. 2.2.1 makes one LLM call per
  add(): its ADD-only "additive extraction" (a 33,653-character system prompt, the last 10
  messages, the 10 nearest memories); the second "memory actions" call of older mem0 is gone.
  Behind a server with a 4,096-token context (bench/real_llm.py's) every such call is refused
  for its length (~8,000 prompt tokens), and the proxy keeps the prompt tokens the server
  counted in refusing.

- tiermem with `--batch N` (ADR 0024; a side per value, `1` the default one call per turn):
  TIERMEM_EXTRACTION__BATCH_TURNS=N, so each conversation's turns wait and N of them are
  extracted in one call (`shared.flows.extract_batch.run_batch_extraction`); what waits at
  the end of a conversation is extracted then, as a session fallen quiet would be. A batch's
  calls count on the turn that completed it; facts and errors on each run's own turn.
  `--batch-max-tokens` is the model's context (4,096 for bench/real_llm.py's server, with
  `--llm-max-tokens 512` so a batch's prompt may take 3,584 of it).

Reported per side: LLM calls, prompt and completion tokens per turn (mean) and in total,
seconds per turn (the whole turn, and the part spent waiting for the LLM: the upstream may
be serving others too), turns that failed, facts added and facts active at the end; the calls
by response_format and status; every distinct error. The exit status is 0 whatever happened
(a measurement, not a test).

Results: printed, and written to bench/results/llm_cost.md (llm_cost-scripted.md for
`--llm scripted`).
"""

from __future__ import annotations

import argparse
import dataclasses
import logging
import os
import re
import sys
import tempfile
import time
from collections import Counter
from collections.abc import Sequence
from dataclasses import dataclass, field
from datetime import UTC, datetime
from pathlib import Path

from sqlmodel import Session

from bench._common import RESULTS_DIR, command_line, machine_line, write_results
from bench.batched import QUIET_S, TurnExtraction
from bench.bench_beliefs import (
    Conversation,
    extractor_endpoint,
    import_message,
    load,
    make_runtime,
    run_stats,
)
from bench.token_proxy import Call, TokenProxy
from shared.db.models import ExtractionRun
from shared.errors import DomainError
from shared.flows.extract_turn import RunOutcome
from shared.memory.reader import list_memories
from shared.records.users import find_user
from shared.runtime import Runtime

DATA = Path(__file__).parent / "data" / "casual_chat.jsonl"
PROG = "python -m bench.bench_llm_cost"
SIDES = ("tiermem", "mem0")
ERROR_CHARS = 240
_NUMBER = re.compile(r"\d+")


# -- turns -----------------------------------------------------------------------------------


def first_turns(conversations: Sequence[Conversation], limit: int | None) -> list[Conversation]:
    """The conversations holding the first `limit` messages, the last one cut short."""
    kept: list[Conversation] = []
    left = sum(len(c.messages) for c in conversations) if limit is None else limit
    for conv in conversations:
        if left <= 0:
            break
        kept.append(dataclasses.replace(conv, messages=conv.messages[:left]))
        left -= len(kept[-1].messages)
    return kept


@dataclass
class TurnCost:
    conversation: str
    index: int
    calls: list[Call]
    seconds: float
    facts: int  # facts this turn added
    error: str | None = None  # why the turn failed (or what went wrong in it)


@dataclass
class SideResult:
    name: str
    turns: list[TurnCost] = field(default_factory=list)
    active_facts: int = 0  # held at the end, over every conversation's user
    notes: list[str] = field(default_factory=list)

    @property
    def calls(self) -> list[Call]:
        return [c for t in self.turns for c in t.calls]

    def add(self, turn: TurnCost) -> None:
        """Keep the turn and say so on stderr (a real model takes minutes for a few turns)."""
        self.turns.append(turn)
        tokens = (
            sum(c.prompt_tokens for c in turn.calls),
            sum(c.completion_tokens for c in turn.calls),
        )
        print(
            f"{self.name} {turn.conversation}#{turn.index}: {len(turn.calls)} calls, "
            f"{tokens[0]} + {tokens[1]} tokens, {turn.seconds:.1f} s, {turn.facts} facts"
            + (f"; {turn.error}" if turn.error else ""),
            file=sys.stderr,
            flush=True,
        )


def _short(text: str) -> str:
    return " ".join(text.split())[:ERROR_CHARS]


# -- tiermem ---------------------------------------------------------------------------------


@dataclass(frozen=True)
class Batching:
    """tiermem's batch settings for a side (ADR 0024): `turns` 1 is one call per turn."""

    turns: int = 1
    max_tokens: int = 8192  # TIERMEM_EXTRACTION__BATCH_MAX_TOKENS
    llm_max_tokens: int | None = None  # TIERMEM_LLM__MAX_TOKENS; None: its default

    @property
    def name(self) -> str:
        return "tiermem" if self.turns == 1 else f"tiermem, batches of {self.turns}"


def _count(runtime: Runtime, turn: TurnCost, outcome: RunOutcome) -> None:
    turn.facts += outcome.added
    if outcome.status in ("failed", "dropped"):
        with Session(runtime.engine) as session:
            run = session.get(ExtractionRun, outcome.run_id)
        why = run.error if run and run.error else ""
        turn.error = _short(f"run {outcome.status}: {why}")


def run_tiermem(
    conversations: Sequence[Conversation],
    proxy: TokenProxy,
    model: str | None,
    folder: Path,
    batching: Batching = Batching(),
) -> SideResult:
    side = SideResult(batching.name)
    runtime, tenant_id = make_runtime(
        folder,
        proxy.base_url,
        model,
        llm={"max_tokens": batching.llm_max_tokens} if batching.llm_max_tokens else None,
        extraction={
            "batch_turns": batching.turns,
            "batch_max_tokens": batching.max_tokens,
            "batch_quiet_s": QUIET_S,  # never by the clock here: at a conversation's end
        },
    )
    extraction = TurnExtraction(runtime)
    owner: dict[str, TurnCost] = {}  # a run's turn: its outcome may come with a later one's
    try:
        for conv in conversations:
            for i in range(len(conv.messages)):
                mark, started = proxy.mark(), time.perf_counter()
                turn = TurnCost(conv.id, i, [], 0.0, 0)
                try:
                    outcomes = []
                    for run_id in import_message(runtime, tenant_id, conv, i):
                        owner[run_id] = turn
                        outcomes += extraction.extract(run_id)
                    if i == len(conv.messages) - 1:
                        outcomes += extraction.flush()  # its calls count on this last turn
                    for outcome in outcomes:
                        _count(runtime, owner.pop(outcome.run_id), outcome)
                except DomainError as exc:  # a transient error the worker would retry
                    turn.error = _short(f"{type(exc).__name__}: {exc.message}")
                turn.seconds = time.perf_counter() - started
                turn.calls = proxy.calls_since(mark)
                side.add(turn)
        prompt = completion = 0
        with Session(runtime.engine) as session:
            for conv in conversations:
                user = find_user(session=session, tenant_id=tenant_id, user_external_id=conv.id)
                side.active_facts += list_memories(session=session, user=user, limit=1000).count
                stats = run_stats(session, user.id)
                prompt, completion = (
                    prompt + stats.prompt_tokens,
                    completion + stats.completion_tokens,
                )
        side.notes.append(
            f"{side.name}'s own run records say {prompt} prompt + {completion} completion tokens "
            "(a run that failed records none)."
        )
    finally:
        runtime.close()
    return side


# -- mem0 ------------------------------------------------------------------------------------


class _LoggedErrors(logging.Handler):
    """mem0's own error log lines (it logs an unparseable reply and goes on with nothing)."""

    def __init__(self) -> None:
        super().__init__(logging.ERROR)
        self.lines: list[str] = []

    def emit(self, record: logging.LogRecord) -> None:
        self.lines.append(record.getMessage())

    def take(self) -> list[str]:
        taken, self.lines = self.lines, []
        return taken


def run_mem0(
    conversations: Sequence[Conversation], proxy: TokenProxy, model: str, folder: Path
) -> SideResult:
    # mem0 reads both once, at its import (tests/mem0_compat/conftest.py).
    os.environ["MEM0_TELEMETRY"] = "False"
    os.environ["MEM0_DIR"] = str(folder / "mem0-home")
    import mem0

    from bench.mem0_runner import make_memory
    from shared.config import EmbeddingSettings
    from shared.embeddings.local_onnx import OnnxMiniLMEmbedder

    side = SideResult(f"mem0 {getattr(mem0, '__version__', '?')}")
    llm = {
        "provider": "openai",
        "config": {"model": model, "openai_base_url": proxy.base_url, "api_key": "unused"},
    }
    memory, _ = make_memory(folder / "mem0", OnnxMiniLMEmbedder(EmbeddingSettings()), llm)
    logged = _LoggedErrors()
    logging.getLogger("mem0").addHandler(logged)
    try:
        for conv in conversations:
            for i, said in enumerate(conv.messages):
                messages = [{"role": "user", "content": said.text}]
                if said.reply:
                    messages.append({"role": "assistant", "content": said.reply})
                mark, started = proxy.mark(), time.perf_counter()
                turn = TurnCost(conv.id, i, [], 0.0, 0)
                try:
                    out = memory.add(messages, user_id=conv.id, infer=True)
                    turn.facts = sum(r.get("event") == "ADD" for r in out.get("results", []))
                except Exception as exc:  # whatever mem0 raises is the finding: recorded
                    turn.error = _short(f"{type(exc).__name__}: {exc}")
                turn.seconds = time.perf_counter() - started
                turn.calls = proxy.calls_since(mark)
                if turn.error is None and (lines := logged.take()):
                    turn.error = _short(f"mem0 logged: {' / '.join(lines)}")
                logged.take()
                side.add(turn)
        for conv in conversations:
            side.active_facts += len(
                memory.get_all(filters={"user_id": conv.id}, top_k=1000)["results"]
            )
    finally:
        logging.getLogger("mem0").removeHandler(logged)
        memory.vector_store.client.close()
    return side


# -- report ----------------------------------------------------------------------------------


def _mean(total: float, n: int) -> str:
    return f"{total / n:.1f}" if n else "–"


def summary_table(sides: Sequence[SideResult]) -> str:
    rows = [
        "| side | turns | LLM calls (answered / not) | calls per turn | prompt tokens per turn "
        "(total) | completion tokens per turn (total) | s per turn (of it waiting for the LLM) "
        "| turns with an error | facts added | facts active at the end |",
        "|---|--:|--:|--:|--:|--:|--:|--:|--:|--:|",
    ]
    for side in sides:
        n, calls = len(side.turns), side.calls
        answered = sum(c.ok for c in calls)
        prompt = sum(c.prompt_tokens for c in calls)
        completion = sum(c.completion_tokens for c in calls)
        seconds = sum(t.seconds for t in side.turns)
        waiting = sum(c.seconds for c in calls)
        rows.append(
            f"| {side.name} | {n} | {len(calls)} ({answered} / {len(calls) - answered}) "
            f"| {_mean(len(calls), n)} | {_mean(prompt, n)} ({prompt}) "
            f"| {_mean(completion, n)} ({completion}) | {_mean(seconds, n)} ({_mean(waiting, n)}) "
            f"| {sum(t.error is not None for t in side.turns)} "
            f"| {sum(t.facts for t in side.turns)} | {side.active_facts} |"
        )
    return "\n".join(rows)


def calls_table(sides: Sequence[SideResult]) -> str:
    rows = [
        "| side | response_format | HTTP status | calls | prompt tokens | completion tokens "
        "| prompt tokens the server counted in refusing | mean s |",
        "|---|---|--:|--:|--:|--:|--:|--:|",
    ]
    for side in sides:
        groups: dict[tuple[str, int], list[Call]] = {}
        for c in side.calls:
            groups.setdefault((c.response_format or "none", c.status), []).append(c)
        for (fmt, status), calls in sorted(groups.items()):
            refused = [c.refused_prompt_tokens for c in calls if c.refused_prompt_tokens]
            rows.append(
                f"| {side.name} | {fmt} | {status} | {len(calls)} "
                f"| {sum(c.prompt_tokens for c in calls)} "
                f"| {sum(c.completion_tokens for c in calls)} "
                f"| {f'{min(refused)}–{max(refused)} per call' if refused else '–'} "
                f"| {_mean(sum(c.seconds for c in calls), len(calls))} |"
            )
    return "\n".join(rows) if len(rows) > 2 else "(no calls)"


def errors_list(sides: Sequence[SideResult]) -> str:
    """Each distinct error once, numbers shown as N (a refusal names the prompt's length)."""
    rows = ["| side | count | what (numbers as N) |", "|---|--:|---|"]
    for side in sides:
        seen = Counter(
            f"call, HTTP {c.status}: {_NUMBER.sub('N', _short(c.error))}"
            for c in side.calls
            if c.error
        )
        seen.update(f"turn: {_NUMBER.sub('N', t.error)}" for t in side.turns if t.error)
        rows += [f"| {side.name} | {n} | {_cell(what)} |" for what, n in seen.most_common()]
    return "\n".join(rows) if len(rows) > 2 else "(none)"


def refusal_notes(sides: Sequence[SideResult]) -> list[str]:
    notes = []
    for side in sides:
        counted = [c.refused_prompt_tokens for c in side.calls if c.refused_prompt_tokens]
        if counted:
            notes.append(
                f"{side.name}: {len(counted)} of {len(side.calls)} calls refused for their "
                f"length; the server counted {min(counted)}–{max(counted)} prompt tokens in "
                f"them (mean {sum(counted) / len(counted):.0f}), counted as 0 above."
            )
    return notes


def _cell(text: str) -> str:
    return text.replace("|", "\\|").replace("\n", " ")


def turns_table(sides: Sequence[SideResult]) -> str:
    rows = [
        "| side | conversation | turn | calls | prompt | completion | s | facts | error |",
        "|---|---|--:|--:|--:|--:|--:|--:|---|",
    ]
    for side in sides:
        for t in side.turns:
            rows.append(
                f"| {side.name} | {t.conversation} | {t.index} | {len(t.calls)} "
                f"| {sum(c.prompt_tokens for c in t.calls)} "
                f"| {sum(c.completion_tokens for c in t.calls)} | {t.seconds:.1f} | {t.facts} "
                f"| {_cell(t.error or '')} |"
            )
    return "\n".join(rows)


def report(
    sides: Sequence[SideResult], *, argv: Sequence[str] | None, upstream: str, data: str,
    turns: int, conversations: int,
) -> str:  # fmt: skip
    notes = [n for s in sides for n in s.notes] + refusal_notes(sides)
    return "\n".join(
        [
            "# LLM cost per stored turn: tiermem beside mem0",
            "",
            f"`{command_line(PROG, argv)}` — {datetime.now(UTC):%Y-%m-%d %H:%M} UTC",
            "",
            machine_line(),
            "",
            f"{turns} turns (the first user messages of `{data}`, {conversations} "
            f"conversations, each with the assistant's reply where the set has one) through "
            "each side in turn; every chat completion went through one token-counting proxy "
            "(bench/token_proxy.py), which recorded the usage the server reported. The server: "
            f"{upstream}. A call is any request a side sent (discovery, repair, retries and "
            "refused ones too); "
            "per turn = over every turn given. Seconds are the whole turn (extraction, "
            "embedding, writing); in brackets the part spent waiting for the LLM, which "
            "includes queueing behind other users of the same server.",
            "",
            summary_table(sides),
            "",
            *(notes and [" ".join(notes), ""]),
            "## Calls by response_format and status",
            "",
            calls_table(sides),
            "",
            "## Errors",
            "",
            errors_list(sides),
            "",
            "## Per turn",
            "",
            turns_table(sides),
            "",
        ]
    )


def main(argv: Sequence[str] | None = None) -> None:
    parser = argparse.ArgumentParser(prog=PROG, description=(__doc__ or "").splitlines()[0])
    parser.add_argument(
        "--llm", required=True, help="the base URL of an OpenAI-compatible server, or scripted"
    )
    parser.add_argument("--model", default="local", help="the model name the server serves")
    parser.add_argument("--data", type=Path, default=DATA, help="a labelled JSONL set")
    parser.add_argument("--limit", type=int, default=None, help="the first N user messages")
    parser.add_argument("--side", choices=("both", *SIDES), default="both")
    parser.add_argument(
        "--batch",
        default="1",
        help="tiermem's batch_turns, one tiermem side each: 1 (one call per turn), or 1,4",
    )
    parser.add_argument(
        "--batch-max-tokens", type=int, default=8192, help="TIERMEM_EXTRACTION__BATCH_MAX_TOKENS"
    )
    parser.add_argument(
        "--llm-max-tokens", type=int, default=None, help="TIERMEM_LLM__MAX_TOKENS (its default)"
    )
    parser.add_argument("--output", type=Path, default=None)
    args = parser.parse_args(argv)
    if args.llm == "offline":
        parser.error("--llm needs a server: a base URL, or scripted")
    scripted = args.llm == "scripted"
    output = args.output or RESULTS_DIR / ("llm_cost-scripted.md" if scripted else "llm_cost.md")
    logging.basicConfig(level=logging.WARNING)

    conversations = first_turns(load(args.data), args.limit)
    turns = sum(len(c.messages) for c in conversations)
    sides: list[SideResult] = []
    with (
        extractor_endpoint(args.llm, args.model, like_llama_cpp=True) as (upstream, described),
        TokenProxy(upstream or "") as proxy,
        tempfile.TemporaryDirectory(prefix="tiermem-llm-cost-") as folder,
    ):
        if args.side in ("both", "tiermem"):
            model = None if scripted else args.model
            for n in (int(n) for n in args.batch.split(",")):
                batching = Batching(n, args.batch_max_tokens, args.llm_max_tokens)
                where = Path(folder) / f"tiermem-{n}"
                print(f"{batching.name}: {turns} turns through {proxy.base_url}", file=sys.stderr)
                sides.append(run_tiermem(conversations, proxy, model, where, batching))
        if args.side in ("both", "mem0"):
            print(f"mem0: {turns} turns through {proxy.base_url}", file=sys.stderr, flush=True)
            sides.append(run_mem0(conversations, proxy, args.model, Path(folder) / "mem0"))

    try:
        data_name = str(args.data.resolve().relative_to(Path.cwd()))
    except ValueError:
        data_name = str(args.data)
    text = report(
        sides, argv=argv, upstream=described, data=data_name, turns=turns,
        conversations=len(conversations),
    )  # fmt: skip
    print(text)
    write_results(output, text)
    sys.exit(0)


if __name__ == "__main__":
    main()
