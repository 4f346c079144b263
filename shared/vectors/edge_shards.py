"""The open Qdrant Edge shards under one folder: each loaded on first use and checked for
damage, the least recently used closed past a limit, a closing one waiting for the calls
under way in it."""

from __future__ import annotations

import logging
import re
import shutil
import threading
from collections import OrderedDict
from collections.abc import Callable, Iterator, Sequence
from contextlib import contextmanager
from functools import partial
from pathlib import Path
from typing import Any, TypeVar

import qdrant_edge as qe

from shared.errors import DamagedCollection, DomainError, InvalidInput, Unavailable
from shared.vectors.base import Placement
from shared.vectors.edge_damage import (
    LOADING,
    damaged,
    doubt,
    engine_call,
    engine_error,
    forget_points,
    load_in_child,
    record_points,
    unpanicked,
)
from shared.vectors.edge_spec import SHARD_CONFIG, ShardSpec

logger = logging.getLogger(__name__)

NAME = re.compile(r"[A-Za-z0-9_-]{1,255}")
T = TypeVar("T")


class ShardClosed(Exception):
    """A call reached a shard being closed: the caller looks the collection up again."""


class Shard:
    """An open shard, what it was made with, and the calls under way in it: closing waits
    for them, so that no call meets a closing shard and the points it records are all there
    are."""

    def __init__(self, shard: qe.EdgeShard, made: ShardSpec, folder: Path) -> None:
        self.shard, self.made, self.folder = shard, made, folder
        self._calls = 0
        self._closing = False
        self._idle = threading.Condition()

    @contextmanager
    def in_use(self) -> Iterator[None]:
        with self._idle:
            if self._closing:
                raise ShardClosed
            self._calls += 1
        try:
            yield
        finally:
            with self._idle:
                self._calls -= 1
                self._idle.notify_all()

    def close(self, *, record: bool = True) -> None:
        """Flushed first: a shard closed to make room, or at shutdown, keeps every write;
        `record`: its number of points is kept beside it for the next load to check."""
        with self._idle:
            self._closing = True
            self._idle.wait_for(lambda: self._calls == 0)
        points = None
        if record:
            try:
                points = int(unpanicked(lambda: self.shard.count(qe.CountRequest())))
            except Exception:
                logger.warning("counting the vector shard in %s failed", self.folder, exc_info=True)
        if close_quietly(self.shard) and points is not None:
            record_points(self.folder, points)


class ShardCache:
    """The shards of the collections under `root`, opened on first use and kept open, up to
    `max_open` (with per_user, every user has shards, and each open one holds files and
    maps). `lock` guards the table of open shards, not engine calls."""

    def __init__(self, root: Path, placement: Placement, max_open: int) -> None:
        self.root, self.placement = root, placement
        self.lock = threading.RLock()
        # collection → open shard, least recently used first
        self.open: OrderedDict[str, Shard] = OrderedDict()
        self._max_open = max_open
        # Shards found damaged where a later open would not see it again: a load that
        # killed a process (found once by a child process), data a call could not decode.
        self._damaged: dict[str, DamagedCollection] = {}
        self.closed = False
        self._told_placement = False

    def folder(self, collection: str) -> Path:
        if not NAME.fullmatch(collection):
            raise InvalidInput(
                f"collection names are 1-255 letters, digits, '_' or '-', got {collection!r}"
            )
        return self.root / collection

    def entry(self, collection: str) -> Shard | None:
        """The open shard, loaded on first use; None: no such collection."""
        folder = self.folder(collection)
        with self.lock:
            self._check_open()
            entry = self.open.get(collection)
            if entry is not None:
                self.open.move_to_end(collection)
                return entry
            if collection in self._damaged:
                raise self._damaged[collection]
            made = read_spec(collection, folder)
            if made is None:
                return None  # none, or one that never finished being created
            return self.keep(collection, self._load(collection, folder, made))

    def _load(self, collection: str, folder: Path, made: ShardSpec) -> Shard:
        """Open a shard, refusing one found damaged with DamagedCollection (lock held)."""
        marker = folder / LOADING
        if marker.exists():
            # The last load never returned: its process died in it. A damaged shard can
            # abort the process that loads it, so a child process loads it first.
            failure = load_in_child(folder)
            if failure is not None:
                reason = "loading it ended the process that tried"
                self._damaged[collection] = damaged(collection, folder, reason, failure)
                raise self._damaged[collection]
        if not (made.made_as_today(self.placement) or self._told_placement):
            # The engine keeps each segment where it was made: only a rebuild moves it.
            self._told_placement = True
            logger.warning(
                "vector shards made with another placement or datatype than "
                "TIERMEM_QDRANT__VECTOR_MEMORY=%s (e.g. %s); `tiermem compact` rebuilds them",
                self.placement,
                collection,
            )
        marker.touch()
        try:
            shard = unpanicked(lambda: qe.EdgeShard.load(str(folder)))
        except Exception as exc:
            raise damaged(collection, folder, "the engine cannot load it", exc) from exc
        finally:
            marker.unlink(missing_ok=True)
        why = doubt(shard, folder)
        if why is not None:
            close_quietly(shard)
            raise damaged(collection, folder, *why)
        forget_points(folder)  # it changes from here on; a clean close records it again
        return Shard(shard, made, folder)

    def keep(self, collection: str, entry: Shard) -> Shard:
        """Hold a shard open (lock held), closing the least recently used past the limit."""
        self.open[collection] = entry
        while len(self.open) > self._max_open:
            _, oldest = self.open.popitem(last=False)
            oldest.close()
        return entry

    def call(self, collection: str, fn: Callable[[qe.EdgeShard, ShardSpec], T], missing: T) -> T:
        """fn(shard, what it was made with) on the collection's shard; `missing` when there is
        none. A shard closed under the call (dropped, or closed past the open limit) is looked
        up once more."""
        for attempt in (1, 2):
            entry = self.entry(collection)
            if entry is None:
                return missing
            try:
                with entry.in_use():
                    return unpanicked(partial(fn, entry.shard, entry.made))
            except DomainError:
                raise
            except ShardClosed:
                if attempt == 1:
                    continue
                raise Unavailable(
                    f"vector collection {collection} was closed twice under one call; retry",
                    details={"collection": collection},
                ) from None
            except Exception as exc:  # the engine raises plain Exception, told apart by text
                error = engine_error(collection, entry.folder, exc)
                if isinstance(error, DamagedCollection):
                    self._condemn(collection, entry, error)
                raise error from exc
        return missing

    def _condemn(self, collection: str, entry: Shard, error: DamagedCollection) -> None:
        """A shard a call found damaged (stored data the engine cannot decode, read after a
        clean open) is closed and refused from here on, as one found damaged on open, until
        it is dropped: a call that reads other pages would otherwise still succeed."""
        with self.lock:
            self._damaged[collection] = error
            if self.open.get(collection) is entry:
                del self.open[collection]
        entry.close(record=False)

    def made(self, collection: str) -> ShardSpec | None:
        entry = self.entry(collection)
        return None if entry is None else entry.made

    def create(
        self, collection: str, made: ShardSpec, indexes: Sequence[tuple[str, Any]]
    ) -> ShardSpec:
        """A new shard with its payload indexes (lock held)."""
        folder = self.folder(collection)
        if folder.exists():  # a shard that never finished being created: start it afresh
            shutil.rmtree(folder)
        config = made.config(self.placement)
        shard = engine_call(collection, folder, lambda: qe.EdgeShard.create(str(folder), config))
        try:
            for field, params in indexes:
                op = qe.UpdateOperation.create_field_index(field, params)
                engine_call(collection, folder, partial(shard.update, op))
        except Exception:
            close_quietly(shard)
            shutil.rmtree(folder, ignore_errors=True)
            raise
        self.keep(collection, Shard(shard, made, folder))
        logger.info(
            "created vector collection",
            extra={"collection": collection, "dim": made.dim, "sparse": made.sparse},
        )
        return made

    def has_sparse(self, collection: str) -> bool | None:
        folder = self.folder(collection)
        with self.lock:
            entry = self.open.get(collection)
            if entry is not None:
                return entry.made.sparse
            if collection in self._damaged:
                raise self._damaged[collection]
        made = read_spec(collection, folder)  # the config alone: no shard opened for this
        return None if made is None else made.sparse

    def drop(self, collection: str) -> None:
        folder = self.folder(collection)
        with self.lock:
            entry = self.open.pop(collection, None)
            if entry is not None:
                entry.close(record=False)
            self._damaged.pop(collection, None)
            if folder.exists():
                shutil.rmtree(folder)
                logger.info("dropped vector collection", extra={"collection": collection})

    def names(self) -> list[str]:
        # A folder with segments and no config is a damaged collection, listed so that it
        # can be dropped; one with neither never finished being created.
        shards = {p.parent.name for p in self.root.glob(f"*/{SHARD_CONFIG}")}
        shards.update(p.parent.parent.name for p in self.root.glob("*/segments/*"))
        return sorted(name for name in shards if NAME.fullmatch(name))  # not a compaction's

    def close(self) -> None:
        """Close every open shard, recording its points; the cache opens none after."""
        with self.lock:
            self.closed = True
            for entry in self.open.values():
                entry.close()
            self.open.clear()

    def _check_open(self) -> None:
        if self.closed:
            raise RuntimeError("the vector store is closed")


def close_quietly(shard: qe.EdgeShard) -> bool:
    """Flush and close; False (logged) when either failed."""
    closed = True
    for step in (shard.flush, shard.close):
        try:
            unpanicked(step)
        except Exception:
            logger.warning("closing a vector shard failed", exc_info=True)
            closed = False
    return closed


def read_spec(collection: str, folder: Path) -> ShardSpec | None:
    """What the collection's shard was made with, from its config alone; None: no such
    collection (or one that never finished being created); DamagedCollection when segments
    are there without a readable config."""
    if not (folder / SHARD_CONFIG).exists():
        if any((folder / "segments").glob("*")):
            raise damaged(collection, folder, "its edge_config.json is missing")
        return None
    try:
        return ShardSpec.read(folder)
    except (OSError, ValueError, AttributeError) as exc:  # cut short, or not JSON
        raise damaged(collection, folder, "its edge_config.json is unreadable", exc) from exc
