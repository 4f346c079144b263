"""Keyed locks, one holder at a time per key: in memory for one process, Redis across them."""

from __future__ import annotations

import contextlib
import threading
import time
from collections.abc import Callable, Iterator
from contextlib import AbstractContextManager, contextmanager
from dataclasses import dataclass, field
from typing import Protocol

import redis

# How often a waiter asks Redis whether another process let go (redis-py's default is
# 100 ms). Waiters within one process queue on a local lock instead and wake at once.
REDIS_POLL_S = 0.02

Busy = Callable[[str], Exception]  # the error for a key still held after the wait


class KeyLocks(Protocol):
    def hold(self, key: str) -> AbstractContextManager[None]: ...


@dataclass
class _Entry:
    lock: threading.Lock = field(default_factory=threading.Lock)
    holders: int = 0  # threads holding or waiting for the lock


class LocalLocks:
    """One process (`tiermem serve`, tests): a lock per key, held in memory only while a
    thread holds or waits for it (so a million users or sessions leave no locks behind)."""

    def __init__(self, *, wait_s: float, busy: Busy) -> None:
        self._wait_s = wait_s
        self._busy = busy
        self._guard = threading.Lock()
        self._locks: dict[str, _Entry] = {}

    def __len__(self) -> int:
        """How many keys are held or waited for right now."""
        with self._guard:
            return len(self._locks)

    @contextmanager
    def hold(self, key: str) -> Iterator[None]:
        with self._guard:
            entry = self._locks.setdefault(key, _Entry())
            entry.holders += 1
        try:
            if not entry.lock.acquire(timeout=self._wait_s):
                raise self._busy(key)
            try:
                yield
            finally:
                entry.lock.release()
        finally:
            with self._guard:
                entry.holders -= 1
                if not entry.holders:
                    del self._locks[key]


class RedisLocks:
    """Across processes and machines, as the Redis key `prefix` + key. The lock expires
    after `timeout_s`, so a worker killed while holding it blocks that key at most so long.

    The threads of one process first queue on a local lock, so only one of them at a time
    polls Redis for a key, and the next one in line gets the lock the moment it is freed
    (Redis offers no wake-up; polling all of them was slower, see docs/benchmarks.md).
    """

    def __init__(
        self, url: str, *, prefix: str, timeout_s: float, wait_s: float, busy: Busy
    ) -> None:
        self._redis = redis.Redis.from_url(url)
        self._prefix = prefix
        self._timeout_s = timeout_s
        self._wait_s = wait_s
        self._busy = busy
        self._local = LocalLocks(wait_s=wait_s, busy=busy)

    @contextmanager
    def hold(self, key: str) -> Iterator[None]:
        deadline = time.monotonic() + self._wait_s
        with self._local.hold(key):
            lock = self._redis.lock(
                f"{self._prefix}{key}",
                timeout=self._timeout_s,
                sleep=REDIS_POLL_S,
                blocking_timeout=max(deadline - time.monotonic(), 0.0),
            )
            if not lock.acquire():
                raise self._busy(key)
            try:
                yield
            finally:
                # expired while we worked: the next holder already has it
                with contextlib.suppress(redis.exceptions.LockError):
                    lock.release()
