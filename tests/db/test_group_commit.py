"""Group commit of turns: a batch stores what one transaction per turn would, and a bad turn
fails alone (shared.records.ingest.ingest_batch, shared.flows.store_turn.TurnWriter)."""

from __future__ import annotations

import threading
import time
from collections.abc import Iterator
from concurrent.futures import Future, ThreadPoolExecutor
from contextlib import ExitStack
from pathlib import Path
from typing import Any

import pytest
from sqlalchemy import text
from sqlalchemy.orm import aliased
from sqlmodel import Session, col, select

from shared.config import Settings
from shared.db.migrate import upgrade_to_head
from shared.db.models import ChatSession, ExtractionRun, Message, User
from shared.errors import Conflict, Unavailable
from shared.flows.store_turn import TurnWriter
from shared.records.ingest import IngestRequest, IngestResult, NewMessage, ingest_batch
from shared.records.tenancy import create_tenant
from shared.runtime import Runtime
from tests.factories import fresh_pg_database, make_settings
from workers.task_queue import TaskQueue


def _runtime(settings: Settings) -> tuple[Runtime, str]:
    upgrade_to_head(settings)
    runtime = Runtime(settings)
    with Session(runtime.engine) as session:
        tenant_id = create_tenant(session=session, name="t").id
    return runtime, tenant_id


@pytest.fixture(params=["sqlite", "postgres"])
def two_stores(
    request: pytest.FixtureRequest, tmp_path: Path
) -> Iterator[list[tuple[Runtime, str]]]:
    """Two empty databases of one backend: one stores a batch, the other turn by turn."""
    with ExitStack() as stack:
        stores = []
        for name in ("batched", "alone"):
            overrides = {}
            if request.param == "postgres":
                overrides["database_url"] = stack.enter_context(fresh_pg_database())
            runtime, tenant_id = _runtime(make_settings(tmp_path / name, **overrides))
            stack.callback(runtime.close)
            stores.append((runtime, tenant_id))
        yield stores


def _turn(text_: str, *external_ids: str, reply: bool = True) -> list[NewMessage]:
    ids = list(external_ids) + [None, None]
    messages = [NewMessage("user", text_, external_id=ids[0])]
    if reply:
        messages.append(NewMessage("assistant", f"Noted: {text_}", external_id=ids[1]))
    return messages


REQUESTS = [  # (user, session, messages)
    ("ana", "s1", _turn("I live in Berlin.", "a1", "a2")),
    ("bob", "s2", _turn("I fly planes.")),
    ("ana", "s1", _turn("I love jazz.", "a3", reply=False)),
    ("ana", "s1", _turn("I live in Berlin.", "a1", "a2")),  # a client's retry
    ("ana", "s3", _turn("A new chat.")),
    ("ana", "s1", [NewMessage("assistant", "Anything else?", external_id="a4")]),
]


def _shape(result: IngestResult) -> tuple[Any, ...]:
    """A result without its generated ids."""
    return (
        [(m.seq, m.role, m.external_id, m.run_id is not None) for m in result.messages],
        [(r.status, r.extractor, r.reply_message_id is not None) for r in result.runs],
        result.duplicates,
        [(r.status, r.reply_message_id is not None) for r in result.existing_runs],
    )


def _stored(runtime: Runtime) -> list[tuple[Any, ...]]:
    """Every message with its owners and its run, without generated ids."""
    owner, run_owner = aliased(User), aliased(User)
    with Session(runtime.engine) as session:
        rows = session.exec(
            select(
                ChatSession.external_id,
                owner.external_id,
                Message.seq,
                Message.role,
                Message.content,
                Message.token_count,
                Message.external_id,
                Message.extraction_status,
                run_owner.external_id,
                col(ExtractionRun.session_id) == col(Message.session_id),
                ExtractionRun.reply_message_id,
            )
            .join(ChatSession, col(ChatSession.id) == col(Message.session_id))
            .join(owner, col(owner.id) == col(Message.user_id))
            .outerjoin(ExtractionRun, col(ExtractionRun.message_id) == col(Message.id))
            .outerjoin(run_owner, col(run_owner.id) == col(ExtractionRun.user_id))
            .order_by(col(ChatSession.external_id), col(Message.seq))
        ).all()
        return [(*row[:-1], row[-1] is not None) for row in rows]


def test_a_batch_stores_what_a_transaction_per_request_would(
    two_stores: list[tuple[Runtime, str]],
) -> None:
    (batched, tenant_b), (alone, tenant_a) = two_stores

    def requests(tenant_id: str) -> list[IngestRequest]:
        return [
            IngestRequest(
                tenant_id=tenant_id,
                user_external_id=user,
                session_external_id=chat,
                messages=messages,
                extractor="offline",
            )
            for user, chat, messages in REQUESTS
        ]

    with Session(batched.engine) as session:
        together = ingest_batch(
            session=session, settings=batched.settings, requests=requests(tenant_b)
        )
        session.commit()
    one_by_one = []
    for request in requests(tenant_a):
        with Session(alone.engine) as session:
            one_by_one += ingest_batch(session=session, settings=alone.settings, requests=[request])
            session.commit()

    assert [_shape(r) for r in together] == [_shape(r) for r in one_by_one]
    assert _stored(batched) == _stored(alone)
    retry = together[3]
    assert retry.duplicates == 2 and not retry.runs
    assert [m.id for m in retry.messages] == [m.id for m in together[0].messages]
    assert [r.id for r in retry.existing_runs] == [r.id for r in together[0].runs]
    assert [m.seq for m in together[5].messages] == [3]  # after a1, a2 and a3 in s1


class Recorder:
    """The writer's after_commit: records each call's run ids; can be made to fail."""

    def __init__(self, *, fail: bool = False) -> None:
        self.calls: list[list[str]] = []
        self.fail = fail

    def __call__(self, run_ids: list[str]) -> None:
        self.calls.append(run_ids)
        if self.fail:
            raise ConnectionError("broker down")


@pytest.fixture
def store(tmp_path: Path) -> Iterator[tuple[Runtime, str]]:
    runtime, tenant_id = _runtime(make_settings(tmp_path))
    yield runtime, tenant_id
    runtime.close()


@pytest.fixture(params=["sqlite", "postgres"])
def any_store(request: pytest.FixtureRequest, tmp_path: Path) -> Iterator[tuple[Runtime, str]]:
    """A fresh SQLite file or PostgreSQL database with one tenant."""
    with ExitStack() as stack:
        overrides = {}
        if request.param == "postgres":
            overrides["database_url"] = stack.enter_context(fresh_pg_database())
        runtime, tenant_id = _runtime(make_settings(tmp_path, **overrides))
        stack.callback(runtime.close)
        yield runtime, tenant_id


def _request(tenant_id: str, user: str, chat: str, text_: str) -> IngestRequest:
    return IngestRequest(
        tenant_id=tenant_id,
        user_external_id=user,
        session_external_id=chat,
        messages=_turn(text_),
        extractor="offline",
    )


def test_a_bad_turn_in_a_batch_fails_alone(store: tuple[Runtime, str]) -> None:
    runtime, tenant_id = store
    recorder = Recorder()
    writer = TurnWriter(runtime.engine, runtime.settings, after_commit=recorder)
    try:
        writer.submit(_request(tenant_id, "ana", "s1", "Hello.")).result(10)
        # Hold the write lock so the next turns queue up and the writer takes them together.
        with Session(runtime.engine) as holder:
            holder.execute(text("UPDATE tenants SET name = name"))
            first = writer.submit(_request(tenant_id, "ana", "s2", "I live in Berlin."))
            time.sleep(0.1)  # the writer now waits for the lock with `first` alone
            queued = [
                writer.submit(_request(tenant_id, "bob", "s1", "Not my session.")),
                writer.submit(_request(tenant_id, "bob", "s3", "I fly planes.")),
                writer.submit(_request(tenant_id, "cy", "s4", "I cook.")),
            ]
            time.sleep(0.1)
            holder.commit()
        first.result(10)
        with pytest.raises(Conflict, match="belongs to another user"):
            queued[0].result(10)
        good = [future.result(10) for future in queued[1:]]
    finally:
        writer.close()

    # The two good turns were committed in one batch: their runs were enqueued together.
    good_runs = {r.id for result in good for r in result.runs}
    assert any(good_runs <= set(call) for call in recorder.calls), recorder.calls
    with Session(runtime.engine) as session:
        owners = dict(session.exec(select(ChatSession.external_id, ChatSession.user_id)).all())
        assert set(owners) == {"s1", "s2", "s3", "s4"}
        assert (
            session.exec(select(Message).where(col(Message.content) == "Not my session.")).all()
            == []
        )
        runs = session.exec(select(ExtractionRun.id)).all()
    assert sorted(runs) == sorted(run_id for call in recorder.calls for run_id in call)


def test_an_enqueue_failure_still_answers_and_leaves_the_runs_pending(
    store: tuple[Runtime, str],
) -> None:
    runtime, tenant_id = store
    # The API's wiring: the writer sends through the TaskQueue, which keeps the broker's
    # failure from the writer.
    tasks = TaskQueue(runtime.settings, extract=Recorder(fail=True))
    writer = TurnWriter(runtime.engine, runtime.settings, after_commit=tasks.extract)
    try:
        result = writer.submit(_request(tenant_id, "ana", "s1", "I live in Berlin.")).result(10)
    finally:
        writer.close()
    with Session(runtime.engine) as session:
        run = session.get(ExtractionRun, result.runs[0].id)
        assert run is not None and run.status == "pending"  # the outbox sweeper resends it


def test_concurrent_turns_get_contiguous_positions_and_one_run_each(
    any_store: tuple[Runtime, str],
) -> None:
    runtime, tenant_id = any_store
    recorder = Recorder()
    writer = TurnWriter(runtime.engine, runtime.settings, after_commit=recorder, max_batch=8)
    chats, per_thread, threads = 4, 20, 8

    def post(thread: int) -> list[IngestResult]:
        futures: list[Future[IngestResult]] = []
        for i in range(per_thread):
            chat = f"s{(thread + i) % chats}"
            futures.append(writer.submit(_request(tenant_id, f"u-{chat}", chat, f"t{thread}.{i}")))
        return [future.result(30) for future in futures]

    try:
        with ThreadPoolExecutor(threads) as pool:
            results = [r for batch in pool.map(post, range(threads)) for r in batch]
    finally:
        writer.close()
    assert len(results) == threads * per_thread
    assert any(len(call) > 1 for call in recorder.calls), "no batch ever held two turns"
    with Session(runtime.engine) as session:
        for chat in range(chats):
            seqs = session.exec(
                select(Message.seq)
                .join(ChatSession, col(ChatSession.id) == col(Message.session_id))
                .where(ChatSession.external_id == f"s{chat}")
                .order_by(col(Message.seq))
            ).all()
            assert seqs == list(range(len(seqs)))
        assert len(session.exec(select(ExtractionRun.id)).all()) == threads * per_thread
        assert sorted(session.exec(select(ExtractionRun.id)).all()) == sorted(
            run_id for call in recorder.calls for run_id in call
        )


def test_a_closed_writer_refuses_new_turns_after_storing_the_queued_ones(
    store: tuple[Runtime, str],
) -> None:
    runtime, tenant_id = store
    writer = TurnWriter(runtime.engine, runtime.settings, after_commit=Recorder())
    futures = [writer.submit(_request(tenant_id, "ana", "s1", f"turn {i}")) for i in range(5)]
    writer.close()
    assert all(future.result(0).runs for future in futures)
    with pytest.raises(Unavailable, match="shutting down"):
        writer.submit(_request(tenant_id, "ana", "s1", "too late"))


def test_a_turn_is_answered_only_after_its_job_is_on_the_broker(store: tuple[Runtime, str]) -> None:
    runtime, tenant_id = store
    release = threading.Event()
    sent: list[list[str]] = []

    def slow_enqueue(run_ids: list[str]) -> None:
        release.wait(10)
        sent.append(run_ids)

    writer = TurnWriter(runtime.engine, runtime.settings, after_commit=slow_enqueue)
    try:
        future = writer.submit(_request(tenant_id, "ana", "s1", "I live in Berlin."))
        time.sleep(0.2)
        assert not future.done()  # committed, but not yet enqueued
        release.set()
        result = future.result(10)
    finally:
        writer.close()
    assert sent == [[result.runs[0].id]]


def test_a_turn_whose_caller_gave_up_before_the_writer_took_it_is_not_stored(
    store: tuple[Runtime, str],
) -> None:
    runtime, tenant_id = store
    writer = TurnWriter(runtime.engine, runtime.settings, after_commit=Recorder())
    try:
        with Session(runtime.engine) as holder:  # the writer waits with the first turn
            holder.execute(text("UPDATE tenants SET name = name"))
            first = writer.submit(_request(tenant_id, "ana", "s1", "First."))
            time.sleep(0.1)
            abandoned = writer.submit(_request(tenant_id, "bob", "s2", "Never mind."))
            kept = writer.submit(_request(tenant_id, "cy", "s3", "Still here."))
            assert abandoned.cancel()
            holder.commit()
        assert first.result(10).runs and kept.result(10).runs
    finally:
        writer.close()
    with Session(runtime.engine) as session:
        contents = set(session.exec(select(Message.content)).all())
    assert "Never mind." not in contents and "Still here." in contents


def test_a_database_that_stays_locked_fails_the_batch_with_503(tmp_path: Path) -> None:
    runtime, tenant_id = _runtime(make_settings(tmp_path, database={"busy_timeout_ms": 300}))
    writer = TurnWriter(runtime.engine, runtime.settings, after_commit=Recorder())
    try:
        with Session(runtime.engine) as holder:
            holder.execute(text("UPDATE tenants SET name = name"))
            futures = [writer.submit(_request(tenant_id, "ana", f"s{i}", "Hi.")) for i in range(3)]
            for future in futures:
                with pytest.raises(Unavailable, match="send it again"):
                    future.result(10)
            holder.commit()
        assert writer.submit(_request(tenant_id, "ana", "s9", "Hi again.")).result(10).runs
    finally:
        writer.close()
        runtime.close()
