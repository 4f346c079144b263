"""Tiered compression at 100, 1,000 and 10,000 messages: LLM cost, tokens per turn, overhead.

Each session is played turn by turn through the real path: messages stored with
`ingest_messages` (SQLite in a temporary folder), then `compress_session` — the function
the worker's task calls after every reply — which checks the trigger and, above it, runs
the loop, persisting each step. The summarizer is the real LLM summarizer (prompt
building, structured output, rendering) over an in-process zero-latency client that
answers like a model would, so LLM calls and summarizer tokens are the ones a real run
sends, and the engine's own time excludes the model. A second pass with the offline
extractive summarizer measures the whole run when no LLM is configured.
"""

from __future__ import annotations

import argparse
import json
import random
import re
import statistics
import tempfile
import time
from collections.abc import Sequence
from dataclasses import dataclass, field
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

from sqlmodel import Session, select

from bench._common import (
    RESULTS_DIR,
    command_line,
    load_average,
    machine_line,
    percentile,
    write_results,
)
from bench.bench_embeddings import chat_sentences
from shared.compression.budget import header_cost, line_cost
from shared.compression.llm import LLMSummarizer, render_summary
from shared.compression.offline import OfflineSummarizer, truncate_tokens
from shared.compression.store import load
from shared.config import LLMSettings, Settings
from shared.db.migrate import upgrade_to_head
from shared.db.models import ChatSession, CompressionRun, Tenant
from shared.flows import compress_session as service
from shared.llm.client import LLMReply
from shared.records.ingest import NewMessage, ingest_messages
from shared.records.tenancy import ensure_dev_tenant
from shared.runtime import Runtime
from shared.tokens import count_tokens

RESULTS = RESULTS_DIR / "compression.md"
SIZES = (100, 1_000, 10_000)
DECISION = "We decided to use PostgreSQL for the billing service because the team knows it."


class ZeroLatencyModel:
    """Stands in for the OpenAI-compatible client: answers at once with a structured summary
    built from the transcript (decision-like lines first), about 70 % of the asked length,
    and counts tokens the way a server's `usage` would."""

    def complete_json(
        self,
        *,
        system: str,
        user: str,
        schema: dict[str, Any],
        schema_name: str,
        max_tokens: int | None = None,
    ) -> LLMReply:
        asked = int(re.search(r"under (\d+) tokens", user).group(1))  # type: ignore[union-attr]
        transcript = user.split("<conversation>\n", 1)[1].rsplit("\n</conversation>", 1)[0]
        sentences: list[str] = []
        for line in transcript.splitlines():
            line = line.removeprefix("[summary] ")
            label, _, rest = line.partition(": ")
            if label in ("Topic", "[extractive]") or not rest:
                continue
            sentences += [p for p in rest.split("; ") if p.strip()]
        decisions = [p for p in sentences if "decided" in p.lower()]
        data: dict[str, Any] = {
            "topic": "conversation",
            "decisions": [],
            "constraints": [],
            "open_items": [],
            "facts": [],
        }
        # Up to ~70 % of the asked length, decisions first and oldest first, each cut to
        # what is left: a careful model.
        for key, items in (("decisions", decisions), ("facts", sentences)):
            for item in items:
                room = int(asked * 0.7) - count_tokens(render_summary(data)) - 3
                if room < 4:
                    break
                if item not in data["decisions"]:
                    data[key].append(truncate_tokens(item, min(room, 40)))
        raw = json.dumps(data)
        return LLMReply(
            data=data,
            raw=raw,
            model="zero-latency",
            prompt_tokens=count_tokens(system) + count_tokens(user),
            completion_tokens=count_tokens(raw),
            latency_ms=0.0,
        )

    def close(self) -> None:
        pass


def conversation(n_messages: int, seed: int) -> list[NewMessage]:
    """User turns of one to three chat sentences, replies of two to five; a decision early."""
    rng = random.Random(seed)
    pool = chat_sentences(4 * n_messages + 50, seed=seed)
    out: list[NewMessage] = []
    k = 0
    while len(out) < n_messages:
        user_n, reply_n = rng.randint(1, 3), rng.randint(2, 5)
        user = " ".join(pool[k : k + user_n])
        k += user_n
        if len(out) == 4:
            user = DECISION
        reply = " ".join(pool[k : k + reply_n])
        k += reply_n
        out += [NewMessage("user", user, "Ana"), NewMessage("assistant", reply)]
    return out[:n_messages]


@dataclass
class Result:
    n: int
    summarizer: str
    turns: int = 0
    runs: list[CompressionRun] = field(default_factory=list)
    sent: list[int] = field(default_factory=list)  # history tokens in the context, per turn
    full: list[int] = field(default_factory=list)  # the full history, per turn
    check_ms: list[float] = field(default_factory=list)  # the check after a reply, no run


def play(n: int, *, limit: int, summarizer: str, seed: int) -> Result:
    tmp = Path(tempfile.mkdtemp(prefix="tm-bench-compress-"))
    settings = Settings(
        data_dir=tmp,
        qdrant={"in_memory": True},
        compression={"context_limit_tokens": limit},
    )
    upgrade_to_head(settings)
    runtime = Runtime(settings)
    if summarizer == "llm":
        model = ZeroLatencyModel()
        llm = LLMSettings(base_url="http://zero-latency")
        runtime.summarizer = LLMSummarizer(llm, client=model)  # type: ignore[arg-type]
    else:
        runtime.summarizer = OfflineSummarizer()
    result = Result(n=n, summarizer=summarizer)
    with Session(runtime.engine) as session:
        ensure_dev_tenant(session=session, settings=settings)
        tenant_id = session.exec(select(Tenant.id)).one()
    messages = conversation(n, seed)
    full = header_cost()
    chat_id = ""
    for i in range(0, len(messages), 2):
        pair = messages[i : i + 2]
        with Session(runtime.engine) as session:
            stored = ingest_messages(
                session=session,
                settings=settings,
                tenant_id=tenant_id,
                user_external_id="ana",
                session_external_id="bench",
                messages=pair,
                extractor="offline",
            )
            chat_id = stored.session.id
            session.commit()
        full += sum(line_cost(m.speaker or m.role.capitalize(), m.content) for m in pair)
        started = time.perf_counter()
        outcome = service.compress_session(runtime, chat_id)
        elapsed = (time.perf_counter() - started) * 1000
        if outcome.status == "below_trigger":
            result.check_ms.append(elapsed)
        with Session(runtime.engine) as session:
            chat = session.get(ChatSession, chat_id)
            assert chat is not None
            state = load(session, chat).state
        result.sent.append(state.history_cost(header_cost()))
        result.full.append(full)
        result.turns += 1
    with Session(runtime.engine) as session:
        result.runs = list(session.exec(select(CompressionRun)))
    runtime.close()
    return result


def _mean(values: Sequence[float]) -> float:
    return statistics.fmean(values) if values else 0.0


def table(results: list[Result], limit: int) -> str:
    target, trigger = limit // 2, int(limit * 0.7)
    rows = [
        "| messages | summarizer | runs | LLM calls / run | summarizer tokens / run (in + out) "
        "| fallbacks | history tokens / turn: compressed vs full (mean) | at the last turn "
        "| engine ms / run p50 / p95 (no LLM) | whole run ms p50 | check ms / reply p50 |",
        "|---:|---|---:|---:|---:|---:|---|---|---|---:|---:|",
    ]
    for r in results:
        runs = [x for x in r.runs if x.status in ("done", "cannot_fit", "partial")]
        calls = _mean([x.llm_calls for x in runs])
        tokens = _mean([x.prompt_tokens + x.completion_tokens for x in runs])
        engine = [x.engine_ms for x in runs]
        whole = [x.duration_ms for x in runs]
        sent, full = _mean(r.sent), _mean(r.full)
        rows.append(
            f"| {r.n:,} | {r.summarizer} | {len(runs)} | {calls:.1f} | "
            f"{tokens:,.0f} | {sum(x.fallbacks for x in runs)} | "
            f"{sent:,.0f} vs {full:,.0f} ({full / max(sent, 1):.1f}×) | "
            f"{r.sent[-1]:,} vs {r.full[-1]:,} ({r.full[-1] / max(r.sent[-1], 1):.0f}×) | "
            f"{percentile(engine, 50):.1f} / {percentile(engine, 95):.1f} | "
            f"{percentile(whole, 50):.1f} | {percentile(r.check_ms, 50):.2f} |"
        )
    over = max(max(r.sent) for r in results)
    return "\n".join(rows) + (
        f"\n\nContext limit {limit:,} tokens: trigger {trigger:,}, target {target:,}. The "
        f"compressed history never exceeded {over:,} tokens in any turn (it may sit between "
        f"the target and the trigger until the next run)."
    )


def main(argv: Sequence[str] | None = None) -> None:
    parser = argparse.ArgumentParser(prog="python -m bench.bench_compression", description=__doc__)
    parser.add_argument("--limit", type=int, default=4096, help="the model's context limit")
    parser.add_argument("--sizes", default=",".join(str(s) for s in SIZES))
    parser.add_argument("--seed", type=int, default=11)
    parser.add_argument("--output", type=Path, default=RESULTS)
    args = parser.parse_args(argv)
    sizes = [int(s) for s in args.sizes.split(",")]
    results: list[Result] = []
    for summarizer in ("llm", "offline"):
        for n in sizes:
            started = time.perf_counter()
            results.append(play(n, limit=args.limit, summarizer=summarizer, seed=args.seed))
            print(
                f"{summarizer} {n:>6} messages: {time.perf_counter() - started:.1f} s", flush=True
            )
    text = "\n".join(
        [
            "# Tiered compression",
            "",
            f"`{command_line('python -m bench.bench_compression', argv)}` — "
            f"{datetime.now(UTC):%Y-%m-%d %H:%M} UTC",
            "",
            machine_line(),
            f"Load average at the end: {load_average()} (timings are upper bounds on a busy host).",
            "",
            "Sessions played turn by turn through `ingest_messages` and `compress_session` (the "
            "worker task's body) on SQLite. `llm`: the real LLM summarizer (prompt, structured "
            "output, rendering) over a zero-latency in-process model, so calls and tokens are "
            "what a real model would be sent and the engine time excludes the model. `offline`: "
            "the extractive summarizer, no LLM at all. Engine ms = the run minus the summarizer "
            "calls (loading the tiers, planning, counting tokens, one transaction per step). "
            "Check ms = the trigger check after a reply that needs no run.",
            "",
            table(results, args.limit),
            "",
        ]
    )
    write_results(args.output, text)
    print(text)


if __name__ == "__main__":
    main()
