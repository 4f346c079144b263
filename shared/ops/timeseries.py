"""Per-minute history of the extract queue, from SQL (the /ops page's plots).

Depth at a minute's end is rebuilt from the runs' own timestamps (created, started), so it
needs no sampler and is right for minutes before anyone looked.
"""

from __future__ import annotations

import datetime as dt
from bisect import bisect_right

from pydantic import BaseModel
from sqlalchemy import func, or_
from sqlmodel import Session, col, select

from shared.db.models import ExtractionRun, utcnow
from shared.ops.queue_names import EXTRACT
from shared.ops.queues import of_tenant, percentile_of, utc


class Point(BaseModel):
    at: dt.datetime  # the minute's end
    depth: int  # runs created and not yet started
    finished: int  # done + skipped in the minute
    failed: int
    duration_ms_p50: float | None
    duration_ms_p95: float | None


class Series(BaseModel):
    queue: str = EXTRACT
    minutes: int
    points: list[Point]


def per_minute(
    *,
    session: Session,
    minutes: int,
    tenant_id: str | None = None,
    now: dt.datetime | None = None,
) -> Series:
    """`tenant_id`: that tenant's runs only (None: all)."""
    now = (now or utcnow()).replace(second=0, microsecond=0) + dt.timedelta(minutes=1)
    start = now - dt.timedelta(minutes=minutes)
    live = col(ExtractionRun.replay_job_id).is_(None) & of_tenant(ExtractionRun, tenant_id)
    # Waiting when the window opens: created before it, started in it or not at all.
    base = session.exec(
        select(func.count()).where(
            live,
            col(ExtractionRun.created_at) < start,
            or_(col(ExtractionRun.started_at).is_(None), col(ExtractionRun.started_at) >= start),
        )
    ).one()
    created = sorted(
        utc(t)
        for t in session.exec(
            select(ExtractionRun.created_at).where(live, col(ExtractionRun.created_at) >= start)
        ).all()
    )
    started = sorted(
        utc(t)
        for t in session.exec(
            select(ExtractionRun.started_at).where(live, col(ExtractionRun.started_at) >= start)
        ).all()
        if t is not None
    )
    finished = session.exec(
        select(ExtractionRun.finished_at, ExtractionRun.status, ExtractionRun.duration_ms).where(
            live, col(ExtractionRun.finished_at) >= start
        )
    ).all()
    by_minute: dict[int, list[tuple[str, float]]] = {}
    for at, status, duration in finished:
        if at is not None:
            index = int((utc(at) - start).total_seconds() // 60)
            by_minute.setdefault(index, []).append((status, float(duration)))
    points = []
    for i in range(minutes):
        end = start + dt.timedelta(minutes=i + 1)
        rows = by_minute.get(i, [])
        ok = [d for s, d in rows if s in ("done", "skipped")]
        points.append(
            Point(
                at=end,
                depth=max(0, int(base) + bisect_right(created, end) - bisect_right(started, end)),
                finished=len(ok),
                failed=sum(1 for s, _ in rows if s == "failed"),
                duration_ms_p50=percentile_of(ok, 50),
                duration_ms_p95=percentile_of(ok, 95),
            )
        )
    return Series(minutes=minutes, points=points)
