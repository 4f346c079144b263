"""Per-session compression locks: Redis across processes, in memory for one process."""

from __future__ import annotations

import threading
import weakref

from shared.errors import TransientError
from shared.locks import KeyLocks, LocalLocks, RedisLocks
from shared.runtime import Runtime


class CompressionBusy(TransientError):
    """Another run holds this session's lock: the task retries later, then finds the work done."""

    code = "compression_busy"


SessionLocks = KeyLocks


def _busy(session_id: str) -> CompressionBusy:
    return CompressionBusy(f"session {session_id} is being compressed by another run")


_by_runtime: weakref.WeakKeyDictionary[Runtime, SessionLocks] = weakref.WeakKeyDictionary()
_guard = threading.Lock()


def session_locks(runtime: Runtime) -> SessionLocks:
    """One lock table per Runtime (that is, per process), like runtime.user_locks."""
    with _guard:
        locks = _by_runtime.get(runtime)
        if locks is None:
            cfg = runtime.settings.compression
            if runtime.settings.redis_url:
                # The lock expires after lock_timeout_s, so a killed worker blocks a session
                # for at most that long; a run that outlives it is still stopped by the
                # version check.
                locks = RedisLocks(
                    runtime.settings.redis_url,
                    prefix="tiermem:lock:compress:",
                    timeout_s=cfg.lock_timeout_s,
                    wait_s=cfg.lock_wait_s,
                    busy=_busy,
                )
            else:
                locks = LocalLocks(wait_s=cfg.lock_wait_s, busy=_busy)
            _by_runtime[runtime] = locks
        return locks
