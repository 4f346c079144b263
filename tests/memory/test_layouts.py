"""Both layouts serve the same API, and `tiermem reindex` moves a store from one to the
other from SQL: after the layout setting changes, every memory and message is found again
and the other layout's collections are gone."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest
from fastapi.testclient import TestClient

from services.api.main import create_app
from shared.config import Settings
from shared.db.migrate import upgrade_to_head
from shared.extraction.pipeline import run_extraction
from shared.runtime import Runtime
from shared.vectors.scope import layout_of
from tests import factories as f
from tests.conftest import APP_KEY, make_settings, tiermem_env

SAID = {"ana": "I live in Lisbon and I love jazz.", "bo": "I work as a pilot and I have a dog."}


def api(settings: Settings) -> tuple[TestClient, Runtime]:
    runtime = Runtime(settings)

    def extract_now(run_ids: list[str]) -> None:
        for run_id in run_ids:
            run_extraction(runtime, run_id)

    client = TestClient(create_app(settings, runtime=runtime, enqueue=extract_now))
    client.headers["Authorization"] = f"Bearer {APP_KEY}"
    return client, runtime


def found(client: TestClient) -> dict[str, Any]:
    memories = {
        u: [
            h["content"]
            for h in client.post(f"/v1/users/{u}/memories/search", json={"query": q}).json()["data"]
        ]
        for u, q in (("ana", "where does she live"), ("bo", "what is his job"))
    }
    history = client.get("/v1/users/ana/history/search", params={"q": "music jazz"}).json()
    return {
        "memories": memories,
        "history_vector_hits": sum(h["vector_rank"] is not None for h in history["data"]),
    }


def reindex(settings: Settings, layout: str) -> None:
    env = tiermem_env({
        "TIERMEM_DATA_DIR": str(settings.data_dir),
        "TIERMEM_QDRANT__LAYOUT": layout,
        "TIERMEM_QDRANT__ENGINE": settings.qdrant.engine,
    })  # fmt: skip
    run = subprocess.run([sys.executable, "-m", "services.cli.main", "reindex"], env=env,
                         capture_output=True, text=True, timeout=300,
                         cwd=Path(__file__).resolve().parents[2])  # fmt: skip
    assert run.returncode == 0, run.stderr


@pytest.mark.parametrize("engine", ["edge", "local"])
def test_reindex_moves_the_store_between_layouts(tmp_path: Path, engine: str) -> None:
    per_user = make_settings(tmp_path, qdrant={"layout": "per_user", "engine": engine})
    upgrade_to_head(per_user)
    client, runtime = api(per_user)
    with client:
        for user, text in SAID.items():
            assert (
                client.post(f"/v1/sessions/s-{user}/turns", json=f.turn(user, text)).status_code
                == 202
            )
        before = found(client)
    runtime.close()
    assert before["memories"]["ana"] and before["memories"]["bo"] and before["history_vector_hits"]

    for layout in ("partitioned", "per_user"):
        reindex(per_user, layout)
        settings = make_settings(tmp_path, qdrant={"layout": layout, "engine": engine})
        client, runtime = api(settings)
        with client:
            assert found(client) == before
            kinds = {layout_of(c, "tm_") for c in runtime.vectors.list_collections()}
            assert kinds == {layout}
            # one collection per tenant (facts, messages) or per user (2 users × 2)
            assert len(runtime.vectors.list_collections()) == (2 if layout == "partitioned" else 4)
        runtime.close()
