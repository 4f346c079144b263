"""Deleting a user on the embedded engine: unsearchable at once, and after `tiermem compact`
nothing of theirs is left in the vector folder's files (the engine's own vacuum would leave
it in the write-ahead log)."""

from __future__ import annotations

import sys
import uuid
from pathlib import Path

import pytest
import qdrant_edge

from shared.db.migrate import upgrade_to_head
from shared.vectors import VectorPoint
from shared.vectors.edge_store import EdgeVectorStore
from shared.vectors.sparse import document_terms, query_terms
from tests import factories as f
from tests import processes
from tests.factories import make_settings, tiermem_env
from tests.memory.test_layouts import api


def bytes_on_disk(folder: Path, marker: str) -> int:
    return sum(p.read_bytes().count(marker.encode()) for p in folder.rglob("*") if p.is_file())


def test_compaction_keeps_the_live_points_and_indexes_and_drops_the_deleted(
    tmp_path: Path,
) -> None:
    folder = tmp_path / "vectors"
    store = EdgeVectorStore(path=str(folder))
    try:
        store.ensure_collection("tm_shared", 3, tenant_field="tm_user")
        kept = {str(uuid.uuid4()): float(i) for i in range(30)}
        store.upsert("tm_shared", [
            *(VectorPoint(p, [1.0, x, 0.0], {"tm_user": "kept", "n": x}) for p, x in kept.items()),
            *(VectorPoint(str(uuid.uuid4()), [0.0, 1.0, float(i)],
                          {"tm_user": "gone", "text": f"GONE-{i}"}) for i in range(5)),
        ])  # fmt: skip
        store.delete_where("tm_shared", {"tm_user": "gone"})
        assert (
            store.search("tm_shared", [0.0, 1.0, 0.0], limit=5, payload_filter={"tm_user": "gone"})
            == []
        )
        assert bytes_on_disk(folder, "GONE-") > 0  # deleted, yet still in the files

        assert store.compact("tm_shared") is True
        assert bytes_on_disk(folder, "GONE-") == 0
        assert store.list_collections() == ["tm_shared"]
        hits = store.search(
            "tm_shared", [1.0, 0.0, 0.0], limit=50, payload_filter={"tm_user": "kept"}
        )
        assert {h.id: h.payload["n"] for h in hits} == kept
        state = store.describe("tm_shared")
        assert state is not None and state.points == 30
        assert store.compact("tm_missing") is False
    finally:
        store.close()
    # The compacted shard reopens with its tenant index, and no compaction folder is left.
    shard = qdrant_edge.EdgeShard.load(str(folder / "tm_shared"))
    try:
        index = shard.info().payload_schema["tm_user"]
        assert index.params is not None and index.params.is_tenant
    finally:
        shard.close()
    assert sorted(p.name for p in folder.iterdir() if p.is_dir()) == ["tm_shared"]


def test_a_deleted_user_is_told_when_the_disk_is_freed_and_compact_frees_it(
    tmp_path: Path,
) -> None:
    settings = make_settings(tmp_path)
    upgrade_to_head(settings)
    client, runtime = api(settings)
    with client:
        for user, text in (("ana", "I live in Zanzibar."), ("bo", "I live in Reykjavik.")):
            sent = client.post(f"/v1/sessions/s-{user}/turns", json=f.turn(user, text))
            assert sent.status_code == 202, sent.text
        deleted = client.delete("/v1/users/ana")
        assert deleted.status_code == 200, deleted.text
        assert "`tiermem compact`" in deleted.json()["disk_reclaimed"]
    runtime.close()
    folder = Path(settings.qdrant_path or "")
    assert bytes_on_disk(folder, "Zanzibar") > 0

    run = processes.run(
        [sys.executable, "-m", "services.cli.main", "compact"],
        env=tiermem_env({"TIERMEM_DATA_DIR": str(settings.data_dir)}),
        capture_output=True, text=True, timeout=120, cwd=Path(__file__).resolve().parents[2],
    )  # fmt: skip
    assert run.returncode == 0, run.stderr
    assert "compacted 2 collections" in run.stderr
    assert bytes_on_disk(folder, "Zanzibar") == 0

    client, runtime = api(settings)
    with client:
        hits = client.post("/v1/users/bo/memories/search", json={"query": "where does he live"})
        assert any("Reykjavik" in h["content"] for h in hits.json()["data"])
    runtime.close()


def test_compaction_keeps_sparse_vectors_and_sparse_only_points(tmp_path: Path) -> None:
    store = EdgeVectorStore(path=str(tmp_path / "vectors"))
    try:
        store.ensure_collection("tm_m", 3, tenant_field="tm_user", sparse=True)
        both, words_only = str(uuid.uuid4()), str(uuid.uuid4())
        store.upsert("tm_m", [
            VectorPoint(both, [1.0, 0.0, 0.0], {"tm_user": "a"}, sparse=document_terms("dog")),
            VectorPoint(words_only, None, {"tm_user": "a"}, sparse=document_terms("ok thanks")),
            VectorPoint(str(uuid.uuid4()), [0.0, 1.0, 0.0], {"tm_user": "gone"},
                        sparse=document_terms("dog")),
        ])  # fmt: skip
        store.delete_where("tm_m", {"tm_user": "gone"})
        assert store.compact("tm_m") is True
        assert store.has_sparse("tm_m") is True and store.count("tm_m") == 2
        for text, point in (("dogs", both), ("thanks", words_only)):
            found = store.hybrid_search(
                "tm_m", [1.0, 0.0, 0.0], query_terms(text), limit=5,
                payload_filter={"tm_user": "a"},
            )  # fmt: skip
            assert found is not None and [h.id for h in found.sparse] == [point]
    finally:
        store.close()


def test_a_compaction_killed_between_its_renames_is_finished_on_the_next_open(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    folder = tmp_path / "vectors"
    store = EdgeVectorStore(path=str(folder))
    points = [VectorPoint(str(uuid.uuid4()), [1.0, float(i), 0.0], {"n": i}) for i in range(20)]
    store.upsert("tm_shared", points)
    renames = 0
    real_rename = Path.rename

    def dies_after_the_first(self: Path, target: Path) -> Path:  # the process dies here
        nonlocal renames
        renames += 1
        if renames == 2:
            raise KeyboardInterrupt
        return real_rename(self, target)

    monkeypatch.setattr(Path, "rename", dies_after_the_first)
    with pytest.raises(KeyboardInterrupt):
        store.compact("tm_shared")
    monkeypatch.undo()
    assert not (folder / "tm_shared").exists()  # the window a crash can fall into
    store.close()

    again = EdgeVectorStore(path=str(folder))
    try:
        assert again.list_collections() == ["tm_shared"]
        assert again.count("tm_shared") == 20
    finally:
        again.close()
    assert sorted(p.name for p in folder.iterdir() if p.is_dir()) == ["tm_shared"]


def test_an_unfinished_copy_is_dropped_and_the_collection_kept(tmp_path: Path) -> None:
    folder = tmp_path / "vectors"
    store = EdgeVectorStore(path=str(folder))
    store.upsert("tm_shared", [VectorPoint(str(uuid.uuid4()), [1.0, 0.0, 0.0], {})])
    store.close()
    (folder / ".compacting-tm_shared").mkdir()  # killed while copying
    again = EdgeVectorStore(path=str(folder))
    try:
        assert again.count("tm_shared") == 1
    finally:
        again.close()
    assert not (folder / ".compacting-tm_shared").exists()
