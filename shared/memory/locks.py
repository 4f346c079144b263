"""Per-user write locks: two extractions of one user never decide dedup at the same time."""

from __future__ import annotations

import contextlib
import threading
import time
from collections.abc import Iterator
from contextlib import AbstractContextManager, contextmanager
from dataclasses import dataclass, field
from typing import Protocol

import redis

from shared.errors import TransientError

# How often a waiter asks Redis whether another process let go (redis-py's default is
# 100 ms). Waiters within one process queue on a local lock instead and wake at once.
REDIS_POLL_S = 0.02


class UserLocks(Protocol):
    def hold(self, key: str) -> AbstractContextManager[None]: ...


def _busy(key: str, wait_s: float) -> TransientError:
    return TransientError(f"memory lock for user {key} busy for {wait_s:.0f}s")


@dataclass
class _Entry:
    lock: threading.Lock = field(default_factory=threading.Lock)
    holders: int = 0  # threads holding or waiting for the lock


class LocalUserLocks:
    """One process (`tiermem serve`, tests): a lock per user key, held in memory while a
    thread holds or waits for it (so a million users leave no million locks behind)."""

    def __init__(self, *, wait_s: float) -> None:
        self._wait_s = wait_s
        self._guard = threading.Lock()
        self._locks: dict[str, _Entry] = {}

    @contextmanager
    def hold(self, key: str) -> Iterator[None]:
        with self._guard:
            entry = self._locks.setdefault(key, _Entry())
            entry.holders += 1
        try:
            if not entry.lock.acquire(timeout=self._wait_s):
                raise _busy(key, self._wait_s)
            try:
                yield
            finally:
                entry.lock.release()
        finally:
            with self._guard:
                entry.holders -= 1
                if not entry.holders:
                    del self._locks[key]


class RedisUserLocks:
    """Across processes and machines. The lock expires after `timeout_s`, so a worker killed
    while holding it blocks that user for at most that long.

    The threads of one process first queue on a local lock, so only one of them at a time
    polls Redis for a user, and the next one in line gets the lock the moment it is freed
    (Redis offers no wake-up; polling all of them was slower, see docs/benchmarks.md).
    """

    def __init__(self, url: str, *, timeout_s: float, wait_s: float) -> None:
        self._redis = redis.Redis.from_url(url)
        self._timeout_s = timeout_s
        self._wait_s = wait_s
        self._local = LocalUserLocks(wait_s=wait_s)

    @contextmanager
    def hold(self, key: str) -> Iterator[None]:
        deadline = time.monotonic() + self._wait_s
        with self._local.hold(key):
            lock = self._redis.lock(
                f"tiermem:lock:user:{key}",
                timeout=self._timeout_s,
                sleep=REDIS_POLL_S,
                blocking_timeout=max(deadline - time.monotonic(), 0.0),
            )
            if not lock.acquire():
                raise _busy(key, self._wait_s)
            try:
                yield
            finally:
                # expired while we worked: the next holder already has it
                with contextlib.suppress(redis.exceptions.LockError):
                    lock.release()
