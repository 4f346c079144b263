"""Webhooks and the events feed through the API in one process (as `tiermem serve` runs it),
delivered by the delivery flow's own calls to a real receiver on 127.0.0.1. The drills
across processes (worker killed, receiver down, slow, failing) are in
tests/e2e/test_webhook_drills.py."""

from __future__ import annotations

from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import pytest
from fastapi.testclient import TestClient

from shared.flows.deliver_webhooks import deliver_webhook, dispatch_webhooks
from shared.runtime import Runtime
from tests import factories as f
from tests.factories import ADMIN_KEY, APP_KEY, free_port, wait_job
from tests.webhook_receiver import Receiver, received

OPERATOR = {"Authorization": f"Bearer {ADMIN_KEY}"}


def bearer(key: str) -> dict[str, str]:
    return {"Authorization": f"Bearer {key}"}


@dataclass
class Tenant:
    id: str
    app: dict[str, str]
    admin: dict[str, str]


def admin_key(client: TestClient, tenant_id: str) -> dict[str, str]:
    minted = client.post(
        f"/v1/admin/tenants/{tenant_id}/keys", json={"scope": "admin"}, headers=OPERATOR
    )
    assert minted.status_code == 201, minted.text
    return bearer(minted.json()["key"])


def dev_tenant(client: TestClient) -> Tenant:
    tenants = client.get("/v1/admin/tenants", headers=OPERATOR).json()
    tenant_id = next(t["id"] for t in tenants if t["name"] == "default")
    return Tenant(tenant_id, bearer(APP_KEY), admin_key(client, tenant_id))


def new_tenant(client: TestClient, name: str) -> Tenant:
    made = client.post("/v1/admin/tenants", json={"name": name}, headers=OPERATOR).json()
    tenant_id = made["tenant"]["id"]
    return Tenant(tenant_id, bearer(made["app_key"]["key"]), admin_key(client, tenant_id))


def subscribe(client: TestClient, tenant: Tenant, url: str, **extra: Any) -> dict[str, Any]:
    body = {"url": url, "events": ["memory.added", "user.deleted"], **extra}
    response = client.post("/v1/webhooks", json=body, headers=tenant.admin)
    assert response.status_code == 201, response.text
    made: dict[str, Any] = response.json()
    return made


def store_turn(client: TestClient, tenant: Tenant, user: str, text: str) -> None:
    response = client.post("/v1/sessions/s1/turns", json=f.turn(user, text), headers=tenant.app)
    assert response.status_code == 202, response.text
    assert wait_job(client, response.json()["job_id"], headers=tenant.app)["status"] == "done"


def deliver_all(runtime: Runtime) -> list[str]:
    outcomes = [deliver_webhook(runtime, d) for d in dispatch_webhooks(runtime)]
    return outcomes


@pytest.fixture(name="receiver_port")
def receiver_port_fixture() -> int:
    return free_port()


@pytest.fixture(name="receiver")
def receiver_fixture(tmp_path: Path, receiver_port: int) -> Iterator[dict[str, str]]:
    """The receiver's secrets by path; tests fill them in as they subscribe."""
    secrets: dict[str, str] = {}
    receiver = Receiver(receiver_port, tmp_path / "received.jsonl", secrets).start()
    yield secrets
    receiver.stop()


def test_subscriptions_are_checked_and_answered_clearly(client: TestClient) -> None:
    tenant = dev_tenant(client)
    good = {"url": "https://example.com/hooks", "events": ["memory.added"]}

    assert client.post("/v1/webhooks", json=good, headers=tenant.app).status_code == 403
    unnamed = client.post("/v1/webhooks", json=good, headers=OPERATOR)
    assert unnamed.status_code == 422 and "tenant_id" in unnamed.json()["error"]["message"]
    for bad, words in (
        ({"url": "ftp://example.com/x"}, "http:// or https://"),
        ({"url": "example.com/hooks"}, "http:// or https://"),
        ({"url": "https://user:pw@example.com/"}, "password"),
        ({"events": ["memory.created"]}, "unknown event type(s) 'memory.created'"),
        ({"events": []}, "events"),
        ({"secret": "hunter2"}, "whsec_"),
    ):
        response = client.post("/v1/webhooks", json={**good, **bad}, headers=tenant.admin)
        assert response.status_code == 422, (bad, response.text)
        assert words in response.json()["error"]["message"], response.text

    made = client.post("/v1/webhooks", json=good, headers=tenant.admin)
    assert made.status_code == 201, made.text
    hook = made.json()
    assert hook["secret"].startswith("whsec_") and hook["enabled"] and hook["pending"] == 0
    listed = client.get("/v1/webhooks", headers=tenant.admin).json()
    assert listed["count"] == 1 and "secret" not in listed["data"][0]
    assert "secret" not in client.get(f"/v1/webhooks/{hook['id']}", headers=tenant.admin).json()

    changed = client.patch(
        f"/v1/webhooks/{hook['id']}",
        json={"events": ["memory.ended", "compression.done"], "enabled": False},
        headers=tenant.admin,
    )
    assert changed.status_code == 200, changed.text
    assert changed.json()["events"] == ["memory.ended", "compression.done"]
    assert changed.json()["enabled"] is False
    bad_patch = client.patch(
        f"/v1/webhooks/{hook['id']}", json={"url": "mailto:x@example.com"}, headers=tenant.admin
    )
    assert bad_patch.status_code == 422

    assert client.delete(f"/v1/webhooks/{hook['id']}", headers=tenant.admin).status_code == 204
    assert client.get(f"/v1/webhooks/{hook['id']}", headers=tenant.admin).status_code == 404


def test_a_turn_becomes_a_signed_delivery_and_a_feed_entry(
    client: TestClient, runtime: Runtime, receiver: dict[str, str], receiver_port: int,
    tmp_path: Path,
) -> None:  # fmt: skip
    tenant = dev_tenant(client)
    hook = subscribe(client, tenant, f"http://127.0.0.1:{receiver_port}/a")
    receiver["/a"] = hook["secret"]

    store_turn(client, tenant, "ana", "I live in Lima and I love jazz.")
    assert set(deliver_all(runtime)) == {"delivered"}
    got = received(tmp_path / "received.jsonl")
    assert got and all(r["valid"] and r["type"] == "memory.added" for r in got)
    assert {r["data"]["user_id"] for r in got} == {"ana"}
    assert any("Lima" in r["data"]["memory"]["content"] for r in got)

    feed = client.get("/v1/events", headers=tenant.app).json()
    added = [e for e in feed["data"] if e["type"] == "memory.added"]
    assert [e["id"] for e in added] == [r["id"] for r in got]  # same ids, same order
    cursors = [e["cursor"] for e in feed["data"]]
    assert cursors == sorted(cursors) and feed["next_cursor"] == cursors[-1]
    # resumable: a page at a time, from the cursor
    first = client.get("/v1/events", params={"limit": 1}, headers=tenant.app).json()
    rest = client.get(
        "/v1/events", params={"after": first["next_cursor"]}, headers=tenant.app
    ).json()
    assert first["has_more"] and [*first["data"], *rest["data"]] == feed["data"]
    assert client.get("/v1/events", params={"after": cursors[-1]}, headers=tenant.app).json() == {
        "data": [], "next_cursor": cursors[-1], "has_more": False,
    }  # fmt: skip

    # nothing owed now; a second pass sends nothing
    assert deliver_all(runtime) == []
    state = client.get(f"/v1/webhooks/{hook['id']}", headers=tenant.admin).json()
    assert state["pending"] == 0 and state["delivered_total"] == len(got)

    # deleting the user: their events leave the feed, user.deleted is announced
    assert client.delete("/v1/users/ana", headers=tenant.app).status_code == 200
    feed = client.get("/v1/events", headers=tenant.app).json()
    assert [e["type"] for e in feed["data"]] == ["user.deleted"]
    assert feed["data"][0]["data"]["user_id"] == "ana"
    assert deliver_all(runtime) == ["delivered"]
    assert received(tmp_path / "received.jsonl")[-1]["type"] == "user.deleted"


def test_a_tenants_events_reach_only_its_own_subscriptions(
    client: TestClient, runtime: Runtime, receiver: dict[str, str], receiver_port: int,
    tmp_path: Path,
) -> None:  # fmt: skip
    a, b = new_tenant(client, "acme"), new_tenant(client, "globex")
    hook_a = subscribe(client, a, f"http://127.0.0.1:{receiver_port}/a")
    hook_b = subscribe(client, b, f"http://127.0.0.1:{receiver_port}/b")
    receiver |= {"/a": hook_a["secret"], "/b": hook_b["secret"]}

    store_turn(client, a, "ana", "I live in Lima and I love jazz.")
    store_turn(client, b, "bob", "I live in Oslo and I love chess.")
    deliver_all(runtime)
    got = received(tmp_path / "received.jsonl")
    by_path = {p: [r for r in got if r["path"] == p] for p in ("/a", "/b")}
    assert by_path["/a"] and by_path["/b"] and all(r["valid"] for r in got)
    assert {r["data"]["tenant_id"] for r in by_path["/a"]} == {a.id}
    assert {r["data"]["user_id"] for r in by_path["/a"]} == {"ana"}
    assert {r["data"]["tenant_id"] for r in by_path["/b"]} == {b.id}
    assert not any("Oslo" in str(r["data"]) for r in by_path["/a"])

    # the feed and the subscriptions are each tenant's own
    feed_a = client.get("/v1/events", headers=a.app).json()["data"]
    assert feed_a and {e["data"]["tenant_id"] for e in feed_a} == {a.id}
    assert client.get(f"/v1/webhooks/{hook_b['id']}", headers=a.admin).status_code == 404
    assert (
        client.patch(
            f"/v1/webhooks/{hook_b['id']}", json={"enabled": False}, headers=a.admin
        ).status_code
        == 404
    )
    assert client.delete(f"/v1/webhooks/{hook_b['id']}", headers=a.admin).status_code == 404
    assert client.post(f"/v1/webhooks/{hook_b['id']}/test", headers=a.admin).status_code == 404
    assert [h["id"] for h in client.get("/v1/webhooks", headers=a.admin).json()["data"]] == [
        hook_a["id"]
    ]
    assert client.get("/v1/events", headers=OPERATOR).status_code == 403  # no tenant of its own
    named_other = client.post(
        "/v1/webhooks",
        json={"url": "https://example.com/", "events": ["memory.added"], "tenant_id": b.id},
        headers=a.admin,
    )
    assert named_other.status_code == 403


def test_the_test_ping_reports_what_the_receiver_said(
    client: TestClient, receiver: dict[str, str], receiver_port: int, tmp_path: Path
) -> None:
    tenant = dev_tenant(client)
    hook = subscribe(client, tenant, f"http://127.0.0.1:{receiver_port}/a")
    receiver["/a"] = hook["secret"]
    ping = client.post(f"/v1/webhooks/{hook['id']}/test", headers=tenant.admin).json()
    assert ping["delivered"] and ping["status_code"] == 200 and ping["error"] is None
    [got] = received(tmp_path / "received.jsonl")
    assert got["valid"] and got["type"] == "webhook.test" and got["id"] == ping["webhook_id"]

    nowhere = subscribe(client, tenant, f"http://127.0.0.1:{free_port()}/gone")
    ping = client.post(f"/v1/webhooks/{nowhere['id']}/test", headers=tenant.admin).json()
    assert not ping["delivered"] and ping["status_code"] is None and "Connect" in ping["error"]
