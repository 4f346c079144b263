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
    write_results,
    postgres_database,
    sample_cpu,
    tiermem_command,
    wait_http,
)

RESULTS = RESULTS_DIR / "ingest.md"
TARGET_P99_MS = 20.0


@dataclass
class IngestRun:
    label: str
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

    @property
    def errors(self) -> int:
        return sum(n for status, n in self.statuses.items() if status != "202")

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


def run_backend(backend: str, args: argparse.Namespace, extra_env: dict[str, str]) -> IngestRun:
    data_dir = Path(tempfile.mkdtemp(prefix=f"tiermem-bench-ingest-{backend}-"))
    flush_redis(args.redis_url)
    port = free_port()
    try:
        with _database(backend) as db_env:
            env = child_env({
                "TIERMEM_REDIS_URL": args.redis_url,
                "TIERMEM_DATA_DIR": str(data_dir),
                "TIERMEM_PORT": str(port),
                **db_env,
                **extra_env,
            })
            api = Service(
                f"api ({backend})",
                [*tiermem_command(), "api", "--workers", str(args.api_workers)],
                env, args.logs / f"ingest-api-{backend}.log",
            )
            with api:
                url = f"http://127.0.0.1:{port}"
                wait_http(f"{url}/readyz", service=api)
                result = _drive(url, args, api)
                api.check_alive()
            samples, payload = result
            queued = _queued(args.redis_url)
    finally:
        shutil.rmtree(data_dir, ignore_errors=True)
        flush_redis(args.redis_url)
    first, last = samples
    label = backend if not extra_env else f"{backend} ({', '.join(_short(extra_env))})"
    return IngestRun(
        label=label, sent=payload["sent"], duration_s=payload["duration_s"],
        latency_ms=payload["latency_ms"], service_ms=payload["service_ms"],
        lag_ms=payload["lag_ms"], statuses=payload["statuses"],
        api_cpu=cpu_percent(first, last, "api"), loadgen_cpu=cpu_percent(first, last, "loadgen"),
        machine_busy=machine_percent(first, last), queued_tasks=queued,
    )


def _short(env: dict[str, str]) -> list[str]:
    return [f"{k.removeprefix('TIERMEM_')}={v}" for k, v in env.items()]


def _drive(
    url: str, args: argparse.Namespace, api: Service
) -> tuple[tuple[CpuSample, CpuSample], dict[str, Any]]:
    argv = [
        sys.executable, "-m", "bench.loadgen", "--url", url, "--rate", str(args.rate),
        "--duration", str(args.duration), "--warmup", str(args.warmup),
        "--users", str(args.users), "--connections", str(args.connections),
    ]
    if not args.external_ids:
        argv.append("--no-external-ids")
    loadgen = subprocess.Popen(argv, stdout=subprocess.PIPE, text=True)
    pids = {"api": api.pid, "loadgen": loadgen.pid}
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
        raise RuntimeError(f"load generator failed (exit {loadgen.returncode}); "
                           f"API log tail:\n{api.log_tail()}")
    return (start, end), payload


def render(runs: list[IngestRun], args: argparse.Namespace, argv: Sequence[str] | None,
           load_before: str) -> str:
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
        f"`tiermem api --workers {args.api_workers}`, Redis broker db "
        f"{args.redis_url.rsplit('/', 1)[-1]}, no worker (tasks queue). Latency counts from "
        "each request's scheduled send time (no coordinated omission); the load generator "
        "(asyncio httpx, one process) shares the 2 cores with the API. "
        f"Target: p99 ≤ {TARGET_P99_MS:g} ms.",
        "",
        "| database | sent | achieved /s | errors | p50 ms | p90 ms | p99 ms | p99.9 ms | max ms "
        "| send lag p99 ms | API CPU | loadgen CPU | machine busy | tasks queued |",
        "|---|---|---|---|---|---|---|---|---|---|---|---|---|---|",
    ]
    for run in runs:
        lat = run.latency_ms
        lines.append(
            f"| {run.label} | {run.sent} | {run.achieved_rate:.1f} | {run.errors} "
            f"| {percentile(lat, 50):.1f} | {percentile(lat, 90):.1f} "
            f"| {percentile(lat, 99):.1f} | {percentile(lat, 99.9):.1f} | {max(lat):.1f} "
            f"| {percentile(run.lag_ms, 99):.1f} | {run.api_cpu:.0f} % | {run.loadgen_cpu:.0f} % "
            f"| {run.machine_busy:.0f} % | {run.queued_tasks} |"
        )
    lines.append("")
    for run in runs:
        verdict = "meets" if percentile(run.latency_ms, 99) <= TARGET_P99_MS else "misses"
        statuses = ", ".join(f"{k}: {v}" for k, v in sorted(run.statuses.items()))
        lines.append(f"- {run.label}: {verdict} the p99 target; statuses {statuses}.")
    lines += [
        "",
        "API CPU is % of one core (200 % = both); machine busy is % of all cores. "
        "Send lag is how late the generator sent (its own scheduling delay).",
        "",
    ]
    return "\n".join(lines)


def main(argv: Sequence[str] | None = None) -> None:
    parser = argparse.ArgumentParser(prog="python -m bench.bench_ingest", description=__doc__)
    parser.add_argument("--backends", default="sqlite,postgres",
                        help="comma-separated: sqlite, postgres")
    parser.add_argument("--rate", type=float, default=200.0, help="requests per second")
    parser.add_argument("--duration", type=float, default=30.0, help="measured seconds")
    parser.add_argument("--warmup", type=float, default=5.0, help="unmeasured seconds first")
    parser.add_argument("--users", type=int, default=200, help="users, one session each")
    parser.add_argument("--connections", type=int, default=256, help="load generator's cap")
    parser.add_argument("--api-workers", type=int, default=1, help="uvicorn worker processes")
    parser.add_argument("--no-external-ids", dest="external_ids", action="store_false",
                        help="send messages without external_id")
    parser.add_argument("--env", action="append", default=[], metavar="KEY=VALUE",
                        help="extra environment for the API (repeatable), e.g. "
                             "TIERMEM_LOG_LEVEL=WARNING")
    parser.add_argument("--redis-url", default=REDIS_URL, help="flushed before and after")
    parser.add_argument("--logs", type=Path, default=RESULTS_DIR / "logs")
    parser.add_argument("--out", type=Path, default=RESULTS)
    args = parser.parse_args(argv)
    extra_env = dict(item.split("=", 1) for item in args.env)
    load_before = load_average()
    runs = []
    for backend in args.backends.split(","):
        print(f"ingest: {backend} …", file=sys.stderr)
        runs.append(run_backend(backend.strip(), args, extra_env))
    table = render(runs, args, argv, load_before)
    print(table)
    write_results(args.out, table)


if __name__ == "__main__":
    main()
