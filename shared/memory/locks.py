"""Per-user write locks: two extractions of one user never decide dedup at the same time."""

from __future__ import annotations

from collections.abc import Callable

from shared.config import Settings
from shared.errors import TransientError
from shared.locks import KeyLocks, LocalLocks, RedisLocks

UserLocks = KeyLocks


def _busy(wait_s: float) -> Callable[[str], TransientError]:
    return lambda key: TransientError(f"memory lock for user {key} busy for {wait_s:.0f}s")


class LocalUserLocks(LocalLocks):
    """One process (`tiermem serve`, tests)."""

    def __init__(self, *, wait_s: float) -> None:
        super().__init__(wait_s=wait_s, busy=_busy(wait_s))


class RedisUserLocks(RedisLocks):
    """Across processes and machines."""

    def __init__(self, url: str, *, timeout_s: float, wait_s: float) -> None:
        super().__init__(
            url,
            prefix="tiermem:lock:user:",
            timeout_s=timeout_s,
            wait_s=wait_s,
            busy=_busy(wait_s),
        )


def make_user_locks(settings: Settings) -> UserLocks:
    """The process's user locks (the Runtime keeps one): Redis across processes, else local."""
    redis_cfg = settings.redis
    if settings.redis_url:
        return RedisUserLocks(
            settings.redis_url, timeout_s=redis_cfg.lock_timeout_s, wait_s=redis_cfg.lock_wait_s
        )
    return LocalUserLocks(wait_s=redis_cfg.lock_wait_s)
