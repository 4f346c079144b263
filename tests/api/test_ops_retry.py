"""Retrying failed runs in bulk through the API, with the embedded worker (what
`tiermem serve` runs): every failed run goes back to pending and is extracted."""

from __future__ import annotations

from fastapi.testclient import TestClient
from sqlalchemy import update
from sqlmodel import Session, col

from shared.db.models import ExtractionRun
from shared.runtime import Runtime
from tests.factories import ADMIN_KEY, wait_for

ADMIN = {"Authorization": f"Bearer {ADMIN_KEY}"}


def test_all_failed_runs_are_retried(client: TestClient, runtime: Runtime) -> None:
    jobs = []
    for text in ("I live in Lisbon.", "I work as a nurse.", "I love hiking."):
        r = client.post("/v1/sessions/s1/turns", json={"user_id": "ana", "user_message": text})
        jobs.append(r.json()["job_id"])
    status = lambda j: client.get(f"/v1/jobs/{j}").json()["status"]  # noqa: E731
    wait_for(lambda: all(status(j) == "done" for j in jobs), timeout=30, what="extraction")
    with Session(runtime.engine) as s:  # as if the LLM had refused them for good
        s.execute(
            update(ExtractionRun)
            .where(col(ExtractionRun.id).in_(jobs[:2]))
            .values(status="failed", error="400 from the LLM")
        )
        s.commit()
    failed = client.get("/v1/ops/queues", headers=ADMIN).json()["queues"][0]["failed_runs"]
    assert sorted(r["id"] for r in failed) == sorted(jobs[:2])

    r = client.post("/v1/ops/runs/retry", json={}, headers=ADMIN)
    assert r.status_code == 200 and sorted(r.json()["retried"]) == sorted(jobs[:2])
    wait_for(lambda: all(status(j) == "done" for j in jobs), timeout=30, what="the retries")
    assert client.get("/v1/ops/queues", headers=ADMIN).json()["queues"][0]["failed_runs"] == []
    empty = client.post("/v1/ops/runs/retry", json={"run_ids": []}, headers=ADMIN)
    assert empty.status_code == 422 and "run_ids: empty" in empty.json()["error"]["message"]
    assert client.post("/v1/ops/runs/retry", json={}).status_code == 403  # the app key
