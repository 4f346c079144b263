"""A session's waiting runs (shared.records.batches): when they are due, claimed once however
many checks race for them, and found again by the outbox sweeper when a check was lost."""

from __future__ import annotations

import datetime as dt
import threading

import pytest
from sqlalchemy import update
from sqlmodel import Session, select

from shared.db.engine import session_scope
from shared.db.models import ExtractionRun, Message, utcnow
from shared.flows.extract_turn import park
from shared.records.batches import BatchRule, claim_due, due_in, park_run
from shared.records.ingest import IngestRequest, NewMessage, ingest_batch
from shared.records.outbox import claim_lost_runs
from shared.records.tenancy import create_tenant
from shared.runtime import Runtime

RULE = BatchRule(turns=3, quiet_s=30)


def _store_turns(runtime: Runtime, texts: list[str], chat: str = "s1") -> tuple[str, list[str]]:
    """One session's turns stored (a tenant each); (its id, their runs' ids in turn order)."""
    with Session(runtime.engine) as session:
        tenant_id = create_tenant(session=session, name=f"t-{chat}").id
        request = IngestRequest(
            tenant_id=tenant_id,
            user_external_id="ana",
            session_external_id=chat,
            messages=[NewMessage("user", text) for text in texts],
            extractor="llm",
        )
        (result,) = ingest_batch(session=session, settings=runtime.settings, requests=[request])
        session.commit()
    return result.chat_id, [run.id for run in result.runs]


def _park(runtime: Runtime, run_ids: list[str]) -> None:
    with session_scope(runtime.engine) as session:
        assert all(park_run(session, run_id) for run_id in run_ids)


def _statuses(runtime: Runtime) -> dict[str, tuple[str, str | None]]:
    with Session(runtime.engine) as session:
        return {r.id: (r.status, r.batch_id) for r in session.exec(select(ExtractionRun))}


def _age(runtime: Runtime, seconds: float) -> None:
    """Every run (and its clock) as if stored `seconds` ago."""
    then = utcnow() - dt.timedelta(seconds=seconds)
    with session_scope(runtime.engine) as session:
        session.execute(update(ExtractionRun).values(created_at=then, updated_at=then))


def test_waiting_turns_are_due_at_n_or_after_the_quiet_time(runtime: Runtime) -> None:
    session_id, runs = _store_turns(runtime, ["a", "b", "c", "d"])
    with Session(runtime.engine) as session:
        assert due_in(session, session_id=session_id, rule=RULE) is None  # none waiting yet
    _park(runtime, runs[:2])
    with Session(runtime.engine) as session:
        # Two of three wait, and two turns are still pending: the session is not quiet.
        assert 29 < (due_in(session, session_id=session_id, rule=RULE) or 0) <= 30
        assert park_run(session, runs[0]) is False  # parked once
        message = session.exec(select(Message).where(Message.run_id == runs[0])).one()
        assert message.extraction_status == "waiting"
    _park(runtime, runs[2:3])
    with Session(runtime.engine) as session:
        assert due_in(session, session_id=session_id, rule=RULE) == 0
    with session_scope(runtime.engine) as session:
        assert claim_due(session, session_id=session_id, rule=RULE) == [runs[:3]]
    statuses = _statuses(runtime)
    batch = statuses[runs[0]][1]
    assert batch and [statuses[r] for r in runs] == [("pending", batch)] * 3 + [("pending", None)]

    _park(runtime, runs[3:])
    with Session(runtime.engine) as session:
        assert due_in(session, session_id=session_id, rule=RULE) == pytest.approx(30, abs=1)
    _age(runtime, 31)
    with session_scope(runtime.engine) as session:
        assert claim_due(session, session_id=session_id, rule=RULE) == [runs[3:]]


def test_a_backlog_is_claimed_in_batches_of_n_in_turn_order(runtime: Runtime) -> None:
    session_id, runs = _store_turns(runtime, [f"turn {i}" for i in range(7)])
    _park(runtime, list(reversed(runs)))
    with session_scope(runtime.engine) as session:
        assert claim_due(session, session_id=session_id, rule=RULE) == [
            runs[:3],
            runs[3:6],
            runs[6:],
        ]


def test_checks_that_race_claim_each_turn_once(runtime: Runtime) -> None:
    session_id, runs = _store_turns(runtime, [f"turn {i}" for i in range(6)])
    _park(runtime, runs)
    start = threading.Barrier(4)
    claimed: list[list[str]] = []

    def check() -> None:
        start.wait()
        with session_scope(runtime.engine) as session:
            batches = claim_due(session, session_id=session_id, rule=RULE)
        claimed.extend(batches)

    threads = [threading.Thread(target=check) for _ in range(4)]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join(30)
    assert sorted(run for batch in claimed for run in batch) == sorted(runs)
    assert len({_statuses(runtime)[r][1] for r in runs}) == 2  # two batches of three


def test_the_sweeper_resends_a_waiting_turn_whose_check_was_lost(runtime: Runtime) -> None:
    session_id, runs = _store_turns(runtime, ["a"])
    _park(runtime, runs)
    settings = runtime.settings
    with session_scope(runtime.engine) as session:
        assert claim_lost_runs(session=session, settings=settings) == []
    # Past the pending sweep's age, but not yet past it and the quiet time: still its check's.
    _age(runtime, settings.worker.sweep_pending_after_s + 1)
    with session_scope(runtime.engine) as session:
        assert claim_lost_runs(session=session, settings=settings) == []
    _age(runtime, settings.worker.sweep_pending_after_s + settings.extraction.batch_quiet_s + 1)
    with session_scope(runtime.engine) as session:
        assert claim_lost_runs(session=session, settings=settings) == runs
    with Session(runtime.engine) as session:
        run = session.get(ExtractionRun, runs[0])
        assert run is not None and (run.status, run.session_id) == ("waiting", session_id)


def test_turns_parked_at_once_find_their_session_due(runtime: Runtime) -> None:
    """Two workers park a session's last two turns at the same moment: the one that commits
    last must see both waiting and send the check (each transaction alone sees one)."""
    runtime.settings.extraction.batch_turns = 2  # this test's runtime only
    for round_ in range(4):
        texts = [f"round {round_} turn {i}" for i in range(2)]
        _, runs = _store_turns(runtime, texts, chat=f"s{round_}")
        assert 0 in _park_at_once(runtime, runs), f"round {round_}: no check was due"


def _park_at_once(runtime: Runtime, run_ids: list[str]) -> list[float | None]:
    """shared.flows.extract_turn.park of each run, on threads started together; their dues."""
    start = threading.Barrier(len(run_ids))
    dues: list[float | None] = []

    def park_one(run_id: str) -> None:
        start.wait()
        outcome = park(runtime, run_id)
        assert outcome is not None
        dues.append(outcome.batch_due_in_s)

    threads = [threading.Thread(target=park_one, args=(run_id,)) for run_id in run_ids]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join(60)
    assert len(dues) == len(run_ids)
    return dues
