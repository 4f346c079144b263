"""Text no database can store (a lone surrogate, a NUL) is refused with 422 naming the
field, on SQLite and on PostgreSQL (which refuses NUL in any text column with an error of
its own: without the check it was a 500), and what was stored before stays readable."""

from __future__ import annotations

from collections.abc import Iterator
from contextlib import ExitStack, contextmanager
from pathlib import Path

import pytest
from fastapi.testclient import TestClient

from services.api.main import create_app
from shared.db.migrate import upgrade_to_head
from shared.runtime import Runtime
from tests.factories import ADMIN_KEY, APP_KEY, fresh_pg_database, make_settings

JSON = {"content-type": "application/json"}
DATABASES = ["sqlite", "postgres"]


@contextmanager
def serving(database: str, tmp_path: Path) -> Iterator[TestClient]:
    """The API over SQLite or a fresh PostgreSQL database, with the app key."""
    with ExitStack() as stack:
        url = (
            {"database_url": stack.enter_context(fresh_pg_database())}
            if database == "postgres"
            else {}
        )
        settings = make_settings(tmp_path, qdrant={"in_memory": True}, **url)
        upgrade_to_head(settings)
        runtime = Runtime(settings)
        stack.callback(runtime.close)
        app = create_app(settings, runtime=runtime, enqueue=lambda ids: None)
        with TestClient(app) as client:
            client.headers["Authorization"] = f"Bearer {APP_KEY}"
            yield client


@pytest.fixture(name="api", params=DATABASES)
def api_fixture(request: pytest.FixtureRequest, tmp_path: Path) -> Iterator[TestClient]:
    with serving(request.param, tmp_path) as client:
        yield client


@pytest.fixture(name="api_of_module", params=DATABASES, scope="module")
def api_of_module_fixture(
    request: pytest.FixtureRequest, tmp_path_factory: pytest.TempPathFactory
) -> Iterator[TestClient]:
    """One API per database for the many requests that store nothing."""
    with serving(request.param, tmp_path_factory.mktemp(request.param)) as client:
        stored = client.post(
            "/v1/sessions/s1/turns", json={"user_id": "ana", "user_message": "Hi."}
        )
        assert stored.status_code == 202, stored.text
        yield client


@pytest.mark.parametrize(
    ("body", "field"),
    [
        ('{"user_id": "ana", "user_message": "I live in \\ud800 Lima"}', "user_message"),
        ('{"user_id": "ana", "user_message": {"content": "hi", "speaker": "A\\u0000na"}}',
         "user_message.speaker"),
        ('{"user_id": "ana", "user_message": "hi", "assistant_message": "ok \\udc00"}',
         "assistant_message"),
    ],
    ids=["lone-surrogate", "nul-in-speaker", "lone-low-surrogate-in-reply"],
)  # fmt: skip
def test_text_no_database_stores_is_refused_and_nothing_stored_is_lost(
    api: TestClient, body: str, field: str
) -> None:
    first = api.post(
        "/v1/sessions/s1/turns", json={"user_id": "ana", "user_message": "I like tea."}
    )
    assert first.status_code == 202, first.text
    refused = api.post("/v1/sessions/s1/turns", content=body.encode(), headers=JSON)
    assert refused.status_code == 422, refused.text
    assert refused.json()["error"]["message"].startswith(field + " "), refused.text
    exported = api.get("/v1/users/ana/export")
    assert exported.status_code == 200 and "I like tea." in exported.text
    assert exported.text.count('"role":"user"') == 1


# Issue 24: an id in a path went to the database as it came; PostgreSQL refuses a NUL in
# any text (psycopg.DataError: a 500, and the connection dropped) where SQLite found no row.
ADMIN = {"Authorization": f"Bearer {ADMIN_KEY}"}
ID_PATHS = [
    ("GET", "/v1/jobs/{}", "job_id", None),
    ("GET", "/v1/users/ana/memories/{}", "memory_id", None),
    ("DELETE", "/v1/users/ana/memories/{}", "memory_id", None),
    ("GET", "/v1/sessions/s1/compression/runs/{}", "run_id", None),
    ("GET", "/v1/replay/{}", "job_id", ADMIN),
    ("POST", "/v1/replay/{}/cancel", "job_id", ADMIN),
    ("POST", "/v1/replay/{}/resume", "job_id", ADMIN),
    ("POST", "/v1/admin/tenants/{}/keys", "tenant_id", ADMIN),
    ("GET", "/mem0/v1/memories/{}/", "memory_id", None),
    ("PUT", "/mem0/v1/memories/{}/", "memory_id", None),
    ("DELETE", "/mem0/v1/memories/{}/", "memory_id", None),
    ("GET", "/mem0/v1/memories/{}/history/", "memory_id", None),
    ("DELETE", "/mem0/v2/entities/user/{}/", "entity_id", None),
    ("GET", "/mem0/v1/event/{}/", "event_id", None),
]
BODIES = {"PUT": {"text": "I like green tea."}, "POST": {"name": "k2"}}


@pytest.mark.parametrize("bad_id", ["%00", "a%00b", "x%0A"], ids=["nul", "inner-nul", "newline"])
@pytest.mark.parametrize(("method", "path", "param", "headers"), ID_PATHS,
                         ids=[f"{m} {p}" for m, p, _, _ in ID_PATHS])  # fmt: skip
def test_every_id_in_a_path_is_checked_by_the_id_rule(
    api_of_module: TestClient,
    method: str,
    path: str,
    param: str,
    headers: dict[str, str] | None,
    bad_id: str,
) -> None:
    api = api_of_module
    response = api.request(method, path.format(bad_id), headers=headers, json=BODIES.get(method))
    assert response.status_code == 422, response.text
    error = response.json()["error"]
    assert error["code"] == "invalid_input", error
    assert error["message"].startswith(f"path.{param}: invalid id; use 1-128"), error
    # the database was not asked: the next request on the same connection pool works
    assert api.get("/v1/users/ana/export").status_code == 200
