"""Telling a damaged Qdrant Edge shard from a sound one: the engine's errors and panics
turned into domain errors, the points a shard held at its last clean close, and a first
load in a child process after a load that never returned."""

from __future__ import annotations

import json
import logging
import os
import subprocess
import sys
from collections.abc import Callable
from pathlib import Path
from typing import TypeVar

import qdrant_edge as qe

from shared.errors import DamagedCollection, DomainError, InvalidInput, Unavailable

logger = logging.getLogger(__name__)

# In a shard folder: present while this store loads the shard (left behind, the last load
# never returned); and the number of points it held when it was last closed cleanly.
LOADING = ".tiermem-loading"
CLOSED_WITH = ".tiermem-closed.json"
PROBE_TIMEOUT_S = 300.0
# Words in an engine error that say stored bytes cannot be read back (a garbage payload
# page): the shard is damaged, and retrying the call will not help.
_UNREADABLE = ("failed to decode value", "failed to decompress")
T = TypeVar("T")


class EnginePanic(Exception):
    """A Rust panic in the engine: the shard's files broke the engine's own assumptions."""


def unpanicked(fn: Callable[[], T]) -> T:
    """fn(), a Rust panic raised as EnginePanic: pyo3 raises it as PanicException, which
    derives from BaseException, so `except Exception` would let it through (a 500)."""
    try:
        return fn()
    except BaseException as exc:
        if type(exc).__name__ == "PanicException":
            raise EnginePanic(str(exc)) from exc
        raise


def engine_call(collection: str, folder: Path, fn: Callable[[], T]) -> T:
    try:
        return unpanicked(fn)
    except Exception as exc:
        raise engine_error(collection, folder, exc) from exc


def engine_error(collection: str, folder: Path, exc: Exception) -> DomainError:
    """qdrant-edge raises plain Exception: a wrong dimension is the caller's; a panic, or
    stored data it cannot decode, says the shard is damaged; anything else (disk, I/O,
    other damage the engine reports as an error) is a 503 in the API and a retry in a
    worker."""
    text = str(exc)
    if "dimension error" in text:
        return InvalidInput(text, details={"collection": collection})
    if isinstance(exc, EnginePanic):
        return damaged(collection, folder, "the engine panicked reading it", exc)
    if any(sign in text.lower() for sign in _UNREADABLE):
        return damaged(collection, folder, "the engine cannot decode its stored data", exc)
    return Unavailable(
        f"the embedded vector engine failed on collection {collection}: {text[:300]} "
        "(if a shard is damaged, `tiermem reindex` rebuilds it from SQL)",
        details={"collection": collection},
    )


def damaged(collection: str, folder: Path, reason: str, cause: object = None) -> DamagedCollection:
    """The error for a shard that cannot be trusted; the engine's own words go to the log
    (with the folder), not to API clients."""
    logger.error(
        "vector collection %s (%s) is damaged: %s%s",
        collection,
        folder,
        reason,
        f": {str(cause)[:500]}" if cause is not None else "",
        extra={"collection": collection},
    )
    return DamagedCollection(
        f"vector collection {collection} is damaged ({reason}): it cannot be searched or "
        "written until `tiermem reindex` drops it and rebuilds it from SQL, which holds every "
        "fact and message (stop the process holding the vector folder first)",
        details={"collection": collection},
    )


def doubt(shard: qe.EdgeShard, folder: Path) -> tuple[str, object] | None:
    """Why a shard that loaded cannot be trusted, if it cannot: points missing since its
    last clean close (a segment the engine skipped, a truncated id tracker load silently),
    or a first point that cannot be read (vectors or payloads cut short)."""
    try:
        recorded = _recorded_points(folder)
        if recorded is not None:
            points = int(unpanicked(lambda: shard.count(qe.CountRequest())))
            if points != recorded:
                return f"it holds {points} points but held {recorded} when last closed", None
        first = qe.ScrollRequest(limit=1, with_payload=True, with_vector=True)
        unpanicked(lambda: shard.scroll(first))
    except Exception as exc:
        return "its points cannot be read", exc
    return None


def _recorded_points(folder: Path) -> int | None:
    try:
        return int(json.loads((folder / CLOSED_WITH).read_text(encoding="utf-8"))["points"])
    except (OSError, ValueError, KeyError, TypeError):  # none, or cut short by a power loss
        return None


def record_points(folder: Path, points: int) -> None:
    scratch = folder / f"{CLOSED_WITH}.tmp"
    scratch.write_text(json.dumps({"points": points}), encoding="utf-8")
    os.replace(scratch, folder / CLOSED_WITH)


def forget_points(folder: Path) -> None:
    """Remove the close record for good (synced): one that came back after a power loss
    would make the shard, grown since, look damaged."""
    record = folder / CLOSED_WITH
    if not record.exists():
        return
    record.unlink()
    handle = os.open(folder, os.O_RDONLY)
    try:
        os.fsync(handle)
    finally:
        os.close(handle)


# A child process loads the shard under an address-space limit: the garbage that makes the
# engine ask for tens of gigabytes fails there at once, wherever the machine has them.
_LOAD_IN_CHILD = """
import resource, sys
limit = int(sys.argv[2])
resource.setrlimit(resource.RLIMIT_AS, (limit, limit))
import qdrant_edge as qe
shard = qe.EdgeShard.load(sys.argv[1])
shard.scroll(qe.ScrollRequest(limit=1, with_payload=True, with_vector=True))
shard.close()
"""


def load_in_child(folder: Path) -> str | None:
    """Why loading the shard fails in a child process (its last words), or None."""
    size = sum(p.stat().st_size for p in folder.rglob("*") if p.is_file())
    limit = 4 * 2**30 + 4 * size  # the engine maps its files; Python and threads need room
    try:
        child = subprocess.run(
            [sys.executable, "-c", _LOAD_IN_CHILD, str(folder), str(limit)],
            capture_output=True,
            text=True,
            timeout=PROBE_TIMEOUT_S,
        )
    except subprocess.TimeoutExpired:
        return f"a load in a child process took over {PROBE_TIMEOUT_S:g} s"
    if child.returncode == 0:
        return None
    words = child.stderr.strip().splitlines() or [f"exit status {child.returncode}"]
    # a Rust abort says why first (then a backtrace); a Python traceback says it last
    return words[0] if child.returncode < 0 else words[-1]
