"""Text no database can store (a lone surrogate, a NUL) is refused with 422 naming the
field, on SQLite and on PostgreSQL (which refuses NUL in any text column with an error of
its own: without the check it was a 500), and what was stored before stays readable."""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path

import pytest
from fastapi.testclient import TestClient

from services.api.main import create_app
from shared.db.migrate import upgrade_to_head
from shared.runtime import Runtime
from tests.conftest import APP_KEY, make_settings

JSON = {"content-type": "application/json"}


@pytest.fixture(name="api", params=["sqlite", "postgres"])
def api_fixture(request: pytest.FixtureRequest, tmp_path: Path) -> Iterator[TestClient]:
    database = (
        {"database_url": request.getfixturevalue("pg_url")} if request.param == "postgres" else {}
    )
    settings = make_settings(tmp_path, qdrant={"in_memory": True}, **database)
    upgrade_to_head(settings)
    runtime = Runtime(settings)
    with TestClient(create_app(settings, runtime=runtime, enqueue=lambda ids: None)) as client:
        client.headers["Authorization"] = f"Bearer {APP_KEY}"
        yield client
    runtime.close()


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
