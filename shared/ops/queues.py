"""What the workers are doing: queue depths from the broker, the rest from SQL.

The broker only knows what it holds right now; SQL knows every turn, so the age of the
oldest pending turn, throughput, failures and retries come from the run tables and stay
right when the broker lost messages (the outbox sweeper re-sends those).
"""

from __future__ import annotations

import datetime as dt
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any

from sqlalchemy import case, func, true
from sqlmodel import Session, col, select

from shared.config import Settings
from shared.db.models import CompressionRun, ExtractionRun, Fact, Tenant, utcnow
from shared.ops.broker import read_broker
from shared.ops.models import (
    FailedRun,
    FormatFallback,
    OpsSnapshot,
    OrphanedRun,
    QueueStats,
    TenantStats,
    Window,
)
from shared.ops.queue_names import COMPRESS, EXTRACT, QUEUES, REPLAY
from shared.ops.workers import HeartbeatStore, WorkerInfo
from shared.records.runs import RETRYABLE, WAITING

WINDOWS_MIN = (1, 5, 15)


def percentile_of(values: Sequence[float], q: float) -> float | None:
    if not values:
        return None
    ordered = sorted(values)
    index = min(len(ordered) - 1, max(0, round(q / 100 * (len(ordered) - 1))))
    return round(ordered[index], 1)


def _windows(session: Session, model: Any, scope: Any, now: dt.datetime) -> list[Window]:
    """Runs finished in each window; one read of the longest window, cut in Python."""
    since = now - dt.timedelta(minutes=max(WINDOWS_MIN))
    rows = session.exec(
        select(model.finished_at, model.status, model.attempts, model.duration_ms).where(
            scope,
            col(model.finished_at) >= since,
            col(model.status).in_(
                ("done", "skipped", "dropped", "failed", "cannot_fit", "partial")
            ),
        )
    ).all()
    return _cut_windows(rows, now)


def _cut_windows(rows: Sequence[Any], now: dt.datetime) -> list[Window]:
    windows = []
    for minutes in WINDOWS_MIN:
        start = now - dt.timedelta(minutes=minutes)
        inside = [r for r in rows if utc(r[0]) >= start]
        failed = sum(1 for r in inside if r[1] == "failed")
        dropped = sum(1 for r in inside if r[1] == "dropped")
        durations = [float(r[3]) for r in inside if r[1] != "failed"]
        windows.append(
            Window(
                minutes=minutes,
                finished=len(inside),
                failed=failed,
                dropped=dropped,
                retried=sum(1 for r in inside if r[2] > 1),
                per_minute=round(len(inside) / minutes, 2),
                failure_rate=round((failed + dropped) / len(inside), 4) if inside else 0.0,
                duration_ms_p50=percentile_of(durations, 50),
                duration_ms_p95=percentile_of(durations, 95),
            )
        )
    return windows


def of_tenant(model: Any, tenant_id: str | None) -> Any:
    """A table's rows of one tenant (None: of every tenant)."""
    return true() if tenant_id is None else col(model.tenant_id) == tenant_id


def utc(value: dt.datetime) -> dt.datetime:
    # SQLite hands datetimes back without their offset; everything stored is UTC.
    return value if value.tzinfo else value.replace(tzinfo=dt.UTC)


def _sql_queue(
    session: Session,
    table: _RunTable | None,
    now: dt.datetime,
    failed_limit: int,
    tenant_id: str | None,
) -> dict[str, Any]:
    if table is None:  # a queue without runs in SQL (maintenance)
        return {"pending": 0, "waiting": 0, "running": 0, "oldest_pending_age_s": None,
                "windows": _cut_windows([], now), "failed_runs": []}  # fmt: skip
    model, scope = table.model, table.scope(tenant_id)
    waiting = ("pending", WAITING, "retrying")
    pending, parked, running, oldest = session.exec(
        select(
            func.sum(case((col(model.status).in_(waiting), 1), else_=0)),
            func.sum(case((col(model.status) == WAITING, 1), else_=0)),
            func.sum(case((col(model.status) == "running", 1), else_=0)),
            func.min(case((col(model.status).in_(waiting), model.created_at), else_=None)),
        ).where(scope, col(model.status).in_((*waiting, "running")))
    ).one()
    failed = session.exec(
        select(model)
        .where(scope, col(model.status).in_(RETRYABLE))
        .order_by(col(model.finished_at).desc())
        .limit(failed_limit)
    ).all()
    return {
        "pending": int(pending or 0),
        "waiting": int(parked or 0),
        "running": int(running or 0),
        "oldest_pending_age_s": (
            round((now - utc(oldest)).total_seconds(), 1) if oldest is not None else None
        ),
        "windows": _windows(session, model, scope, now),
        "failed_runs": [
            FailedRun(
                id=r.id,
                kind=table.kind,
                tenant_id=r.tenant_id,
                status=r.status,
                attempts=r.attempts,
                error=r.error,
                finished_at=r.finished_at,
            )
            for r in failed
        ],
    }


@dataclass(frozen=True)
class _RunTable:
    """The SQL rows behind a queue's work: a table, and which of its rows."""

    model: Any
    kind: str
    replay: bool | None = None  # extraction runs: live (False) or a replay's (True)
    tracks_worker: bool = False  # its rows name the worker that claimed them

    def scope(self, tenant_id: str | None = None) -> Any:
        """The table's rows for this queue (of `tenant_id` only, when given)."""
        if self.replay is None:
            return of_tenant(self.model, tenant_id)
        column = col(ExtractionRun.replay_job_id)
        return (column.is_not(None) if self.replay else column.is_(None)) & of_tenant(
            self.model, tenant_id
        )


# A worker's record is written once it is ready, before it takes a task; this much clock
# slack keeps a run claimed in the same instant from looking older than its worker.
_CLAIM_SLACK = dt.timedelta(seconds=1)


def orphaned_runs(
    session: Session,
    table: _RunTable | None,
    workers: Sequence[WorkerInfo],
    settings: Settings,
    now: dt.datetime,
    tenant_id: str | None = None,
) -> list[OrphanedRun]:
    """Runs left `running` by a worker that is gone: no live heartbeat under the name that
    claimed them, or only one of a worker started since (a restart under the same name)."""
    if table is None or not table.tracks_worker:
        return []
    started = {w.hostname: utc(w.started_at) for w in workers}
    running = session.exec(
        select(ExtractionRun)
        .where(
            table.scope(tenant_id),
            ExtractionRun.status == "running",
            col(ExtractionRun.worker).is_not(None),
        )
        .order_by(col(ExtractionRun.started_at))
    ).all()
    orphans = []
    for run in running:
        since = started.get(run.worker or "")
        claimed = utc(run.started_at) if run.started_at else None
        if since is not None and (claimed is None or claimed + _CLAIM_SLACK >= since):
            continue
        orphans.append(
            OrphanedRun(
                id=run.id,
                kind=table.kind,
                tenant_id=run.tenant_id,
                worker=run.worker or "",
                started_at=run.started_at,
                resend_in_s=_resend_in_s(settings, claimed, utc(run.updated_at), now),
            )
        )
    return orphans


def _resend_in_s(
    settings: Settings, claimed: dt.datetime | None, updated: dt.datetime, now: dt.datetime
) -> float:
    """The sooner of Redis handing the unacked task back (visibility timeout after its
    delivery) and the sweeper's next look after SWEEP_RUNNING_AFTER_S."""
    worker = settings.worker
    sweeper = updated + dt.timedelta(seconds=worker.sweep_running_after_s + worker.sweep_interval_s)
    times = [sweeper]
    if settings.redis_url and claimed is not None:
        times.append(claimed + dt.timedelta(seconds=settings.redis.visibility_timeout_s))
    return round(max(0.0, (min(times) - now).total_seconds()), 1)


def orphaned_note(settings: Settings) -> str:
    redis = (
        f"Redis hands its task to another worker {settings.redis.visibility_timeout_s:g} s "
        "after it was delivered (TIERMEM_REDIS__VISIBILITY_TIMEOUT_S), or "
        if settings.redis_url
        else ""
    )
    return (
        "claimed by a worker whose heartbeat is gone (killed or cut off): "
        f"{redis}the outbox sweeper sends it again once it has been running "
        f"{settings.worker.sweep_running_after_s:g} s (TIERMEM_WORKER__SWEEP_RUNNING_AFTER_S)"
    )


RUN_TABLES: dict[str, _RunTable] = {
    EXTRACT: _RunTable(ExtractionRun, "extract_turn", replay=False, tracks_worker=True),
    COMPRESS: _RunTable(CompressionRun, "compress_session"),
    REPLAY: _RunTable(ExtractionRun, "replay_turn", replay=True, tracks_worker=True),
}


def tenant_stats(
    session: Session, settings: Settings, now: dt.datetime, tenant_id: str | None = None
) -> list[TenantStats]:
    since = now - dt.timedelta(minutes=15)
    query = select(Tenant) if tenant_id is None else select(Tenant).where(Tenant.id == tenant_id)
    tenants = {t.id: t.name for t in session.exec(query).all()}
    runs = {
        row[0]: row[1:]
        for row in session.exec(
            select(
                ExtractionRun.tenant_id,
                func.sum(
                    case(
                        (
                            col(ExtractionRun.status).in_(("pending", WAITING, "retrying"))
                            & col(ExtractionRun.replay_job_id).is_(None),
                            1,
                        ),
                        else_=0,
                    )
                ),
                func.sum(ExtractionRun.prompt_tokens),
                func.sum(ExtractionRun.completion_tokens),
            )
            .where(of_tenant(ExtractionRun, tenant_id))
            .group_by(col(ExtractionRun.tenant_id))
        ).all()
    }
    summaries = {
        row[0]: row[1:]
        for row in session.exec(
            select(
                CompressionRun.tenant_id,
                func.sum(CompressionRun.prompt_tokens),
                func.sum(CompressionRun.completion_tokens),
            )
            .where(of_tenant(CompressionRun, tenant_id))
            .group_by(col(CompressionRun.tenant_id))
        ).all()
    }
    facts = {
        row[0]: row[1:]
        for row in session.exec(
            select(
                Fact.tenant_id,
                func.sum(case((col(Fact.created_at) >= since, 1), else_=0)),
                func.sum(case((col(Fact.valid_to).is_(None), 1), else_=0)),
            )
            .where(of_tenant(Fact, tenant_id))
            .group_by(col(Fact.tenant_id))
        ).all()
    }
    prices = settings.llm
    out = []
    for tenant, name in sorted(tenants.items(), key=lambda kv: kv[1]):
        pending, run_prompt, run_completion = runs.get(tenant, (0, 0, 0))
        sum_prompt, sum_completion = summaries.get(tenant, (0, 0))
        written, active = facts.get(tenant, (0, 0))
        prompt = int(run_prompt or 0) + int(sum_prompt or 0)
        completion = int(run_completion or 0) + int(sum_completion or 0)
        cost = (
            prompt * prices.prompt_usd_per_million + completion * prices.completion_usd_per_million
        ) / 1e6
        out.append(
            TenantStats(
                tenant_id=tenant,
                name=name,
                turns_pending=int(pending or 0),
                facts_written_15m=int(written or 0),
                facts_active=int(active or 0),
                llm_prompt_tokens=prompt,
                llm_completion_tokens=completion,
                estimated_cost_usd=round(cost, 6),
            )
        )
    return out


def format_fallbacks(
    session: Session, now: dt.datetime, tenant_id: str | None = None
) -> list[FormatFallback]:
    """Per model, the extraction runs that used json_object because its server rejected
    json_schema (read through the partial index ix_runs_format_fallback)."""
    fell_back = col(ExtractionRun.response_format_note).is_not(None)
    scope = fell_back & of_tenant(ExtractionRun, tenant_id)
    since = now - dt.timedelta(minutes=15)
    rows = session.exec(
        select(
            ExtractionRun.model,
            func.count(),
            func.sum(case((col(ExtractionRun.updated_at) >= since, 1), else_=0)),
            func.max(ExtractionRun.updated_at),
        )
        .where(scope)
        .group_by(col(ExtractionRun.model))
    ).all()
    out = []
    for model, runs, recent, last_at in rows:
        note = session.exec(
            select(ExtractionRun.response_format_note)
            .where(scope, ExtractionRun.model == model)
            .order_by(col(ExtractionRun.updated_at).desc())
            .limit(1)
        ).first()
        out.append(
            FormatFallback(
                model=model or "unknown",
                runs=int(runs),
                runs_15m=int(recent or 0),
                last_at=utc(last_at),
                note=note,
            )
        )
    return sorted(out, key=lambda f: f.last_at, reverse=True)


def snapshot(
    *,
    session: Session,
    settings: Settings,
    failed_limit: int = 20,
    tenant_id: str | None = None,
    workers: Sequence[WorkerInfo] | None = None,
    now: dt.datetime | None = None,
) -> OpsSnapshot:
    """The queues and tenants; with `tenant_id`, only that tenant's rows, and no broker
    depth (the broker's queues are shared by every tenant). `workers`: the live heartbeats,
    when the caller has read them already."""
    now = now or utcnow()
    broker = read_broker(settings.redis_url)
    shared_view = broker.available and tenant_id is None
    if workers is None:
        workers = HeartbeatStore.from_settings(settings).read(now)
    queues = []
    for name in QUEUES:
        table = RUN_TABLES.get(name)
        sql = _sql_queue(session, table, now, failed_limit, tenant_id)
        orphans = orphaned_runs(session, table, workers, settings, now, tenant_id)
        queues.append(
            QueueStats(
                name=name,
                depth=broker.depth.get(name) if shared_view else None,
                reserved=broker.reserved.get(name) if shared_view else None,
                paused=name in broker.paused,
                **{**sql, "running": sql["running"] - len(orphans)},
                orphaned=len(orphans),
                orphaned_note=orphaned_note(settings) if orphans else None,
                orphaned_runs=orphans[:failed_limit],
            )
        )
    return OpsSnapshot(
        at=now,
        broker="redis" if broker.available else "in-process",
        queues=queues,
        tenants=tenant_stats(session, settings, now, tenant_id),
        llm_format_fallbacks=format_fallbacks(session, now, tenant_id),
    )
