"""Sustained extraction throughput of one `tiermem worker` against a slow scripted LLM.

For each worker setting: a fresh data folder and Redis db, K turns loaded with
`tiermem import` (tasks queue in Redis before any worker runs), then the worker starts
and SQL is polled until every run has finished. Throughput counts from the first to the
last completion, so worker start-up and model loading are outside the window.
"""

from __future__ import annotations

import argparse
import contextlib
import datetime as dt
import json
import random
import shutil
import subprocess
import sys
import tempfile
import time
from collections.abc import Iterator, Sequence
from dataclasses import dataclass, field
from datetime import UTC, datetime
from pathlib import Path

from sqlalchemy import create_engine, text
from sqlalchemy.engine import Engine

from bench._common import (
    REDIS_URL,
    REPO,
    RESULTS_DIR,
    CpuSample,
    Service,
    child_env,
    command_line,
    cpu_percent,
    flush_redis,
    free_port,
    load_average,
    machine_line,
    machine_percent,
    percentile,
    postgres_database,
    sample_cpu,
    server_pids,
    tiermem_command,
    user_messages,
    wait_port,
    write_results,
)
from bench.variants import PATCHES_ENV

RESULTS = RESULTS_DIR / "extraction.md"
TARGET_TURNS_PER_S = 30.0
FINISHED = ("done", "skipped", "failed", "dropped")
PREFORK_CHECK_S = 120.0


@dataclass(frozen=True)
class Setting:
    pool: str
    concurrency: int
    patches: tuple[str, ...] = ()  # bench.variants patches standing in for product fixes

    @property
    def label(self) -> str:
        return f"{self.pool} -c {self.concurrency}" + "".join(f" +{p}" for p in self.patches)

    @property
    def slug(self) -> str:
        return "-".join([self.pool, str(self.concurrency), *self.patches])

    def command(self) -> list[str]:
        options = [
            "--queues",
            "extract",
            "--pool",
            self.pool,
            "--concurrency",
            str(self.concurrency),
            "--loglevel",
            "WARNING",
        ]
        if self.patches:
            return [sys.executable, "-m", "bench.variants", "worker", *options]
        return [*tiermem_command(), "worker", *options]


@dataclass
class ExtractionRun:
    setting: Setting
    backend: str
    turns: int
    import_s: float
    statuses: dict[str, int]
    window_s: float = 0.0  # first → last completion
    completed: int = 0
    facts_extracted: int = 0
    facts_added: int = 0
    facts_merged: int = 0
    retried: int = 0
    duration_ms: list[float] = field(default_factory=list)
    llm_ms: list[float] = field(default_factory=list)
    worker_cpu: float = float("nan")
    llm_server_cpu: float = float("nan")
    servers_cpu: float = float("nan")  # Redis + PostgreSQL server processes
    machine_busy: float = float("nan")
    errors: list[str] = field(default_factory=list)
    timed_out: bool = False

    @property
    def turns_per_s(self) -> float:
        return (self.completed - 1) / self.window_s if self.window_s > 0 else 0.0

    @property
    def facts_per_s(self) -> float:
        return self.facts_added / self.window_s if self.window_s > 0 else 0.0

    @property
    def cpu_ms_per_turn(self) -> float:
        rate = self.turns_per_s
        return 10 * self.worker_cpu / rate if rate else float("nan")


# -- the transcript --------------------------------------------------------------------------


def write_transcript(
    path: Path, *, turns: int, users: int, turns_per_session: int, seed: int
) -> None:
    """`turns` user/assistant exchanges over `users` users, interleaved across users the way
    live traffic arrives (turn 1 of every user, then turn 2, ...). Every user message is
    substantive, so each turn makes one LLM call (none is skipped as small talk)."""
    rng = random.Random(seed)
    texts = user_messages(turns, seed=seed, substantive_only=True)
    replies = (
        "Got it, I'll keep that in mind.",
        "Thanks for telling me, noted.",
        "That sounds like a plan; want me to draft the next steps?",
        "Understood. Anything else I should know about it?",
    )
    start = dt.datetime(2026, 3, 1, 9, 0, tzinfo=dt.UTC)
    per_user = -(-turns // users)
    with path.open("w", encoding="utf-8") as out:
        written = 0
        for index in range(per_user):
            for user in range(users):
                if written == turns:
                    return
                session = index // turns_per_session
                when = start + dt.timedelta(days=session, minutes=2 * index + user % 60)
                common = {"user_id": f"u{user:04d}", "session_id": f"u{user:04d}-s{session:03d}"}
                out.write(
                    json.dumps(
                        {
                            **common,
                            "role": "user",
                            "speaker": f"User{user}",
                            "content": texts[written],
                            "created_at": when.isoformat(),
                            "external_id": f"u{user}-t{index}-q",
                        }
                    )
                    + "\n"
                )
                reply_at = when + dt.timedelta(seconds=20)
                out.write(
                    json.dumps(
                        {
                            **common,
                            "role": "assistant",
                            "content": rng.choice(replies),
                            "created_at": reply_at.isoformat(),
                            "external_id": f"u{user}-t{index}-a",
                        }
                    )
                    + "\n"
                )
                written += 1


# -- one measured run ------------------------------------------------------------------------


@contextlib.contextmanager
def _database(backend: str, data_dir: Path) -> Iterator[tuple[dict[str, str], str]]:
    if backend == "sqlite":
        yield {}, f"sqlite:///{data_dir / 'tiermem.db'}"
    elif backend == "postgres":
        with postgres_database("tiermem_bench_extract") as url:
            yield {"TIERMEM_DATABASE_URL": url}, url
    else:
        raise ValueError(f"unknown backend {backend!r}: use sqlite or postgres")


def _status_counts(engine: Engine) -> dict[str, int]:
    # A plain engine (not the product's): on SQLite its reads take no write lock.
    with engine.connect() as conn:
        rows = conn.execute(text("SELECT status, COUNT(*) FROM extraction_runs GROUP BY status"))
        return {str(status): int(count) for status, count in rows}


def _as_datetime(value: object) -> dt.datetime:
    if isinstance(value, dt.datetime):
        return value if value.tzinfo else value.replace(tzinfo=dt.UTC)
    parsed = dt.datetime.fromisoformat(str(value))
    return parsed if parsed.tzinfo else parsed.replace(tzinfo=dt.UTC)


def _collect(engine: Engine, run: ExtractionRun) -> None:
    with engine.connect() as conn:
        rows = conn.execute(
            text(
                "SELECT finished_at, duration_ms, llm_ms, facts_extracted, facts_added, "
                "facts_merged, attempts FROM extraction_runs WHERE status = 'done'"
            )
        ).all()
        errors = conn.execute(
            text(
                "SELECT error, COUNT(*) FROM extraction_runs WHERE error IS NOT NULL "
                "GROUP BY error ORDER BY COUNT(*) DESC LIMIT 3"
            )
        ).all()
    finished = sorted(_as_datetime(r[0]) for r in rows if r[0] is not None)
    run.completed = len(finished)
    if len(finished) > 1:
        run.window_s = (finished[-1] - finished[0]).total_seconds()
    run.duration_ms = [float(r[1]) for r in rows]
    run.llm_ms = [float(r[2]) for r in rows]
    run.facts_extracted = sum(int(r[3]) for r in rows)
    run.facts_added = sum(int(r[4]) for r in rows)
    run.facts_merged = sum(int(r[5]) for r in rows)
    run.retried = sum(1 for r in rows if int(r[6]) > 1)
    run.errors = [f"{count}× {str(error)[:160]}" for error, count in errors]


def _cpu_window(samples: list[tuple[int, CpuSample]], total: int) -> tuple[CpuSample, CpuSample]:
    """The samples bracketing the completions: the last before the first run finished, and
    the first that saw every run finished (or the final one)."""
    before = next(
        (s for (n, s), (m, _) in zip(samples, samples[1:], strict=False) if m > 0), samples[0][1]
    )
    after = next((s for n, s in samples if n >= total), samples[-1][1])
    return before, after


def run_setting(
    setting: Setting,
    backend: str,
    args: argparse.Namespace,
    transcript: Path,
    llm: Service,
    llm_url: str,
) -> ExtractionRun:
    data_dir = Path(tempfile.mkdtemp(prefix="tiermem-bench-extract-"))
    flush_redis(args.redis_url)
    try:
        with _database(backend, data_dir) as (db_env, url):
            env = child_env(
                {
                    "TIERMEM_REDIS_URL": args.redis_url,
                    "TIERMEM_DATA_DIR": str(data_dir),
                    "TIERMEM_LLM__BASE_URL": llm_url,
                    "TIERMEM_LOG_LEVEL": "WARNING",
                    **db_env,
                }
            )
            env.update(args.worker_env)
            if setting.patches:
                env[PATCHES_ENV] = ",".join(setting.patches)
            started = time.monotonic()
            subprocess.run(
                [*tiermem_command(), "import", str(transcript)],
                env=env,
                cwd=REPO,
                check=True,
                capture_output=True,
            )
            import_s = time.monotonic() - started
            engine = create_engine(url)
            try:
                run = ExtractionRun(
                    setting=setting,
                    backend=backend,
                    turns=args.turns,
                    import_s=import_s,
                    statuses={},
                )
                worker = Service(
                    f"worker {setting.label}",
                    setting.command(),
                    env,
                    args.logs / f"extract-worker-{setting.slug}.log",
                )
                with worker:
                    samples = _poll(engine, worker, llm, args, run)
                _collect(engine, run)
            finally:
                engine.dispose()
    finally:
        shutil.rmtree(data_dir, ignore_errors=True)
        flush_redis(args.redis_url)
    first, last = _cpu_window(samples, args.turns)
    run.worker_cpu = cpu_percent(first, last, "worker")
    run.llm_server_cpu = cpu_percent(first, last, "llm")
    run.servers_cpu = sum(
        cpu_percent(first, last, name) for name in ("redis", "postgres") if name in first.seconds
    )
    run.machine_busy = machine_percent(first, last)
    return run


def _poll(
    engine: Engine, worker: Service, llm: Service, args: argparse.Namespace, run: ExtractionRun
) -> list[tuple[int, CpuSample]]:
    pids = {"worker": worker.pid, "llm": llm.pid, **server_pids()}
    samples: list[tuple[int, CpuSample]] = []
    # The prefork check only has to show what happens; it would take ~15 min to finish.
    limit = min(args.timeout, PREFORK_CHECK_S) if run.setting.pool == "prefork" else args.timeout
    deadline = time.monotonic() + limit
    last_progress, last_finished = time.monotonic(), -1
    while True:
        worker.check_alive()
        counts = _status_counts(engine)
        finished = sum(counts.get(s, 0) for s in FINISHED)
        samples.append((finished, sample_cpu(pids)))
        run.statuses = counts
        now = time.monotonic()
        if finished != last_finished:
            last_progress, last_finished = now, finished
        if finished >= args.turns:
            return samples
        if now > deadline or now - last_progress > args.stall_timeout:
            run.timed_out = True
            return samples
        time.sleep(args.poll_interval)


# -- report ----------------------------------------------------------------------------------


def render(
    runs: list[ExtractionRun],
    args: argparse.Namespace,
    argv: Sequence[str] | None,
    load_before: str,
) -> str:
    stamp = datetime.now(UTC).strftime("%Y-%m-%d %H:%M UTC")
    lines = [
        f"## Extraction throughput ({stamp})",
        "",
        f"`{command_line('python -m bench.bench_extraction', argv)}`",
        "",
        f"Machine: {machine_line()}; load average {load_before} before the first run.",
        "",
        f"{args.turns} turns over {args.users} users ({args.turns_per_session} turns a "
        f"session, interleaved across users), loaded with `tiermem import`; then one "
        f"`tiermem worker --queues extract` with Redis db {args.redis_url.rsplit('/', 1)[-1]}, "
        f"embedded Qdrant (a folder the worker owns), local ONNX embeddings, and "
        f"`python -m tests.scripted_llm --latency {args.latency:g} --facts-per-turn "
        f"{args.facts_per_turn}` as the LLM. Rates count from the first to the last "
        f"completion. Target: ≥ {TARGET_TURNS_PER_S:g} turns/s."
        + (
            f" Extra environment: {', '.join(f'`{k}={v}`' for k, v in args.worker_env.items())}."
            if args.worker_env
            else ""
        ),
        "",
        "| database | worker | turns/s | facts added/s | facts extracted | merged "
        "| run p50 ms | run p95 ms | LLM p50 ms | LLM p95 ms | worker CPU | worker CPU/turn "
        "| LLM server CPU | Redis+PG CPU | machine busy | failed | retried | import s |",
        "|---|---|---|---|---|---|---|---|---|---|---|---|---|---|---|---|---|---|",
    ]
    for run in runs:
        rate = f"{run.turns_per_s:.1f}" + (" (timed out)" if run.timed_out else "")
        lines.append(
            f"| {run.backend} | {run.setting.label} | {rate} | {run.facts_per_s:.1f} "
            f"| {run.facts_extracted} | {run.facts_merged} "
            f"| {percentile(run.duration_ms, 50):.0f} | {percentile(run.duration_ms, 95):.0f} "
            f"| {percentile(run.llm_ms, 50):.0f} | {percentile(run.llm_ms, 95):.0f} "
            f"| {run.worker_cpu:.0f} % | {run.cpu_ms_per_turn:.0f} ms "
            f"| {run.llm_server_cpu:.0f} % | {run.servers_cpu:.0f} % | {run.machine_busy:.0f} % "
            f"| {run.statuses.get('failed', 0)} | {run.retried} | {run.import_s:.1f} |"
        )
    lines += [
        "",
        "Worker and LLM-server CPU are % of one core over the completion window (200 % = "
        "both cores); machine busy is % of all cores, other people's jobs on this shared box "
        "included. A run's duration is claim → LLM → embed → write under the user's lock → "
        "finish; LLM is the chat call alone.",
        "",
    ]
    for run in runs:
        unfinished = {k: v for k, v in run.statuses.items() if k not in ("done", "skipped")}
        if run.timed_out or run.errors or unfinished:
            lines.append(
                f"- {run.backend}, {run.setting.label}: statuses {run.statuses}"
                + (f"; errors: {'; '.join(run.errors)}" if run.errors else "")
            )
    best = max(runs, key=lambda r: r.turns_per_s, default=None)
    if best is not None:
        good = [r for r in runs if r.turns_per_s >= 0.95 * best.turns_per_s and not r.timed_out]
        pick = min(good, key=lambda r: r.setting.concurrency, default=best)
        verdict = "meets" if best.turns_per_s >= TARGET_TURNS_PER_S else "misses"
        lines += [
            f"- Best: {best.setting.label} at {best.turns_per_s:.1f} turns/s ({verdict} the "
            f"target); the smallest setting within 5 % of it: {pick.setting.label}.",
            "",
        ]
    return "\n".join(lines)


def main(argv: Sequence[str] | None = None) -> None:
    parser = argparse.ArgumentParser(prog="python -m bench.bench_extraction", description=__doc__)
    parser.add_argument(
        "--concurrency", default="16,32,64,96", help="comma-separated thread-pool sizes to measure"
    )
    parser.add_argument("--pool", default="threads", help="Celery pool for --concurrency")
    parser.add_argument(
        "--patches",
        action="append",
        default=[],
        metavar="A+B",
        help="also measure every concurrency with these bench.variants "
        "patches (repeatable; '' is the product as shipped)",
    )
    parser.add_argument(
        "--prefork-check",
        action="store_true",
        help="also run `--pool prefork --concurrency 2` for at most "
        f"{PREFORK_CHECK_S:.0f} s (its processes cannot share the embedded "
        "Qdrant folder; this shows what happens)",
    )
    parser.add_argument("--backends", default="sqlite", help="comma-separated: sqlite, postgres")
    parser.add_argument(
        "--env",
        action="append",
        default=[],
        metavar="KEY=VALUE",
        help="extra environment for import and worker (repeatable), e.g. "
        "TIERMEM_QDRANT__IN_MEMORY=true",
    )
    parser.add_argument("--turns", type=int, default=1800)
    parser.add_argument("--users", type=int, default=100)
    parser.add_argument("--turns-per-session", type=int, default=6)
    parser.add_argument("--latency", type=float, default=1.0, help="scripted LLM latency, s")
    parser.add_argument("--facts-per-turn", type=int, default=3)
    parser.add_argument("--timeout", type=float, default=600.0, help="per setting, s")
    parser.add_argument(
        "--stall-timeout",
        type=float,
        default=60.0,
        help="give up a setting after this long without a completion",
    )
    parser.add_argument("--poll-interval", type=float, default=0.5)
    parser.add_argument("--seed", type=int, default=5)
    parser.add_argument("--redis-url", default=REDIS_URL, help="flushed before and after")
    parser.add_argument("--logs", type=Path, default=RESULTS_DIR / "logs")
    parser.add_argument("--out", type=Path, default=RESULTS)
    args = parser.parse_args(argv)
    args.worker_env = dict(item.split("=", 1) for item in args.env)

    patch_sets = [tuple(p for p in spec.split("+") if p) for spec in args.patches or [""]]
    settings = [
        Setting(args.pool, int(c), patches)
        for patches in patch_sets
        for c in args.concurrency.split(",")
        if c.strip()
    ]
    if args.prefork_check:
        settings.append(Setting("prefork", 2))
    load_before = load_average()
    runs: list[ExtractionRun] = []
    with tempfile.TemporaryDirectory(prefix="tiermem-bench-transcript-") as folder:
        transcript = Path(folder) / "turns.jsonl"
        write_transcript(
            transcript,
            turns=args.turns,
            users=args.users,
            turns_per_session=args.turns_per_session,
            seed=args.seed,
        )
        port = free_port()
        llm = Service(
            "scripted LLM",
            [
                sys.executable,
                "-m",
                "tests.scripted_llm",
                "--port",
                str(port),
                "--latency",
                str(args.latency),
                "--facts-per-turn",
                str(args.facts_per_turn),
            ],
            child_env({}),
            args.logs / "extract-scripted-llm.log",
        )
        with llm:
            wait_port(port, service=llm)
            for backend in args.backends.split(","):
                for setting in settings:
                    print(f"extraction: {backend.strip()}, {setting.label} …", file=sys.stderr)
                    run = run_setting(
                        setting,
                        backend.strip(),
                        args,
                        transcript,
                        llm,
                        f"http://127.0.0.1:{port}/v1",
                    )
                    print(
                        f"  {run.turns_per_s:.1f} turns/s, {run.facts_per_s:.1f} facts/s, "
                        f"worker CPU {run.worker_cpu:.0f} %, statuses {run.statuses}",
                        file=sys.stderr,
                    )
                    runs.append(run)
    table = render(runs, args, argv, load_before)
    print(table)
    write_results(args.out, table)


if __name__ == "__main__":
    main()
