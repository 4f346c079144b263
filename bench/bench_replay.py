"""Replay throughput over a large stored history, and what it does to live extraction.

Loads `--stored` turns straight into SQL as already-extracted history (messages plus a done
live run each — what months of traffic leave behind; loading them through extraction would
take hours at 1 s per LLM call), then runs the real `tiermem api` and one `tiermem worker
--queues extract --replay-concurrency N` (Redis, embedded Qdrant folder, local ONNX
embeddings) against the scripted LLM at `--latency` s per call.

Phase 1: live turns at `--live-rate` per second for `--window` s, no replay → the delay
from POST to the job being done, p50/p95. Phase 2: a replay (`--mode`) over every stored
turn starts, the same live traffic runs for the same window, and the replay's rate is
taken over that window (turns finished ÷ seconds) with its projected time for the whole
history. The replay is then cancelled.
"""

from __future__ import annotations

import argparse
import shutil
import sys
import tempfile
import threading
import time
from collections.abc import Sequence
from dataclasses import dataclass, field
from datetime import UTC, datetime, timedelta
from pathlib import Path
from typing import Any

import httpx

from bench._common import (
    REDIS_URL,
    RESULTS_DIR,
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
    sample_cpu,
    tiermem_command,
    user_messages,
    wait_http,
    wait_port,
    write_results,
)

RESULTS = RESULTS_DIR / "replay.md"
ADMIN = {"Authorization": "Bearer dev-admin-key"}
APP = {"Authorization": "Bearer dev-app-key"}


def load_history(data_dir: Path, stored: int, users: int) -> None:
    """`stored` turns as extracted history: Core inserts, in pages, before any server runs."""
    import os

    os.environ["TIERMEM_DATA_DIR"] = str(data_dir)
    from sqlalchemy import insert
    from sqlmodel import Session, select

    from shared.config import Settings
    from shared.db.engine import make_engine
    from shared.db.migrate import upgrade_to_head
    from shared.db.models import ChatSession, ExtractionRun, Message, Tenant, User, new_id
    from shared.records.tenancy import ensure_dev_tenant
    from shared.tokens import count_tokens

    settings = Settings(data_dir=data_dir)
    upgrade_to_head(settings)
    engine = make_engine(settings)
    texts = user_messages(500, seed=3, substantive_only=True)
    start = datetime(2025, 1, 1, tzinfo=UTC)
    with Session(engine) as session:
        ensure_dev_tenant(session=session, settings=settings)
        tenant_id = session.exec(select(Tenant.id)).one()
        user_ids = [new_id() for _ in range(users)]
        session_ids = [new_id() for _ in range(users)]
        session.execute(
            insert(User.__table__),
            [  # type: ignore[attr-defined]
                {"id": u, "tenant_id": tenant_id, "external_id": f"old-{i}", "created_at": start}
                for i, u in enumerate(user_ids)
            ],
        )
        per_user = -(-stored // users)
        session.execute(
            insert(ChatSession.__table__),
            [  # type: ignore[attr-defined]
                {
                    "id": s,
                    "tenant_id": tenant_id,
                    "user_id": u,
                    "external_id": f"old-{i}",
                    "next_seq": per_user,
                    "created_at": start,
                    "updated_at": start,
                }
                for i, (u, s) in enumerate(zip(user_ids, session_ids, strict=True))
            ],
        )
        session.commit()
        page = 5000
        for first in range(0, stored, page):
            messages, runs = [], []
            for n in range(first, min(stored, first + page)):
                u, seq = n % users, n // users
                text = texts[n % len(texts)]
                said = start + timedelta(minutes=n)
                message_id, run_id = new_id(), new_id()
                messages.append(
                    {
                        "id": message_id,
                        "tenant_id": tenant_id,
                        "user_id": user_ids[u],
                        "session_id": session_ids[u],
                        "seq": seq,
                        "role": "user",
                        "content": text,
                        "token_count": count_tokens(text),
                        "created_at": said,
                        "received_at": said,
                        "extraction_status": "done",
                        "run_id": run_id,
                    }
                )
                runs.append(
                    {
                        "id": run_id,
                        "tenant_id": tenant_id,
                        "user_id": user_ids[u],
                        "session_id": session_ids[u],
                        "message_id": message_id,
                        "status": "done",
                        "attempts": 1,
                        "extractor": "llm",
                        "extractor_version": "llm-0",
                        "model": "old-model",
                        "created_at": said,
                        "updated_at": said,
                        "finished_at": said,
                    }
                )
            session.execute(insert(Message.__table__), messages)  # type: ignore[attr-defined]
            session.execute(insert(ExtractionRun.__table__), runs)  # type: ignore[attr-defined]
            session.commit()
            print(f"  loaded {min(stored, first + page)}/{stored} turns", file=sys.stderr)
    engine.dispose()


@dataclass
class LiveTraffic:
    """Live turns at a steady rate on a thread; each one's delay from POST to done."""

    url: str
    rate: float
    window_s: float
    tag: str
    delays_ms: list[float] = field(default_factory=list)
    lost: int = 0

    def run(self) -> None:
        client = httpx.Client(base_url=self.url, timeout=30)
        jobs: dict[str, float] = {}
        deadline = time.monotonic() + self.window_s
        n, next_at = 0, time.monotonic()
        while time.monotonic() < deadline or jobs:
            now = time.monotonic()
            if now < deadline and now >= next_at:
                body = {
                    "user_id": f"live-{self.tag}-{n % 20}",
                    "user_message": f"I started learning pottery class number {n}.",
                }
                r = client.post(
                    f"/v1/sessions/live-{self.tag}-{n % 20}/turns", json=body, headers=APP
                )
                jobs[r.json()["job_id"]] = time.monotonic()
                n += 1
                next_at += 1.0 / self.rate
            for job_id, posted in list(jobs.items()):
                status = client.get(f"/v1/jobs/{job_id}", headers=APP).json()["status"]
                if status in ("done", "skipped", "failed", "dropped"):
                    self.delays_ms.append((time.monotonic() - posted) * 1000)
                    del jobs[job_id]
                elif time.monotonic() - posted > 120:
                    self.lost += 1
                    del jobs[job_id]
            time.sleep(0.05)
        client.close()


def run(args: argparse.Namespace) -> dict[str, Any]:
    data_dir = Path(tempfile.mkdtemp(prefix="tiermem-bench-replay-"))
    flush_redis(args.redis_url)
    try:
        t0 = time.monotonic()
        load_history(data_dir, args.stored, args.users)
        load_s = time.monotonic() - t0
        llm_port, api_port = free_port(), free_port()
        env = child_env(
            {
                "TIERMEM_DATA_DIR": str(data_dir),
                "TIERMEM_REDIS_URL": args.redis_url,
                "TIERMEM_PORT": str(api_port),
                "TIERMEM_LLM__BASE_URL": f"http://127.0.0.1:{llm_port}/v1",
                "TIERMEM_REPLAY__RATE_LIMIT": args.rate_limit,
                "TIERMEM_LOG_LEVEL": "WARNING",
            }
        )
        llm = Service(
            "scripted LLM",
            [
                sys.executable,
                "-m",
                "tests.scripted_llm",
                "--port",
                str(llm_port),
                "--latency",
                str(args.latency),
                "--facts-per-turn",
                "2",
            ],
            child_env({}),
            args.logs / "replay-llm.log",
        )
        api = Service("api", [*tiermem_command(), "api"], env, args.logs / "replay-api.log")
        worker = Service(
            "worker",
            [
                *tiermem_command(),
                "worker",
                "--queues",
                "extract",
                "--concurrency",
                str(args.live_concurrency),
                "--replay-concurrency",
                str(args.replay_concurrency),
                "--loglevel",
                "WARNING",
            ],
            env,
            args.logs / "replay-worker.log",
        )
        with llm, api, worker:
            wait_port(llm_port, service=llm)
            url = f"http://127.0.0.1:{api_port}"
            wait_http(f"{url}/readyz", service=api)
            time.sleep(5)  # the worker's model load
            print("phase 1: live traffic, no replay", file=sys.stderr)
            alone = LiveTraffic(url, args.live_rate, args.window, "a")
            alone.run()

            print(f"phase 2: {args.mode} replay over {args.stored} turns + live", file=sys.stderr)
            client = httpx.Client(base_url=url, timeout=60)
            job = client.post("/v1/replay", json={"mode": args.mode}, headers=ADMIN).json()
            time.sleep(args.warmup)
            first = client.get(f"/v1/replay/{job['id']}", headers=ADMIN).json()
            pids = {"worker": worker.pid, "api": api.pid, "llm": llm.pid}
            cpu0, t_first = sample_cpu(pids), time.monotonic()
            beside = LiveTraffic(url, args.live_rate, args.window, "b")
            thread = threading.Thread(target=beside.run)
            thread.start()
            thread.join()
            last = client.get(f"/v1/replay/{job['id']}", headers=ADMIN).json()
            cpu1, elapsed = sample_cpu(pids), time.monotonic() - t_first
            client.post(f"/v1/replay/{job['id']}/cancel", headers=ADMIN)
            client.close()
            worker.check_alive()
        finished = (last["done"] + last["staged"]) - (first["done"] + first["staged"])
        rate = finished / elapsed
        return {
            "load_s": load_s,
            "job": job,
            "first": first,
            "last": last,
            "elapsed": elapsed,
            "rate": rate,
            "finished": finished,
            "alone": alone,
            "beside": beside,
            "worker_cpu": cpu_percent(cpu0, cpu1, "worker"),
            "machine": machine_percent(cpu0, cpu1),
        }
    finally:
        shutil.rmtree(data_dir, ignore_errors=True)
        flush_redis(args.redis_url)


def render(
    result: dict[str, Any], args: argparse.Namespace, argv: Sequence[str] | None, load_before: str
) -> str:
    alone, beside = result["alone"], result["beside"]
    total = args.stored
    rate = result["rate"]
    minutes = total / rate / 60 if rate else float("inf")
    projected = f"{minutes / 60:.1f} h" if minutes >= 90 else f"{minutes:.0f} min"
    stamp = datetime.now(UTC).strftime("%Y-%m-%d %H:%M UTC")

    def row(name: str, t: LiveTraffic) -> str:
        d = t.delays_ms
        if not d:
            return f"| {name} | 0 | — | — | — | {t.lost} |"
        return (
            f"| {name} | {len(d)} | {percentile(d, 50):.0f} | {percentile(d, 95):.0f} | "
            f"{max(d):.0f} | {t.lost} |"
        )

    return "\n".join(
        [
            f"## Replay ({stamp})",
            "",
            f"`{command_line('python -m bench.bench_replay', argv)}`",
            "",
            f"Machine: {machine_line()}; load average {load_before} before the run.",
            "",
            f"{total:,} stored turns over {args.users} users loaded into SQLite as extracted "
            f"history in {result['load_s']:.0f} s; `tiermem api` + one `tiermem worker --queues "
            f"extract --concurrency {args.live_concurrency} --replay-concurrency "
            f"{args.replay_concurrency}` (Redis, embedded Qdrant, local ONNX embeddings), "
            f"scripted LLM at {args.latency:g} s per call (2 facts per turn), replay rate limit "
            f"`{args.rate_limit or 'none'}`, live turns at {args.live_rate:g}/s for "
            f"{args.window:g} s in each phase.",
            "",
            f"| replay ({args.mode}) | turns in the window | rate | projected for {total:,} turns "
            "| worker CPU | machine busy |",
            "|---|---|---|---|---|---|",
            f"| over {result['elapsed']:.0f} s after {args.warmup:g} s warm-up | "
            f"{result['finished']} "
            f"| {rate:.1f} turns/s | {projected} | {result['worker_cpu']:.0f} % | "
            f"{result['machine']:.0f} % |",
            "",
            "| live extraction | turns | delay p50 ms | p95 ms | max ms | lost |",
            "|---|---|---|---|---|---|",
            row("alone", alone),
            row("during the replay", beside),
            "",
            f"Failed replay turns in the window: {result['last']['failed']}.",
            "",
        ]
    )


def main(argv: Sequence[str] | None = None) -> None:
    p = argparse.ArgumentParser(prog="python -m bench.bench_replay")
    p.add_argument("--stored", type=int, default=100_000)
    p.add_argument("--users", type=int, default=1000)
    p.add_argument("--mode", choices=("dry_run", "apply", "rebuild"), default="apply")
    p.add_argument("--latency", type=float, default=1.0)
    p.add_argument("--live-rate", type=float, default=2.0)
    p.add_argument("--window", type=float, default=120.0)
    p.add_argument("--warmup", type=float, default=20.0)
    p.add_argument("--live-concurrency", type=int, default=16)
    p.add_argument("--replay-concurrency", type=int, default=32)
    p.add_argument("--rate-limit", default="", help="TIERMEM_REPLAY__RATE_LIMIT ('' = none)")
    p.add_argument("--redis-url", default=REDIS_URL)
    p.add_argument("--logs", type=Path, default=RESULTS_DIR / "logs")
    p.add_argument("--out", type=Path, default=RESULTS)
    args = p.parse_args(argv)
    load_before = load_average()
    table = render(run(args), args, argv, load_before)
    print(table)
    write_results(args.out, table)


if __name__ == "__main__":
    main()
