"""Who reaches what: every admin, ops, replay, jobs and metrics route × {app key of tenant A,
tenant admin key of A, the operator key} against tenant B's objects (and A's own).

The model (shared.records.tenancy.Principal): an app key reaches its tenant's users and jobs; a
tenant admin key also its own tenant's keys, replays and ops rows, never another tenant's;
the operator key (TIERMEM_AUTH__ADMIN_KEY, from settings only) reaches every tenant, creates
tenants, and alone sees the shared workers, pauses queues and reads /metrics.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

import pytest
from fastapi.testclient import TestClient

from tests import factories as f
from tests.factories import ADMIN_KEY, wait_job

OPERATOR = {"Authorization": f"Bearer {ADMIN_KEY}"}
ROLES = ("app_a", "admin_a", "operator")


@dataclass
class World:
    client: TestClient
    keys: dict[str, dict[str, str]]  # role → headers
    tenant_a: str
    tenant_b: str
    job_a: str
    job_b: str
    replay_a: str
    replay_b: str

    def call(self, role: str, method: str, path: str, body: Any = None) -> Any:
        return self.client.request(method, path, json=body, headers=self.keys[role])


def bearer(key: str) -> dict[str, str]:
    return {"Authorization": f"Bearer {key}"}


def make_tenant(client: TestClient, name: str) -> tuple[str, str]:
    response = client.post("/v1/admin/tenants", json={"name": name}, headers=OPERATOR)
    assert response.status_code == 201, response.text
    body = response.json()
    return body["tenant"]["id"], body["app_key"]["key"]


def store_turn(client: TestClient, key: str, user: str) -> str:
    response = client.post(
        "/v1/sessions/s1/turns",
        json=f.turn(user, "I live in Lima and I love jazz."),
        headers=bearer(key),
    )
    assert response.status_code == 202, response.text
    job_id: str = response.json()["job_id"]
    wait_job(client, job_id, headers=bearer(key))
    return job_id


def start_replay(client: TestClient, tenant_id: str) -> str:
    body = {"mode": "dry_run", "tenant_id": tenant_id}
    response = client.post("/v1/replay", json=body, headers=OPERATOR)
    assert response.status_code == 202, response.text
    replay_id: str = response.json()["id"]
    return replay_id


@pytest.fixture(name="world")
def world_fixture(client: TestClient) -> World:
    tenant_a, app_a = make_tenant(client, "acme")
    tenant_b, app_b = make_tenant(client, "globex")
    minted = client.post(
        f"/v1/admin/tenants/{tenant_a}/keys", json={"scope": "admin"}, headers=OPERATOR
    )
    assert minted.status_code == 201, minted.text
    job_a = store_turn(client, app_a, "ana")
    job_b = store_turn(client, app_b, "bob")
    return World(
        client=client,
        keys={
            "app_a": bearer(app_a),
            "admin_a": bearer(minted.json()["key"]),
            "operator": OPERATOR,
        },
        tenant_a=tenant_a,
        tenant_b=tenant_b,
        job_a=job_a,
        job_b=job_b,
        replay_a=start_replay(client, tenant_a),
        replay_b=start_replay(client, tenant_b),
    )


# (method, path, body, expected status for app_a / admin_a / operator). Paths name {A}/{B}
# for the tenants, {job_a}/{job_b} and {replay_a}/{replay_b} for their objects. A status
# set means any of them (a replay may be done, and done replays cannot be cancelled: 409).
# 409 for pause/resume: `tiermem serve`'s in-process broker has no shared pause flag; the
# point here is that the operator got past authorization and the others did not.
ANY_END = (200, 409)
MATRIX: list[tuple[str, str, Any, tuple[Any, Any, Any]]] = [
    ("GET", "/v1/jobs/{job_b}", None, (404, 404, 200)),
    ("GET", "/v1/jobs/{job_a}", None, (200, 200, 200)),
    ("GET", "/v1/admin/tenants", None, (403, 200, 200)),
    ("POST", "/v1/admin/tenants", {"name": "initech"}, (403, 403, 201)),
    ("POST", "/v1/admin/tenants/{B}/keys", {"scope": "app"}, (403, 403, 201)),
    ("POST", "/v1/admin/tenants/{B}/keys", {"scope": "admin"}, (403, 403, 201)),
    ("POST", "/v1/admin/tenants/{A}/keys", {"scope": "app"}, (403, 201, 201)),
    ("POST", "/v1/replay", {"mode": "dry_run", "tenant_id": "{B}"}, (403, 403, 202)),
    ("POST", "/v1/replay", {"mode": "dry_run", "tenant_id": "{A}"}, (403, 202, 202)),
    ("GET", "/v1/replay", None, (403, 200, 200)),
    ("GET", "/v1/replay/{replay_b}", None, (403, 404, 200)),
    ("GET", "/v1/replay/{replay_a}", None, (403, 200, 200)),
    ("POST", "/v1/replay/{replay_b}/cancel", None, (403, 404, ANY_END)),
    ("POST", "/v1/replay/{replay_b}/resume", None, (403, 404, ANY_END)),
    ("GET", "/v1/ops/queues", None, (403, 200, 200)),
    ("GET", "/v1/ops/timeseries", None, (403, 200, 200)),
    ("GET", "/v1/ops/workers", None, (403, 403, 200)),
    ("GET", "/v1/ops/vectors", None, (403, 403, 200)),
    ("POST", "/v1/ops/runs/retry", {"tenant_id": "{B}"}, (403, 403, 200)),
    ("POST", "/v1/ops/runs/retry", {"run_ids": ["{job_b}"]}, (403, 200, 200)),
    ("POST", "/v1/ops/queues/extract/pause", None, (403, 403, 409)),
    ("POST", "/v1/ops/queues/extract/resume", None, (403, 403, 409)),
    ("GET", "/metrics", None, (403, 403, 200)),
    ("GET", "/v1/users/bob/export", None, (404, 404, 403)),  # B's user: not A's, not the operator's
    # what the memory browser reads: a tenant's users, a user's beliefs, sessions and runs
    ("GET", "/v1/users", None, (200, 200, 403)),
    ("GET", "/v1/users/bob/beliefs", None, (404, 404, 403)),
    ("GET", "/v1/users/bob/sessions", None, (404, 404, 403)),
    ("GET", "/v1/users/bob/runs", None, (404, 404, 403)),
]


def fill(value: Any, world: World) -> Any:
    names = {
        "{A}": world.tenant_a, "{B}": world.tenant_b, "{job_a}": world.job_a,
        "{job_b}": world.job_b, "{replay_a}": world.replay_a, "{replay_b}": world.replay_b,
    }  # fmt: skip
    if isinstance(value, str):
        for name, real in names.items():
            value = value.replace(name, real)
        return value
    if isinstance(value, list):
        return [fill(v, world) for v in value]
    if isinstance(value, dict):
        return {k: fill(v, world) for k, v in value.items()}
    return value


def test_every_admin_route_by_role_against_another_tenant(world: World) -> None:
    wrong = []
    for method, path, body, expected in MATRIX:
        for role, want in zip(ROLES, expected, strict=True):
            got = world.call(role, method, fill(path, world), fill(body, world))
            allowed = want if isinstance(want, tuple) else (want,)
            if got.status_code not in allowed:
                wrong.append(
                    f"{role:8} {method} {path}: {got.status_code} (want {want}) {got.text[:120]}"
                )
            elif got.status_code >= 400:
                assert set(got.json()["error"]) == {"code", "message", "details"}
    assert not wrong, "\n".join(wrong)


def test_what_a_tenant_admin_sees_is_its_own_tenant_only(world: World) -> None:
    admin_a = world.keys["admin_a"]
    tenants = world.client.get("/v1/admin/tenants", headers=admin_a).json()
    assert [t["id"] for t in tenants] == [world.tenant_a]
    replays = world.client.get("/v1/replay", headers=admin_a).json()
    assert {r["id"] for r in replays} == {world.replay_a}
    ops = world.client.get("/v1/ops/queues", headers=admin_a).json()
    assert [t["tenant_id"] for t in ops["tenants"]] == [world.tenant_a]
    assert all(q["depth"] is None for q in ops["queues"])  # the shared broker is not its own
    everything = world.client.get("/v1/ops/queues", headers=OPERATOR).json()
    assert {world.tenant_a, world.tenant_b} <= {t["tenant_id"] for t in everything["tenants"]}
    # B's run named by A's admin is not retried (and not said to exist)
    retry = world.client.post(
        "/v1/ops/runs/retry", json={"run_ids": [world.job_b]}, headers=admin_a
    ).json()
    assert retry == {"retried": [], "skipped": [world.job_b]}


def test_a_tenants_user_list_holds_its_own_users_only(world: World) -> None:
    for role in ("app_a", "admin_a"):
        users = world.call(role, "GET", "/v1/users").json()
        assert [u["user_id"] for u in users["data"]] == ["ana"] and users["count"] == 1
    assert world.call("app_a", "GET", "/v1/users?q=bo").json() == {"data": [], "count": 0}


def test_a_tenant_admin_replay_without_a_tenant_covers_its_own(world: World) -> None:
    response = world.client.post(
        "/v1/replay", json={"mode": "dry_run"}, headers=world.keys["admin_a"]
    )
    assert response.status_code == 202, response.text
    assert response.json()["selection"]["tenant_id"] == world.tenant_a


def test_a_key_minted_by_a_tenant_admin_reaches_its_tenant_only(world: World) -> None:
    minted = world.client.post(
        f"/v1/admin/tenants/{world.tenant_a}/keys",
        json={"name": "ci"},
        headers=world.keys["admin_a"],
    )
    assert minted.status_code == 201, minted.text
    key = bearer(minted.json()["key"])
    assert world.client.get("/v1/users/ana/export", headers=key).status_code == 200
    assert world.client.get("/v1/users/bob/export", headers=key).status_code == 404


def test_the_operator_sees_the_vector_store(world: World) -> None:
    """Both tenants' turns are in: a facts and a messages collection each (partitioned)."""
    stats = world.client.get("/v1/ops/vectors", headers=OPERATOR).json()
    assert stats["engine"] == "edge" and stats["layout"] == "partitioned"
    assert stats["collections"] == 4 and stats["other_layout_collections"] == 0
    assert stats["points"] > 0 and stats["disk_bytes"] > 0
    assert stats["points_by_layout"] == {"partitioned": stats["points"]}
    assert stats["segments"] >= 4 and stats["optimizer"] == {"none": 4}
    metrics = world.client.get("/metrics", headers=OPERATOR).text
    assert f'tiermem_vector_points{{layout="partitioned"}} {stats["points"]}' in metrics
    assert 'tiermem_vector_collections_by_optimizer{state="none"} 4' in metrics
    assert 'tiermem_vector_store_info{engine="edge",layout="partitioned"} 1' in metrics
