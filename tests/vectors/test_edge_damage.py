"""A Qdrant Edge shard damaged on disk — the ways a crash, a power loss, a bad disk or a
partial copy leave a folder — is refused on open as DamagedCollection, naming the
collection and `tiermem reindex`; the other collections keep working, and dropping it
(what reindex does first) lets it be written afresh.

What qdrant-edge 0.9.0 itself does with each is checked beside it: a load error, a Rust
panic, a load with silently fewer points, a load whose reads fail, or (the id tracker test)
an abort of the whole process.
"""

from __future__ import annotations

import logging
import os
import random
import shutil
import sys
import uuid
from collections.abc import Callable
from pathlib import Path

import pytest
import qdrant_edge as qe

from shared.errors import DamagedCollection
from shared.vectors import VectorPoint
from shared.vectors.edge_damage import CLOSED_WITH, LOADING, engine_error
from shared.vectors.edge_store import EdgeVectorStore
from shared.vectors.scope import MESSAGES_SUFFIX, layout_of, message_collections_without_sparse
from shared.vectors.sparse import document_terms, query_terms
from tests import processes

DAMAGED, HEALTHY = "tm_damaged", "tm_healthy"
BATCHES, PER_BATCH = 5, 10
ROOT = Path(__file__).resolve().parents[2]


def _points(batch: int) -> list[VectorPoint]:
    return [
        VectorPoint(str(uuid.uuid4()), [1.0, float(i), float(batch)], {"k": "v", "i": i})
        for i in range(PER_BATCH)
    ]


@pytest.fixture(name="root")
def root_fixture(tmp_path: Path) -> Path:
    """A folder of two collections written in several batches (after a flush the WAL keeps
    only the last, so a lost segment is not replayed back), closed cleanly."""
    root = tmp_path / "vectors"
    store = EdgeVectorStore(path=str(root))
    try:
        for batch in range(BATCHES):
            store.upsert(DAMAGED, _points(batch))
            store.upsert(HEALTHY, _points(batch))
    finally:
        store.close()
    return root


def _segment(shard: Path) -> Path:
    [segment] = (shard / "segments").iterdir()
    return segment


def _garbage(path: Path, size: int = 4096, at: int = 0) -> None:
    with path.open("r+b") as handle:
        handle.seek(at)
        handle.write(random.Random(7).randbytes(size))


def _zero_every_file(shard: Path) -> None:
    for path in shard.rglob("*"):
        if path.is_file():
            path.write_bytes(bytes(path.stat().st_size))


def _unguarded(shard: Path) -> str:
    """What the engine alone makes of a shard folder (a copy: loading replays the WAL)."""
    copy = shard.parent.with_name("unguarded")  # beside the store's folder, not in it
    shutil.copytree(shard, copy)
    try:
        return _engine_alone(copy)
    finally:
        shutil.rmtree(copy)


def _engine_alone(folder: Path) -> str:
    try:
        loaded = qe.EdgeShard.load(str(folder))
    except Exception:
        return "load error"
    except BaseException as exc:  # pyo3's PanicException
        assert type(exc).__name__ == "PanicException"
        return "load panics"
    try:
        if loaded.count(qe.CountRequest()) < BATCHES * PER_BATCH:
            return "loads fewer points, silently"
        loaded.scroll(qe.ScrollRequest(limit=1, with_payload=True, with_vector=True))
        return "loads"
    except Exception:
        return "loads, reads fail"
    finally:
        loaded.close()


# name → (the damage, what the engine alone does with it)
DAMAGE: dict[str, tuple[Callable[[Path], None], str | tuple[str, ...]]] = {
    "config garbage": (lambda s: _garbage(s / "edge_config.json", 40), "load error"),
    "config missing": (lambda s: (s / "edge_config.json").unlink(), "loads"),
    "segment.json garbage": (lambda s: _garbage(_segment(s) / "segment.json", 60), "load error"),
    "version.info missing": (
        lambda s: (_segment(s) / "version.info").unlink(),
        "loads fewer points, silently",  # the segment is skipped; the WAL's last batch comes
    ),
    "segment folder missing": (
        lambda s: shutil.rmtree(_segment(s)),
        "loads fewer points, silently",
    ),
    "id tracker cut short": (
        lambda s: os.truncate(_segment(s) / "mutable_id_tracker.mappings", 200),
        "loads fewer points, silently",
    ),
    "deleted flags status empty": (
        lambda s: os.truncate(_segment(s) / "vector_storage/deleted/status.dat", 0),
        "load panics",
    ),
    "vectors file empty": (
        lambda s: os.truncate(_segment(s) / "vector_storage/vectors/chunk_0.mmap", 0),
        "loads, reads fail",
    ),
    # Whether the engine's first read touches the garbage page varies from run to run (one
    # CI run of 40 read it cleanly): either way, the store refuses the shard.
    "payload pages garbage": (
        lambda s: _garbage(_segment(s) / "payload_storage/page_0.dat"),
        ("loads, reads fail", "loads"),
    ),
    "WAL header garbage": (lambda s: _garbage(s / "wal/open-1", 64), "load error"),
    "WAL index garbage": (lambda s: _garbage(s / "wal/first-index", 15), "load error"),
    "every file zeroed (power loss)": (_zero_every_file, "load error"),
}


@pytest.mark.parametrize("damage", list(DAMAGE))
def test_a_damaged_shard_is_refused_naming_it_and_the_rebuild(root: Path, damage: str) -> None:
    harm, engine_alone = DAMAGE[damage]
    harm(root / DAMAGED)
    assert _unguarded(root / DAMAGED) in (
        engine_alone if isinstance(engine_alone, tuple) else (engine_alone,)
    )
    store = EdgeVectorStore(path=str(root))
    try:
        assert store.list_collections() == [DAMAGED, HEALTHY]  # listed, so it can be dropped
        for call in (
            lambda: store.search(DAMAGED, [1.0, 0.0, 0.0], limit=3),
            lambda: store.count(DAMAGED),
            lambda: store.upsert(DAMAGED, _points(0)),
            lambda: store.compact(DAMAGED),  # `tiermem compact` stops, saying so
        ):
            with pytest.raises(DamagedCollection) as refused:
                call()
            assert f"vector collection {DAMAGED} is damaged" in refused.value.message
            assert "`tiermem reindex`" in refused.value.message
            assert "rebuilds it from SQL" in refused.value.message
            assert refused.value.code == "unavailable"  # a 503 in the API
            assert refused.value.details == {"collection": DAMAGED}
        assert store.count(HEALTHY) == BATCHES * PER_BATCH
        assert len(store.search(HEALTHY, [1.0, 0.0, 0.0], limit=3)) == 3

        store.drop_collection(DAMAGED)  # reindex's first step
        store.upsert(DAMAGED, _points(0))
        assert store.count(DAMAGED) == PER_BATCH
    finally:
        store.close()
    again = EdgeVectorStore(path=str(root))  # and the rebuilt one passes its checks
    try:
        assert again.count(DAMAGED) == PER_BATCH
    finally:
        again.close()


def test_a_clean_close_records_the_points_and_an_open_forgets_them(root: Path) -> None:
    record = root / DAMAGED / CLOSED_WITH
    assert record.read_text() == '{"points": 50}'
    store = EdgeVectorStore(path=str(root))
    try:
        assert store.count(DAMAGED) == BATCHES * PER_BATCH
        assert not record.exists()  # the shard may change now: a crash leaves no record
        store.upsert(DAMAGED, _points(9))
    finally:
        store.close()
    assert record.read_text() == '{"points": 60}'


def test_a_process_killed_while_loading_a_healthy_shard_does_not_condemn_it(root: Path) -> None:
    (root / DAMAGED / LOADING).touch()  # what a kill -9 in the middle of a load leaves
    store = EdgeVectorStore(path=str(root))
    try:
        assert store.count(DAMAGED) == BATCHES * PER_BATCH  # checked in a child, then loaded
        assert not (root / DAMAGED / LOADING).exists()
    finally:
        store.close()


# Opens the folder and touches the collection; its address space is capped so the engine's
# giant allocation fails here as it would on a machine without that much memory.
_TOUCH = """
import resource, sys
resource.setrlimit(resource.RLIMIT_AS, (4 << 30, 4 << 30))
from shared.vectors.edge_store import EdgeVectorStore
EdgeVectorStore(path=sys.argv[1]).count(sys.argv[2])
"""


def test_a_shard_whose_load_aborts_the_process_is_refused_by_the_next_one(
    root: Path, caplog: pytest.LogCaptureFixture
) -> None:
    # The first point's internal id becomes 4 billion: the engine sizes a table by it.
    mappings = _segment(root / DAMAGED) / "mutable_id_tracker.mappings"
    with mappings.open("r+b") as handle:
        handle.seek(17)  # after the record's kind (1 byte) and its UUID (16)
        handle.write(b"\xf0\xff\xff\xff")
    crashed = processes.run(
        [sys.executable, "-c", _TOUCH, str(root), DAMAGED],
        capture_output=True, text=True, cwd=ROOT, timeout=120,
    )  # fmt: skip
    assert crashed.returncode == -6, crashed.stderr[-2000:]  # SIGABRT: nothing to catch
    assert "memory allocation of" in crashed.stderr
    assert (root / DAMAGED / LOADING).exists()

    caplog.set_level(logging.ERROR, logger="shared.vectors.edge_damage")
    store = EdgeVectorStore(path=str(root))
    try:
        for _ in range(2):  # the child's verdict is kept: one child, one log line
            with pytest.raises(DamagedCollection, match="loading it ended the process"):
                store.search(DAMAGED, [1.0, 0.0, 0.0], limit=3)
        [logged] = [r.getMessage() for r in caplog.records]
        assert "memory allocation of" in logged and str(root / DAMAGED) in logged
        assert store.count(HEALTHY) == BATCHES * PER_BATCH
        store.drop_collection(DAMAGED)
        store.upsert(DAMAGED, _points(0))
        assert store.count(DAMAGED) == PER_BATCH
    finally:
        store.close()


def test_a_panic_in_a_call_on_an_open_shard_is_a_damaged_collection_not_a_crash(
    root: Path,
) -> None:
    store = EdgeVectorStore(path=str(root))
    try:
        assert store.count(DAMAGED, payload_filter={"k": "v"}) == BATCHES * PER_BATCH
        # The payload pages go bad under the open shard (a disk fault): a filter on a field
        # without an index reads them, and the engine panics.
        _garbage(_segment(root / DAMAGED) / "payload_storage/page_0.dat")
        with pytest.raises(DamagedCollection, match="the engine panicked reading it"):
            store.count(DAMAGED, payload_filter={"k": "v"})
        assert store.count(HEALTHY, payload_filter={"k": "v"}) == BATCHES * PER_BATCH
    finally:
        store.close()


def test_stored_data_the_engine_cannot_decode_is_a_damaged_collection_not_a_retry(
    tmp_path: Path,
) -> None:
    # The engine's words when a garbage payload page is read after the shard opened cleanly
    # (seen in CI): a retry would fail the same way, so the shard is refused as damaged.
    said = Exception(
        "Service runtime error: Failed to decode value: Failed to decompress LZ4 value: "
        "literal is out of bounds of the input"
    )
    error = engine_error(DAMAGED, tmp_path, said)
    assert isinstance(error, DamagedCollection)
    assert "cannot decode its stored data" in str(error) and "tiermem reindex" in str(error)
    transient = engine_error(DAMAGED, tmp_path, Exception("Service runtime error: disk busy"))
    assert not isinstance(transient, DamagedCollection)


def test_a_shard_a_call_could_not_decode_is_refused_until_dropped(root: Path) -> None:
    # A garbage payload page may open cleanly and fail only the call that reads it (seen in
    # CI: the search failed, a count after it, which reads no payload, succeeded): once
    # one call says the stored data cannot be decoded, every call is refused until reindex.
    store = EdgeVectorStore(path=str(root))

    def reads_a_garbage_page(shard: object, made: object) -> None:
        raise Exception("Service runtime error: Failed to decode value: Failed to decompress")

    try:
        with pytest.raises(DamagedCollection):
            store._shards.call(DAMAGED, reads_a_garbage_page, missing=None)
        for call in (
            lambda: store.count(DAMAGED),
            lambda: store.search(DAMAGED, [1.0, 0.0, 0.0], limit=3),
            lambda: store.upsert(DAMAGED, _points(0)),
        ):
            with pytest.raises(DamagedCollection) as refused:
                call()
            assert "cannot decode its stored data" in refused.value.message
        assert store.count(HEALTHY) == BATCHES * PER_BATCH
        store.drop_collection(DAMAGED)  # reindex's first step
        store.upsert(DAMAGED, _points(0))
        assert store.count(DAMAGED) == PER_BATCH
    finally:
        store.close()


# A user's message collection (per_user) as ADR 0013 makes it: named dense + BM25 sparse.
WORDS = f"tm_{'ab' * 16}{MESSAGES_SUFFIX}"

# name → damage to a named-form shard (the vector files have other paths there)
NAMED_DAMAGE: dict[str, Callable[[Path], None]] = {
    "config garbage": DAMAGE["config garbage"][0],
    "config missing": DAMAGE["config missing"][0],
    "segment.json garbage": DAMAGE["segment.json garbage"][0],
    "id tracker cut short": DAMAGE["id tracker cut short"][0],
    "dense vectors file empty": lambda s: os.truncate(
        _segment(s) / "vector_storage-dense/vectors/chunk_0.mmap", 0
    ),
    "sparse vectors emptied": lambda s: os.truncate(
        _segment(s) / "vector_storage-bm25/store/page_0.dat", 0
    ),
}


@pytest.mark.parametrize("damage", list(NAMED_DAMAGE))
def test_a_damaged_shard_with_sparse_vectors_is_refused_too(tmp_path: Path, damage: str) -> None:
    root = tmp_path / "vectors"
    store = EdgeVectorStore(path=str(root))
    try:
        store.ensure_collection(WORDS, 3, sparse=True, keyword_fields=("session_id",))
        for batch in range(BATCHES):
            store.upsert(WORDS, [_words(i, batch) for i in range(PER_BATCH)])
    finally:
        store.close()
    NAMED_DAMAGE[damage](root / WORDS)
    store = EdgeVectorStore(path=str(root))
    try:
        for call in (
            lambda: store.hybrid_search(WORDS, [1.0, 0.0, 0.0], query_terms("dog"), limit=3),
            lambda: store.count(WORDS),
            lambda: store.upsert(WORDS, [_words(0, 9)]),
        ):
            with pytest.raises(DamagedCollection, match=f"vector collection {WORDS} is damaged"):
                call()
        if damage.startswith("config"):  # what it was made with cannot be told either
            with pytest.raises(DamagedCollection):
                store.has_sparse(WORDS)
        else:  # told by the config alone, as for a healthy shard
            assert store.has_sparse(WORDS) is True
        # Not an old-form collection to remake: reindex drops it as damaged, checks go on.
        assert layout_of(WORDS, "tm_") == "per_user"
        assert message_collections_without_sparse(store, prefix="tm_", layout="per_user") == []
        store.drop_collection(WORDS)
        store.upsert(WORDS, [_words(0, 0)])
        assert store.has_sparse(WORDS) is True and store.count(WORDS) == 1
    finally:
        store.close()


def _words(i: int, batch: int) -> VectorPoint:
    return VectorPoint(
        str(uuid.uuid4()), [1.0, float(i), float(batch)], {"session_id": "s"},
        sparse=document_terms(f"dog {i} walk {batch}"),
    )  # fmt: skip
