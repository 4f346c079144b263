"""Tiered compression through the API and the embedded worker, summarizing with the scripted LLM."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest
from fastapi.testclient import TestClient

from tests.compression.helpers import text_of
from tests.factories import make_settings, wait_for
from tests.scripted_llm import ScriptedLLM

LIMIT = 2000  # a small model: trigger at 1400 tokens of history, target 1000
DECISION = "We decided to use PostgreSQL for the billing service, not MySQL."
# Replies about as long as a real model's, so topics fill up and spill into bulks.
GENERIC = {
    "topic": "project chat",
    "decisions": [],
    "constraints": ["The review happens before each release."],
    "open_items": ["Ana will check the migration plan with the team."],
    "facts": [
        "Ana and the assistant went over the schedule, the cache and the queue design.",
        "The client report is drafted weekly.",
    ],
}
SHORT = {
    "topic": "",
    "decisions": [],
    "constraints": [],
    "open_items": [],
    "facts": ["Earlier project details were discussed."],
}
DECIDED = {
    "topic": "billing database",
    "decisions": ["Ana decided to use PostgreSQL for the billing service."],
    "constraints": ["Not MySQL."],
    "open_items": ["Ana will confirm the database size."],
    "facts": ["The billing service is new."],
}
# Keeps the words the bulk prompt is matched on, so re-compressions keep finding it.
DECIDED_SHORT = {
    "topic": "",
    "decisions": ["Ana decided to use PostgreSQL for billing."],
    "constraints": [],
    "open_items": [],
    "facts": [],
}


@pytest.fixture(name="settings")
def compression_settings(tmp_path: Path, scripted_llm: ScriptedLLM) -> Any:
    return make_settings(
        tmp_path,
        llm={"base_url": scripted_llm.base_url, "timeout_s": 5},
        qdrant={"in_memory": True},
        compression={"context_limit_tokens": LIMIT},
    )


def script_summaries(llm: ScriptedLLM) -> None:
    # Matched on the summary prompt only (the extraction prompt shows the user's words in a
    # <user> block, never as "Ana: ..." lines or a "Decisions:" section); the last added
    # script that matches wins.
    llm.script("summarize this part", GENERIC)
    llm.script("for the bulk tier", SHORT)
    llm.script("ana: we decided to use postgresql", DECIDED)
    llm.script("decisions: ana decided to use postgresql", DECIDED_SHORT)


def turn(client: TestClient, sid: str, i: int, text: str | None = None) -> None:
    body = {
        "user_id": "ana",
        "user_message": {"content": text or text_of(30 + (i * 17) % 60, i), "speaker": "Ana"},
        "assistant_message": text_of(25 + (i * 11) % 40, 500 + i),
    }
    response = client.post(f"/v1/sessions/{sid}/turns", json=body)
    assert response.status_code == 202, response.text


def tiers(client: TestClient, sid: str) -> dict[str, Any]:
    response = client.get(f"/v1/sessions/{sid}/tiers")
    assert response.status_code == 200, response.text
    body: dict[str, Any] = response.json()
    return body


def runs(client: TestClient, sid: str) -> list[dict[str, Any]]:
    response = client.get(f"/v1/sessions/{sid}/compression/runs")
    assert response.status_code == 200, response.text
    data: list[dict[str, Any]] = response.json()["data"]
    return data


def settle(client: TestClient, sid: str) -> dict[str, Any]:
    """Wait until the compression check of the last reply is done: under the trigger and
    no run pending or running."""

    def settled() -> dict[str, Any] | None:
        # runs, tiers, runs again: a run that finished while the tiers were read shows up
        before = [(r["id"], r["status"]) for r in runs(client, sid)]
        view = tiers(client, sid)
        after = [(r["id"], r["status"]) for r in runs(client, sid)]
        idle = before == after and all(s not in ("pending", "running") for _, s in after)
        return view if idle and view["total_tokens"] <= view["trigger_tokens"] else None

    result: dict[str, Any] = wait_for(settled, timeout=30, what="compression to settle")
    return result


def history_tokens(client: TestClient, sid: str) -> int:
    context = client.get(f"/v1/sessions/{sid}/context", params={"budget_tokens": 100_000})
    assert context.status_code == 200, context.text
    tokens: int = context.json()["section_tokens"]["history"]
    return tokens


def tier(view: dict[str, Any], name: str) -> dict[str, Any]:
    return next(t for t in view["tiers"] if t["name"] == name)


def test_a_long_conversation_stays_under_the_target_and_keeps_an_early_decision(
    client: TestClient, scripted_llm: ScriptedLLM
) -> None:
    script_summaries(scripted_llm)
    sid = "long"
    seen_runs = 0
    for i in range(70):
        turn(client, sid, i, DECISION if i == 3 else None)
        view = settle(client, sid)
        assert view["partition_ok"], view["problems"]
        done = runs(client, sid)
        if len(done) > seen_runs:  # this reply triggered a run
            seen_runs = len(done)
            assert done[0]["status"] == "done", done[0]
            assert history_tokens(client, sid) <= view["target_tokens"]
            assert all(t["fits"] for t in view["tiers"]), (
                [(t["name"], t["tokens"], t["budget_tokens"]) for t in view["tiers"]],
                done[0],
            )
        assert history_tokens(client, sid) <= view["trigger_tokens"]
    assert seen_runs >= 3
    view = tiers(client, sid)
    bulks = tier(view, "bulks")["entries"]
    assert any("PostgreSQL" in e["text"] for e in bulks)
    assert bulks[0]["level"] >= 2 and bulks[0]["spans"][0]["first_seq"] == 2  # after the head
    assert [e["id"] for e in tier(view, "head")["entries"]]  # the first exchange, pinned
    # the context shows bulks, topics then the newest messages, summaries as system entries
    context = client.get(f"/v1/sessions/{sid}/context", params={"budget_tokens": 100_000}).json()
    order = [h["tier"] for h in context["history"]]
    assert order == sorted(order, key=["head", "bulks", "topics", "current"].index)
    summary = next(h for h in context["history"] if h["tier"] == "bulks")
    assert summary["role"] == "system" and summary["speaker"] == "Earlier (summary)"
    assert "PostgreSQL" in context["system_prompt"]
    llm_runs = runs(client, sid)
    assert all(r["summarizer"] == "llm" and r["llm_calls"] >= 1 for r in llm_runs)


def test_tiers_show_spans_and_tokens(client: TestClient, scripted_llm: ScriptedLLM) -> None:
    script_summaries(scripted_llm)
    for i in range(25):
        turn(client, "t1", i)
    view = settle(client, "t1")
    assert [t["name"] for t in view["tiers"]] == ["head", "bulks", "topics", "current"]
    assert view["partition_ok"] and view["version"] >= 2
    assert view["context_limit_tokens"] == LIMIT and view["target_tokens"] == LIMIT // 2
    covered: list[int] = []
    for t in view["tiers"]:
        assert t["tokens"] == sum(e["cost_tokens"] for e in t["entries"])
        for e in t["entries"]:
            for span in e["spans"]:
                assert span["session_id"] == "t1"
                covered.extend(range(span["first_seq"], span["last_seq"] + 1))
    assert covered == list(range(50))  # 25 turns, each message exactly once, in order
    assert client.get("/v1/sessions/nope/tiers").status_code == 404


def test_compact_runs_now_with_a_focus_and_is_recorded(
    client: TestClient, scripted_llm: ScriptedLLM
) -> None:
    script_summaries(scripted_llm)
    for i in range(12):  # under the trigger: nothing happens by itself
        turn(client, "c1", i)
    settle(client, "c1")
    assert runs(client, "c1") == []
    # a smaller budget for this session, automatic runs off: compact still runs when asked
    put = client.put(
        "/v1/sessions/c1/compression", json={"context_limit_tokens": 1400, "enabled": False}
    )
    assert put.status_code == 200, put.text
    accepted = client.post("/v1/sessions/c1/compact", json={"focus": "the billing database"})
    assert accepted.status_code == 202, accepted.text
    run_id = accepted.json()["id"]
    assert accepted.json()["status"] == "pending" and accepted.json()["trigger"] == "compact"

    def finished() -> dict[str, Any] | None:
        run: dict[str, Any] = client.get(f"/v1/sessions/c1/compression/runs/{run_id}").json()
        return run if run["status"] not in ("pending", "running") else None

    run = wait_for(finished, timeout=30, what="the compact run")
    assert run["status"] == "done" and run["iterations"] >= 1, run
    assert run["tokens_after"] < run["tokens_before"] and run["tokens_after"] <= 700
    assert run["focus"] == "the billing database" and run["llm_calls"] >= 1
    prompts = [r["messages"][-1]["content"] for r in scripted_llm.chat_requests()]
    assert any("Pay particular attention to: the billing database" in p for p in prompts)
    view = tiers(client, "c1")
    assert view["partition_ok"] and all(t["fits"] for t in view["tiers"])
    assert [r["trigger"] for r in runs(client, "c1")] == ["compact"]
    missing = client.get("/v1/sessions/c1/compression/runs/unknown")
    assert missing.status_code == 404


def test_a_broken_llm_falls_back_and_the_run_says_so(
    client: TestClient, scripted_llm: ScriptedLLM
) -> None:
    scripted_llm.script("summarize this part", "this is not JSON at all")
    for i in range(25):
        turn(client, "f1", i)
    settle(client, "f1")
    done = runs(client, "f1")
    assert done and done[-1]["status"] == "done"
    assert done[-1]["fallbacks"] >= 1 and done[-1]["llm_calls"] >= 2  # a repair each time
    steps = [s for s in done[-1]["steps"] if s["kind"] == "summarize"]
    assert steps and all(s["summarizer"] == "offline" and "fallback" in s for s in steps)
    entries = (
        tier(tiers(client, "f1"), "topics")["entries"]
        + tier(tiers(client, "f1"), "bulks")["entries"]
    )
    assert entries and all(e["summarizer"] == "offline" for e in entries)
    assert all(e["text"].startswith("[extractive]") for e in entries)


def test_settings_are_validated_and_readable(client: TestClient) -> None:
    turn(client, "s1", 0)
    current = client.get("/v1/sessions/s1/compression").json()
    assert current["effective"]["trigger_ratio"] == 0.7 and current["overrides"] == {}
    bad_shares = client.put("/v1/sessions/s1/compression", json={"current_share": 0.9})
    assert bad_shares.status_code == 422
    assert "sum to 1" in bad_shares.json()["error"]["message"]
    bad_ratio = client.put(
        "/v1/sessions/s1/compression", json={"trigger_ratio": 0.4, "target_ratio": 0.6}
    )
    assert bad_ratio.status_code == 422
    unknown = client.put("/v1/sessions/s1/compression", json={"chunk_max_tokens": 10})
    assert unknown.status_code == 422  # per deployment, not per session
    ok = client.put(
        "/v1/sessions/s1/compression",
        json={"current_share": 0.6, "topics_share": 0.25, "bulks_share": 0.15, "pin_head": False},
    )
    assert ok.status_code == 200, ok.text
    assert ok.json()["effective"]["current_share"] == 0.6
    assert client.get("/v1/sessions/s1/compression").json()["overrides"]["pin_head"] is False


def test_continue_seeds_a_child_session_with_the_compressed_context(
    client: TestClient, scripted_llm: ScriptedLLM
) -> None:
    script_summaries(scripted_llm)
    for i in range(30):
        turn(client, "p1", i, DECISION if i == 2 else None)
    parent = settle(client, "p1")
    response = client.post("/v1/sessions/p1/continue", json={"session_id": "p1-day2"})
    assert response.status_code == 201, response.text
    child = response.json()
    assert child["parent_session_id"] == "p1" and child["session_id"] == "p1-day2"
    assert child["user_id"] == "ana" and child["seeded_entries"] > 0
    assert child["seeded_tokens"] == sum(t["tokens"] for t in parent["tiers"])
    view = settle(client, "p1-day2")
    assert view["partition_ok"], view["problems"]
    spans = [s for t in view["tiers"] for e in t["entries"] for s in e["spans"]]
    assert {s["session_id"] for s in spans} == {"p1"}  # everything comes from the parent
    turn(client, "p1-day2", 100, "Where were we with the billing service?")
    context = client.get("/v1/sessions/p1-day2/context", params={"budget_tokens": 100_000})
    assert "PostgreSQL" in context.json()["system_prompt"]
    assert settle(client, "p1-day2")["partition_ok"]
    again = client.post("/v1/sessions/p1/continue", json={"session_id": "p1-day2"})
    assert again.status_code == 409
    generated = client.post("/v1/sessions/p1/continue")
    assert generated.status_code == 201 and generated.json()["session_id"].startswith("p1.cont-")
    assert client.post("/v1/sessions/nope/continue").status_code == 404
