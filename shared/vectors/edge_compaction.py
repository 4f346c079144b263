"""Compacting a Qdrant Edge shard: its live points copied into a shard made as new ones are
today and swapped in by two renames, and what a compaction killed mid-way left finished."""

from __future__ import annotations

import logging
import shutil
from pathlib import Path

import qdrant_edge as qe

from shared.errors import Unavailable
from shared.vectors.edge_damage import engine_call
from shared.vectors.edge_shards import ShardCache, close_quietly
from shared.vectors.edge_spec import ShardSpec

logger = logging.getLogger(__name__)

COMPACTING, COMPACTED = ".compacting-", ".compacted-"  # a compaction's folders, by stage


def compact(shards: ShardCache, collection: str) -> bool:
    """Copy the live points into a new shard made as new shards are today (datatype,
    placement) and swap it in, so nothing of a deleted point stays on disk (the engine's
    own vacuum leaves it in the write-ahead log). The caller must own the store alone:
    a write meanwhile would land in the old shard."""
    folder = shards.folder(collection)
    with shards.lock:
        entry = shards.entry(collection)
        if entry is None:
            return False
        old, made = entry.shard, entry.made
        rebuilt = ShardSpec(dim=made.dim, shared=made.shared, sparse=made.sparse)
        fresh_folder = shards.root / f"{COMPACTING}{collection}"
        shutil.rmtree(fresh_folder, ignore_errors=True)
        try:
            fresh = engine_call(
                collection,
                fresh_folder,
                lambda: qe.EdgeShard.create(str(fresh_folder), rebuilt.config(shards.placement)),
            )
            try:
                engine_call(collection, folder, lambda: _copy_live_points(old, fresh))
            finally:
                close_quietly(fresh)
            _check_copy(old, fresh_folder, collection)
        except BaseException:
            shutil.rmtree(fresh_folder, ignore_errors=True)
            raise
        shards.open.pop(collection, None)
        entry.close(record=False)  # its folder goes to the trash
        # Swapped by two renames; a crash between them is finished when the folder is
        # next opened (finish_compactions): the copy was complete before the first.
        trash = shards.root / f"{COMPACTED}{collection}"
        shutil.rmtree(trash, ignore_errors=True)
        folder.rename(trash)
        fresh_folder.rename(folder)
        shutil.rmtree(trash)
    return True


def finish_compactions(root: Path) -> None:
    """What a compaction killed mid-way left: a copy is complete once the old shard was
    moved aside (`.compacted-`), so it takes the collection's name; any other copy is
    unfinished and goes."""
    for trash in root.glob(f"{COMPACTED}*"):
        name = trash.name.removeprefix(COMPACTED)
        fresh = root / f"{COMPACTING}{name}"
        if not (root / name).exists() and fresh.is_dir():
            fresh.rename(root / name)
            logger.warning("finished an interrupted compaction", extra={"collection": name})
        shutil.rmtree(trash, ignore_errors=True)
    for fresh in root.glob(f"{COMPACTING}*"):
        shutil.rmtree(fresh, ignore_errors=True)


def _check_copy(old: qe.EdgeShard, fresh_folder: Path, collection: str) -> None:
    """The copy, reopened from disk, holds every live point of the old shard."""
    copy = engine_call(collection, fresh_folder, lambda: qe.EdgeShard.load(str(fresh_folder)))
    try:
        have, want = copy.info().points_count, old.info().points_count
    finally:
        close_quietly(copy)
    if have != want:
        raise Unavailable(
            f"compacting vector collection {collection} copied {have} of {want} points; "
            "the collection is left as it was",
            details={"collection": collection},
        )


def _copy_live_points(old: qe.EdgeShard, fresh: qe.EdgeShard) -> None:
    """Payload indexes first (the tenant index co-locates a user's points), then the points."""
    for field, index in old.info().payload_schema.items():
        fresh.update(qe.UpdateOperation.create_field_index(field, index.params or index.data_type))
    offset = None
    while True:
        request = qe.ScrollRequest(offset=offset, limit=1_000, with_payload=True, with_vector=True)
        records, offset = old.scroll(request)
        points = [qe.Point(r.id, r.vector, r.payload or {}) for r in records if r.vector]
        if points:
            fresh.update(qe.UpdateOperation.upsert_points(points))
        if offset is None:
            return
