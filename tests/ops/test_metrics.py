"""Process-wide counters: by name and labels, exact under concurrent increments."""

from __future__ import annotations

import threading

import pytest

from shared.metrics import Counters, Sample


def test_counts_by_name_and_label_set() -> None:
    counters = Counters()
    counters.incr("hits_total", source="fact", reason="role_change")
    counters.incr("hits_total", reason="role_change", source="fact")  # label order is irrelevant
    counters.incr("hits_total", by=3, source="message", reason="exfiltration")
    assert counters.value("hits_total", source="fact", reason="role_change") == 2
    assert counters.value("hits_total", source="fact") == 0  # exactly these labels
    assert counters.total("hits_total") == 5
    assert counters.total("hits_total", source="message") == 3
    assert counters.snapshot() == [
        Sample("hits_total", (("reason", "exfiltration"), ("source", "message")), 3.0),
        Sample("hits_total", (("reason", "role_change"), ("source", "fact")), 2.0),
    ]
    assert counters.snapshot()[0].label_dict() == {"reason": "exfiltration", "source": "message"}


def test_never_goes_down() -> None:
    with pytest.raises(ValueError):
        Counters().incr("x", by=-1)


def test_concurrent_increments_are_not_lost() -> None:
    counters = Counters()

    def work() -> None:
        for _ in range(5000):
            counters.incr("n", worker="any")

    threads = [threading.Thread(target=work) for _ in range(8)]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join()
    assert counters.value("n", worker="any") == 40_000
