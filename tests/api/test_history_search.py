"""GET /v1/users/{id}/history/search through the real worker path, on SQLite and PostgreSQL."""

from __future__ import annotations

import datetime as dt
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
from fastapi.testclient import TestClient
from sqlmodel import Session, select

from shared.db.models import User
from shared.runtime import Runtime
from tests.factories import make_settings, wait_job
from tests.memory.history_corpus import (
    OTHER_SESSIONS,
    OTHER_USER,
    SESSIONS,
    USER,
    transcript,
)

PET_MESSAGE = "My dog Rex chewed the sofa while we were out."


@pytest.fixture(
    name="settings", params=["sqlite", pytest.param("postgres", marks=pytest.mark.postgres)]
)
def settings_fixture(tmp_path: Path, request: pytest.FixtureRequest) -> Any:
    # No LLM configured: the offline extractor, as `tiermem serve` runs out of the box.
    database = (
        {"database_url": request.getfixturevalue("pg_url")} if request.param == "postgres" else {}
    )
    return make_settings(tmp_path, qdrant={"in_memory": True}, **database)


@pytest.fixture(name="stored")
def stored_fixture(client: TestClient) -> Iterator[dict[str, dict[str, Any]]]:
    """Both users' transcripts stored and every extraction job finished; the export of each
    user (their message ids, external ids and times), keyed by user id."""
    lines = transcript(USER, SESSIONS) + transcript(OTHER_USER, OTHER_SESSIONS)
    accepted = client.post("/v1/import", json={"messages": lines})
    assert accepted.status_code == 202, accepted.text
    jobs = accepted.json()["job_ids"]
    assert len(jobs) == len(lines) // 2
    for job_id in jobs:
        assert wait_job(client, job_id)["status"] in ("done", "skipped")
    yield {u: client.get(f"/v1/users/{u}/export").json() for u in (USER, OTHER_USER)}


def search(client: TestClient, user: str, q: str, **params: Any) -> list[dict[str, Any]]:
    response = client.get(f"/v1/users/{user}/history/search", params={"q": q, **params})
    assert response.status_code == 200, response.text
    body: dict[str, Any] = response.json()
    assert body["count"] == len(body["data"])
    hits: list[dict[str, Any]] = body["data"]
    return hits


def ids(export: dict[str, Any]) -> set[str]:
    return {m["id"] for m in export["messages"]}


def test_rare_keyword_finds_its_message_first_with_session_time_and_ids(
    client: TestClient, stored: dict[str, dict[str, Any]]
) -> None:
    by_id = {m["id"]: m for m in stored[USER]["messages"]}

    [first, *_] = search(client, USER, "INC-40213")
    assert first["content"] == "Yes, I opened ticket INC-40213 with the helpdesk about the VPN."
    assert first["keyword_rank"] == 1
    # Everything a caller needs to point back at the turn.
    stored_row = by_id[first["message_id"]]
    assert first["external_id"] == "work-2023-06-1u" == stored_row["external_id"]
    assert first["session_id"] == "work-2023-06"
    assert first["role"] == "user" and first["speaker"] == "Ana"
    said = dt.datetime(2023, 6, 12, 9, 3, tzinfo=dt.UTC)
    assert dt.datetime.fromisoformat(first["created_at"]) == said
    assert first["score"] > 0

    [first, *_] = search(client, USER, "Zanzibar")
    assert "ten days in Zanzibar" in first["content"]
    assert (first["session_id"], first["external_id"]) == ("trip-2023-05", "trip-2023-05-0u")


def test_paraphrase_without_a_shared_word_is_found_by_meaning(
    client: TestClient, stored: dict[str, dict[str, Any]]
) -> None:
    hits = search(client, USER, "what did I say about my pet", k=3)
    found = next(h for h in hits if h["content"] == PET_MESSAGE)
    assert found["keyword_rank"] is None and found["vector_rank"] is not None
    assert found["session_id"] == "home-2023-07"


def test_another_users_messages_never_appear(
    client: TestClient, stored: dict[str, dict[str, Any]]
) -> None:
    mine, theirs = ids(stored[USER]), ids(stored[OTHER_USER])
    for q in ("Zanzibar", "INC-40213", "my dog chewed the sofa", "printer", "shoes"):
        hits = search(client, USER, q, k=100)
        assert hits and {h["message_id"] for h in hits} <= mine, q
    # ...and the other way round: the other user finds only their own.
    hits = search(client, OTHER_USER, "INC-40213", k=100)
    assert hits[0]["content"] == "My ticket INC-40213 is about the office printer."
    assert {h["message_id"] for h in hits} <= theirs


def test_each_hit_says_why_it_was_found(
    client: TestClient, stored: dict[str, dict[str, Any]], runtime: Runtime
) -> None:
    weight = runtime.settings.context.history_vector_weight
    hits = search(client, USER, "problems with the VPN ticket", k=10)
    assert hits[0]["content"].startswith("Yes, I opened ticket INC-40213")
    assert [h["score"] for h in hits] == sorted((h["score"] for h in hits), reverse=True)
    # The score is the hit's BM25 over the best candidate's plus the weighted cosine; each
    # part and each rank is shown, so a client can tell a keyword hit from a paraphrase.
    assert max(h["keyword_score"] or 0 for h in hits) == pytest.approx(1.0)
    both = [h for h in hits if h["keyword_score"] is not None and h["vector_score"] is not None]
    assert both and any(h["keyword_score"] is None for h in hits)
    for h in both:
        assert h["keyword_rank"] and h["vector_rank"] and not h["speaker_named"]
        expected = h["keyword_score"] + weight * h["vector_score"]
        assert h["score"] == pytest.approx(expected, abs=1e-5)


def test_a_question_naming_a_speaker_finds_what_they_said(
    client: TestClient, runtime: Runtime
) -> None:
    """A question about what Maya baked is about her own words, not the message that names
    her (addressed to her): hers rise by the bonus and say so (the ordering by the bonus is
    tested in tests/memory/test_history_search.py)."""
    said = [
        ("Tom", "user", "Maya, are you coming on Friday?"),
        ("Maya", "assistant", "Yes! I'm baking a lemon tart for the party."),
        ("Tom", "user", "I bought the drinks and some crisps."),
    ]
    lines = [
        {"user_id": "tom", "session_id": "party", "role": role, "speaker": speaker,
         "content": content, "created_at": f"2024-03-01T18:00:0{i}Z"}
        for i, (speaker, role, content) in enumerate(said)
    ]  # fmt: skip
    accepted = client.post("/v1/import", json={"messages": lines})
    assert accepted.status_code == 202, accepted.text
    for job_id in accepted.json()["job_ids"]:
        assert wait_job(client, job_id)["status"] in ("done", "skipped")
    hits = search(client, "tom", "What did Maya bake for the party?", k=3)
    assert hits[0]["speaker"] == "Maya" and hits[0]["speaker_named"]
    assert not any(h["speaker_named"] for h in hits if h["speaker"] == "Tom")
    bonus = runtime.settings.context.history_speaker_bonus
    assert hits[0]["score"] == pytest.approx(
        hits[0]["keyword_score"]
        + runtime.settings.context.history_vector_weight * hits[0]["vector_score"]
        + bonus,
        abs=1e-5,
    )


def test_around_shows_the_exchange_of_each_hit(
    client: TestClient, stored: dict[str, dict[str, Any]]
) -> None:
    plain = search(client, USER, "INC-40213", k=3)
    assert all(h["before"] == [] and h["after"] == [] for h in plain)
    [hit, *_] = search(client, USER, "INC-40213", k=3, around=2)
    assert hit["content"].startswith("Yes, I opened ticket INC-40213")
    # The ticket is the work session's second turn: its first turn is before it.
    assert [m["content"] for m in hit["before"]] == [
        "The VPN keeps dropping every twenty minutes since the update.",
        "Is it the new client, version 5.2?",
    ]
    assert [m["content"] for m in hit["after"]] == [
        "Good, keep the ticket number handy.",
        "Another ticket, INC-39977, was for my broken laptop charger last month.",
    ]
    assert {m["session_id"] for m in hit["before"] + hit["after"]} == {hit["session_id"]}
    too_many = client.get(f"/v1/users/{USER}/history/search", params={"q": "VPN", "around": 9})
    assert too_many.status_code == 422


def test_exclude_session_and_small_talk(
    client: TestClient, stored: dict[str, dict[str, Any]]
) -> None:
    hits = search(client, USER, "Zanzibar honeymoon", k=50, exclude_session_id="trip-2023-05")
    assert hits and all(h["session_id"] != "trip-2023-05" for h in hits)
    # An unknown session (or another user's) leaves nothing out.
    assert search(client, USER, "Zanzibar", exclude_session_id="bo-chat")[0]["session_id"] == (
        "trip-2023-05"
    )
    # Small talk is found by keyword but was never embedded.
    [thanks] = [h for h in search(client, USER, "ok thanks", k=100) if h["content"] == "ok thanks"]
    assert thanks["keyword_rank"] is not None and thanks["vector_rank"] is None


# FTS5 and tsquery syntax, stray quotes, emoji and a maximal query: all just text.
ODD_QUERIES = [
    '"*" OR AND (',
    "NEAR(a b)",
    "content:sofa",
    "-",
    "'",
    '"',
    "^*",
    "a AND OR NOT",
    "\U0001f642",
    "INC-40213*",
    "x" * 4000,
]


def test_operators_and_punctuation_are_only_text(
    client: TestClient, stored: dict[str, dict[str, Any]]
) -> None:
    for q in ODD_QUERIES:
        hits = search(client, USER, q)
        assert {h["message_id"] for h in hits} <= ids(stored[USER]), q


def test_bad_requests(client: TestClient, stored: dict[str, dict[str, Any]]) -> None:
    url = f"/v1/users/{USER}/history/search"
    cases: list[dict[str, str | int]] = [
        {},
        {"q": ""},
        {"q": "   "},
        {"q": "x" * 4001},
        {"q": "a", "k": 0},
        {"q": "a", "k": 101},
        {"q": "a", "exclude_session_id": "bad id!"},
    ]
    for params in cases:
        response = client.get(url, params=params)
        assert response.status_code == 422, (params, response.text)
        assert response.json()["error"]["code"]
    assert client.get("/v1/users/nobody/history/search", params={"q": "a"}).status_code == 404


def test_delete_user_drops_their_message_vectors(
    client: TestClient, stored: dict[str, dict[str, Any]], runtime: Runtime
) -> None:
    with Session(runtime.engine) as session:
        users = {u.external_id: u for u in session.exec(select(User)).all()}
    ana, bo = (
        runtime.messages_of(tenant_id=users[u].tenant_id, user_id=users[u].id)
        for u in (USER, OTHER_USER)
    )
    kept = bo.count()
    assert ana.count() > 0 and kept > 0

    assert client.delete(f"/v1/users/{USER}").status_code == 200

    assert ana.count() == 0 and bo.count() == kept
    if runtime.settings.qdrant.layout == "per_user":
        assert ana.collection not in runtime.vectors.list_collections()
    gone = client.get(f"/v1/users/{USER}/history/search", params={"q": "Zanzibar"})
    assert gone.status_code == 404
