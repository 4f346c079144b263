"""What the memory browser reads, in one process (as `tiermem serve` runs it) with the
scripted LLM extracting: a tenant's users, a user's sessions and runs, and the timeline of
their beliefs with the message that ended each old value."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest
from fastapi.testclient import TestClient

from shared.config import Settings
from tests import factories as f
from tests.factories import make_settings, wait_job
from tests.scripted_llm import ScriptedLLM


@pytest.fixture(name="settings")
def llm_settings(tmp_path: Path, scripted_llm: ScriptedLLM) -> Settings:
    return make_settings(
        tmp_path,
        llm={"base_url": scripted_llm.base_url, "timeout_s": 5},
        qdrant={"in_memory": True},
    )


@pytest.fixture(name="ana")
def ana_fixture(client: TestClient, scripted_llm: ScriptedLLM) -> list[dict[str, Any]]:
    """Ana's changing life stored turn by turn, each extracted before the next; the jobs."""
    jobs = []
    for session_id, body in f.script_changing_life(scripted_llm):
        accepted = client.post(f"/v1/sessions/{session_id}/turns", json=body)
        assert accepted.status_code == 202, accepted.text
        jobs.append(wait_job(client, accepted.json()["job_id"]))
    assert [j["status"] for j in jobs] == ["done"] * len(jobs), jobs
    return jobs


def slot(timeline: dict[str, Any], name: str) -> dict[str, Any]:
    found: dict[str, Any] = next(s for s in timeline["data"] if s["slot"] == name)
    return found


def test_each_slot_shows_its_values_and_the_message_that_ended_the_old_one(
    client: TestClient, ana: list[dict[str, Any]]
) -> None:
    timeline = client.get("/v1/users/ana/beliefs").json()
    location = slot(timeline, "identity/location")
    assert location["current"] == "Bristol"
    leeds, bristol = location["values"]
    assert (leeds["value"], leeds["state"], bristol["state"]) == ("Leeds", "superseded", "current")
    assert leeds["said_in"]["content"] == "I live in Leeds, up north."
    assert leeds["ended_at"] is not None and bristol["ended_at"] is None
    change = leeds["ended_by"]
    assert change["memory_id"] == bristol["memory_id"] and change["is_ending"] is False
    assert change["message"]["content"] == "Big news: we moved to Bristol!"
    assert change["message"]["created_at"].startswith("2026-03-03")
    assert change["message"]["session_id"] == "move"

    employer = slot(timeline, "identity/employer")
    assert employer["current"] == "SAP"
    assert [(v["value"], v["state"]) for v in employer["values"]] == [
        ("Siemens", "superseded"),
        ("SAP", "current"),
    ]
    assert employer["values"][0]["ended_by"]["message"]["content"].startswith("I started a new job")
    assert employer["values"][1]["extractor"] == "llm" and employer["values"][1]["model"]

    # An ended pet: the value is ended by the ending, which holds now; nothing is current.
    pet = slot(timeline, "fact/pet:rex")
    assert pet["current"] is None
    assert [v["state"] for v in pet["values"]] == ["ended", "ending"]
    rex = pet["values"][0]
    assert rex["ended_by"]["is_ending"] is True
    assert rex["ended_by"]["message"]["content"] == "Sadly Rex passed away on Sunday."
    # The slot changed most recently comes first.
    assert timeline["data"][0]["slot"] == "fact/pet:rex" and timeline["count"] == 3


def test_users_sessions_and_runs_are_listed_for_the_browser(
    client: TestClient, ana: list[dict[str, Any]]
) -> None:
    users = client.get("/v1/users", params={"q": "AN"}).json()  # any case
    assert users["count"] == 1
    [summary] = users["data"]
    assert summary["user_id"] == "ana" and summary["sessions"] == 2
    assert summary["messages"] == 12 and summary["memories_active"] == 3  # Bristol, SAP, ending
    assert summary["last_message_at"].startswith("2026-03-17")
    assert client.get("/v1/users", params={"q": "a_"}).json()["count"] == 0  # `_` is literal

    sessions = client.get("/v1/users/ana/sessions").json()
    assert sessions["count"] == 2
    assert {s["session_id"]: s["messages"] for s in sessions["data"]} == {"home": 6, "move": 6}

    runs = client.get("/v1/users/ana/runs", params={"limit": 2}).json()
    assert runs["count"] == 6 and len(runs["data"]) == 2
    newest = runs["data"][0]
    assert newest["id"] == ana[-1]["id"] and newest["session_id"] == "move"
    assert newest["message"] == "Sadly Rex passed away on Sunday."
    failed = client.get("/v1/users/ana/runs", params={"status": ["failed", "dropped"]}).json()
    assert failed == {"data": [], "count": 0}


def test_a_misspelt_status_or_an_unknown_user_is_a_clear_4xx(
    client: TestClient, ana: list[dict[str, Any]]
) -> None:
    bad = client.get("/v1/users/ana/runs", params={"status": "broken"})
    assert bad.status_code == 422 and "failed" in bad.text  # the statuses it takes
    missing = client.get("/v1/users/nobody/beliefs")
    assert missing.status_code == 404
    assert missing.json()["error"]["message"] == "user 'nobody' not found"
