"""Per-user locks: one holder at a time per user, in one process and across processes."""

from __future__ import annotations

import threading
import time
from collections.abc import Callable
from concurrent.futures import ThreadPoolExecutor

import pytest

from shared.errors import TransientError
from shared.memory.locks import LocalUserLocks, RedisUserLocks, UserLocks

THREADS = 12


def _redis(url: str, wait_s: float = 10.0) -> RedisUserLocks:
    return RedisUserLocks(url, timeout_s=30, wait_s=wait_s)


@pytest.fixture(params=["local", "redis"])
def make_locks(request: pytest.FixtureRequest) -> Callable[[float], UserLocks]:
    if request.param == "local":
        return lambda wait_s: LocalUserLocks(wait_s=wait_s)
    url = request.getfixturevalue("redis_url")
    return lambda wait_s: _redis(url, wait_s)


def test_threads_of_one_process_take_a_users_lock_one_at_a_time(
    make_locks: Callable[[float], UserLocks],
) -> None:
    locks = make_locks(10.0)
    inside = 0
    most_inside = 0
    guard = threading.Lock()

    def work(_: int) -> None:
        nonlocal inside, most_inside
        with locks.hold("ana"):
            with guard:
                inside += 1
                most_inside = max(most_inside, inside)
            time.sleep(0.005)
            with guard:
                inside -= 1

    with ThreadPoolExecutor(THREADS) as pool:
        list(pool.map(work, range(THREADS * 3)))
    assert most_inside == 1


def test_other_users_are_not_held_up(make_locks: Callable[[float], UserLocks]) -> None:
    locks = make_locks(0.2)
    with locks.hold("ana"), locks.hold("ben"):
        pass


def test_a_busy_lock_gives_up_after_the_wait_with_a_retryable_error(
    make_locks: Callable[[float], UserLocks],
) -> None:
    locks = make_locks(0.2)
    held, done = threading.Event(), threading.Event()

    def holder() -> None:
        with locks.hold("ana"):
            held.set()
            done.wait(10)

    thread = threading.Thread(target=holder)
    thread.start()
    try:
        assert held.wait(5)
        with pytest.raises(TransientError, match="busy"), locks.hold("ana"):
            pass
    finally:
        done.set()
        thread.join()
    with locks.hold("ana"):  # free again
        pass


def test_a_second_process_waits_for_the_first_through_redis(redis_url: str) -> None:
    first, second = _redis(redis_url), _redis(redis_url, wait_s=5.0)
    held, done = threading.Event(), threading.Event()
    released_at = 0.0

    def holder() -> None:
        nonlocal released_at
        with first.hold("ana"):
            held.set()
            done.wait(10)
            time.sleep(0.1)
            released_at = time.monotonic()

    thread = threading.Thread(target=holder)
    thread.start()
    assert held.wait(5)
    done.set()
    with second.hold("ana"):
        acquired_at = time.monotonic()
    thread.join()
    assert acquired_at >= released_at
