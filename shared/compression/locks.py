"""Per-session compression locks: Redis across processes, in memory for one process."""

from __future__ import annotations

from shared.config import Settings
from shared.errors import TransientError
from shared.locks import KeyLocks, LocalLocks, RedisLocks


class CompressionBusy(TransientError):
    """Another run holds this session's lock: the task retries later, then finds the work done."""

    code = "compression_busy"


SessionLocks = KeyLocks


def _busy(chat_id: str) -> CompressionBusy:
    return CompressionBusy(f"session {chat_id} is being compressed by another run")


def make_session_locks(settings: Settings) -> SessionLocks:
    """The process's lock table (the Runtime keeps one): Redis across processes, else local."""
    cfg = settings.compression
    if settings.redis_url:
        # The lock expires after lock_timeout_s, so a killed worker blocks a session for at
        # most that long; a run that outlives it is still stopped by the version check.
        return RedisLocks(
            settings.redis_url,
            prefix="tiermem:lock:compress:",
            timeout_s=cfg.lock_timeout_s,
            wait_s=cfg.lock_wait_s,
            busy=_busy,
        )
    return LocalLocks(wait_s=cfg.lock_wait_s, busy=_busy)
