"""Replay through the API with the embedded worker (its own replay threads) and the
scripted LLM: a dry run diffs a changed extraction against the live facts without
touching them; apply writes through dedup; rebuild swaps a user's facts from the
selected turns; each twice gives what once gives; cancel and resume."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest
from fastapi.testclient import TestClient

from tests import factories as f
from tests.factories import ADMIN_KEY, make_settings, wait_for
from tests.scripted_llm import ScriptedLLM

ADMIN = {"Authorization": f"Bearer {ADMIN_KEY}"}
BERLIN = f.identity("Ana", "location", "Berlin", "Ana lives in Berlin.")
REX = f.general("Ana", "Ana has a dog called Rex.")
CHESS = f.general("Ana", "Ana plays chess on Sundays.")
WALKS = f.general("Ana", "Ana walks her dog every morning before work.")
TURNS = {
    "Berlin": "I live in Berlin these days.",
    "Rex": "My dog Rex keeps me busy.",
    "chess": "On Sundays I play chess.",
}


@pytest.fixture(name="settings")
def llm_settings(tmp_path: Path, scripted_llm: ScriptedLLM) -> Any:
    return make_settings(
        tmp_path,
        llm={"base_url": scripted_llm.base_url, "timeout_s": 5},
        qdrant={"in_memory": True},
    )


def store_turns(client: TestClient, llm: ScriptedLLM) -> None:
    llm.script("Berlin", f.facts(BERLIN))
    llm.script("Rex", f.facts(REX))
    llm.script("chess", f.facts(CHESS))
    jobs = []
    for text in TURNS.values():
        r = client.post("/v1/sessions/s1/turns", json={"user_id": "ana", "user_message": text})
        assert r.status_code == 202, r.text
        jobs.append(r.json()["job_id"])
    wait_for(
        lambda: all(client.get(f"/v1/jobs/{j}").json()["status"] == "done" for j in jobs),
        timeout=30, what="the live extraction",
    )  # fmt: skip


def change_the_model(llm: ScriptedLLM) -> None:
    """The new extraction: Berlin again, a different fact about Rex, nothing about chess."""
    llm.script("Rex", f.facts(WALKS))
    llm.script("chess", f.facts())


def active(client: TestClient) -> set[str]:
    data = client.get("/v1/users/ana/memories").json()["data"]
    return {m["content"] for m in data}


def tenant_id(client: TestClient) -> str:
    tenants = client.get("/v1/admin/tenants", headers=ADMIN).json()
    return str(next(t["id"] for t in tenants if t["name"] == "default"))


def replay(client: TestClient, mode: str, **selection: Any) -> dict[str, Any]:
    body = {"mode": mode, "tenant_id": tenant_id(client), "user_ids": ["ana"], **selection}
    r = client.post("/v1/replay", json=body, headers=ADMIN)
    assert r.status_code == 202, r.text
    job: dict[str, Any] = r.json()
    assert job["total"] == 3 and job["status"] == "running"

    def finished() -> dict[str, Any] | None:
        now: dict[str, Any] = client.get(f"/v1/replay/{job['id']}", headers=ADMIN).json()
        return now if now["status"] == "done" else None

    result: dict[str, Any] = wait_for(finished, timeout=60, what=f"the {mode} replay")
    assert result["done"] == 3 and result["failed"] == 0 and result["pending"] == 0
    return result


def contents(items: list[dict[str, Any]]) -> set[str]:
    return {i["content"] for i in items}


def test_dry_run_reports_the_diff_and_changes_nothing(
    client: TestClient, scripted_llm: ScriptedLLM
) -> None:
    store_turns(client, scripted_llm)
    before = active(client)
    assert before == {BERLIN["content"], REX["content"], CHESS["content"]}
    change_the_model(scripted_llm)

    job = replay(client, "dry_run")
    diff = job["report"]["ana"]
    assert contents(diff["added"]) == {WALKS["content"]}
    assert contents(diff["missing"]) == {REX["content"], CHESS["content"]}
    assert diff["superseded"] == [] and diff["turns"] == 3
    assert active(client) == before  # a rehearsal only


def test_apply_writes_through_dedup_and_twice_is_once(
    client: TestClient, scripted_llm: ScriptedLLM
) -> None:
    store_turns(client, scripted_llm)
    change_the_model(scripted_llm)
    replay(client, "apply")
    after = active(client)
    assert after == {BERLIN["content"], REX["content"], CHESS["content"], WALKS["content"]}
    replay(client, "apply")
    assert active(client) == after
    memories = client.get("/v1/users/ana/memories").json()["data"]
    berlin = next(m for m in memories if m["content"] == BERLIN["content"])
    assert berlin["mention_count"] == 1  # the same message is not counted again


def test_rebuild_swaps_the_facts_of_the_selected_turns(
    client: TestClient, scripted_llm: ScriptedLLM
) -> None:
    store_turns(client, scripted_llm)
    scripted_llm.script("Paris", f.facts(f.general("Ana", "Ana visited Paris in May.")))
    r = client.post(
        "/v1/sessions/s2/turns", json={"user_id": "ana", "user_message": "I visited Paris."}
    )
    wait_for(
        lambda: client.get(f"/v1/jobs/{r.json()['job_id']}").json()["status"] == "done",
        timeout=30, what="the Paris turn",
    )  # fmt: skip
    change_the_model(scripted_llm)

    job = replay(client, "rebuild", session_ids=["s1"])  # Paris (session s2) is not selected
    report = job["report"]["ana"]
    assert len(report["retired"]) == 2 and report["added"] == 1
    expected = {BERLIN["content"], WALKS["content"], "Ana visited Paris in May."}
    assert active(client) == expected
    # Retired facts are kept as history, out of search.
    hits = client.post("/v1/users/ana/memories/search", json={"query": "chess", "k": 5}).json()
    assert CHESS["content"] not in contents(hits["data"])

    replay(client, "rebuild", session_ids=["s1"])
    assert active(client) == expected


def test_cancel_then_resume_finishes_the_job(client: TestClient, scripted_llm: ScriptedLLM) -> None:
    store_turns(client, scripted_llm)
    scripted_llm.latency_s = 0.5
    body = {"mode": "apply", "tenant_id": tenant_id(client), "user_ids": ["ana"]}
    job = client.post("/v1/replay", json=body, headers=ADMIN).json()
    cancelled = client.post(f"/v1/replay/{job['id']}/cancel", headers=ADMIN).json()
    assert cancelled["status"] == "cancelled"
    scripted_llm.latency_s = 0.0

    resumed = client.post(f"/v1/replay/{job['id']}/resume", headers=ADMIN).json()
    assert resumed["status"] == "running"
    wait_for(
        lambda: client.get(f"/v1/replay/{job['id']}", headers=ADMIN).json()["status"] == "done",
        timeout=60, what="the resumed replay",
    )  # fmt: skip
    done = client.get(f"/v1/replay/{job['id']}", headers=ADMIN).json()
    assert done["done"] == 3 and done["pending"] == 0
    assert client.post(f"/v1/replay/{job['id']}/cancel", headers=ADMIN).status_code == 409


def test_bad_selections_are_refused(client: TestClient, scripted_llm: ScriptedLLM) -> None:
    store_turns(client, scripted_llm)
    cases = [
        ({"mode": "again"}, 422, "mode"),
        ({"mode": "apply", "user_ids": ["ana"]}, 422, "tenant_id"),
        ({"mode": "apply", "tenant_id": tenant_id(client), "user_ids": ["nobody"]}, 404, "nobody"),
        ({"mode": "apply", "stale_only": True}, 422, "no stored turns"),
    ]
    for body, status, says in cases:
        r = client.post("/v1/replay", json=body, headers=ADMIN)
        assert r.status_code == status, r.text
        assert says in r.text
    assert client.post("/v1/replay", json={"mode": "apply"}).status_code == 403  # app key
    assert client.get("/v1/replay/nope", headers=ADMIN).status_code == 404
