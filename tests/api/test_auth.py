"""API keys: who gets in (401), who may do what (403), keys kept hashed, production refusing
dev secrets, and tenants that cannot see each other (404, never another tenant's data).

The API runs in-process with the embedded Celery worker and the offline extractor.
"""

from __future__ import annotations

import hashlib
import time
from pathlib import Path
from typing import Any

import pytest
from fastapi.testclient import TestClient
from sqlalchemy import text, update
from sqlmodel import Session, col

from services.api.main import create_app
from shared.config import DEV_ADMIN_KEY, DEV_APP_KEY, DEV_SECRET_KEY, Settings
from shared.db.migrate import upgrade_to_head
from shared.db.models import ApiKey, utcnow
from shared.records.tenancy import KeyCache
from shared.runtime import Runtime
from tests import factories as f
from tests.factories import ADMIN_KEY, APP_KEY, wait_job

ADMIN = {"Authorization": f"Bearer {ADMIN_KEY}"}
MEMORIES = "/v1/users/ana/memories"
STRONG_SECRET = "s" * 40
STRONG_ADMIN = "a" * 30


def bearer(key: str) -> dict[str, str]:
    return {"Authorization": f"Bearer {key}"}


def error_of(response: Any, status: int) -> dict[str, Any]:
    assert response.status_code == status, response.text
    error: dict[str, Any] = response.json()["error"]
    assert set(error) == {"code", "message", "details"}
    return error


def new_tenant(client: TestClient, name: str) -> tuple[str, str]:
    """(tenant id, its first app key) through the admin API."""
    response = client.post("/v1/admin/tenants", json={"name": name}, headers=ADMIN)
    assert response.status_code == 201, response.text
    body = response.json()
    assert body["tenant"]["name"] == name and body["app_key"]["scope"] == "app"
    return body["tenant"]["id"], body["app_key"]["key"]


# -- who gets in ---------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("headers", "says"),
    [
        ({}, "missing API key"),
        ({"Authorization": "Bearer "}, "missing API key"),
        ({"Authorization": f"Basic {APP_KEY}"}, "missing API key"),  # only Bearer is read
        ({"Authorization": "Bearer not-a-key"}, "unknown or revoked"),
        ({"X-API-Key": "not-a-key"}, "unknown or revoked"),
        ({"Authorization": f"Bearer {APP_KEY}x"}, "unknown or revoked"),
    ],
    ids=["none", "empty-bearer", "basic", "wrong-bearer", "wrong-x-api-key", "near-miss"],
)
def test_without_a_valid_key_every_route_answers_401(
    client: TestClient, headers: dict[str, str], says: str
) -> None:
    del client.headers["Authorization"]
    for method, path in (
        ("GET", MEMORIES),
        ("POST", "/v1/sessions/s1/turns"),
        ("GET", "/v1/jobs/x"),
        ("POST", "/v1/admin/tenants"),
    ):
        response = client.request(method, path, headers=headers, json={"name": "x"})
        error = error_of(response, 401)
        assert error["code"] == "unauthorized" and says in error["message"], (path, error)
        assert response.headers["WWW-Authenticate"] == "Bearer"


def test_health_probes_need_no_key(client: TestClient) -> None:
    del client.headers["Authorization"]
    assert client.get("/healthz").status_code == 200
    assert client.get("/readyz").status_code == 200


def test_x_api_key_header_and_lowercase_bearer_work(client: TestClient) -> None:
    del client.headers["Authorization"]
    accepted = client.post(
        "/v1/sessions/s1/turns",
        json=f.turn("ana", "I live in Oslo."),
        headers={"X-API-Key": APP_KEY},
    )
    assert accepted.status_code == 202, accepted.text
    assert client.get(MEMORIES, headers={"X-API-Key": APP_KEY}).status_code == 200
    assert client.get(MEMORIES, headers={"authorization": f"bearer {APP_KEY}"}).status_code == 200


def test_revoked_key_is_refused_once_the_key_cache_expires(
    client: TestClient, runtime: Runtime, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setattr(runtime, "key_cache", KeyCache(ttl_s=0.3))
    _, key = new_tenant(client, "acme")
    del client.headers["Authorization"]  # (it would win over X-API-Key)
    assert client.get("/v1/users/nobody/memories", headers=bearer(key)).status_code == 404
    with Session(runtime.engine) as s:
        s.execute(
            update(ApiKey)
            .where(col(ApiKey.key_hash) == hashlib.sha256(key.encode()).hexdigest())
            .values(revoked_at=utcnow())
        )
        s.commit()
    # The documented trade (TIERMEM_AUTH__KEY_CACHE_S): this process still knows the key ...
    assert client.get("/v1/users/nobody/memories", headers=bearer(key)).status_code == 404
    time.sleep(0.35)
    # ... and refuses it once its entry expired.
    for headers in (bearer(key), {"X-API-Key": key}):
        response = client.get("/v1/users/nobody/memories", headers=headers)
        assert "revoked" in error_of(response, 401)["message"]
        assert response.headers["WWW-Authenticate"] == "Bearer"
    # other keys are unaffected
    assert client.get("/v1/users/nobody/memories", headers=bearer(APP_KEY)).status_code == 404


# -- who may do what -----------------------------------------------------------------------


def test_admin_key_on_user_routes_is_403_with_a_way_out(
    client: TestClient, runtime: Runtime
) -> None:
    for method, path, body in (
        ("GET", MEMORIES, None),
        ("POST", "/v1/sessions/s1/turns", f.turn("ana", "I like tea.")),
        ("POST", "/v1/import", {"messages": []}),
        ("POST", f"{MEMORIES}/search", {"query": "x"}),
        ("DELETE", "/v1/users/ana", None),
        ("GET", "/v1/users/ana/export", None),
    ):
        error = error_of(client.request(method, path, json=body, headers=ADMIN), 403)
        assert error["code"] == "forbidden", (path, error)
        assert "app key" in error["message"] and "/v1/admin/tenants" in error["message"]
    with Session(runtime.engine) as s:
        assert s.execute(text("SELECT count(*) FROM messages")).scalar_one() == 0


def test_app_key_on_admin_routes_is_403(client: TestClient, runtime: Runtime) -> None:
    for method, path in (
        ("POST", "/v1/admin/tenants"),
        ("GET", "/v1/admin/tenants"),
        ("POST", "/v1/admin/tenants/any/keys"),
    ):
        error = error_of(client.request(method, path, json={"name": "evil"}), 403)
        assert error["code"] == "forbidden" and "admin key" in error["message"], (path, error)
        assert error["details"] == {"scope": "app"}
    with Session(runtime.engine) as s:
        assert s.execute(text("SELECT count(*) FROM tenants")).scalar_one() == 1  # the dev one
        assert s.execute(text("SELECT count(*) FROM api_keys")).scalar_one() == 1


def test_admin_creates_tenants_and_keys(client: TestClient) -> None:
    tenant_id, first = new_tenant(client, "acme")
    response = client.post(
        f"/v1/admin/tenants/{tenant_id}/keys", json={"name": "mobile"}, headers=ADMIN
    )
    assert response.status_code == 201, response.text
    second = response.json()
    assert second["tenant_id"] == tenant_id and second["scope"] == "app"
    assert second["key"] != first

    # both keys reach the same tenant's users
    accepted = client.post(
        "/v1/sessions/m1/turns", json=f.turn("zoe", "I live in Rome."), headers=bearer(first)
    )
    assert accepted.status_code == 202, accepted.text
    assert client.get("/v1/users/zoe/memories", headers=bearer(second["key"])).status_code == 200
    # and not the dev tenant's
    assert client.get("/v1/users/zoe/memories").status_code == 404

    names = [t["name"] for t in client.get("/v1/admin/tenants", headers=ADMIN).json()]
    assert names == ["acme", "default"]
    assert (
        error_of(client.post("/v1/admin/tenants", json={"name": "acme"}, headers=ADMIN), 409)[
            "code"
        ]
        == "conflict"
    )
    assert (
        error_of(client.post("/v1/admin/tenants/nope/keys", json={}, headers=ADMIN), 404)["code"]
        == "not_found"
    )


def test_admin_key_reads_any_tenants_job(client: TestClient) -> None:
    _, key = new_tenant(client, "acme")
    jobs = []
    for headers in (bearer(APP_KEY), bearer(key)):
        response = client.post(
            "/v1/sessions/s1/turns", json=f.turn("ana", "I live in Oslo."), headers=headers
        )
        jobs.append(response.json()["job_id"])
    for job_id in jobs:
        assert wait_job(client, job_id, headers=ADMIN)["id"] == job_id
    assert client.get(f"/v1/jobs/{jobs[1]}").status_code == 404  # an app key: its own only
    assert client.get(f"/v1/jobs/{jobs[0]}", headers=bearer(key)).status_code == 404


def test_keys_are_stored_hashed(client: TestClient, runtime: Runtime) -> None:
    tenant_id, first = new_tenant(client, "acme")
    second = client.post(
        f"/v1/admin/tenants/{tenant_id}/keys", json={"scope": "admin"}, headers=ADMIN
    ).json()["key"]
    plaintexts = [first, second, APP_KEY]

    with Session(runtime.engine) as s:
        rows = [dict(r._mapping) for r in s.execute(text("SELECT * FROM api_keys"))]
    assert len(rows) == 3
    hashes = {hashlib.sha256(k.encode()).hexdigest() for k in plaintexts}
    assert {r["key_hash"] for r in rows} == hashes
    for row in rows:
        for key in plaintexts:
            assert all(key not in str(value) for value in row.values()), row
    # nor anywhere in the database files (WAL included)
    data = b"".join(p.read_bytes() for p in Path(runtime.settings.data_dir).glob("tiermem.db*"))
    assert data and all(k.encode() not in data for k in plaintexts)


# -- production refuses dev secrets --------------------------------------------------------


@pytest.fixture(name="clean_env")
def clean_env_fixture(monkeypatch: pytest.MonkeyPatch) -> None:
    import os

    for name in os.environ:
        if name.startswith("TIERMEM_"):
            monkeypatch.delenv(name)


@pytest.mark.parametrize(
    ("settings", "names"),
    [
        ({}, ["TIERMEM_SECRET_KEY", "TIERMEM_AUTH__ADMIN_KEY"]),
        (
            {"secret_key": DEV_SECRET_KEY, "auth": {"admin_key": STRONG_ADMIN}},
            ["TIERMEM_SECRET_KEY"],
        ),
        (
            {"secret_key": "short-but-not-default", "auth": {"admin_key": STRONG_ADMIN}},
            ["TIERMEM_SECRET_KEY", "32"],
        ),
        (
            {"secret_key": STRONG_SECRET, "auth": {"admin_key": DEV_ADMIN_KEY}},
            ["TIERMEM_AUTH__ADMIN_KEY", "non-default"],
        ),
        ({"secret_key": STRONG_SECRET}, ["TIERMEM_AUTH__ADMIN_KEY", "non-default"]),
        (
            {"secret_key": STRONG_SECRET, "auth": {"admin_key": "too-short-admin-key"}},
            ["TIERMEM_AUTH__ADMIN_KEY", "24"],
        ),
        (
            {
                "secret_key": STRONG_SECRET,
                "auth": {"admin_key": STRONG_ADMIN, "dev_app_key": DEV_APP_KEY},
            },
            ["TIERMEM_AUTH__DEV_APP_KEY", "development only"],
        ),
    ],
    ids=[
        "defaults",
        "default-secret",
        "short-secret",
        "dev-admin-key",
        "no-admin-key",
        "short-admin-key",
        "dev-app-key",
    ],
)
def test_production_refuses_unsafe_settings(
    clean_env: None, settings: dict[str, Any], names: list[str]
) -> None:
    with pytest.raises(ValueError) as refused:
        Settings(_env_file=None, environment="production", **settings)  # type: ignore[call-arg]
    for name in names:
        assert name in str(refused.value)


def test_production_accepts_proper_secrets_and_has_no_dev_keys(
    clean_env: None, tmp_path: Path
) -> None:
    settings = Settings(
        _env_file=None,
        environment="production",
        secret_key=STRONG_SECRET,  # type: ignore[call-arg]
        auth={"admin_key": STRONG_ADMIN},
        data_dir=tmp_path,
        qdrant={"in_memory": True},
    )
    assert settings.admin_key == STRONG_ADMIN and settings.dev_app_key is None
    upgrade_to_head(settings)
    runtime = Runtime(settings)
    try:
        with TestClient(create_app(settings, runtime=runtime, enqueue=lambda ids: None)) as client:
            for dev_key in (APP_KEY, ADMIN_KEY):
                assert client.get(MEMORIES, headers=bearer(dev_key)).status_code == 401
            assert client.get("/v1/admin/tenants", headers=bearer(STRONG_ADMIN)).json() == []
    finally:
        runtime.close()


# -- tenants cannot see each other ---------------------------------------------------------


def _tell(client: TestClient, key: str, session: str, text_: str) -> str:
    response = client.post(
        f"/v1/sessions/{session}/turns", json=f.turn("ana", text_), headers=bearer(key)
    )
    assert response.status_code == 202, response.text
    job = wait_job(client, response.json()["job_id"], headers=bearer(key))
    assert job["status"] == "done" and job["facts_added"] >= 1, job
    return str(job["id"])


def test_tenant_b_cannot_reach_tenant_a(client: TestClient) -> None:
    a = APP_KEY
    _, b = new_tenant(client, "acme")
    job_a = _tell(client, a, "s1", "I live in Berlin and I love jazz.")
    [memory_a, *_] = client.get(MEMORIES).json()["data"]
    memory_path = f"{MEMORIES}/{memory_a['id']}"

    def b_is_refused() -> None:
        assert client.get(f"/v1/jobs/{job_a}", headers=bearer(b)).status_code == 404
        assert client.get(memory_path, headers=bearer(b)).status_code == 404
        assert client.delete(memory_path, headers=bearer(b)).status_code == 404

    # before B has an "ana" of its own, A's is simply not there for B
    b_is_refused()
    for method, path in (
        ("GET", MEMORIES),
        ("GET", "/v1/users/ana/export"),
        ("DELETE", "/v1/users/ana"),
    ):
        assert client.request(method, path, headers=bearer(b)).status_code == 404
    assert (
        client.post(f"{MEMORIES}/search", json={"query": "jazz"}, headers=bearer(b)).status_code
        == 404
    )

    # B's own "ana", even in a session with the same id, is a different person
    _tell(client, b, "s1", "I work as a pilot and I have a dog.")
    b_is_refused()
    exported = client.get("/v1/users/ana/export", headers=bearer(b)).json()
    assert exported["messages"] and all("Berlin" not in m["content"] for m in exported["messages"])
    memories_a = {m["id"] for m in client.get(MEMORIES).json()["data"]}
    memories_b = {m["id"] for m in client.get(MEMORIES, headers=bearer(b)).json()["data"]}
    assert memories_b and not memories_a & memories_b
    for query in ("Where does Ana live?", "Berlin jazz music", memory_a["content"]):
        hits = client.post(
            f"{MEMORIES}/search", json={"query": query, "k": 100}, headers=bearer(b)
        ).json()["data"]
        assert {h["id"] for h in hits} <= memories_b

    # B erasing its "ana" leaves A's untouched
    assert client.delete("/v1/users/ana", headers=bearer(b)).status_code == 200
    assert {m["id"] for m in client.get(MEMORIES).json()["data"]} == memories_a
    assert client.get(memory_path).status_code == 200
    hits = client.post(f"{MEMORIES}/search", json={"query": memory_a["content"], "k": 1}).json()
    assert hits["data"][0]["id"] == memory_a["id"]
    assert client.get(f"/v1/jobs/{job_a}").status_code == 200
