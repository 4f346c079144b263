"""Both layouts serve the same API, and `tiermem reindex` moves a store from one to the
other from SQL: after the layout setting changes, every memory and message is found again
and the other layout's collections are gone. The same command brings over the data dir of
a tiermem that stored vectors in qdrant-client's local mode, which every process names
until then; a setting that still asks for that mode stops a command with what to do. It
rebuilds a damaged collection too."""

from __future__ import annotations

import json
import logging
import shutil
import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest
import qdrant_edge as qe
from fastapi.testclient import TestClient
from qdrant_client import QdrantClient
from qdrant_client import models as qm
from sqlalchemy import update
from sqlmodel import Session, select

from services.api.main import create_app
from shared.config import Settings
from shared.db.engine import make_engine
from shared.db.migrate import upgrade_to_head
from shared.db.models import Message, User
from shared.flows.extract_turn import run_extraction
from shared.runtime import Runtime
from shared.vectors import local_mode_leftovers
from shared.vectors.base import SHARED_HNSW
from shared.vectors.scope import USER_FIELD, layout_of
from tests import factories as f
from tests import processes
from tests.factories import APP_KEY, make_settings, tiermem_env

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


def reindex(
    settings: Settings, layout: str, *options: str, **env: str
) -> subprocess.CompletedProcess[str]:
    """`tiermem reindex` in its own process; its console writes to stderr."""
    return processes.run(
        [sys.executable, "-m", "services.cli.main", "reindex", *options],
        env=tiermem_env(
            {"TIERMEM_DATA_DIR": str(settings.data_dir), "TIERMEM_QDRANT__LAYOUT": layout, **env}
        ),
        capture_output=True,
        text=True,
        timeout=300,
        cwd=Path(__file__).resolve().parents[2],
    )


def store_turns(settings: Settings) -> dict[str, Any]:
    """Both users' turns through the API, extracted; what the searches then find."""
    upgrade_to_head(settings)
    client, runtime = api(settings)
    with client:
        for user, text in SAID.items():
            assert (
                client.post(f"/v1/sessions/s-{user}/turns", json=f.turn(user, text)).status_code
                == 202
            )
        stored = found(client)
    runtime.close()
    assert stored["memories"]["ana"] and stored["memories"]["bo"] and stored["history_vector_hits"]
    return stored


def test_reindex_moves_the_store_between_layouts(tmp_path: Path) -> None:
    per_user = make_settings(tmp_path, qdrant={"layout": "per_user"})
    before = store_turns(per_user)

    for layout in ("partitioned", "per_user"):
        run = reindex(per_user, layout)
        assert run.returncode == 0, run.stderr
        settings = make_settings(tmp_path, qdrant={"layout": layout})
        client, runtime = api(settings)
        with client:
            assert found(client) == before
            kinds = {layout_of(c, "tm_") for c in runtime.vectors.list_collections()}
            assert kinds == {layout}
            # one collection per tenant (facts, messages) or per user (2 users × 2)
            assert len(runtime.vectors.list_collections()) == (2 if layout == "partitioned" else 4)
        runtime.close()


def test_an_earlier_local_mode_folder_is_named_until_reindex_rebuilds_it(
    tmp_path: Path, caplog: pytest.LogCaptureFixture
) -> None:
    settings = make_settings(tmp_path)
    before = store_turns(settings)
    # The data dir as an earlier tiermem left it: vectors in qdrant-client's local mode
    # under <data dir>/qdrant, none in Qdrant Edge's folder yet.
    shutil.rmtree(settings.data_dir / "vectors")
    earlier = settings.data_dir / "qdrant"
    local_mode = QdrantClient(path=str(earlier))
    local_mode.create_collection("tm_old", qm.VectorParams(size=2, distance=qm.Distance.COSINE))
    local_mode.close()

    client, runtime = api(settings)
    with client, caplog.at_level(logging.WARNING, logger="shared.runtime"):
        assert found(client)["memories"] == {"ana": [], "bo": []}  # nothing reads that folder
    runtime.close()
    [warning] = [r.getMessage() for r in caplog.records if "earlier tiermem" in r.getMessage()]
    assert str(earlier.resolve()) in warning and "`tiermem reindex`" in warning

    stale = reindex(settings, "partitioned", TIERMEM_QDRANT__ENGINE="local")
    assert stale.returncode == 2
    assert "TIERMEM_QDRANT__ENGINE=local is no longer supported" in stale.stderr
    assert "Unset TIERMEM_QDRANT__ENGINE, then run `tiermem reindex`" in stale.stderr
    assert "pydantic" not in stale.stderr and "Traceback" not in stale.stderr

    run = reindex(settings, "partitioned")
    assert run.returncode == 0, run.stderr
    assert f"{earlier.resolve()} holds an earlier tiermem's vectors" in run.stderr
    client, runtime = api(settings)
    with client:
        assert found(client) == before
    runtime.close()
    shutil.rmtree(earlier)
    assert local_mode_leftovers(settings) is None  # deleted: the warning stops


def as_an_earlier_tiermem_made_it(folder: Path) -> int:
    """Remake an Edge message shard as tiermem made it before sparse vectors (ADR 0013): one
    unnamed dense vector a point, small talk left out; returns the points kept."""
    made = qe.EdgeShard.load(str(folder))
    config = json.loads((folder / "edge_config.json").read_text())
    records, _ = made.scroll(qe.ScrollRequest(limit=10_000, with_payload=True, with_vector=True))
    made.close()
    shutil.rmtree(folder)
    dense = config["vectors"]["dense"]
    earlier = qe.EdgeShard.create(str(folder), qe.EdgeConfig(
        vectors=qe.EdgeVectorParams(size=dense["size"], distance=qe.Distance.Cosine),
        hnsw_config=qe.HnswIndexConfig(**SHARED_HNSW),
    ))  # fmt: skip
    earlier.update(qe.UpdateOperation.create_field_index(
        USER_FIELD, qe.KeywordIndexParams(is_tenant=True)
    ))  # fmt: skip
    points = [qe.Point(r.id, r.vector["dense"], r.payload) for r in records if "dense" in r.vector]
    earlier.update(qe.UpdateOperation.upsert_points(points))
    earlier.close()
    return len(points)


def test_a_message_collection_of_an_earlier_tiermem_is_named_and_remade_by_reindex(
    tmp_path: Path, caplog: pytest.LogCaptureFixture
) -> None:
    settings = make_settings(tmp_path)
    before = store_turns(settings)
    [shard] = (settings.data_dir / "vectors").glob("*_m")
    assert as_an_earlier_tiermem_made_it(shard) > 0
    engine = make_engine(settings)
    with engine.begin() as conn:  # as migration 0007 leaves the rows of an earlier tiermem
        conn.execute(update(Message).values(indexed_at=None))
    engine.dispose()

    client, runtime = api(settings)
    with client, caplog.at_level(logging.WARNING, logger="shared.runtime"):
        assert found(client) == before  # SQL full-text and the dense vectors, as before
        jazz = client.get("/v1/users/ana/history/search", params={"q": "jazz"}).json()["data"]
        assert jazz[0]["keyword_rank"] == 1 and "jazz" in jazz[0]["content"]
    runtime.close()
    [warning] = [r.getMessage() for r in caplog.records if "before sparse" in r.getMessage()]
    assert "1 message collections" in warning and "`tiermem reindex`" in warning

    run = reindex(settings, "partitioned")
    assert run.returncode == 0, run.stderr
    assert "sparse_vectors" in json.loads((shard / "edge_config.json").read_text())
    caplog.clear()
    client, runtime = api(settings)
    with client, caplog.at_level(logging.WARNING, logger="shared.runtime"):
        assert found(client) == before
        jazz = client.get("/v1/users/ana/history/search", params={"q": "jazz"}).json()["data"]
        assert jazz[0]["keyword_rank"] == 1 and jazz[0]["vector_rank"] is not None
    runtime.close()
    assert not [r for r in caplog.records if "before sparse" in r.getMessage()]


@pytest.mark.parametrize("layout", ["partitioned", "per_user"])
def test_a_damaged_collection_is_a_503_naming_it_and_reindex_rebuilds_it(
    tmp_path: Path, layout: str
) -> None:
    settings = make_settings(tmp_path, qdrant={"layout": layout})
    before = store_turns(settings)
    runtime = Runtime(settings)
    with Session(runtime.engine) as s:
        ana = s.exec(select(User).where(User.external_id == "ana")).one()
    damaged = runtime.facts_of(tenant_id=ana.tenant_id, user_id=ana.id).collection
    runtime.close()
    # A segment's state file turned to garbage: the engine refuses to load the shard.
    [segment] = (Path(str(settings.qdrant_path)) / damaged / "segments").iterdir()
    (segment / "segment.json").write_bytes(b"\x00\xff" * 40)

    client, runtime = api(settings)
    with client:
        search = client.post("/v1/users/ana/memories/search", json={"query": "where she lives"})
        assert search.status_code == 503, search.text
        error = search.json()["error"]
        assert error["code"] == "unavailable" and error["details"] == {"collection": damaged}
        assert f"vector collection {damaged} is damaged" in error["message"]
        assert "`tiermem reindex`" in error["message"] and "Service runtime" not in error["message"]
        # The other collections keep working: ana's messages are still found by meaning...
        history = client.get("/v1/users/ana/history/search", params={"q": "music jazz"})
        hits = sum(h["vector_rank"] is not None for h in history.json()["data"])
        assert hits == before["history_vector_hits"]
        # ...and with a collection of her own, bo's memories are not hers.
        bo = client.post("/v1/users/bo/memories/search", json={"query": "what is his job"})
        assert bo.status_code == (200 if layout == "per_user" else 503)
    runtime.close()

    # Only ana is asked for; in the partitioned layout the tenant's collection held bo's
    # memories too, so he is rebuilt with her.
    run = reindex(settings, layout, "--user", "ana")
    assert run.returncode == 0, run.stderr
    client, runtime = api(settings)
    with client:
        assert found(client) == before
    runtime.close()
