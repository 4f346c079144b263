"""Ops against real processes: `tiermem api`, Redis, a `tiermem worker` subprocess.

Turns queued with no worker show up as broker depth and SQL pending; a worker drains them
and throughput, its heartbeat and the Prometheus numbers show it; a paused queue keeps its
messages until resumed; a failed run is retried through the API.
"""

from __future__ import annotations

import signal
import socket
import subprocess
from typing import Any

import httpx
import pytest

from tests import factories as f
from tests import processes
from tests.e2e.test_processes import (  # the fixtures are shared with the e2e tests
    TIERMEM,
    Stack,
    script_distinct_facts,
    stack_env_fixture,  # noqa: F401
    stack_fixture,  # noqa: F401
    turn_text,
)
from tests.factories import ADMIN_KEY, wait_for
from tests.scripted_llm import ScriptedLLM

pytestmark = pytest.mark.slow
ADMIN = {"Authorization": f"Bearer {ADMIN_KEY}"}


@pytest.fixture(autouse=True)
def quick_heartbeats(stack: Stack) -> None:
    stack.env["TIERMEM_WORKER__HEARTBEAT_S"] = "0.5"


def ops(stack: Stack, path: str) -> Any:
    r = httpx.get(f"{stack.url}{path}", headers=ADMIN, timeout=10)
    assert r.status_code == 200, r.text
    return r.json() if "json" in r.headers["content-type"] else r.text


def queue(stack: Stack, name: str = "extract") -> dict[str, Any]:
    snap = ops(stack, "/v1/ops/queues")
    found: dict[str, Any] = next(q for q in snap["queues"] if q["name"] == name)
    return found


def post_turns(stack: Stack, texts: list[str]) -> list[str]:
    return [
        stack.post_turn("s1", {"user_id": "ana", "user_message": text, "assistant_message": "ok"})
        for text in texts
    ]


def metric(text: str, sample: str) -> float:
    for line in text.splitlines():
        if line.startswith(sample + " "):
            return float(line.rsplit(" ", 1)[1])
    raise AssertionError(f"{sample} not in /metrics:\n{text[:3000]}")


def test_depth_drain_workers_and_metrics(stack: Stack, scripted_llm: ScriptedLLM) -> None:
    n = 8
    script_distinct_facts(scripted_llm, n)
    stack.start_api()
    job_ids = post_turns(stack, [turn_text(i) for i in range(n)])

    waiting = queue(stack)
    assert waiting["depth"] == n and waiting["pending"] == n and waiting["reserved"] == 0
    assert waiting["oldest_pending_age_s"] is not None and waiting["oldest_pending_age_s"] >= 0
    assert ops(stack, "/v1/ops/workers") == []
    tenants = ops(stack, "/v1/ops/queues")["tenants"]
    assert [t["turns_pending"] for t in tenants if t["name"] == "default"] == [n]

    stack.start_worker()
    stack.wait_all_done(job_ids)
    drained = queue(stack)
    assert drained["depth"] == 0 and drained["pending"] == 0 and drained["running"] == 0
    assert drained["oldest_pending_age_s"] is None
    last_minute = drained["windows"][0]
    assert last_minute["minutes"] == 1 and last_minute["finished"] == n
    assert last_minute["per_minute"] == n and last_minute["failure_rate"] == 0
    assert last_minute["duration_ms_p50"] is not None

    def beat_after_drain() -> list[Any]:
        workers: list[Any] = ops(stack, "/v1/ops/workers")
        idle = workers and workers[0]["processed"] >= n and workers[0]["active"] == 0
        return workers if idle else []

    (worker,) = wait_for(beat_after_drain, timeout=20, what="a heartbeat after the drain")
    assert worker["queues"] == ["extract"] and worker["pool"] == "threads"
    assert worker["concurrency"] == 4 and worker["reserved"] == 0
    assert worker["heartbeat_age_s"] < 5

    series = ops(stack, "/v1/ops/timeseries?minutes=5")["points"]
    assert sum(p["finished"] for p in series) == n and series[-1]["depth"] == 0

    text = ops(stack, "/metrics")
    assert metric(text, 'tiermem_queue_depth{queue="extract"}') == 0
    assert metric(text, 'tiermem_runs_total{queue="extract",status="done"}') == n
    assert metric(text, "tiermem_extraction_duration_seconds_count") == n
    assert metric(text, 'tiermem_facts_per_turn_bucket{le="1"}') == n  # one fact each
    assert metric(text, 'tiermem_dedup_total{outcome="added"}') == n
    assert metric(text, "tiermem_workers") == 1
    tokens = 'tiermem_llm_tokens_total{kind="prompt",model="gpt-4o-mini",stage="extraction"}'
    assert metric(text, tokens) > 0
    # The worker owns the embedded vector folder: the API reports what its files tell.
    assert metric(text, "tiermem_vector_disk_bytes") > 0
    assert "tiermem_vector_points{" not in text

    # The terminal view reads the same numbers straight from SQL, Redis and the heartbeats.
    status = processes.run(
        [TIERMEM, "ops", "status"],
        env={**stack.env, "COLUMNS": "200"},
        capture_output=True,
        text=True,
        timeout=60,
        check=True,
    ).stdout
    assert "workers (1 live)" in status
    # the worker holds the vector folder: the view says what the files tell, without it
    assert "vectors: engine edge · layout partitioned · disk " in status
    watch = processes.run(
        [TIERMEM, "ops", "watch", "--interval", "0.5", "--count", "2"],
        env={**stack.env, "COLUMNS": "200"}, capture_output=True, text=True, timeout=60,
        check=True,
    ).stdout  # fmt: skip
    assert "queues · broker: redis" in watch and "│ extract" in watch
    extract_row = next(line for line in status.splitlines() if "│ extract" in line)
    assert [cell.strip() for cell in extract_row.split("│")[2:6]] == ["0", "0", "0", "0"]


def test_pause_keeps_messages_until_resume(stack: Stack, scripted_llm: ScriptedLLM) -> None:
    script_distinct_facts(scripted_llm, 3)
    stack.start_api()
    stack.start_worker()
    wait_for(lambda: ops(stack, "/v1/ops/workers"), timeout=30, what="a worker heartbeat")

    r = httpx.post(f"{stack.url}/v1/ops/queues/extract/pause", headers=ADMIN)
    assert r.status_code == 200 and r.json() == {"queue": "extract", "paused": True}
    wait_for(
        lambda: ops(stack, "/v1/ops/workers")[0]["queues"] == [],
        timeout=20,
        what="the worker to stop consuming extract",
    )
    job_ids = post_turns(stack, [turn_text(i) for i in range(3)])
    paused = queue(stack)
    assert paused["paused"] is True and paused["depth"] == 3 and paused["pending"] == 3
    # The outbox sweeper holds off too: no second copies pile up behind the pause.
    sweep = processes.run(
        [TIERMEM, "sweep"],
        env={**stack.env, "TIERMEM_WORKER__SWEEP_PENDING_AFTER_S": "0"},
        capture_output=True,
        text=True,
        timeout=60,
        check=True,
    )
    assert "re-enqueued 0 runs" in sweep.stderr + sweep.stdout
    assert queue(stack)["depth"] == 3

    r = httpx.post(f"{stack.url}/v1/ops/queues/extract/resume", headers=ADMIN)
    assert r.status_code == 200 and r.json()["paused"] is False
    stack.wait_all_done(job_ids)
    assert queue(stack)["paused"] is False

    unknown = httpx.post(f"{stack.url}/v1/ops/queues/nope/pause", headers=ADMIN)
    assert unknown.status_code == 422 and "extract" in unknown.json()["error"]["message"]


def test_failed_run_is_listed_then_retried(stack: Stack, scripted_llm: ScriptedLLM) -> None:
    scripted_llm.script("my cat", f.facts(f.general("Ana", "Ana has a cat called Miso.")))
    scripted_llm.misbehave("400", times=1, match="my cat")  # a permanent error: no retry
    stack.start_api()
    stack.start_worker()
    (job_id,) = post_turns(stack, ["my cat is called Miso"])
    wait_for(lambda: stack.job(job_id)["status"] == "failed", timeout=60, what="the run to fail")

    failed = queue(stack)["failed_runs"]
    assert [r["id"] for r in failed] == [job_id] and "400" in failed[0]["error"]

    r = httpx.post(
        f"{stack.url}/v1/ops/runs/retry", json={"run_ids": [job_id, "nope"]}, headers=ADMIN
    )
    assert r.status_code == 200 and r.json() == {"retried": [job_id], "skipped": ["nope"]}
    stack.wait_all_done([job_id])
    assert queue(stack)["failed_runs"] == []
    app_key = httpx.get(
        f"{stack.url}/v1/ops/queues", headers={"Authorization": "Bearer dev-app-key"}
    )
    assert app_key.status_code == 403


def test_two_workers_on_one_host_each_their_own_and_a_killed_ones_runs_orphaned(
    stack: Stack, scripted_llm: ScriptedLLM
) -> None:
    """Two `tiermem worker` processes on this host are two workers in ops: each its own
    heartbeat under its own node name, so when one is killed holding a run, that run shows
    as orphaned while the other worker lives on, listed, with its own run still running."""
    script_distinct_facts(scripted_llm, 2)
    scripted_llm.latency_s = 60.0  # each worker holds its run until it is killed
    stack.start_api()

    def start(name: str, *args: str) -> subprocess.Popen[bytes]:
        return stack.start_worker(
            *args,
            concurrency=1,  # one run each
            extra_env={
                # Their own vector folders: an embedded folder takes one process (a Qdrant
                # server would take both); SQL and the broker are shared.
                "TIERMEM_QDRANT__PATH": str(stack.tmp / f"vectors-{name}"),
                "TIERMEM_LLM__TIMEOUT_S": "120",
            },
        )

    killed, live = start("a"), start("b", "--name", "live-b@%h")
    pids = {killed.pid, live.pid}
    wait_for(
        lambda: {w["pid"] for w in ops(stack, "/v1/ops/workers")} == pids,
        timeout=60,
        what="both workers listed, each under its own name",
    )
    post_turns(stack, [turn_text(i) for i in range(2)])

    def each_holding_a_run() -> list[Any]:
        workers: list[Any] = ops(stack, "/v1/ops/workers")
        return workers if [w["active"] for w in workers] == [1, 1] else []

    workers = wait_for(each_holding_a_run, timeout=60, what="a run in flight on each worker")
    names = {w["pid"]: w["hostname"] for w in workers}
    host = socket.gethostname()
    assert names[killed.pid] == f"tiermem-extract-{killed.pid}@{host}"
    assert names[live.pid] == f"live-b@{host}"
    (held,) = next(w for w in workers if w["pid"] == killed.pid)["active_tasks"]
    # A task is active in Celery a moment before its run is claimed in SQL.
    wait_for(lambda: queue(stack)["running"] == 2, timeout=30, what="both runs claimed")

    stack.stop(killed, signal.SIGKILL)

    def orphaned() -> dict[str, Any] | None:
        extract = queue(stack)
        return extract if extract["orphaned"] else None

    extract = wait_for(orphaned, timeout=30, what="the killed worker's run to show orphaned")
    assert [(r["id"], r["worker"]) for r in extract["orphaned_runs"]] == [
        (held["args"][0], names[killed.pid])
    ]
    assert extract["orphaned"] == 1 and extract["running"] == 1  # the live worker's run
    assert [(w["pid"], w["hostname"]) for w in ops(stack, "/v1/ops/workers")] == [
        (live.pid, names[live.pid])
    ]
    assert live.poll() is None
    stack.stop(live, signal.SIGKILL)  # its run waits on the slow LLM; nothing left to see
