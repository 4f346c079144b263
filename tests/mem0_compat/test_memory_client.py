"""mem0ai's own `MemoryClient` (mem0ai 2.2.1, mem0/client/main.py) pointed at a real
`tiermem serve` with `host=<tiermem>/mem0`: every call it makes for add, search, get_all,
get, update, history, delete, delete_all and delete_users is answered in mem0's shapes.

`MemoryClient.__init__` checks its key with `GET /v1/ping/` (`_validate_api_key`), and sends
`Authorization: Token <key>` (`_client_headers`); tiermem answers both under /mem0.
"""

from __future__ import annotations

import time
from pathlib import Path
from typing import Any

import httpx
import pytest

from tests.factories import APP_KEY

pytest.importorskip("mem0", reason="mem0ai is the `mem0` extra: pip install -e '.[mem0]'")


@pytest.fixture(name="client")
def client_fixture(serve: str, mem0_home: Path) -> Any:
    from mem0 import MemoryClient

    return MemoryClient(api_key=APP_KEY, host=f"{serve}/mem0")


def wait_count(client: Any, user: str, count: int) -> dict[str, Any]:
    deadline = time.monotonic() + 30
    while True:
        page: dict[str, Any] = client.get_all(filters={"user_id": user})
        if page["count"] >= count:
            return page
        assert time.monotonic() < deadline, page
        time.sleep(0.1)


def test_a_wrong_key_fails_at_construction_as_against_mem0(serve: str, mem0_home: Path) -> None:
    from mem0 import MemoryClient

    with pytest.raises(ValueError, match="Error"):
        MemoryClient(api_key="not-a-key", host=f"{serve}/mem0")


def test_add_is_extracted_by_the_worker_and_found_in_mem0_shapes(client: Any) -> None:
    added = client.add(
        [
            {"role": "user", "content": "I live in Berlin and I love jazz."},
            {"role": "assistant", "content": "Nice!"},
        ],
        user_id="ana",
    )
    # mem0's asynchronous answer: queued, with an event (tiermem's job) to follow.
    assert added["status"] == "PENDING" and added["event_id"]
    page = wait_count(client, "ana", 2)
    assert page["next"] is None and page["previous"] is None
    assert {m["memory"] for m in page["results"]} == {
        "The user lives in Berlin.",
        "The user loves jazz.",
    }
    memory = page["results"][0]
    assert {"id", "memory", "hash", "metadata", "categories", "user_id", "created_at"} <= set(
        memory
    )
    assert memory["user_id"] == "ana" and memory["metadata"]["tiermem"]["active"] is True

    hits = client.search("where does the user live?", filters={"user_id": "ana"}, top_k=1)
    assert [h["memory"] for h in hits["results"]] == ["The user lives in Berlin."]
    assert 0 < hits["results"][0]["score"] <= 1
    # An entity without memories has none (mem0 answers so, not 404).
    assert client.search("anything", filters={"user_id": "nobody"}) == {"results": []}


def test_update_keeps_the_id_and_history_shows_both_versions(client: Any) -> None:
    client.add("I live in Oslo.", user_id="ben")
    [memory] = wait_count(client, "ben", 1)["results"]
    updated = client.update(memory["id"], text="Lives in Bergen")
    assert updated["id"] == memory["id"] and updated["memory"] == "Lives in Bergen"
    assert client.get(memory["id"])["memory"] == "Lives in Bergen"
    # The new text is typed by the offline rules: it holds the location slot now.
    assert updated["metadata"]["tiermem"]["slot"] == "identity/location"
    history = client.history(memory["id"])
    assert [(h["event"], h["old_memory"], h["new_memory"]) for h in history] == [
        ("ADD", None, "The user lives in Oslo."),
        ("UPDATE", "The user lives in Oslo.", "Lives in Bergen"),
    ]
    assert client.get_all(filters={"user_id": "ben"})["count"] == 1


def test_infer_false_writes_typed_memories_at_once(client: Any) -> None:
    added = client.add("Likes pizza", user_id="cai", infer=False, metadata={"src": "form"})
    assert added["status"] == "SUCCEEDED"
    [result] = added["results"]
    memory = client.get(result["id"])
    assert memory["memory"] == "The user likes pizza."
    assert memory["categories"] == ["preference"]
    assert memory["metadata"]["src"] == "form"


def test_infer_false_refuses_a_message_too_short_to_be_a_memory(serve: str) -> None:
    """Each message becomes a memory as it is: one of one character is a 422 naming it,
    and nothing of the request is written (schemathesis found a 500 here)."""
    said = [{"role": "user", "content": "Likes tea"}, {"role": "user", "content": "k"}]
    body = {"messages": said, "user_id": "gus", "infer": False}
    headers = {"Authorization": f"Bearer {APP_KEY}"}
    r = httpx.post(f"{serve}/mem0/v3/memories/add/", json=body, headers=headers)
    assert r.status_code == 422, r.text
    assert r.json()["error"]["message"].startswith("messages[1].content: ")
    found = httpx.get(f"{serve}/v1/users/gus/memories", headers=headers)
    assert found.status_code == 404, found.text  # not even the user was stored


def test_delete_delete_all_and_delete_users(client: Any, serve: str) -> None:
    for text in ("Likes tea", "Lives in Rome", "Wants to learn Spanish"):
        client.add(text, user_id="dan", infer=False)
    page = wait_count(client, "dan", 3)
    client.delete(page["results"][0]["id"])
    assert client.get_all(filters={"user_id": "dan"})["count"] == 2
    client.delete_all(user_id="dan")
    assert client.get_all(filters={"user_id": "dan"})["count"] == 0

    client.add("Likes tea", user_id="eve", infer=False)
    assert client.delete_users(user_id="eve") == {"message": "Entity deleted successfully."}
    users = httpx.get(f"{serve}/v1/users/eve/memories", headers={"X-API-Key": APP_KEY})
    assert users.status_code == 404


def test_a_memory_of_another_tenant_is_not_found(client: Any, serve: str) -> None:
    added = client.add("Likes chess", user_id="fay", infer=False)
    memory_id = added["results"][0]["id"]
    admin = {"Authorization": "Bearer dev-admin-key"}
    made = httpx.post(f"{serve}/v1/admin/tenants", json={"name": "other"}, headers=admin)
    other_key = made.json()["app_key"]["key"]
    answer = httpx.get(
        f"{serve}/mem0/v1/memories/{memory_id}/", headers={"Authorization": f"Token {other_key}"}
    )
    assert answer.status_code == 404
