"""The ops snapshot as clients read it: queues, their windows and runs, tenants, fallbacks."""

from __future__ import annotations

import datetime as dt

from pydantic import BaseModel


class Window(BaseModel):
    minutes: int
    finished: int  # done + skipped + dropped + failed
    failed: int
    dropped: int = 0  # extraction runs whose model returned items and none could be kept
    retried: int  # finished runs that needed more than one attempt
    per_minute: float  # finished ÷ minutes
    failure_rate: float  # (failed + dropped) ÷ finished (0 when none finished)
    duration_ms_p50: float | None
    duration_ms_p95: float | None


class FailedRun(BaseModel):
    id: str
    kind: str  # extract_turn | compress_session
    tenant_id: str
    status: str
    attempts: int
    error: str | None
    finished_at: dt.datetime | None


class OrphanedRun(BaseModel):
    id: str
    kind: str
    tenant_id: str
    worker: str  # the worker that claimed it, whose heartbeat is gone
    started_at: dt.datetime | None
    resend_in_s: float  # about when Redis or the sweeper sends it again (0: any moment)


class QueueStats(BaseModel):
    name: str
    depth: int | None  # messages waiting in the broker; None without a broker to ask
    reserved: int | None  # delivered to a worker, not yet acknowledged
    paused: bool
    pending: int  # from SQL: runs waiting to start (retrying and batch-waiting ones included)
    # Of those, turns waiting for their session's batch (TIERMEM_EXTRACTION__BATCH_TURNS).
    waiting: int = 0
    running: int  # claimed by a live worker (or by one ops cannot tell)
    orphaned: int = 0  # status running, but the worker that claimed it has no heartbeat
    orphaned_note: str | None = None
    orphaned_runs: list[OrphanedRun] = []
    oldest_pending_age_s: float | None
    windows: list[Window]
    failed_runs: list[FailedRun]


class TenantStats(BaseModel):
    tenant_id: str
    name: str
    turns_pending: int
    facts_written_15m: int
    facts_active: int
    llm_prompt_tokens: int
    llm_completion_tokens: int
    estimated_cost_usd: float


class FormatFallback(BaseModel):
    """A model whose server rejected json_schema: its extraction runs use json_object."""

    model: str
    runs: int  # extraction runs that used json_object for that reason
    runs_15m: int
    last_at: dt.datetime
    note: str | None  # the latest such run's note: what the server said


class OpsSnapshot(BaseModel):
    at: dt.datetime
    broker: str  # "redis" or "in-process"
    queues: list[QueueStats]
    tenants: list[TenantStats]
    # Models running in json_object fallback (ADR 0018); empty while every server takes
    # json_schema (or json_object is configured).
    llm_format_fallbacks: list[FormatFallback] = []
