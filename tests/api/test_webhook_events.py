"""Every event type, from the change that announces it, as the feed shows it (the same rows
webhooks deliver): extraction through the scripted LLM, in one process."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest
from fastapi.testclient import TestClient

from tests import factories as f
from tests.factories import make_settings, wait_for, wait_job
from tests.scripted_llm import ScriptedLLM


@pytest.fixture(name="settings")
def llm_settings(tmp_path: Path, scripted_llm: ScriptedLLM) -> Any:
    return make_settings(
        tmp_path,
        llm={"base_url": scripted_llm.base_url, "timeout_s": 5},
        qdrant={"in_memory": True},
    )


def turn(client: TestClient, text: str) -> dict[str, Any]:
    response = client.post("/v1/sessions/s1/turns", json=f.turn("ana", text))
    assert response.status_code == 202, response.text
    return wait_job(client, response.json()["job_id"])


def feed(client: TestClient, after: int = 0) -> list[dict[str, Any]]:
    page = client.get("/v1/events", params={"after": after, "limit": 1000}).json()
    events: list[dict[str, Any]] = page["data"]
    return events


def test_each_change_is_announced_once_in_order(
    client: TestClient, scripted_llm: ScriptedLLM
) -> None:
    siemens = f.identity("Ana", "employer", "Siemens", "Ana works at Siemens.")
    scripted_llm.script("work at siemens", f.facts(siemens))
    scripted_llm.script(
        "berlin", f.facts(f.identity("Ana", "location", "Berlin", "Ana lives in Berlin."))
    )
    scripted_llm.script(
        "lisbon", f.facts(f.identity("Ana", "location", "Lisbon", "Ana lives in Lisbon."))
    )
    scripted_llm.script("quit", f.facts(f.ended({**siemens, "content": "Ana quit Siemens."})))
    scripted_llm.script("oslo", {"facts": [{"type": "identity", "content": "Ana is in Oslo."}]})
    scripted_llm.misbehave("401", match="broken", times=10)

    assert turn(client, "I work at Siemens.")["facts_added"] == 1
    assert turn(client, "Yes, I work at Siemens still.")["facts_merged"] == 1
    turn(client, "I live in Berlin.")
    assert turn(client, "I moved to Lisbon.")["facts_superseded"] == 1
    assert turn(client, "I quit my job.")["facts_superseded"] == 1
    assert turn(client, "I am in Oslo.")["status"] == "dropped"
    failed = turn(client, "this one is broken")
    assert failed["status"] == "failed"

    events = feed(client)
    assert [e["type"] for e in events] == [
        "memory.added",  # works at Siemens
        "memory.updated",  # said again
        "memory.added",  # Berlin
        "memory.added",  # Lisbon ...
        "memory.superseded",  # ... replaces Berlin
        "memory.added",  # the ending, "Ana quit Siemens."
        "memory.ended",  # ... ends "Ana works at Siemens."
        "extraction.dropped",
        "extraction.failed",
    ]
    assert all(e["data"]["user_id"] == "ana" for e in events)
    cursors = [e["cursor"] for e in events]
    assert cursors == sorted(set(cursors))
    by_type = {e["type"]: e["data"] for e in events}
    berlin, lisbon = events[2]["data"]["memory"], events[3]["data"]["memory"]
    superseded = by_type["memory.superseded"]["memory"]
    assert superseded["id"] == berlin["id"] and superseded["superseded_by"] == lisbon["id"]
    assert superseded["valid_to"] is not None and superseded["content"] == "Ana lives in Berlin."
    ended, ending = by_type["memory.ended"]["memory"], events[5]["data"]["memory"]
    assert ended["content"] == "Ana works at Siemens." and ended["ended_by"] == ending["id"]
    assert by_type["memory.updated"]["memory"]["mention_count"] == 2
    assert set(berlin) == {
        "id", "type", "content", "confidence", "mention_count", "valid_from", "valid_to",
        "superseded_by",
    }  # fmt: skip
    dropped = by_type["extraction.dropped"]["job"]
    assert dropped["status"] == "dropped" and "none could be kept" in dropped["error"]
    assert dropped["session_id"] == "s1"
    job = by_type["extraction.failed"]["job"]
    assert job["id"] == failed["id"] and job["status"] == "failed" and job["error"]

    # memory.deleted
    last = cursors[-1]
    gone = client.delete(f"/v1/users/ana/memories/{lisbon['id']}")
    assert gone.status_code == 204
    [deleted] = feed(client, last)
    assert deleted["type"] == "memory.deleted" and deleted["data"]["memory"]["id"] == lisbon["id"]

    # compression.done
    last = deleted["cursor"]
    for i in range(8):
        turn(client, f"Small talk number {i} about the weather and the garden and the trains.")
    put = client.put("/v1/sessions/s1/compression", json={"context_limit_tokens": 300})
    assert put.status_code == 200, put.text
    run_id = client.post("/v1/sessions/s1/compact", json={}).json()["id"]

    def finished() -> dict[str, Any] | None:
        run: dict[str, Any] = client.get(f"/v1/sessions/s1/compression/runs/{run_id}").json()
        return run if run["status"] not in ("pending", "running") else None

    run = wait_for(finished, timeout=60, what="the compact run")
    done = [e for e in feed(client, last) if e["type"] == "compression.done"]
    assert run["status"] == "done", run
    # (an automatic run may have come first: the history went over its new trigger)
    ours = {e["data"]["compression"]["run_id"]: e["data"]["compression"] for e in done}
    assert ours[run_id]["session_id"] == "s1"
    assert ours[run_id]["tokens_after"] == run["tokens_after"]
