"""Fixtures over real components: SQLite files, PostgreSQL, Redis, Celery workers, Qdrant.

Fixtures only; the helpers tests import (settings, keys, waiting, processes) are in
tests/factories.py.
"""

from __future__ import annotations

import gc
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
import redis
from fastapi.testclient import TestClient

from shared.config import Settings
from shared.db.migrate import upgrade_to_head
from shared.runtime import Runtime
from tests.factories import (
    APP_KEY,
    REDIS_URL,
    forget_finished_apps,
    fresh_pg_database,
    make_settings,
)
from tests.scripted_llm import scripted_llm, scripted_llm_server  # noqa: F401  (fixtures)


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
def embedded_worker(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Any]:
    """One real Celery worker (thread pool, in-memory broker) for the whole session, as
    `tiermem serve` runs it; each test points it at its own Runtime."""
    from services.embedded import EmbeddedWorker

    # Migrated like any data folder: the worker's start hooks (outbox sweep, webhook
    # dispatch) read it before a test points the worker at its own Runtime.
    folder = tmp_path_factory.mktemp("bootstrap")
    bootstrap_settings = Settings(qdrant={"in_memory": True}, data_dir=folder)
    upgrade_to_head(bootstrap_settings)
    bootstrap = Runtime(bootstrap_settings)
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


@pytest.fixture(name="pg_url")
def pg_url_fixture() -> Iterator[str]:
    """A fresh PostgreSQL database per test, dropped afterwards."""
    with fresh_pg_database() as url:
        yield url
