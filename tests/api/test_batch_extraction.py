"""A session's turns extracted in one LLM call (ADR 0024), through the HTTP API with the
embedded Celery worker (what `tiermem serve` runs) and the scripted LLM server."""

from __future__ import annotations

import datetime as dt
import time
from pathlib import Path
from typing import Any

import pytest
from fastapi.testclient import TestClient
from sqlalchemy import update
from sqlmodel import Session, select

from shared.db.models import ExtractionRun, utcnow
from shared.flows.extract_batch import collect_session
from shared.runtime import Runtime
from tests import factories as f
from tests.factories import ADMIN_KEY, make_settings, wait_for, wait_job
from tests.scripted_llm import ScriptedLLM

ADMIN = {"Authorization": f"Bearer {ADMIN_KEY}"}
TURNS = ["I live in Lisbon now.", "I work at Arup.", "My sister is called Marta."]
FACTS = [
    f.identity("Ana", "location", "Lisbon", "Ana lives in Lisbon."),
    f.identity("Ana", "employer", "Arup", "Ana works at Arup."),
    f.relationship("Ana", "Marta", "sister", "Ana's sister is Marta."),
]


@pytest.fixture(name="batching")
def batching_fixture() -> dict[str, Any]:
    """The extraction settings a test runs with; a test changes them before `client`."""
    return {"batch_turns": 3, "batch_quiet_s": 60}


@pytest.fixture(
    name="settings", params=["sqlite", pytest.param("postgres", marks=pytest.mark.postgres)]
)
def llm_settings(
    tmp_path: Path,
    scripted_llm: ScriptedLLM,
    batching: dict[str, Any],
    request: pytest.FixtureRequest,
) -> Any:
    database = (
        {"database_url": request.getfixturevalue("pg_url")} if request.param == "postgres" else {}
    )
    return make_settings(
        tmp_path,
        llm={"base_url": scripted_llm.base_url, "timeout_s": 5},
        qdrant={"in_memory": True},
        extraction=batching,
        **database,
    )


def post_turn(client: TestClient, text: str, session: str = "s1") -> str:
    response = client.post(f"/v1/sessions/{session}/turns", json=f.turn("ana", text))
    assert response.status_code == 202, response.text
    job_id: str = response.json()["job_id"]
    return job_id


def status(client: TestClient, job_id: str) -> str:
    result: str = client.get(f"/v1/jobs/{job_id}").json()["status"]
    return result


def extract_queue(client: TestClient) -> dict[str, Any]:
    snap = client.get("/v1/ops/queues", headers=ADMIN).json()
    queue: dict[str, Any] = next(q for q in snap["queues"] if q["name"] == "extract")
    return queue


def sources(client: TestClient) -> dict[str, str]:
    """Each memory's content → the id of the user message it was extracted from."""
    listed = client.get("/v1/users/ana/memories").json()["data"]
    return {m["content"]: m["sources"][0]["message_id"] for m in listed}


def message_of(client: TestClient, job_id: str) -> str:
    result: str = client.get(f"/v1/jobs/{job_id}").json()["message_id"]
    return result


@pytest.mark.parametrize("batching", [{}])
def test_by_default_each_turn_is_one_call_as_before(
    client: TestClient, scripted_llm: ScriptedLLM
) -> None:
    for word, fact in zip(("Lisbon", "Arup", "Marta"), FACTS, strict=True):
        scripted_llm.script(word, f.facts(fact))
    jobs = [wait_job(client, post_turn(client, text)) for text in TURNS]
    assert [j["status"] for j in jobs] == ["done"] * 3
    assert [j["facts_added"] for j in jobs] == [1, 1, 1]
    assert all(j["batch_id"] is None and j["batch_size"] is None for j in jobs)
    # One extraction call a turn; the later turns' follow-ups (is the known fact nearest the
    # turn still true?) continue their turn's conversation.
    extractions = [r for r in scripted_llm.chat_requests() if len(r["messages"]) == 2]
    assert len(extractions) == 3
    assert all('<turn n="' not in r["messages"][1]["content"] for r in extractions)


def test_n_waiting_turns_are_one_call_and_each_fact_goes_to_its_turns_run(
    client: TestClient, scripted_llm: ScriptedLLM
) -> None:
    scripted_llm.script(
        "Marta",
        f.facts(
            *({"turn": n, **fact} for n, fact in ((3, FACTS[2]), (1, FACTS[0]), (2, FACTS[1])))
        ),
    )
    first, second = post_turn(client, TURNS[0]), post_turn(client, TURNS[1])
    # Parked, not lost: the jobs API and ops show them waiting for the session's batch.
    wait_for(
        lambda: status(client, first) == status(client, second) == "waiting",
        what="two waiting runs",
    )
    queue = extract_queue(client)
    assert (queue["pending"], queue["waiting"]) == (2, 2)
    assert scripted_llm.chat_requests() == []

    third = post_turn(client, TURNS[2])
    jobs = [wait_job(client, job) for job in (first, second, third)]
    assert [j["status"] for j in jobs] == ["done"] * 3
    assert [j["facts_added"] for j in jobs] == [1, 1, 1]
    assert len(scripted_llm.chat_requests()) == 1
    assert len({j["batch_id"] for j in jobs}) == 1 and jobs[0]["batch_id"] is not None
    assert [j["batch_size"] for j in jobs] == [3, 3, 3]
    # The call's tokens, shared out over the three runs.
    assert all(j["prompt_tokens"] > 0 for j in jobs)
    # Each fact is stored with the message of the turn that said it.
    assert sources(client) == {
        fact["content"]: message_of(client, job)
        for fact, job in zip(FACTS, (first, second, third), strict=True)
    }
    assert extract_queue(client)["waiting"] == 0


@pytest.mark.parametrize("batching", [{"batch_turns": 5, "batch_quiet_s": 1.0}])
def test_a_quiet_session_is_extracted_once(
    client: TestClient, scripted_llm: ScriptedLLM, runtime: Runtime
) -> None:
    scripted_llm.script("Arup", f.facts({"turn": 1, **FACTS[0]}, {"turn": 2, **FACTS[1]}))
    started = time.monotonic()
    first = post_turn(client, TURNS[0])
    second = post_turn(client, TURNS[1])
    jobs = [wait_job(client, job) for job in (first, second)]
    assert time.monotonic() - started >= 1.0  # it waited for the quiet time
    assert [j["facts_added"] for j in jobs] == [1, 1]
    # The first turn's check (sent when it was parked) and the second's both fired; only
    # one found the session quiet and claimed the turns. Checking again claims nothing.
    time.sleep(1.5)
    assert collect_session(runtime, _session_id(runtime, first)) == []
    assert len(scripted_llm.chat_requests()) == 1


def _session_id(runtime: Runtime, run_id: str) -> str:
    with Session(runtime.engine) as session:
        run = session.get(ExtractionRun, run_id)
        assert run is not None
        return run.session_id


@pytest.mark.parametrize("batching", [{"batch_turns": 2, "batch_quiet_s": 60}])
def test_a_batch_call_that_fails_once_is_retried_for_every_turn(
    client: TestClient, scripted_llm: ScriptedLLM
) -> None:
    scripted_llm.script("Arup", f.facts({"turn": 1, **FACTS[0]}, {"turn": 2, **FACTS[1]}))
    scripted_llm.misbehave("503", times=1)
    ids = [post_turn(client, text) for text in TURNS[:2]]
    jobs = [wait_job(client, job) for job in ids]
    assert [(j["status"], j["attempts"], j["facts_added"]) for j in jobs] == [("done", 2, 1)] * 2
    assert len(scripted_llm.chat_requests()) == 2


@pytest.mark.parametrize("batching", [{"batch_turns": 2, "batch_quiet_s": 60}])
def test_a_batch_call_refused_for_good_fails_every_turn_and_is_retried_by_ops(
    client: TestClient, scripted_llm: ScriptedLLM
) -> None:
    scripted_llm.misbehave("400", times=1)
    ids = [post_turn(client, text) for text in TURNS[:2]]
    jobs = [wait_job(client, job) for job in ids]
    assert [j["status"] for j in jobs] == ["failed", "failed"]
    assert jobs[0]["error"] == jobs[1]["error"] and "Invalid request" in jobs[0]["error"]
    assert len(scripted_llm.chat_requests()) == 1
    failed = {r["id"] for r in extract_queue(client)["failed_runs"]}
    assert failed == set(ids)

    scripted_llm.script("Lisbon", f.facts(FACTS[0]))
    scripted_llm.script("Arup", f.facts(FACTS[1]))
    retried = client.post("/v1/ops/runs/retry", headers=ADMIN, json={}).json()
    assert sorted(retried["retried"]) == sorted(ids)
    wait_for(lambda: all(status(client, j) == "done" for j in ids), what="the retries")
    assert sorted(sources(client)) == sorted(fact["content"] for fact in FACTS[:2])
    # Retried one turn per call: a batch's turns already waited their time once.
    assert len(scripted_llm.chat_requests()) == 3


@pytest.mark.parametrize("batching", [{"batch_turns": 2, "batch_quiet_s": 60}])
def test_a_turn_whose_items_are_all_dropped_ends_dropped_and_the_other_done(
    client: TestClient, scripted_llm: ScriptedLLM, runtime: Runtime
) -> None:
    no_value = {k: v for k, v in FACTS[1].items() if k not in ("attribute", "value")}
    scripted_llm.script("Arup", f.facts({"turn": 1, **FACTS[0]}, {"turn": 2, **no_value}))
    ids = [post_turn(client, text) for text in TURNS[:2]]
    first, second = (wait_job(client, job) for job in ids)
    assert (first["status"], first["facts_added"]) == ("done", 1)
    # Asked again (the same answer, from a model that repeats itself): both replies counted.
    assert (second["status"], second["facts_added"], second["facts_invalid"]) == ("dropped", 0, 2)
    assert second["asked_again"] and not first["asked_again"]
    assert second["dropped_reasons"] == ["identity.attribute: Field required"] * 2
    assert len(scripted_llm.chat_requests()) == 2  # the batch's call, and one follow-up
    assert [r["id"] for r in extract_queue(client)["failed_runs"]] == [second["id"]]
    with Session(runtime.engine) as session:
        runs = session.exec(select(ExtractionRun)).all()
        assert {r.batch_id for r in runs} == {first["batch_id"]}


def test_turns_whose_check_was_lost_are_found_by_the_sweeper(
    client: TestClient, scripted_llm: ScriptedLLM, runtime: Runtime, embedded_worker: Any
) -> None:
    """The broker lost the session's check (the countdown was an hour): the outbox sweeper
    sends the waiting turns again, and they send their session's check, now due."""
    scripted_llm.script("Arup", f.facts({"turn": 1, **FACTS[0]}, {"turn": 2, **FACTS[1]}))
    ids = [post_turn(client, text) for text in TURNS[:2]]
    wait_for(lambda: all(status(client, j) == "waiting" for j in ids), what="waiting runs")
    assert embedded_worker.sweep(pending_now=True) == 0  # waiting, and not for long
    # `tiermem serve` starting again (its in-process broker lost every check) sends them at
    # once; they wait on for the rest of their quiet time.
    assert embedded_worker.sweep(resend_all=True) == 2
    time.sleep(0.5)
    assert [status(client, j) for j in ids] == ["waiting", "waiting"]
    before = utcnow() - dt.timedelta(minutes=5)
    with Session(runtime.engine) as session:
        session.execute(update(ExtractionRun).values(created_at=before, updated_at=before))
        session.commit()

    assert embedded_worker.sweep(pending_now=True) == 2
    jobs = [wait_job(client, job) for job in ids]
    assert [(j["status"], j["facts_added"], j["batch_size"]) for j in jobs] == [("done", 1, 2)] * 2
    assert len(scripted_llm.chat_requests()) == 1


@pytest.mark.parametrize("batching", [{"batch_turns": 2, "batch_quiet_s": 60}])
def test_a_replay_of_batched_turns_extracts_them_one_call_each(
    client: TestClient, scripted_llm: ScriptedLLM
) -> None:
    scripted_llm.script("Arup", f.facts({"turn": 1, **FACTS[0]}, {"turn": 2, **FACTS[1]}))
    ids = [post_turn(client, text) for text in TURNS[:2]]
    assert [wait_job(client, job)["status"] for job in ids] == ["done", "done"]
    # The model changed: each turn alone now gives its own fact.
    scripted_llm.script("Lisbon", f.facts(FACTS[0]))
    scripted_llm.script("Arup", f.facts(FACTS[1]))
    tenants = client.get("/v1/admin/tenants", headers=ADMIN).json()
    tenant = next(t["id"] for t in tenants if t["name"] == "default")
    body = {"mode": "rebuild", "tenant_id": tenant, "user_ids": ["ana"]}
    job = client.post("/v1/replay", json=body, headers=ADMIN).json()

    def finished() -> dict[str, Any] | None:
        now: dict[str, Any] = client.get(f"/v1/replay/{job['id']}", headers=ADMIN).json()
        return now if now["status"] == "done" else None

    replayed = wait_for(finished, what="the replay")
    assert (replayed["done"], replayed["failed"]) == (2, 0)
    requests = scripted_llm.extraction_requests()
    assert len(requests) == 3
    assert all('<turn n="' not in r["messages"][1]["content"] for r in requests[1:])
    assert sorted(sources(client)) == sorted(fact["content"] for fact in FACTS[:2])
