"""The HTTP surface in one process (as `tiermem serve` runs it), extracting via the scripted LLM."""

from __future__ import annotations

import time
from pathlib import Path
from typing import Any

import pytest
from fastapi.testclient import TestClient
from rich.console import Console
from sqlmodel import Session, func, select

from services.cli.ops import render
from shared.db.models import ExtractionRun, Fact, Message
from shared.ops.models import OpsSnapshot
from shared.runtime import Runtime
from tests import factories as f
from tests.factories import ADMIN_KEY, make_settings, wait_job
from tests.scripted_llm import ScriptedLLM


@pytest.fixture(
    name="settings", params=["sqlite", pytest.param("postgres", marks=pytest.mark.postgres)]
)
def llm_settings(tmp_path: Path, scripted_llm: ScriptedLLM, request: pytest.FixtureRequest) -> Any:
    database = (
        {"database_url": request.getfixturevalue("pg_url")} if request.param == "postgres" else {}
    )
    return make_settings(
        tmp_path,
        llm={"base_url": scripted_llm.base_url, "timeout_s": 5},
        qdrant={"in_memory": True},
        **database,
    )


def post_turn(client: TestClient, session_id: str, body: dict[str, Any]) -> dict[str, Any]:
    response = client.post(f"/v1/sessions/{session_id}/turns", json=body)
    assert response.status_code == 202, response.text
    result: dict[str, Any] = response.json()
    return result


def counts(runtime: Runtime) -> tuple[int, int, int]:
    with Session(runtime.engine) as s:
        return (
            s.exec(select(func.count()).select_from(Message)).one(),
            s.exec(select(func.count()).select_from(ExtractionRun)).one(),
            s.exec(select(func.count()).select_from(Fact)).one(),
        )


def test_turn_is_accepted_then_extracted_into_searchable_memory(
    client: TestClient, scripted_llm: ScriptedLLM
) -> None:
    scripted_llm.script(
        "Berlin",
        f.facts(
            f.identity("Ana", "location", "Berlin", "Ana lives in Berlin."),
            f.preference("Ana", "coffee", "flat white", "Ana likes flat white coffee."),
            f.relationship("Ana", "Maria", "sister", "Ana's sister is called Maria."),
        ),
    )
    started = time.perf_counter()
    accepted = post_turn(
        client, "s1", f.turn("ana", "I live in Berlin, love flat whites, my sister is Maria.")
    )
    assert time.perf_counter() - started < 2.0  # never waits on the LLM
    assert accepted["status"] == "pending" and accepted["extractor"] == "llm"
    assert len(accepted["message_ids"]) == 2

    job = wait_job(client, accepted["job_id"])
    assert job["status"] == "done", job
    assert job["facts_added"] == 3 and job["attempts"] == 1
    assert job["model"] == "gpt-4o-mini" and job["prompt_hash"] and job["prompt_tokens"] > 0

    listed = client.get("/v1/users/ana/memories").json()
    assert listed["count"] == 3
    assert {m["type"] for m in listed["data"]} == {"identity", "preference", "relationship"}
    only_identity = client.get("/v1/users/ana/memories", params={"type": "identity"}).json()
    assert [m["content"] for m in only_identity["data"]] == ["Ana lives in Berlin."]

    hits = client.post(
        "/v1/users/ana/memories/search", json={"query": "Which city does Ana live in?", "k": 2}
    ).json()
    assert hits["data"][0]["content"] == "Ana lives in Berlin."
    assert 0 < hits["data"][0]["score"] <= 1
    # Each memory shows the message it came from, so a client can show where it was said.
    # (a turn's facts come from its user message and the reply it got)
    said, reply = hits["data"][0]["sources"]
    assert [said["message_id"], reply["message_id"]] == accepted["message_ids"]
    assert (said["session_id"], said["role"], said["speaker"]) == ("s1", "user", "Ana")
    assert said["content"] == "I live in Berlin, love flat whites, my sister is Maria."
    assert all(len(m["sources"]) == 2 for m in listed["data"])
    one = client.get(f"/v1/users/ana/memories/{hits['data'][0]['id']}").json()
    assert one["sources"] == hits["data"][0]["sources"]
    typed = client.post(
        "/v1/users/ana/memories/search", json={"query": "family", "types": ["relationship"]}
    ).json()
    assert [m["type"] for m in typed["data"]] == ["relationship"]


def test_a_first_person_query_finds_the_facts_that_name_the_user(
    client: TestClient, scripted_llm: ScriptedLLM
) -> None:
    """Facts name the person ("Ana lives in Berlin."); "Where do I live?" is asked in the
    words they use, as the context builder asks, with the name her messages carry."""
    scripted_llm.script(
        "Berlin",
        f.facts(
            f.identity("Ana", "location", "Berlin", "Ana lives in Berlin."),
            f.preference("Ana", "coffee", "flat white", "Ana likes flat white coffee."),
            f.preference("Ana", "music", "jazz", "Ana loves jazz on rainy days."),
        ),
    )
    accepted = post_turn(client, "s1", f.turn("ana", "I live in Berlin, flat whites and jazz."))
    assert wait_job(client, accepted["job_id"])["status"] == "done"
    hits = client.post(
        "/v1/users/ana/memories/search", json={"query": "Where do I live?", "k": 3}
    ).json()["data"]
    assert hits[0]["content"] == "Ana lives in Berlin."
    # The same question in the third person scores the same: the rewrite is what was embedded.
    third = client.post(
        "/v1/users/ana/memories/search", json={"query": "Where do Ana live?", "k": 1}
    ).json()["data"]
    assert third[0]["score"] == pytest.approx(hits[0]["score"], abs=1e-4)


def test_contradiction_supersedes_and_history_stays_listable(
    client: TestClient, scripted_llm: ScriptedLLM
) -> None:
    scripted_llm.script(
        "Berlin", f.facts(f.identity("Ana", "location", "Berlin", "Ana lives in Berlin."))
    )
    scripted_llm.script(
        "Lisbon", f.facts(f.identity("Ana", "location", "Lisbon", "Ana lives in Lisbon."))
    )
    wait_job(client, post_turn(client, "s1", f.turn("ana", "I live in Berlin"))["job_id"])
    job = wait_job(client, post_turn(client, "s1", f.turn("ana", "I moved to Lisbon"))["job_id"])
    assert job["facts_superseded"] == 1

    active = client.get("/v1/users/ana/memories").json()["data"]
    assert [m["content"] for m in active] == ["Ana lives in Lisbon."]
    everything = client.get("/v1/users/ana/memories", params={"include_superseded": True}).json()
    old = next(m for m in everything["data"] if m["content"] == "Ana lives in Berlin.")
    assert old["active"] is False and old["valid_to"] and old["superseded_by"] == active[0]["id"]
    hits = client.post("/v1/users/ana/memories/search", json={"query": "Berlin", "k": 5}).json()
    assert all(h["content"] != "Ana lives in Berlin." for h in hits["data"])


def test_repeated_fact_merges_with_provenance(
    client: TestClient, scripted_llm: ScriptedLLM
) -> None:
    scripted_llm.script(
        "tea", f.facts(f.preference("Ana", "tea", "green tea", "Ana likes green tea."))
    )
    first = wait_job(client, post_turn(client, "s1", f.turn("ana", "I like green tea"))["job_id"])
    second = wait_job(
        client, post_turn(client, "s2", f.turn("ana", "green tea is my thing"))["job_id"]
    )
    assert (first["facts_added"], second["facts_merged"]) == (1, 1)
    [memory] = client.get("/v1/users/ana/memories").json()["data"]
    assert memory["mention_count"] == 2
    assert len(memory["source_session_ids"]) == 2 and len(memory["source_message_ids"]) == 4


def test_small_talk_is_skipped_without_an_llm_call(
    client: TestClient, scripted_llm: ScriptedLLM
) -> None:
    job = wait_job(
        client, post_turn(client, "s1", f.turn("ana", "thanks!", "You're welcome"))["job_id"]
    )
    assert job["status"] == "skipped" and job["skipped_reason"] == "small_talk"
    assert scripted_llm.chat_requests() == []


def test_rate_limited_llm_is_retried_until_done(
    client: TestClient, scripted_llm: ScriptedLLM
) -> None:
    scripted_llm.script(
        "Oslo", f.facts(f.identity("Ana", "location", "Oslo", "Ana lives in Oslo."))
    )
    scripted_llm.misbehave("429", times=1)
    job = wait_job(
        client, post_turn(client, "s1", f.turn("ana", "I live in Oslo"))["job_id"], timeout=60
    )
    assert job["status"] == "done" and job["attempts"] == 2 and job["facts_added"] == 1


def test_malformed_output_twice_fails_visibly(
    client: TestClient, scripted_llm: ScriptedLLM
) -> None:
    scripted_llm.misbehave("malformed", times=2)
    job = wait_job(client, post_turn(client, "s1", f.turn("ana", "I work as a pilot"))["job_id"])
    assert job["status"] == "failed"
    assert "JSON" in job["error"] or "json" in job["error"]
    assert job["attempts"] == 1  # a permanent error is not retried
    # A failed run names the model it called and how it asked for JSON.
    assert job["model"] == "gpt-4o-mini"
    assert job["response_format"] == "json_schema" and job["response_format_note"] is None


def test_a_server_without_structured_outputs_gets_the_schema_inside_json_object(
    client: TestClient, scripted_llm: ScriptedLLM
) -> None:
    scripted_llm.reject_json_schema()  # HTTP 500 naming json_schema, as llama.cpp's server
    scripted_llm.script(
        "Oslo", f.facts(f.identity("Ana", "location", "Oslo", "Ana lives in Oslo."))
    )
    job = wait_job(client, post_turn(client, "s1", f.turn("ana", "I live in Oslo"))["job_id"])
    assert job["status"] == "done" and job["attempts"] == 1 and job["facts_added"] == 1
    assert job["response_format"] == "json_object+schema"
    assert job["response_format_note"].startswith(
        "fell back to json_object+schema: the server rejected json_schema (HTTP 500: "
    )
    sent = [r["response_format"] for r in scripted_llm.chat_requests()]
    assert [r["type"] for r in sent] == ["json_schema", "json_object"]
    assert "schema" in sent[1]  # what llama.cpp's server decodes by

    job = wait_job(client, post_turn(client, "s1", f.turn("ana", "I like skiing"))["job_id"])
    assert job["status"] == "done" and job["response_format"] == "json_object+schema"
    assert job["response_format_note"].startswith("json_object+schema since an earlier call: ")
    # Straight to json_object+schema, the follow-ups about the known Oslo fact too.
    assert len(scripted_llm.extraction_requests()) == 3
    assert [r["response_format"]["type"] for r in scripted_llm.chat_requests()[2:]] == [
        "json_object"
    ] * (len(scripted_llm.chat_requests()) - 2)

    # The ops view lists the model running in fallback, with what its server said.
    admin = {"Authorization": f"Bearer {ADMIN_KEY}"}
    snap = client.get("/v1/ops/queues", headers=admin).json()
    (fallback,) = snap["llm_format_fallbacks"]
    assert (fallback["model"], fallback["runs"], fallback["runs_15m"]) == ("gpt-4o-mini", 2, 2)
    assert fallback["note"].startswith("json_object+schema since an earlier call: ")
    metrics = client.get("/metrics", headers=admin).text
    assert 'tiermem_llm_structured_output_fallbacks_total{model="gpt-4o-mini"} 2' in metrics
    console = Console(record=True, width=200)
    console.print(render(OpsSnapshot.model_validate(snap), []))
    assert "json_object fallback" in console.export_text()


def test_a_reply_whose_every_item_is_dropped_is_a_visible_retryable_run(
    client: TestClient, scripted_llm: ScriptedLLM
) -> None:
    # A model that answers items without their meaning (no attribute, no value), and the
    # same again when told why: nothing is kept, and the run says so instead of a quiet
    # "done" with 0 facts.
    scripted_llm.script("Oslo", {"facts": [{"type": "identity", "content": "Ana is in Oslo."}]})
    job = wait_job(client, post_turn(client, "s1", f.turn("ana", "I live in Oslo"))["job_id"])
    assert job["status"] == "dropped" and job["facts_added"] == 0 and job["asked_again"]
    assert (job["facts_extracted"], job["facts_invalid"]) == (0, 2)
    assert job["dropped_reasons"] == ["identity.attribute: Field required"] * 2
    assert "when asked again and none could be kept" in job["error"]
    admin = {"Authorization": f"Bearer {ADMIN_KEY}"}
    snap = client.get("/v1/ops/queues", headers=admin).json()
    extract = next(q for q in snap["queues"] if q["name"] == "extract")
    assert [(r["id"], r["status"]) for r in extract["failed_runs"]] == [(job["id"], "dropped")]
    assert extract["windows"][0]["dropped"] == 1 and extract["windows"][0]["failure_rate"] == 1
    metrics = client.get("/metrics", headers=admin).text
    assert 'tiermem_runs_total{queue="extract",status="dropped"} 1' in metrics
    assert "tiermem_facts_invalid_total 2" in metrics
    assert "tiermem_extraction_asked_again_total 1" in metrics

    # Nothing worth remembering is a normal "done".
    quiet = wait_job(client, post_turn(client, "s1", f.turn("ana", "Tell me a joke"))["job_id"])
    assert quiet["status"] == "done" and quiet["facts_invalid"] == 0
    assert not quiet["asked_again"]

    # Told why, a model that then states the fact: the run is done with it.
    scripted_llm.script("Bergen", f.facts(f.general("Ana", "Is Ana in Bergen?")))
    scripted_llm.script_asked_again(
        "a question", f.facts(f.identity("Ana", "location", "Bergen", "Ana lives in Bergen."))
    )
    fixed = wait_job(client, post_turn(client, "s2", f.turn("ana", "moved to Bergen"))["job_id"])
    assert (fixed["status"], fixed["asked_again"], fixed["facts_added"]) == ("done", True, 1)
    assert fixed["facts_invalid"] == 1 and fixed["dropped_reasons"] == ["a question, not a fact"]

    # The model fixed (here: its script), the run is retried like a failed one.
    scripted_llm.script(
        "Oslo", f.facts(f.identity("Ana", "location", "Oslo", "Ana lives in Oslo."))
    )
    retried = client.post("/v1/ops/runs/retry", headers=admin, json={}).json()
    assert retried["retried"] == [job["id"]]
    again = wait_job(client, job["id"])
    assert again["status"] == "done" and again["facts_added"] == 1 and again["error"] is None


def test_extraction_reads_the_conversation_and_the_known_facts(
    client: TestClient, scripted_llm: ScriptedLLM
) -> None:
    scripted_llm.leave_out = ("subject", "confidence")  # a JSON-mode model's habits
    scripted_llm.script(
        "offers", f.facts(f.identity("Priya", "employer", "Atkins", "Priya works at Atkins."))
    )
    first = {
        "user_id": "priya",
        "user_message": {"content": "got 2 offers, arup and atkins", "speaker": "Priya"},
        "assistant_message": "Congrats! Which one, Arup or Atkins?",
    }
    wait_job(client, post_turn(client, "s1", first)["job_id"])
    scripted_llm.script(
        "the first one", {"facts": [{"type": "fact", "attribute": "company", "value": "Arup",
                                     "content": "Priya took the job at Arup."}]},
    )  # fmt: skip
    second = {
        **first,
        "user_message": {"content": "the first one!!", "speaker": "Priya"},
        "assistant_message": "Nice",
    }
    job = wait_job(client, post_turn(client, "s1", second)["job_id"])

    request = scripted_llm.extraction_requests()[-1]
    system, user = (m["content"] for m in request["messages"])
    context, turn = user.split("Extract facts about Priya from this turn only.")
    # The assistant's question, marked as context, before the turn; the fact known so far.
    assert "<earlier_conversation" in context and "Assistant: Congrats! Which one, Arup" in context
    assert "Priya: got 2 offers, arup and atkins" in context
    assert "<known_facts" in context and "identity (employer: Atkins): Priya works at Atkins." in (
        context
    )
    assert "the first one!!" in turn and "Congrats" not in turn
    assert "subject" not in str(request["response_format"])  # the server fills it
    # "company" filed as a plain fact is the employer slot: Arup replaces Atkins.
    assert job["status"] == "done" and job["facts_superseded"] == 1 and job["facts_repaired"] == 1
    memories = client.get("/v1/users/priya/memories").json()["data"]
    assert [m["content"] for m in memories] == ["Priya took the job at Arup."]


def test_an_ending_retires_the_known_fact_it_names(
    client: TestClient, scripted_llm: ScriptedLLM, runtime: Runtime
) -> None:
    """A small model files "Jade works nights at Tesco." with no attribute, then "Jade quit
    Tesco." as the ending of an employer: no slot joins them, the word "Tesco" does, and the
    ending retires the fact it names; an ending that names nothing known retires nothing."""

    def say(text: str) -> dict[str, Any]:
        body = f.turn("jade", text, speaker="Jade")
        return wait_job(client, post_turn(client, "s1", body)["job_id"])

    # No attribute: no slot the belief rules could end.
    scripted_llm.script("tesco", f.facts(f.general("Jade", "Jade works nights at Tesco.")))
    quit_ = f.ended(f.identity("Jade", "employer", "Tesco", "Jade quit Tesco."))
    scripted_llm.script("notice", f.facts(quit_))
    scripted_llm.script("mochi", f.facts(f.pet("Jade", "Mochi", "Jade has a cat called Mochi.")))
    gym = f.ended(f.general("Jade", "Jade stopped going to the gym."))
    scripted_llm.script("gym", f.facts(gym))

    say("i work nights at tesco")
    notice = say("handed my notice in!!")
    request = scripted_llm.chat_requests()[-1]
    assert "- fact: Jade works nights at Tesco." in request["messages"][1]["content"]
    say("oh and my cat mochi")
    gym_job = say("quit the gym lol")

    with Session(runtime.engine) as session:
        rows = {row.content: row for row in session.exec(select(Fact)).all()}
    tesco = rows["Jade works nights at Tesco."]
    assert notice["status"] == "done" and notice["facts_superseded"] == 1
    assert tesco.valid_to is not None
    assert tesco.superseded_by == rows["Jade quit Tesco."].id
    assert gym_job["status"] == "done" and gym_job["facts_superseded"] == 0
    active = {m["content"] for m in client.get("/v1/users/jade/memories").json()["data"]}
    assert active == {
        "Jade quit Tesco.",
        "Jade has a cat called Mochi.",
        "Jade stopped going to the gym.",
    }


def test_a_change_the_model_only_restates_is_found_by_asking_what_the_value_is_now(
    client: TestClient, scripted_llm: ScriptedLLM, runtime: Runtime
) -> None:
    """A small model answers "pescatarian now i guess" with the old fact again. Asked what
    Sofia's diet is now (ADR 0032), it names the new value in her words: the new value is
    stored and the old one retired, and the job says the question was asked."""

    def say(text: str) -> dict[str, Any]:
        body = f.turn("sofia", text, speaker="Sofia")
        return wait_job(client, post_turn(client, "s1", body)["job_id"])

    vegan = f.identity("Sofia", "diet", "vegan", "Sofia is vegan.")
    scripted_llm.script("vegan 2 months", f.facts(vegan))
    scripted_llm.script("pescatarian", f.facts(vegan))  # the old fact restated
    scripted_llm.script_value_now("pescatarian", {"now": "pescatarian"})

    first = say("been vegan 2 months now")
    assert first["ending_checks"] == 0  # nothing known yet: nothing asked
    job = say("adding fish back in. pescatarian now i guess")

    assert job["status"] == "done" and job["facts_superseded"] == 1
    assert job["ending_checks"] == 1 and job["values_changed"] == 1
    active = {m["content"] for m in client.get("/v1/users/sofia/memories").json()["data"]}
    changed = "Sofia's diet is pescatarian, no longer vegan."
    assert active == {changed}
    with Session(runtime.engine) as session:
        rows = {row.content: row for row in session.exec(select(Fact)).all()}
    assert rows["Sofia is vegan."].superseded_by == rows[changed].id


def test_a_goal_the_turn_ends_is_found_by_asking_whether_it_is_still_true(
    client: TestClient, scripted_llm: ScriptedLLM
) -> None:
    """The model writes only the injury; asked whether the goal Grace's message names is
    still true (llm-13), it says no: the goal is retired and an abandoned one is kept."""

    def say(text: str) -> dict[str, Any]:
        body = f.turn("grace", text, speaker="Grace")
        return wait_job(client, post_turn(client, "s1", body)["job_id"])

    marathon = f.goal(
        "Grace", "run the Edinburgh marathon", "Grace is running the Edinburgh marathon."
    )
    scripted_llm.script("signed up", f.facts(marathon))
    foot = f.identity("Grace", "injury", "stress fracture", "Grace has a stress fracture.")
    scripted_llm.script("deffo off", f.facts(foot))
    scripted_llm.script_value_now("still true", {"now": "no"})

    say("signed up for the edinburgh marathon in may!!")
    job = say("stress fracture 😭 no running for 8 wks so marathon is deffo off")

    assert job["status"] == "done" and job["ending_checks"] == 1 and job["values_changed"] == 1
    active = {m["content"] for m in client.get("/v1/users/grace/memories").json()["data"]}
    assert "Grace is running the Edinburgh marathon." not in active
    assert "Grace has a stress fracture." in active
    assert "It is not (or no longer) true that Grace is running the Edinburgh marathon." in active


def test_a_plain_server_error_is_retried_as_before(
    client: TestClient, scripted_llm: ScriptedLLM
) -> None:
    scripted_llm.misbehave("500", times=1)  # nothing about the format: transient
    job = wait_job(
        client, post_turn(client, "s1", f.turn("ana", "I work as a nurse"))["job_id"], timeout=60
    )
    assert job["status"] == "done" and job["attempts"] == 2
    assert job["response_format"] == "json_schema" and job["response_format_note"] is None
    assert [r["response_format"]["type"] for r in scripted_llm.chat_requests()] == [
        "json_schema",
        "json_schema",
    ]


def test_same_external_ids_are_stored_once(client: TestClient, runtime: Runtime) -> None:
    body = f.turn("ana", "I like chess")
    body["user_message"]["external_id"] = "m-1"
    body["assistant_message"] = {"content": "Nice", "external_id": "m-2"}
    first = post_turn(client, "s1", body)
    again = post_turn(client, "s1", body)
    assert again["duplicate"] is True and again["job_id"] == first["job_id"]
    assert again["message_ids"] == first["message_ids"]
    assert counts(runtime)[0] == 2


# Issue 24: the README's SDK pattern (an external_id on the user message only) sent twice
# stored the reply twice. A turn is identified by its user message's external_id.
@pytest.mark.parametrize(
    "resent_reply",
    ["Cool.", "Something else.", {"content": "Cool.", "external_id": "r-2"}, None],
    ids=["same-reply", "other-reply", "reply-with-an-id", "no-reply"],
)
def test_a_resent_turn_stores_nothing_whatever_its_reply(
    client: TestClient, runtime: Runtime, resent_reply: Any
) -> None:
    body = {"user_id": "ana", "user_message": {"content": "I like chess", "external_id": "u-1"}}
    first = post_turn(client, "s1", {**body, "assistant_message": "Cool."})
    again = post_turn(client, "s1", {**body, "assistant_message": resent_reply})
    assert again["duplicate"] is True and again["job_id"] == first["job_id"]
    assert again["message_ids"] == first["message_ids"]  # the user message and its reply
    assert counts(runtime)[:2] == (2, 1)
    history = client.get("/v1/sessions/s1/context", params={"query": "chess"}).json()["history"]
    assert [h["content"] for h in history] == ["I like chess", "Cool."]
    tiers = client.get("/v1/sessions/s1/tiers").json()["tiers"]
    assert [e["text"] for t in tiers for e in t["entries"]] == ["I like chess", "Cool."]
    wait_job(client, first["job_id"])


def test_an_import_sent_again_stores_no_reply_twice(client: TestClient, runtime: Runtime) -> None:
    """A line without an external_id right after a stored user line is that turn's reply."""
    lines = [
        {"user_id": "bo", "session_id": "i1", "role": "user", "content": "I play the violin",
         "external_id": "x1"},
        {"user_id": "bo", "session_id": "i1", "role": "assistant", "content": "Lovely."},
    ]  # fmt: skip
    first = client.post("/v1/import", json={"messages": lines}).json()
    again = client.post("/v1/import", json={"messages": lines}).json()
    assert (first["stored"], first["duplicates"]) == (2, 0)
    assert again == {"stored": 0, "duplicates": 2, "job_ids": []}
    assert counts(runtime)[:2] == (2, 1)
    wait_job(client, first["job_ids"][0])


def test_export_delete_memory_and_delete_user(
    client: TestClient, scripted_llm: ScriptedLLM, runtime: Runtime
) -> None:
    scripted_llm.script(
        "Rex",
        f.facts(
            f.general("Ana", "Ana has a dog named Rex."),
            f.goal("Ana", "run a marathon", "Ana wants to run a marathon."),
        ),
    )
    wait_job(
        client,
        post_turn(client, "s1", f.turn("ana", "I have a dog named Rex and want to run a marathon"))[
            "job_id"
        ],
    )
    export = client.get("/v1/users/ana/export").json()
    assert (
        export["user_id"] == "ana" and len(export["messages"]) == 2 and len(export["memories"]) == 2
    )

    dog = next(m for m in export["memories"] if "Rex" in m["content"])
    assert client.delete(f"/v1/users/ana/memories/{dog['id']}").status_code == 204
    assert client.delete(f"/v1/users/ana/memories/{dog['id']}").status_code == 404
    assert client.get("/v1/users/ana/memories").json()["count"] == 1
    hits = client.post("/v1/users/ana/memories/search", json={"query": "dog Rex"}).json()
    assert all("Rex" not in h["content"] for h in hits["data"])

    assert len(runtime.vectors.list_collections()) == 2  # facts, and messages for history search
    answer = client.delete("/v1/users/ana").json()
    deleted = answer["deleted"]
    assert deleted["messages"] == 2 and deleted["facts"] == 1
    # In memory, the bytes go with the process (Edge: tests/vectors/test_compaction.py).
    assert answer["disk_reclaimed"] == "when this process exits (vectors held in memory)"
    assert client.get("/v1/users/ana/memories").status_code == 404
    assert counts(runtime) == (0, 0, 0)
    store = runtime.vectors  # every point of hers is gone, in either layout
    assert sum(store.count(c) for c in store.list_collections()) == 0


def test_import_batch_queues_one_job_per_user_turn(
    client: TestClient, scripted_llm: ScriptedLLM
) -> None:
    scripted_llm.script("violin", f.facts(f.general("Bo", "Bo plays the violin.")))
    lines = [
        {
            "user_id": "bo",
            "session_id": "old-1",
            "role": "user",
            "speaker": "Bo",
            "content": "I play the violin",
            "created_at": "2024-03-01T10:00:00Z",
            "external_id": "x1",
        },
        {
            "user_id": "bo",
            "session_id": "old-1",
            "role": "assistant",
            "content": "Lovely.",
            "created_at": "2024-03-01T10:00:05Z",
            "external_id": "x2",
        },
        {
            "user_id": "bo",
            "session_id": "old-1",
            "role": "user",
            "content": "ok thanks",
            "external_id": "x3",
        },
    ]
    accepted = client.post("/v1/import", json={"messages": lines})
    assert accepted.status_code == 202, accepted.text
    body = accepted.json()
    assert body["stored"] == 3 and len(body["job_ids"]) == 2
    statuses = {wait_job(client, j)["status"] for j in body["job_ids"]}
    assert statuses == {"done", "skipped"}
    [memory] = client.get("/v1/users/bo/memories").json()["data"]
    assert memory["first_seen_at"].startswith("2024-03-01")
    assert client.post("/v1/import", json={"messages": lines}).json()["duplicates"] == 3


def test_admin_creates_tenant_whose_key_is_isolated(
    client: TestClient, scripted_llm: ScriptedLLM
) -> None:
    scripted_llm.script(
        "Rome", f.facts(f.identity("Ana", "location", "Rome", "Ana lives in Rome."))
    )
    job_id = post_turn(client, "s1", f.turn("ana", "I live in Rome"))["job_id"]
    wait_job(client, job_id)
    memory_id = client.get("/v1/users/ana/memories").json()["data"][0]["id"]

    admin = {"Authorization": f"Bearer {ADMIN_KEY}"}
    created = client.post("/v1/admin/tenants", json={"name": "acme"}, headers=admin)
    assert created.status_code == 201, created.text
    other = {"Authorization": f"Bearer {created.json()['app_key']['key']}"}

    assert client.get("/v1/users/ana/memories", headers=other).status_code == 404
    assert client.get(f"/v1/jobs/{job_id}", headers=other).status_code == 404
    assert client.delete(f"/v1/users/ana/memories/{memory_id}", headers=other).status_code == 404
    assert client.delete("/v1/users/ana", headers=other).status_code == 404
    assert client.get("/v1/users/ana/export", headers=other).status_code == 404
    # the same user and session ids in the other tenant are a different person's
    resp = client.post("/v1/sessions/s1/turns", json=f.turn("ana", "I live in Rome"), headers=other)
    assert resp.status_code == 202
    wait_job(client, resp.json()["job_id"], headers=other)
    mine = client.get("/v1/users/ana/memories").json()["data"]
    theirs = client.get("/v1/users/ana/memories", headers=other).json()["data"]
    assert len(mine) == len(theirs) == 1 and mine[0]["id"] != theirs[0]["id"]


def test_a_name_the_user_gives_is_used_once_known(
    client: TestClient, scripted_llm: ScriptedLLM
) -> None:
    # The README's SDK pattern sends no speaker: until a name is known, facts say "the user".
    scripted_llm.script(
        "i'm tom", f.facts(f.identity("User", "name", "Tom", "The user's name is Tom."))
    )
    wait_job(
        client, post_turn(client, "s1", f.turn("u1", "hi, I'm Tom btw", speaker=None))["job_id"]
    )
    scripted_llm.script(
        "deloitte", f.facts(f.identity("Tom", "employer", "Deloitte", "Tom works at Deloitte."))
    )
    later = f.turn("u1", "I work at Deloitte", speaker=None)
    wait_job(client, post_turn(client, "s1", later)["job_id"])

    _, user = (m["content"] for m in scripted_llm.extraction_requests()[-1]["messages"])
    assert "Person: Tom" in user and '<user name="Tom">' in user
    context = client.get("/v1/sessions/s1/context", params={"query": "where do I work"}).json()
    assert context["system_prompt"].startswith("You are talking with Tom.")
    assert "Tom: hi, I'm Tom btw" in context["system_prompt"]
    found = client.post("/v1/users/u1/memories/search", json={"query": "Where do I work?"})
    assert found.json()["data"][0]["content"] == "Tom works at Deloitte."


def test_the_name_a_person_gives_names_them_in_the_next_turns_prompt(
    client: TestClient, scripted_llm: ScriptedLLM
) -> None:
    """No speaker name: the request says "User" until they say theirs. The 1.5B model wrote
    the name fact as "User is Tom." with "User" as its value; the next turn's request names
    Tom all the same."""
    scripted_llm.script(
        "im tom",
        {"facts": [{"type": "identity", "attribute": "name", "value": "User",
                    "content": "User is Tom.", "confidence": 0.9}]},
    )  # fmt: skip
    first = {"user_id": "tom", "user_message": "hey, im tom btw 👋 just moved to leeds"}
    job = wait_job(client, post_turn(client, "s1", first)["job_id"])
    assert job["status"] == "done" and job["facts_added"] == 1
    second = {"user_id": "tom", "user_message": "geography, first yr. halls are grim tho"}
    wait_job(client, post_turn(client, "s1", second)["job_id"])
    _, user = (m["content"] for m in scripted_llm.extraction_requests()[-1]["messages"])
    assert "Person: Tom" in user and "Extract facts about Tom from this turn only." in user
    memories = client.get("/v1/users/tom/memories").json()["data"]
    assert [m["content"] for m in memories] == ["User's name is Tom."]
