"""Per-session compression locks: one run at a time per session, and in one process a
session's lock lives only while a run holds or waits for it."""

from __future__ import annotations

import threading
from pathlib import Path

import pytest

from shared.compression.locks import CompressionBusy
from shared.locks import LocalLocks
from shared.runtime import Runtime
from tests.factories import make_settings


def test_the_local_lock_table_keeps_only_the_sessions_held_or_waited_for(tmp_path: Path) -> None:
    runtime = Runtime(
        make_settings(tmp_path, qdrant={"in_memory": True}, compression={"lock_wait_s": 0.05})
    )
    try:
        locks = runtime.session_locks
        assert isinstance(locks, LocalLocks)
        for i in range(1000):
            with locks.hold(f"session-{i}"):
                assert len(locks) == 1
        assert len(locks) == 0

        # A run that gives up waiting leaves nothing behind either.
        gave_up = threading.Event()

        def second_run() -> None:
            with pytest.raises(CompressionBusy), locks.hold("session-0"):
                pass
            gave_up.set()

        with locks.hold("session-0"):
            waiter = threading.Thread(target=second_run)
            waiter.start()
            waiter.join(timeout=5)
            assert gave_up.is_set()
            assert len(locks) == 1
        assert len(locks) == 0
    finally:
        runtime.close()
