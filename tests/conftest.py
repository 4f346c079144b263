"""Fixtures over real components: SQLite files, PostgreSQL, Redis, Celery workers, Qdrant."""

from __future__ import annotations

import gc
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
import redis
from fastapi.testclient import TestClient

from shared.config import Settings
from shared.db.migrate import upgrade_to_head
from shared.runtime import Runtime
from tests.processes import REPO, spawn
from tests.scripted_llm import scripted_llm, scripted_llm_server  # noqa: F401  (fixtures)

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


@pytest.fixture(autouse=True)
def _release_test_heap() -> Iterator[None]:
    """Every app a test starts freezes the heap (shared.heap) and is held by FastAPI's
    caches; both let go after each test, the test's apps, runtimes and engines can be
    collected again."""
    yield
    forget_finished_apps()
    gc.unfreeze()


@pytest.fixture(name="settings")
def settings_fixture(tmp_path: Path) -> Settings:
    return make_settings(tmp_path)


@pytest.fixture(scope="session")
def embedded_worker() -> Iterator[Any]:
    """One real Celery worker (thread pool, in-memory broker) for the whole session, as
    `tiermem serve` runs it; each test points it at its own Runtime."""
    from services.embedded import EmbeddedWorker

    bootstrap = Runtime(Settings(qdrant={"in_memory": True}, data_dir=Path("/tmp/tm-bootstrap")))
    worker = EmbeddedWorker(bootstrap, concurrency=8)
    worker.start(sweeper=False)  # tests sweep by hand
    yield worker
    worker.stop()


@pytest.fixture(name="runtime")
def runtime_fixture(settings: Settings) -> Iterator[Runtime]:
    upgrade_to_head(settings)
    runtime = Runtime(settings)
    yield runtime
    runtime.close()


@pytest.fixture(name="client")
def client_fixture(runtime: Runtime, embedded_worker: Any) -> Iterator[TestClient]:
    """The API in-process with the embedded worker: what `tiermem serve` is."""
    from services.api.main import create_app
    from workers.runtime import set_runtime

    set_runtime(runtime)
    embedded_worker.runtime = runtime
    app = create_app(runtime.settings, runtime=runtime, celery=embedded_worker.celery)
    with TestClient(app) as client:
        client.headers["Authorization"] = f"Bearer {APP_KEY}"
        yield client


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


@pytest.fixture(name="redis_url")
def redis_url_fixture() -> Iterator[str]:
    client = redis.Redis.from_url(REDIS_URL)
    try:
        client.ping()
    except redis.ConnectionError:
        pytest.fail(f"Redis is not reachable at {REDIS_URL}; .ci/run starts it")
    client.flushdb()
    yield REDIS_URL
    client.flushdb()


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


@pytest.fixture(name="pg_url")
def pg_url_fixture() -> Iterator[str]:
    """A fresh PostgreSQL database per test, dropped afterwards."""
    with fresh_pg_database() as url:
        yield url


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
