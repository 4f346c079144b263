"""The worker process's Runtime: one per process, shared by its task threads."""

from __future__ import annotations

import threading

from shared.config import get_settings
from shared.runtime import Runtime

_runtime: Runtime | None = None
_lock = threading.Lock()


def get_runtime() -> Runtime:
    global _runtime
    if _runtime is None:
        with _lock:
            if _runtime is None:
                _runtime = Runtime(get_settings())
    return _runtime


def set_runtime(runtime: Runtime) -> None:
    """`tiermem serve` hands its API's Runtime to the in-process worker: one Qdrant client."""
    global _runtime
    _runtime = runtime
