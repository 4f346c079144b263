"""The process's metrics: counters by name and labels, and the prometheus_client registry that
/metrics renders (shared/ops/prometheus.py). At the bottom so any layer can count."""

from __future__ import annotations

import threading
from dataclasses import dataclass

from prometheus_client import CollectorRegistry

LabelSet = tuple[tuple[str, str], ...]


@dataclass(frozen=True)
class Sample:
    name: str
    labels: LabelSet  # sorted (key, value) pairs: hashable and in a stable order
    value: float

    def label_dict(self) -> dict[str, str]:
        return dict(self.labels)


class Counters:
    """Monotonic counters. One lock for all: increments are rare next to the work they count."""

    def __init__(self) -> None:
        self._lock = threading.Lock()
        self._values: dict[tuple[str, LabelSet], float] = {}

    def incr(self, name: str, /, *, by: float = 1.0, **labels: str) -> None:
        if by < 0:
            raise ValueError("a counter never goes down")
        key = (name, _label_set(labels))
        with self._lock:
            self._values[key] = self._values.get(key, 0.0) + by

    def value(self, name: str, /, **labels: str) -> float:
        """The counter with exactly these labels (0 when never incremented)."""
        with self._lock:
            return self._values.get((name, _label_set(labels)), 0.0)

    def total(self, name: str, /, **labels: str) -> float:
        """The sum over every label set that includes the given labels."""
        wanted = set(_label_set(labels))
        with self._lock:
            return sum(v for (n, ls), v in self._values.items() if n == name and wanted <= set(ls))

    def snapshot(self) -> list[Sample]:
        with self._lock:
            items = list(self._values.items())
        return [Sample(name, labels, value) for (name, labels), value in sorted(items)]


def _label_set(labels: dict[str, str]) -> LabelSet:
    return tuple(sorted((key, str(value)) for key, value in labels.items()))


# The process's counters: what a /metrics endpoint will render.
COUNTERS = Counters()
incr = COUNTERS.incr
value = COUNTERS.value
total = COUNTERS.total
snapshot = COUNTERS.snapshot

# The process's prometheus_client metrics: /metrics renders them after what it reads from SQL.
# Not the library's global registry, so nothing a dependency registers there leaks into it.
REGISTRY = CollectorRegistry(auto_describe=True)
