"""Turn-ingest API latency under an open-loop constant request rate, on SQLite and PostgreSQL.

Starts the real `tiermem api` (Redis broker on db 14, no worker: extraction tasks just
queue), warms it up, then a separate load-generator process (bench.loadgen) fires
POST /v1/sessions/{sid}/turns at a fixed rate and measures each latency from the request's
scheduled send time.
"""

from __future__ import annotations

import argparse
import contextlib
import json
import os
import shutil
import subprocess
import sys
import tempfile
from collections.abc import Iterator, Sequence
from dataclasses import dataclass
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

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
    wait_http,
    write_results,
)
from bench.variants import PATCHES_ENV

RESULTS = RESULTS_DIR / "ingest.md"
TARGET_P99_MS = 20.0


@dataclass(frozen=True)
class Variant:
    """One API configuration: `workers=N`, `patches=a+b` (bench.variants),
    `pythonpath=DIR` (e.g. a folder holding uvloop and httptools) and `KEY=VALUE` for
    TIERMEM_KEY. The empty spec is the product as shipped."""

    spec: str
    workers: int = 1
    patches: tuple[str, ...] = ()
    env: tuple[tuple[str, str], ...] = ()

    @classmethod
    def parse(cls, spec: str, *, default_workers: int) -> Variant:
        workers, env = default_workers, []
        patches: tuple[str, ...] = ()
        for token in spec.split():
            key, sep, value = token.partition("=")
            if not sep:
                raise ValueError(f"variant token {token!r} is not KEY=VALUE")
            if key == "workers":
                workers = int(value)
            elif key == "patches":
                patches = tuple(value.split("+"))
            elif key == "pythonpath":
                env.append(("PYTHONPATH", value))
            else:
                env.append((f"TIERMEM_{key}", value))
        return cls(spec=spec, workers=workers, patches=patches, env=tuple(env))

    def command(self) -> list[str]:
        if not self.patches:
            return [*tiermem_command(), "api", "--workers", str(self.workers)]
        return [sys.executable, "-m", "bench.variants", "api", "--workers", str(self.workers)]

    def environment(self) -> dict[str, str]:
        env = dict(self.env)
        if self.patches:
            env[PATCHES_ENV] = ",".join(self.patches)
        return env

    def describe(self) -> str:
        parts = [f"{self.workers} worker{'s' if self.workers > 1 else ''}"]
        parts += [f"+{p}" for p in self.patches]
        parts += [
            ("uvloop+httptools" if k == "PYTHONPATH" else f"{k.removeprefix('TIERMEM_')}={v}")
            for k, v in self.env
        ]
        return ", ".join(parts)


@dataclass
class IngestRun:
    backend: str
    variant: Variant
    sent: int
    duration_s: float
    latency_ms: list[float]
    service_ms: list[float]
    lag_ms: list[float]
    statuses: dict[str, int]
    api_cpu: float
    loadgen_cpu: float
    machine_busy: float
    queued_tasks: int
    servers_cpu: float  # Redis + PostgreSQL server processes

    @property
    def label(self) -> str:
        return f"{self.backend}, {self.variant.describe()}"

    @property
    def errors(self) -> int:
        return sum(n for status, n in self.statuses.items() if status != "202")

    @property
    def api_cpu_per_request_ms(self) -> float:
        return 10 * self.api_cpu / self.achieved_rate if self.achieved_rate else float("nan")

    @property
    def other_cpu(self) -> float:
        """CPU used by everything else on the machine (other people's work, Redis, the
        database server), in % of one core."""
        return max(
            0.0,
            self.machine_busy * (os.cpu_count() or 1)
            - self.api_cpu
            - self.loadgen_cpu
            - self.servers_cpu,
        )

    @property
    def achieved_rate(self) -> float:
        return (self.sent - self.errors) / self.duration_s if self.duration_s else 0.0


@contextlib.contextmanager
def _database(backend: str) -> Iterator[dict[str, str]]:
    if backend == "sqlite":
        yield {}
    elif backend == "postgres":
        with postgres_database("tiermem_bench_ingest") as url:
            yield {"TIERMEM_DATABASE_URL": url}
    else:
        raise ValueError(f"unknown backend {backend!r}: use sqlite or postgres")


def _queued(redis_url: str) -> int:
    import redis

    client = redis.Redis.from_url(redis_url)
    try:
        return int(client.llen("extract"))
    finally:
        client.close()


def run_one(backend: str, variant: Variant, args: argparse.Namespace) -> IngestRun:
    data_dir = Path(tempfile.mkdtemp(prefix=f"tiermem-bench-ingest-{backend}-"))
    flush_redis(args.redis_url)
    port = free_port()
    try:
        with _database(backend) as db_env:
            env = child_env(
                {
                    "TIERMEM_REDIS_URL": args.redis_url,
                    "TIERMEM_DATA_DIR": str(data_dir),
                    "TIERMEM_PORT": str(port),
                    **db_env,
                    **variant.environment(),
                }
            )
            # Migrate first, as a deployment does: `tiermem api --workers N` on an empty
            # database has every worker run the migration at once, and all but one fail.
            subprocess.run(
                [*tiermem_command(), "migrate"], env=env, cwd=REPO, check=True, capture_output=True
            )
            api = Service(
                f"api ({backend})", variant.command(), env, args.logs / f"ingest-api-{backend}.log"
            )
            with api:
                url = f"http://127.0.0.1:{port}"
                wait_http(f"{url}/readyz", service=api)
                (first, last), payload = _drive(url, args, api)
                api.check_alive()
            queued = _queued(args.redis_url)
    finally:
        shutil.rmtree(data_dir, ignore_errors=True)
        flush_redis(args.redis_url)
    return IngestRun(
        backend=backend,
        variant=variant,
        sent=payload["sent"],
        duration_s=payload["duration_s"],
        latency_ms=payload["latency_ms"],
        service_ms=payload["service_ms"],
        lag_ms=payload["lag_ms"],
        statuses=payload["statuses"],
        api_cpu=cpu_percent(first, last, "api"),
        loadgen_cpu=cpu_percent(first, last, "loadgen"),
        machine_busy=machine_percent(first, last),
        queued_tasks=queued,
        servers_cpu=sum(
            cpu_percent(first, last, name)
            for name in ("redis", "postgres")
            if name in first.seconds
        ),
    )


def _drive(
    url: str, args: argparse.Namespace, api: Service
) -> tuple[tuple[CpuSample, CpuSample], dict[str, Any]]:
    argv = [
        sys.executable,
        "-m",
        "bench.loadgen",
        "--url",
        url,
        "--rate",
        str(args.rate),
        "--duration",
        str(args.duration),
        "--warmup",
        str(args.warmup),
        "--users",
        str(args.users),
        "--connections",
        str(args.connections),
        "--client",
        args.client,
    ]
    if not args.external_ids:
        argv.append("--no-external-ids")
    loadgen = subprocess.Popen(argv, stdout=subprocess.PIPE, text=True)
    pids = {"api": api.pid, "loadgen": loadgen.pid, **server_pids()}
    start: CpuSample | None = None
    end: CpuSample | None = None
    payload: dict[str, Any] | None = None
    assert loadgen.stdout is not None
    for line in loadgen.stdout:
        if line.startswith("MARK measure_start"):
            start = sample_cpu(pids)
        elif line.startswith("MARK measure_end"):
            end = sample_cpu(pids)
        elif line.startswith("RESULT "):
            payload = json.loads(line.removeprefix("RESULT "))
    if loadgen.wait() != 0 or start is None or end is None or payload is None:
        raise RuntimeError(
            f"load generator failed (exit {loadgen.returncode}); API log tail:\n{api.log_tail()}"
        )
    return (start, end), payload


def render(
    runs: list[IngestRun], args: argparse.Namespace, argv: Sequence[str] | None, load_before: str
) -> str:
    stamp = datetime.now(UTC).strftime("%Y-%m-%d %H:%M UTC")
    lines = [
        f"## Turn ingest latency ({stamp})",
        "",
        f"`{command_line('python -m bench.bench_ingest', argv)}`",
        "",
        f"Machine: {machine_line()}; load average {load_before} before the first run.",
        "",
        f"Open loop: POST /v1/sessions/{{sid}}/turns at {args.rate:g} requests/s for "
        f"{args.duration:g} s after {args.warmup:g} s of warm-up, over {args.users} users "
        f"(one session each), user message + assistant reply (~90 + ~300 characters"
        f"{', with external ids' if args.external_ids else ''}); "
        "`tiermem api` (or bench.variants for patched rows), Redis broker db "
        f"{args.redis_url.rsplit('/', 1)[-1]}, no worker (tasks queue). Latency counts from "
        "each request's scheduled send time (no coordinated omission); the load generator "
        f"(asyncio, `{args.client}` client, one process) shares the 2 cores with the API. "
        f"Target: p99 ≤ {TARGET_P99_MS:g} ms.",
        "",
        "| database, API configuration | sent | achieved /s | errors | p50 ms | p90 ms | p99 ms "
        "| p99.9 ms | max ms | send lag p99 ms | API CPU | API CPU per request | loadgen CPU "
        "| Redis+PG CPU | other CPU | tasks queued |",
        "|---|---|---|---|---|---|---|---|---|---|---|---|---|---|---|---|",
    ]
    for run in runs:
        lat = run.latency_ms
        lines.append(
            f"| {run.label} | {run.sent} | {run.achieved_rate:.1f} | {run.errors} "
            f"| {percentile(lat, 50):.1f} | {percentile(lat, 90):.1f} "
            f"| {percentile(lat, 99):.1f} | {percentile(lat, 99.9):.1f} | {max(lat):.1f} "
            f"| {percentile(run.lag_ms, 99):.1f} | {run.api_cpu:.0f} % "
            f"| {run.api_cpu_per_request_ms:.1f} ms | {run.loadgen_cpu:.0f} % "
            f"| {run.servers_cpu:.0f} % | {run.other_cpu:.0f} % | {run.queued_tasks} |"
        )
    lines.append("")
    for run in runs:
        verdict = "meets" if percentile(run.latency_ms, 99) <= TARGET_P99_MS else "misses"
        statuses = ", ".join(f"{k}: {v}" for k, v in sorted(run.statuses.items()))
        lines.append(f"- {run.label}: {verdict} the p99 target; statuses {statuses}.")
    lines += [
        "",
        "CPU columns are % of one core over the measured window (200 % = both cores); "
        "Redis+PG CPU is those servers' processes (PostgreSQL's includes other clients'); "
        "other CPU is the rest of the machine (other people's jobs on this shared box). "
        "Send lag is how late the generator sent (its own scheduling delay).",
        "",
    ]
    return "\n".join(lines)


def main(argv: Sequence[str] | None = None) -> None:
    parser = argparse.ArgumentParser(prog="python -m bench.bench_ingest", description=__doc__)
    parser.add_argument(
        "--backends", default="sqlite,postgres", help="comma-separated: sqlite, postgres"
    )
    parser.add_argument("--rate", type=float, default=200.0, help="requests per second")
    parser.add_argument("--duration", type=float, default=30.0, help="measured seconds")
    parser.add_argument("--warmup", type=float, default=5.0, help="unmeasured seconds first")
    parser.add_argument("--users", type=int, default=200, help="users, one session each")
    parser.add_argument("--connections", type=int, default=256, help="load generator's cap")
    parser.add_argument(
        "--client",
        choices=("raw", "httpx"),
        default="raw",
        help="load generator's HTTP client (see bench.loadgen)",
    )
    parser.add_argument(
        "--api-workers",
        type=int,
        default=1,
        help="uvicorn worker processes (unless a variant says otherwise)",
    )
    parser.add_argument(
        "--variant",
        action="append",
        default=[],
        metavar="SPEC",
        help="an API configuration to measure (repeatable; default: the "
        "product as shipped), e.g. 'workers=2 LOG_LEVEL=WARNING "
        "patches=auth_cache+async_deps pythonpath=/opt/uvloop'",
    )
    parser.add_argument(
        "--no-external-ids",
        dest="external_ids",
        action="store_false",
        help="send messages without external_id",
    )
    parser.add_argument("--redis-url", default=REDIS_URL, help="flushed before and after")
    parser.add_argument("--logs", type=Path, default=RESULTS_DIR / "logs")
    parser.add_argument("--out", type=Path, default=RESULTS)
    args = parser.parse_args(argv)
    variants = [Variant.parse(v, default_workers=args.api_workers) for v in args.variant or [""]]
    load_before = load_average()
    runs: list[IngestRun] = []
    failures: list[str] = []
    for variant in variants:
        for backend in args.backends.split(","):
            print(f"ingest: {backend.strip()}, {variant.describe()} …", file=sys.stderr)
            try:
                run = run_one(backend.strip(), variant, args)
            except (RuntimeError, TimeoutError, OSError) as exc:
                print(f"  failed: {exc}", file=sys.stderr)
                failures.append(f"{backend.strip()}, {variant.describe()}: {exc}")
                continue
            print(
                f"  p50 {percentile(run.latency_ms, 50):.1f} ms, "
                f"p99 {percentile(run.latency_ms, 99):.1f} ms, {run.achieved_rate:.0f}/s, "
                f"API CPU {run.api_cpu_per_request_ms:.1f} ms/request",
                file=sys.stderr,
            )
            runs.append(run)
    table = render(runs, args, argv, load_before)
    if failures:
        table += "\nRuns that failed:\n\n" + "\n".join(f"- {f}" for f in failures) + "\n"
    print(table)
    write_results(args.out, table)


if __name__ == "__main__":
    main()
