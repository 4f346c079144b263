"""Tier state in SQL: one transaction a step, two runs never interleave, a crash leaves it sound."""

from __future__ import annotations

import contextlib
import threading
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
from sqlmodel import Session, select

from shared.compression import sessions
from shared.compression.locks import CompressionBusy
from shared.compression.store import check, effective_settings, load
from shared.compression.summary import SummaryOutput, SummaryRequest
from shared.compression.tiers import needs_compression
from shared.db.migrate import upgrade_to_head
from shared.db.models import ChatSession, CompressionRun, CompressionState, Tenant, TierEntry
from shared.flows import compress_session as service
from shared.records.ingest import NewMessage, ingest_messages
from shared.records.tenancy import ensure_dev_tenant
from shared.runtime import Runtime
from tests.compression.helpers import DECISION, WellBehaved, text_of
from tests.factories import make_settings

LIMIT = {"context_limit_tokens": 2000}


@pytest.fixture(
    name="db_settings", params=["sqlite", pytest.param("postgres", marks=pytest.mark.postgres)]
)
def db_settings_fixture(tmp_path: Path, request: pytest.FixtureRequest) -> dict[str, Any]:
    if request.param == "postgres":
        return {"database_url": request.getfixturevalue("pg_url")}
    return {}


def open_runtime(tmp_path: Path, db: dict[str, Any], **overrides: Any) -> Runtime:
    settings = make_settings(
        tmp_path,
        qdrant={"in_memory": True},
        compression=LIMIT | overrides.pop("compression", {}),
        **db,
        **overrides,
    )
    upgrade_to_head(settings)
    return Runtime(settings)


@pytest.fixture(name="runtime")
def runtime_fixture(tmp_path: Path, db_settings: dict[str, Any]) -> Iterator[Runtime]:
    runtime = open_runtime(tmp_path, db_settings)
    yield runtime
    runtime.close()


def add_turns(runtime: Runtime, n_turns: int, *, session_id: str = "s1", start: int = 0) -> str:
    """n user/assistant turns (a decision in the third); returns the chat's internal id."""
    with Session(runtime.engine) as session:
        ensure_dev_tenant(session=session, settings=runtime.settings)
        tenant_id = session.exec(select(Tenant.id)).first()
        assert tenant_id is not None
        chat_id = ""
        for i in range(start, start + n_turns):
            user_text = DECISION if i == 2 else text_of(30 + (i * 13) % 50, i)
            result = ingest_messages(
                session=session,
                settings=runtime.settings,
                tenant_id=tenant_id,
                user_external_id="ana",
                session_external_id=session_id,
                extractor="offline",
                messages=[
                    NewMessage("user", user_text, "Ana"),
                    NewMessage("assistant", text_of(20 + i % 30, 1000 + i)),
                ],
            )
            chat_id = result.chat_id
        session.commit()
    return chat_id


def assert_sound(runtime: Runtime, chat_id: str) -> dict[str, Any]:
    with Session(runtime.engine) as session:
        chat = session.get(ChatSession, chat_id)
        assert chat is not None
        loaded = load(session, chat)
        assert check(session, chat, loaded) == []
        row = session.get(CompressionState, chat_id)
        cfg = effective_settings(runtime.settings.compression, loaded.overrides)
        return {"loaded": loaded, "version": row.version if row else 0, "cfg": cfg}


def test_a_run_persists_each_step_and_reloads_to_the_same_state(runtime: Runtime) -> None:
    chat_id = add_turns(runtime, 40)
    runtime.summarizer = WellBehaved()
    assert service.over_trigger(runtime, chat_id)  # what the extraction task asks first
    outcome = service.compress_session(runtime, chat_id)
    assert outcome.status == "done" and outcome.tokens_after < outcome.tokens_before
    sound = assert_sound(runtime, chat_id)
    loaded, cfg = sound["loaded"], sound["cfg"]
    assert not needs_compression(loaded.state, cfg)
    with Session(runtime.engine) as session:
        run = session.get(CompressionRun, outcome.run_id)
        assert run is not None and run.status == "done" and run.trigger == "auto"
        steps = [s for s in run.steps if s["kind"] != "pin_head"]
        assert run.iterations == len(steps) >= 2
        # one version per persisted step (the head decision is one too)
        assert sound["version"] == run.version_after == (run.version_before or 0) + len(run.steps)
        assert run.llm_calls >= 1 and run.tokens_before > run.tokens_after
        assert run.engine_ms > 0 and run.duration_ms >= run.engine_ms
    # the next reply's check finds nothing to do, without a run row
    assert not service.over_trigger(runtime, chat_id)
    assert service.compress_session(runtime, chat_id).status == "below_trigger"


def test_below_the_trigger_no_run_is_recorded(runtime: Runtime) -> None:
    chat_id = add_turns(runtime, 3)
    assert not service.over_trigger(runtime, chat_id)
    assert not service.over_trigger(runtime, "no-such-session")
    assert service.compress_session(runtime, chat_id).status == "below_trigger"
    with Session(runtime.engine) as session:
        assert session.exec(select(CompressionRun)).all() == []


def test_a_run_stopped_at_its_bound_is_resumed_until_done(
    tmp_path: Path, db_settings: dict[str, Any]
) -> None:
    runtime = open_runtime(tmp_path, db_settings, compression={"max_iterations": 1})
    try:
        chat_id = add_turns(runtime, 40)
        runtime.summarizer = WellBehaved()
        outcome = service.compress_session(runtime, chat_id)
        chain = [outcome.status]
        while outcome.next_run_id:  # what the task does: enqueue the resume run
            outcome = service.compress_session(runtime, chat_id, run_id=outcome.next_run_id)
            chain.append(outcome.status)
        assert chain[0] == "partial" and chain[-1] == "done" and len(chain) >= 3
        sound = assert_sound(runtime, chat_id)
        assert not needs_compression(sound["loaded"].state, sound["cfg"])
        with Session(runtime.engine) as session:
            runs = session.exec(select(CompressionRun)).all()
            assert all(r.iterations <= 1 for r in runs)
            assert {r.trigger for r in runs} == {"auto", "resume"}
    finally:
        runtime.close()


class Crash(BaseException):
    """Not an Exception: nothing on the way up catches it, like a killed worker."""


def test_a_crash_between_steps_leaves_a_consistent_state(
    runtime: Runtime, monkeypatch: pytest.MonkeyPatch
) -> None:
    chat_id = add_turns(runtime, 40)
    runtime.summarizer = WellBehaved()
    real = service.persist_step
    calls = {"n": 0}

    def crashing(*args: Any, **kwargs: Any) -> int:
        calls["n"] += 1
        if calls["n"] == 3:
            raise Crash()
        return real(*args, **kwargs)

    monkeypatch.setattr(service, "persist_step", crashing)
    with pytest.raises(Crash):
        service.compress_session(runtime, chat_id)
    after_crash = assert_sound(runtime, chat_id)
    assert after_crash["version"] == 2  # the two steps before the crash, nothing of the third
    monkeypatch.setattr(service, "persist_step", real)
    with Session(runtime.engine) as session:
        chat = session.get(ChatSession, chat_id)
        assert chat is not None
        run_id = sessions.request_compaction(session=session, chat=chat, focus=None).id
        session.commit()
    assert service.compress_session(runtime, chat_id, run_id=run_id).status == "done"
    assert_sound(runtime, chat_id)
    with Session(runtime.engine) as session:
        statuses = {r.trigger: r.status for r in session.exec(select(CompressionRun))}
        assert statuses == {"auto": "failed", "compact": "done"}  # the crashed run is closed


class Gate:
    """A summarizer that holds every caller until `parties` have arrived: both runs read
    the same version before either writes."""

    name = "llm"

    def __init__(self, parties: int) -> None:
        self.barrier = threading.Barrier(parties, timeout=10)
        self.inner = WellBehaved()

    def summarize(self, request: SummaryRequest) -> SummaryOutput:
        # later calls of the winner find the barrier broken: nobody else is coming
        with contextlib.suppress(threading.BrokenBarrierError):
            self.barrier.wait()
        return self.inner.summarize(request)


def race(runtimes: list[Runtime], chat_id: str) -> list[Any]:
    results: list[Any] = [None] * len(runtimes)

    def work(i: int) -> None:
        try:
            results[i] = service.compress_session(runtimes[i], chat_id)
        except CompressionBusy as exc:
            results[i] = exc

    threads = [threading.Thread(target=work, args=(i,)) for i in range(len(runtimes))]
    for t in threads:
        t.start()
    for t in threads:
        t.join(timeout=60)
    return results


def test_two_runs_without_a_shared_lock_the_version_check_makes_one_give_up(
    tmp_path: Path, db_settings: dict[str, Any]
) -> None:
    # Two Runtimes without Redis are two lock tables: only the version check is left.
    runtimes = [open_runtime(tmp_path, db_settings) for _ in range(2)]
    try:
        chat_id = add_turns(runtimes[0], 40)
        gate = Gate(2)
        for r in runtimes:
            r.summarizer = gate
        outcomes = race(runtimes, chat_id)
        statuses = sorted(o.status for o in outcomes)
        assert statuses == ["done", "stale"], outcomes
        sound = assert_sound(runtimes[0], chat_id)
        assert not needs_compression(sound["loaded"].state, sound["cfg"])
        with Session(runtimes[0].engine) as session:
            runs = session.exec(select(CompressionRun)).all()
            assert sorted(r.status for r in runs) == ["done", "stale"]
            stale = next(r for r in runs if r.status == "stale")
            assert stale.error and "another run" in stale.error
            # nothing of the stale run's work is in the tiers
            entries = session.exec(select(TierEntry)).all()
            assert {e.created_by_run for e in entries} <= {
                next(r.id for r in runs if r.status == "done")
            }
    finally:
        for r in runtimes:
            r.close()


class Slow(WellBehaved):
    def summarize(self, request: SummaryRequest) -> SummaryOutput:
        threading.Event().wait(0.3)
        return super().summarize(request)


def test_two_workers_with_redis_locks_never_interleave(
    tmp_path: Path, db_settings: dict[str, Any], redis_url: str
) -> None:
    runtimes = [
        open_runtime(tmp_path, db_settings, redis_url=redis_url, compression={"lock_wait_s": 0.1})
        for _ in range(2)
    ]
    try:
        chat_id = add_turns(runtimes[0], 40)
        for r in runtimes:
            r.summarizer = Slow()
        outcomes = race(runtimes, chat_id)
        done = [o for o in outcomes if not isinstance(o, Exception)]
        busy = [o for o in outcomes if isinstance(o, CompressionBusy)]
        assert [o.status for o in done] == ["done"] and len(busy) == 1, outcomes
        sound = assert_sound(runtimes[1], chat_id)
        assert sound["version"] >= 2
        # the retry of the busy task finds the work done
        assert service.compress_session(runtimes[1], chat_id).status == "below_trigger"
    finally:
        for r in runtimes:
            r.close()


def test_deleting_the_user_takes_the_tiers_along(runtime: Runtime) -> None:
    from shared.db.models import User
    from shared.flows.forget import delete_user

    chat_id = add_turns(runtime, 40)
    runtime.summarizer = WellBehaved()
    service.compress_session(runtime, chat_id)
    with Session(runtime.engine) as session:
        user = session.exec(select(User)).one()
        delete_user(runtime=runtime, session=session, user=user)
    with Session(runtime.engine) as session:
        for table in (TierEntry, CompressionState, CompressionRun):
            assert session.exec(select(table)).all() == []


def test_the_extraction_task_leaves_the_check_to_the_compression_task_without_a_database(
    tmp_path: Path,
) -> None:
    # Nothing listens on port 1: every statement fails the way a dropped database does.
    down = Runtime(make_settings(tmp_path, database_url="postgresql+psycopg://x@127.0.0.1:1/x"))
    try:
        assert service.over_trigger(down, "any-session") is True
    finally:
        down.close()
