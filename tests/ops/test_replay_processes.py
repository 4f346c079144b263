"""Replay across real processes: `tiermem api`, Redis, and one `tiermem worker` that owns
the embedded Qdrant folder and takes the replay queue on threads of its own.

Live turns posted during a replay finish while the replay is still running (it never
takes their threads); a worker killed in the middle of a rebuild, then resumed, ends with
the facts of a clean run; the CLI follows the job.
"""

from __future__ import annotations

import signal
import subprocess
from typing import Any

import httpx
import pytest

from tests import factories as f
from tests import processes
from tests.e2e.test_processes import (  # the fixtures are shared with the e2e tests
    ONE_CALL_A_TURN,
    TIERMEM,
    Stack,
    stack_env_fixture,  # noqa: F401
    stack_fixture,  # noqa: F401
)
from tests.factories import ADMIN_KEY, wait_for
from tests.scripted_llm import ScriptedLLM

pytestmark = pytest.mark.slow
ADMIN = {"Authorization": f"Bearer {ADMIN_KEY}"}
OLD_TURNS = 24


def start_worker(stack: Stack) -> subprocess.Popen[bytes]:
    return stack.start(
        "worker", "--queues", "extract", "--concurrency", "4", "--replay-concurrency", "2",
        "--loglevel", "WARNING", name="worker",
    )  # fmt: skip


def import_old_turns(stack: Stack, llm: ScriptedLLM) -> None:
    for i in range(OLD_TURNS):
        llm.script(f"old note {i}.", f.facts(f.general("Bo", f"Bo wrote old note {i}.")))
    lines = [
        {"user_id": "bo", "session_id": "archive", "role": "user", "content": f"old note {i}."}
        for i in range(OLD_TURNS)
    ]
    r = httpx.post(
        f"{stack.url}/v1/import", json={"messages": lines},
        headers={"Authorization": "Bearer dev-app-key"},
    )  # fmt: skip
    assert r.status_code == 202, r.text
    stack.wait_all_done(r.json()["job_ids"])


def start_replay(stack: Stack, mode: str) -> dict[str, Any]:
    tenants = httpx.get(f"{stack.url}/v1/admin/tenants", headers=ADMIN).json()
    body = {"mode": mode, "tenant_id": tenants[0]["id"], "user_ids": ["bo"]}
    r = httpx.post(f"{stack.url}/v1/replay", json=body, headers=ADMIN)
    assert r.status_code == 202, r.text
    job: dict[str, Any] = r.json()
    assert job["total"] == OLD_TURNS
    return job


def progress(stack: Stack, job_id: str) -> dict[str, Any]:
    body: dict[str, Any] = httpx.get(f"{stack.url}/v1/replay/{job_id}", headers=ADMIN).json()
    return body


def bo_facts(stack: Stack) -> set[str]:
    r = httpx.get(
        f"{stack.url}/v1/users/bo/memories?limit=500",
        headers={"Authorization": "Bearer dev-app-key"},
    )
    return {m["content"] for m in r.json()["data"]}


def test_live_turns_finish_while_a_replay_runs(stack: Stack, scripted_llm: ScriptedLLM) -> None:
    stack.env["TIERMEM_REPLAY__RATE_LIMIT"] = ""
    stack.env.update(ONE_CALL_A_TURN)
    stack.start_api()
    start_worker(stack)

    def pools() -> list[tuple[list[str], int]]:
        workers = httpx.get(f"{stack.url}/v1/ops/workers", headers=ADMIN).json()
        return sorted((w["queues"], w["concurrency"]) for w in workers)

    # One process, one pool of 4 + 2 threads: at most 2 of them replay.
    wait_for(lambda: len(pools()) == 1, timeout=30, what="the worker's heartbeat")
    assert pools() == [(["extract", "replay"], 6)]
    import_old_turns(stack, scripted_llm)
    scripted_llm.latency_s = 0.4  # the replay: 24 turns on 2 threads, ~5 s at least

    job = start_replay(stack, "apply")
    live = [
        stack.post_turn("now", {"user_id": "cy", "user_message": f"I just moved to town {i}."})
        for i in range(4)
    ]
    stack.wait_all_done(live, timeout=30)
    during = progress(stack, job["id"])
    assert during["status"] == "running" and during["done"] < OLD_TURNS, during

    wait_for(lambda: progress(stack, job["id"])["status"] == "done", timeout=90, what="replay")
    done = progress(stack, job["id"])
    assert done["done"] == OLD_TURNS and done["failed"] == 0
    queues = httpx.get(f"{stack.url}/v1/ops/queues", headers=ADMIN).json()["queues"]
    replay_queue = next(q for q in queues if q["name"] == "replay")
    assert replay_queue["windows"][2]["finished"] == OLD_TURNS

    status = processes.run(
        [TIERMEM, "replay", "status", job["id"]], env=stack.env,
        capture_output=True, text=True, timeout=60, check=True,
    )  # fmt: skip
    assert f"{OLD_TURNS} done" in status.stderr and ": done" in status.stderr
    unknown = processes.run(
        [TIERMEM, "replay", "cancel", "nope"], env=stack.env, capture_output=True, text=True,
        timeout=60,
    )  # fmt: skip
    assert unknown.returncode == 2 and "not found" in unknown.stderr


def test_rebuild_killed_midway_then_resumed_equals_a_clean_run(
    stack: Stack, scripted_llm: ScriptedLLM
) -> None:
    stack.env["TIERMEM_REPLAY__RATE_LIMIT"] = ""
    stack.env.update(ONE_CALL_A_TURN)
    stack.start_api()
    worker = start_worker(stack)
    import_old_turns(stack, scripted_llm)
    # The new extraction: even notes say something else, odd notes say nothing.
    for i in range(OLD_TURNS):
        new = (
            f.facts(f.general("Bo", f"Bo keeps note {i} in a drawer.")) if i % 2 == 0 else f.facts()
        )
        scripted_llm.script(f"old note {i}.", new)
    expected = {f"Bo keeps note {i} in a drawer." for i in range(0, OLD_TURNS, 2)}
    scripted_llm.latency_s = 0.3

    job = start_replay(stack, "rebuild")
    wait_for(
        lambda: progress(stack, job["id"])["staged"] >= 4, timeout=60, what="some staged turns"
    )
    stack.stop(worker, signal.SIGKILL)
    assert bo_facts(stack) == {f"Bo wrote old note {i}." for i in range(OLD_TURNS)}  # untouched

    start_worker(stack)
    r = httpx.post(f"{stack.url}/v1/replay/{job['id']}/resume", headers=ADMIN)
    assert r.status_code == 200 and r.json()["status"] == "running"
    wait_for(lambda: progress(stack, job["id"])["status"] == "done", timeout=120, what="resume")
    assert bo_facts(stack) == expected
    report = progress(stack, job["id"])["report"]["bo"]
    assert len(report["retired"]) == OLD_TURNS and report["added"] == len(expected)

    again = start_replay(stack, "rebuild")  # twice is once
    wait_for(lambda: progress(stack, again["id"])["status"] == "done", timeout=120, what="again")
    assert bo_facts(stack) == expected
