"""A session's waiting extraction runs (ADR 0024): parked one by one, claimed together.

Claiming is a conditional update (`waiting` → `pending` with a batch id) run by run, so two
workers that check the same session at once never claim the same run: on SQLite the write
transactions take turns; on PostgreSQL the second update waits for the first one's row lock
and then finds the run no longer waiting.
"""

from __future__ import annotations

import datetime as dt
from dataclasses import dataclass

from sqlalchemy import case, func, update
from sqlmodel import Session, col, select

from shared.db.models import ExtractionRun, Message, new_id, utcnow
from shared.records.runs import WAITING

# A check that fires this close to the quiet time counts as on time: timers are not exact,
# and a check that found the session not quite quiet would leave it to the sweeper.
_ON_TIME_S = 0.05


@dataclass(frozen=True)
class BatchRule:
    """When a session's waiting turns are extracted: `turns` of them wait, or no new turn
    came for `quiet_s` seconds. `turns` is also the most one batch holds."""

    turns: int
    quiet_s: float


def park_run(session: Session, run_id: str) -> bool:
    """A pending live run becomes waiting; False when it was not pending (claimed meanwhile,
    or already waiting). The caller commits."""
    now = utcnow()
    parked = session.execute(
        update(ExtractionRun)
        .where(
            col(ExtractionRun.id) == run_id,
            col(ExtractionRun.status) == "pending",
            col(ExtractionRun.batch_id).is_(None),
        )
        .values(status=WAITING, updated_at=now)
    )
    if not parked.rowcount:  # type: ignore[attr-defined]
        return False
    session.execute(
        update(Message).where(col(Message.run_id) == run_id).values(extraction_status=WAITING)
    )
    return True


def due_in(
    session: Session, *, session_id: str, rule: BatchRule, now: dt.datetime | None = None
) -> float | None:
    """Seconds until the session's waiting turns are due (0: now), or None when none wait.

    Quiet is measured from the session's newest turn whose live extraction is still open
    (waiting or pending): a turn stored a moment ago, not yet parked, still counts."""
    now = now or utcnow()
    waiting, newest = session.exec(
        select(
            func.sum(case((col(ExtractionRun.status) == WAITING, 1), else_=0)),
            func.max(ExtractionRun.created_at),
        ).where(
            col(ExtractionRun.session_id) == session_id,
            col(ExtractionRun.status).in_((WAITING, "pending")),
            col(ExtractionRun.replay_job_id).is_(None),
        )
    ).one()
    if not waiting:
        return None
    if waiting >= rule.turns:
        return 0.0
    quiet = (_naive(now) - _naive(newest)).total_seconds()
    left = rule.quiet_s - quiet
    return left if left > _ON_TIME_S else 0.0


def claim_due(
    session: Session, *, session_id: str, rule: BatchRule, now: dt.datetime | None = None
) -> list[list[str]]:
    """The session's waiting runs in turn order, claimed in batches of at most `rule.turns`,
    when they are due; [] when they are not, or another worker claimed them first. The
    caller commits, then sends each batch."""
    now = now or utcnow()
    if due_in(session, session_id=session_id, rule=rule, now=now) != 0:
        return []
    ids = list(
        session.exec(
            select(ExtractionRun.id)
            .join(Message, col(Message.id) == col(ExtractionRun.message_id))
            .where(
                col(ExtractionRun.session_id) == session_id,
                col(ExtractionRun.status) == WAITING,
                col(ExtractionRun.replay_job_id).is_(None),
            )
            .order_by(col(Message.seq))
        ).all()
    )
    batches = []
    for start in range(0, len(ids), rule.turns):
        batch_id = new_id()
        chunk = ids[start : start + rule.turns]
        claimed = [run_id for run_id in chunk if _claim(session, run_id, batch_id, now)]
        if claimed:
            batches.append(claimed)
    return batches


def _claim(session: Session, run_id: str, batch_id: str, now: dt.datetime) -> bool:
    claimed = session.execute(
        update(ExtractionRun)
        .where(col(ExtractionRun.id) == run_id, col(ExtractionRun.status) == WAITING)
        .values(status="pending", batch_id=batch_id, enqueued_at=now, updated_at=now)
    )
    return bool(claimed.rowcount)  # type: ignore[attr-defined]


def _naive(value: dt.datetime) -> dt.datetime:
    """SQLite hands back naive UTC datetimes, PostgreSQL aware ones: compare them alike."""
    return value.replace(tzinfo=None) if value.tzinfo else value
