"""The outbox: turns are committed pending before they are enqueued; this finds lost work."""

from __future__ import annotations

import datetime as dt

from sqlalchemy import or_, update
from sqlmodel import Session, and_, col, select

from shared.config import Settings
from shared.db.models import ExtractionRun, utcnow
from shared.records.runs import WAITING


def claim_lost_runs(*, session: Session, settings: Settings, limit: int = 1000) -> list[str]:
    """Run ids to enqueue again: pending too long, running/retrying so long their worker
    must be gone, or waiting for their session's batch (ADR 0024) past its quiet time (the
    check was lost: sent again, the run sends its session's check). Their clock is reset so
    the next sweep does not send them twice."""
    now = utcnow()
    pending_cutoff = now - dt.timedelta(seconds=settings.worker.sweep_pending_after_s)
    waiting_cutoff = pending_cutoff - dt.timedelta(seconds=settings.extraction.batch_quiet_s)
    running_cutoff = now - dt.timedelta(seconds=settings.worker.sweep_running_after_s)
    ids = list(
        session.exec(
            select(ExtractionRun.id)
            .where(
                # A replay's runs are its dispatcher's to send (POST /v1/replay/{id}/resume).
                col(ExtractionRun.replay_job_id).is_(None),
                or_(
                    and_(
                        ExtractionRun.status == "pending",
                        col(ExtractionRun.updated_at) < pending_cutoff,
                    ),
                    and_(
                        ExtractionRun.status == WAITING,
                        col(ExtractionRun.updated_at) < waiting_cutoff,
                    ),
                    and_(
                        col(ExtractionRun.status).in_(["running", "retrying"]),
                        col(ExtractionRun.updated_at) < running_cutoff,
                    ),
                ),
            )
            .order_by(col(ExtractionRun.created_at))
            .limit(limit)
        ).all()
    )
    if ids:
        session.execute(
            update(ExtractionRun)
            .where(col(ExtractionRun.id).in_(ids))
            .values(enqueued_at=now, updated_at=now)
        )
        session.commit()
    return ids
