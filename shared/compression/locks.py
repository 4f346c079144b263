"""Per-session compression locks: Redis across processes, in memory for one process."""

from __future__ import annotations

import contextlib
import threading
import weakref
from collections.abc import Iterator
from contextlib import AbstractContextManager, contextmanager
from typing import Protocol

import redis

from shared.errors import TransientError
from shared.runtime import Runtime


class CompressionBusy(TransientError):
    """Another run holds this session's lock: the task retries later, then finds the work done."""

    code = "compression_busy"


class SessionLocks(Protocol):
    def hold(self, session_id: str) -> AbstractContextManager[None]: ...


class RedisSessionLocks:
    """The lock expires after `timeout_s`, so a killed worker blocks a session for at most
    that long; a run that outlives it is still stopped by the version check."""

    def __init__(self, url: str, *, timeout_s: float, wait_s: float) -> None:
        self._redis = redis.Redis.from_url(url)
        self._timeout_s = timeout_s
        self._wait_s = wait_s

    @contextmanager
    def hold(self, session_id: str) -> Iterator[None]:
        lock = self._redis.lock(
            f"tiermem:lock:compress:{session_id}",
            timeout=self._timeout_s,
            blocking_timeout=self._wait_s,
        )
        if not lock.acquire():
            raise CompressionBusy(f"session {session_id} is being compressed by another run")
        try:
            yield
        finally:
            with contextlib.suppress(redis.exceptions.LockError):  # expired: not ours now
                lock.release()


class LocalSessionLocks:
    """One process (`tiermem serve`, tests)."""

    def __init__(self, *, wait_s: float) -> None:
        self._wait_s = wait_s
        self._guard = threading.Lock()
        self._locks: dict[str, threading.Lock] = {}

    @contextmanager
    def hold(self, session_id: str) -> Iterator[None]:
        with self._guard:
            lock = self._locks.setdefault(session_id, threading.Lock())
        if not lock.acquire(timeout=self._wait_s):
            raise CompressionBusy(f"session {session_id} is being compressed by another run")
        try:
            yield
        finally:
            lock.release()


_by_runtime: weakref.WeakKeyDictionary[Runtime, SessionLocks] = weakref.WeakKeyDictionary()
_guard = threading.Lock()


def session_locks(runtime: Runtime) -> SessionLocks:
    """One lock table per Runtime (that is, per process), like runtime.user_locks."""
    with _guard:
        locks = _by_runtime.get(runtime)
        if locks is None:
            cfg = runtime.settings.compression
            if runtime.settings.redis_url:
                locks = RedisSessionLocks(
                    runtime.settings.redis_url, timeout_s=cfg.lock_timeout_s, wait_s=cfg.lock_wait_s
                )
            else:
                locks = LocalSessionLocks(wait_s=cfg.lock_wait_s)
            _by_runtime[runtime] = locks
        return locks
