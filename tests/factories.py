"""What tests import besides fixtures: builders for test data (extraction replies the scripted
LLM returns, turns, ids), settings and the API keys, waiting on a job, a fresh PostgreSQL
database, and a real `tiermem serve` to talk to."""

from __future__ import annotations

import os
import socket
import subprocess
import sys
import time
import uuid
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import Any

import fastapi.dependencies.models
import httpx
import pytest
from fastapi.testclient import TestClient

from shared.config import Settings
from tests.processes import REPO, spawn


def identity(
    subject: str, attribute: str, value: str, content: str, confidence: float = 0.9
) -> dict[str, Any]:
    return {
        "type": "identity",
        "content": content,
        "subject": subject,
        "confidence": confidence,
        "tags": [attribute],
        "valid_from": None,
        "ended": False,
        "attribute": attribute,
        "value": value,
    }


def preference(
    subject: str,
    topic: str,
    value: str,
    content: str,
    sentiment: str = "likes",
    confidence: float = 0.85,
) -> dict[str, Any]:
    return {
        "type": "preference",
        "content": content,
        "subject": subject,
        "confidence": confidence,
        "tags": [topic],
        "valid_from": None,
        "ended": False,
        "topic": topic,
        "sentiment": sentiment,
        "value": value,
    }


def general(subject: str, content: str, confidence: float = 0.8) -> dict[str, Any]:
    return {
        "type": "fact",
        "content": content,
        "subject": subject,
        "confidence": confidence,
        "tags": [],
        "valid_from": None,
        "ended": False,
        "attribute": None,
        "value": None,
    }


def decision(subject: str, topic: str, choice: str, content: str) -> dict[str, Any]:
    return {
        "type": "decision",
        "content": content,
        "subject": subject,
        "confidence": 0.9,
        "tags": [topic],
        "valid_from": None,
        "ended": False,
        "topic": topic,
        "choice": choice,
        "reason": None,
    }


def goal(subject: str, goal_text: str, content: str, status: str = "active") -> dict[str, Any]:
    return {
        "type": "goal",
        "content": content,
        "subject": subject,
        "confidence": 0.8,
        "tags": [],
        "valid_from": None,
        "ended": False,
        "goal": goal_text,
        "target_date": None,
        "status": status,
    }


def relationship(subject: str, person: str, relation: str, content: str) -> dict[str, Any]:
    return {
        "type": "relationship",
        "content": content,
        "subject": subject,
        "confidence": 0.9,
        "tags": [],
        "valid_from": None,
        "ended": False,
        "person": person,
        "relation": relation,
    }


def facts(*items: dict[str, Any]) -> dict[str, Any]:
    return {"facts": list(items)}


def turn(user_id: str, text: str, reply: str = "Noted.", **extra: Any) -> dict[str, Any]:
    return {
        "user_id": user_id,
        "user_message": {"content": text, "speaker": extra.pop("speaker", "Ana")},
        "assistant_message": reply,
        **extra,
    }


def ended(item: dict[str, Any]) -> dict[str, Any]:
    """The same fact, stating that its value ended ("Ana quit Siemens")."""
    return {**item, "ended": True}


def pet(subject: str, name: str, content: str) -> dict[str, Any]:
    return {**general(subject, content), "attribute": "pet", "value": name}


# Ana's life as the memory browser's tests tell it: she moves from Leeds to Bristol, changes
# jobs from Siemens to SAP, and her dog Rex dies. (session, what she says, the date, what
# the scripted LLM extracts from it); each line names a phrase no later prompt repeats
# before its own turn, and later scripts win, so each turn gets its own reply.
CHANGING_LIFE = [
    ("home", "I live in Leeds, up north.", "2026-01-05T09:00:00Z",
     identity("Ana", "location", "Leeds", "Ana lives in Leeds.")),
    ("home", "I work at Siemens as an engineer.", "2026-01-12T09:00:00Z",
     identity("Ana", "employer", "Siemens", "Ana works at Siemens.")),
    ("home", "My dog Rex loves the park.", "2026-01-20T09:00:00Z",
     pet("Ana", "Rex", "Ana has a dog named Rex.")),
    ("move", "Big news: we moved to Bristol!", "2026-03-03T09:00:00Z",
     identity("Ana", "location", "Bristol", "Ana lives in Bristol.")),
    ("move", "I started a new job at SAP this week.", "2026-03-10T09:00:00Z",
     identity("Ana", "employer", "SAP", "Ana works at SAP.")),
    ("move", "Sadly Rex passed away on Sunday.", "2026-03-17T09:00:00Z",
     ended(pet("Ana", "Rex", "Ana's dog Rex passed away."))),
]  # fmt: skip


def script_changing_life(llm: Any) -> list[tuple[str, dict[str, Any]]]:
    """Script CHANGING_LIFE's replies into the scripted LLM; the turns to post, in order."""
    turns = []
    for session_id, text, said_at, item in CHANGING_LIFE:
        llm.script(text, facts(item))
        turns.append((session_id, turn("ana", text, "Noted.", created_at=said_at)))
    return turns


def new_id(prefix: str) -> str:
    """A user, session or tenant id no other test of a shared server uses."""
    return f"{prefix}-{uuid.uuid4().hex[:8]}"


# --- settings, keys, waiting -----------------------------------------------------------

REDIS_URL = os.environ.get("TIERMEM_TEST_REDIS_URL", "redis://127.0.0.1:6379/15")
PG_ADMIN_URL = os.environ.get(
    "TIERMEM_TEST_PG_URL", "postgresql+psycopg://postgres@127.0.0.1:5432/postgres"
)
APP_KEY = "dev-app-key"
ADMIN_KEY = "dev-admin-key"


def make_settings(tmp_path: Path, **overrides: Any) -> Settings:
    base: dict[str, Any] = {"data_dir": tmp_path / "data"}
    base.update(overrides)
    return Settings(**base)


def forget_finished_apps() -> None:
    """FastAPI classifies each endpoint and dependency once, in module-level LRU caches of
    4,096 entries keyed by the callable (fastapi.dependencies.models). An app's own
    closures (fastapi_offline's /docs routes, our /mcp route) are such keys, so every app
    made stayed alive, with its Runtime, for the next ~1,000 apps of the process: a server
    makes one, the suite one per test (12-14 GB, issue 24). Emptied, the next request
    classifies its callables again."""
    for cached in vars(fastapi.dependencies.models).values():
        if callable(getattr(cached, "cache_clear", None)):
            cached.cache_clear()


def wait_for(
    predicate: Callable[[], Any],
    *,
    timeout: float = 30.0,
    interval: float = 0.05,
    what: str = "condition",
) -> Any:
    deadline = time.monotonic() + timeout
    while True:
        value = predicate()
        if value:
            return value
        if time.monotonic() > deadline:
            raise AssertionError(f"timed out after {timeout}s waiting for {what}")
        time.sleep(interval)


def wait_job(
    client: TestClient, job_id: str, timeout: float = 30.0, headers: dict[str, str] | None = None
) -> dict[str, Any]:
    def finished() -> dict[str, Any] | None:
        response = client.get(f"/v1/jobs/{job_id}", headers=headers)
        assert response.status_code == 200, response.text
        body: dict[str, Any] = response.json()
        return body if body["status"] in ("done", "skipped", "dropped", "failed") else None

    result: dict[str, Any] = wait_for(finished, timeout=timeout, what=f"job {job_id}")
    return result


# --- databases and processes ----------------------------------------------------------


@contextmanager
def fresh_pg_database() -> Iterator[str]:
    """A new, empty PostgreSQL database's URL; dropped on exit."""
    from sqlalchemy import create_engine, text
    from sqlalchemy.engine import make_url

    name = f"tiermem_test_{uuid.uuid4().hex[:10]}"
    admin = create_engine(PG_ADMIN_URL, isolation_level="AUTOCOMMIT")
    try:
        with admin.connect() as conn:
            conn.execute(text(f'CREATE DATABASE "{name}"'))
    except Exception as exc:  # noqa: BLE001
        pytest.fail(f"PostgreSQL is not reachable at {PG_ADMIN_URL}: {exc}")
    try:
        yield make_url(PG_ADMIN_URL).set(database=name).render_as_string(hide_password=False)
    finally:
        with admin.connect() as conn:
            conn.execute(text(f'DROP DATABASE IF EXISTS "{name}" WITH (FORCE)'))
        admin.dispose()


def tiermem_env(settings_env: dict[str, str]) -> dict[str, str]:
    env = {k: v for k, v in os.environ.items() if not k.startswith("TIERMEM_")}
    env.update(settings_env)
    env["PYTHONUNBUFFERED"] = "1"
    return env


def start_process(args: list[str], env: dict[str, str], log: Path) -> subprocess.Popen[bytes]:
    """`args` in the background, its output in `log`; stopped by tests.processes' reaper
    if the run dies first."""
    with log.open("wb") as handle:  # the child has its own copy once started
        return spawn(args, env=env, stdout=handle, stderr=subprocess.STDOUT, cwd=REPO)


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        port: int = s.getsockname()[1]
        return port


TIERMEM = str(Path(sys.executable).with_name("tiermem"))


@contextmanager
def tiermem_serve(tmp: Path, env: dict[str, str] | None = None) -> Iterator[str]:
    """A real `tiermem serve` subprocess on a free port with its data under `tmp`; its URL."""
    port = free_port()
    settings_env = {"TIERMEM_DATA_DIR": str(tmp / "data"), "TIERMEM_PORT": str(port)}
    process = start_process(
        [TIERMEM, "serve"], tiermem_env(settings_env | (env or {})), tmp / "serve.log"
    )
    url = f"http://127.0.0.1:{port}"
    deadline = time.monotonic() + 60
    try:
        while True:
            try:
                if httpx.get(f"{url}/healthz", timeout=1).status_code == 200:
                    break
            except httpx.TransportError:
                pass
            assert process.poll() is None, (tmp / "serve.log").read_text()
            assert time.monotonic() < deadline, "tiermem serve did not start"
            time.sleep(0.2)
        yield url
    finally:
        process.terminate()
        process.wait(timeout=30)
