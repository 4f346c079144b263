"""Per-user write locks: two extractions of one user never decide dedup at the same time."""

from __future__ import annotations

import contextlib
import threading
from collections.abc import Iterator
from contextlib import AbstractContextManager, contextmanager
from typing import Protocol

import redis

from shared.errors import TransientError


class UserLocks(Protocol):
    def hold(self, key: str) -> AbstractContextManager[None]: ...


class RedisUserLocks:
    """Across processes and machines. The lock expires after `timeout_s`, so a worker killed
    while holding it blocks that user for at most that long."""

    def __init__(self, url: str, *, timeout_s: float, wait_s: float) -> None:
        self._redis = redis.Redis.from_url(url)
        self._timeout_s = timeout_s
        self._wait_s = wait_s

    @contextmanager
    def hold(self, key: str) -> Iterator[None]:
        lock = self._redis.lock(
            f"tiermem:lock:user:{key}", timeout=self._timeout_s, blocking_timeout=self._wait_s
        )
        if not lock.acquire():
            raise TransientError(f"memory lock for user {key} busy for {self._wait_s:.0f}s")
        try:
            yield
        finally:
            # expired while we worked: the next holder already has it
            with contextlib.suppress(redis.exceptions.LockError):
                lock.release()


class LocalUserLocks:
    """One process (`tiermem serve`, tests): a lock per user key, held in memory."""

    def __init__(self, *, wait_s: float) -> None:
        self._wait_s = wait_s
        self._guard = threading.Lock()
        self._locks: dict[str, threading.Lock] = {}

    @contextmanager
    def hold(self, key: str) -> Iterator[None]:
        with self._guard:
            lock = self._locks.setdefault(key, threading.Lock())
        if not lock.acquire(timeout=self._wait_s):
            raise TransientError(f"memory lock for user {key} busy for {self._wait_s:.0f}s")
        try:
            yield
        finally:
            lock.release()
