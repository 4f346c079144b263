"""A broker out of reach never undoes what committed: a turn is stored and its run waits
pending for the outbox sweeper; a compact request and a replay answer 503 saying what to do,
with what they stored kept."""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path

import pytest
from fastapi.testclient import TestClient
from sqlmodel import Session

from services.api.main import create_app
from shared.db.migrate import upgrade_to_head
from shared.db.models import ExtractionRun
from shared.runtime import Runtime
from tests.factories import ADMIN_KEY, APP_KEY, make_settings

ADMIN = {"Authorization": f"Bearer {ADMIN_KEY}"}
DEAD_BROKER = "redis://127.0.0.1:9/0"  # the discard port: nothing listens there


@pytest.fixture(name="runtime")
def outage_runtime(tmp_path: Path) -> Iterator[Runtime]:
    settings = make_settings(tmp_path, qdrant={"in_memory": True}, redis_url=DEAD_BROKER)
    upgrade_to_head(settings)
    runtime = Runtime(settings)
    yield runtime
    runtime.close()


@pytest.fixture(name="client")
def outage_client(runtime: Runtime) -> Iterator[TestClient]:
    with TestClient(create_app(runtime.settings, runtime=runtime)) as client:
        client.headers["Authorization"] = f"Bearer {APP_KEY}"
        yield client


def store_a_turn(client: TestClient) -> str:
    r = client.post(
        "/v1/sessions/s1/turns",
        json={"user_id": "ana", "user_message": "I live in Lisbon.", "assistant_message": "Nice!"},
    )
    assert r.status_code == 202, r.text
    job_id: str = r.json()["job_id"]
    return job_id


def test_a_turn_is_stored_and_its_run_waits_for_the_sweeper(client: TestClient) -> None:
    job_id = store_a_turn(client)
    assert client.get(f"/v1/jobs/{job_id}").json()["status"] == "pending"


def test_compaction_answers_503_and_keeps_the_session(client: TestClient) -> None:
    store_a_turn(client)
    r = client.post("/v1/sessions/s1/compact")
    assert r.status_code == 503, r.text
    assert "compression queue is unreachable" in r.json()["error"]["message"]
    assert client.get("/v1/sessions/s1/tiers").status_code == 200


def test_a_replay_answers_503_with_the_resume_hint_and_is_kept(
    client: TestClient, runtime: Runtime
) -> None:
    job = store_a_turn(client)
    with Session(runtime.engine) as session:  # its live extraction finished (no worker here)
        run = session.get(ExtractionRun, job)
        assert run is not None
        run.status = "done"
        session.add(run)
        session.commit()
    tenant = next(t["id"] for t in client.get("/v1/admin/tenants", headers=ADMIN).json())
    r = client.post("/v1/replay", json={"mode": "apply", "tenant_id": tenant}, headers=ADMIN)
    assert r.status_code == 503, r.text
    error = r.json()["error"]
    assert f"/v1/replay/{error['details']['job_id']}/resume" in error["message"]
    kept = client.get(f"/v1/replay/{error['details']['job_id']}", headers=ADMIN)
    assert kept.status_code == 200 and kept.json()["total"] >= 1
