"""GET /metrics: the ops numbers in the Prometheus text format (version 0.0.4).

Read at scrape time from SQL, the broker and the worker heartbeats, so one API process
reports for every worker process and nothing resets when a worker restarts. What SQL
counts (runs, facts, tokens) is exposed as `_total` counters; they drop only when a user
is deleted, which rate() treats as a counter reset. What leaves no row (guard hits, memories
the context builder dropped as contradicted) is counted in this process, from its start.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

from prometheus_client import generate_latest
from sqlalchemy import case, func, select
from sqlmodel import Session, col

from shared.config import Settings
from shared.db.models import CompressionRun, ExtractionRun, Fact
from shared.memory.guard import HITS_METRIC
from shared.ops import metrics
from shared.ops.queues import RUN_TABLES, FormatFallback, OpsSnapshot, snapshot
from shared.ops.vectors import VectorStats
from shared.ops.workers import HeartbeatStore, WorkerInfo

CONTENT_TYPE = "text/plain; version=0.0.4; charset=utf-8"
SECONDS_BUCKETS = (0.05, 0.1, 0.25, 0.5, 1, 2, 5, 10, 30, 60, 120)
FACT_BUCKETS = (0, 1, 2, 3, 5, 10)

QUEUE_GAUGES = (
    ("tiermem_queue_depth", "messages waiting in the broker", "depth"),
    ("tiermem_queue_reserved", "messages delivered to workers, not acknowledged", "reserved"),
    ("tiermem_queue_pending", "runs waiting to start (SQL)", "pending"),
    ("tiermem_queue_running", "runs executing now (SQL)", "running"),
    ("tiermem_queue_orphaned", "runs left running by a worker whose heartbeat is gone", "orphaned"),
    (
        "tiermem_queue_oldest_pending_age_seconds",
        "age of the oldest waiting run",
        "oldest_pending_age_s",
    ),
    ("tiermem_queue_paused", "1 while the queue is paused for maintenance", "paused"),
)
VECTOR_GAUGES = (
    ("tiermem_vector_collections", "tiermem's vector collections", "collections"),
    ("tiermem_vector_segments", "engine segments, all collections", "segments"),
    ("tiermem_vector_indexed_vectors", "vectors in HNSW-indexed segments", "indexed_vectors"),
    ("tiermem_vector_disk_bytes", "blocks the embedded folder holds", "disk_bytes"),
    (
        "tiermem_vector_other_layout_collections",
        "collections of the other layout, waiting for `tiermem reindex`",
        "other_layout_collections",
    ),
)
TENANT_SERIES = (
    ("tiermem_tenant_turns_pending", "gauge", "turns waiting for extraction", "turns_pending"),
    ("tiermem_tenant_facts_active", "gauge", "active facts", "facts_active"),
    ("tiermem_tenant_llm_tokens_total", "counter", "LLM tokens spent", "llm_tokens"),
    (
        "tiermem_tenant_estimated_cost_usd_total",
        "counter",
        "LLM cost at the configured prices",
        "estimated_cost_usd",
    ),
)


class Exposition:
    def __init__(self) -> None:
        self.lines: list[str] = []

    def family(self, name: str, kind: str, help_text: str) -> None:
        self.lines += [f"# HELP {name} {help_text}", f"# TYPE {name} {kind}"]

    def sample(self, name: str, value: float | None, **labels: str) -> None:
        if value is None:
            return
        body = ",".join(f'{k}="{_escape(str(v))}"' for k, v in sorted(labels.items()))
        self.lines.append(f"{name}{{{body}}} {float(value):g}" if body else f"{name} {value:g}")

    def histogram(
        self, name: str, help_text: str, bounds: Sequence[float], row: Sequence[Any]
    ) -> None:
        """`row`: the cumulative count per bound, then the sum and the count (_histogram_row)."""
        *cumulative, total, count = row
        self.family(name, "histogram", help_text)
        for bound, n in zip(bounds, cumulative, strict=True):
            self.sample(f"{name}_bucket", int(n or 0), le=f"{bound:g}")
        self.sample(f"{name}_bucket", int(count), le="+Inf")
        self.sample(f"{name}_sum", float(total or 0))
        self.sample(f"{name}_count", int(count))

    def text(self) -> str:
        return "\n".join(self.lines) + "\n"


def _escape(value: str) -> str:
    return value.replace("\\", "\\\\").replace('"', '\\"').replace("\n", "\\n")


def _histogram_row(session: Session, column: Any, bounds: Sequence[float]) -> Sequence[Any]:
    """One pass over the done extraction runs: cumulative bucket counts, sum, count."""
    parts = [func.sum(case((column <= bound, 1), else_=0)) for bound in bounds]
    query = select(*parts, func.sum(column), func.count()).where(
        col(ExtractionRun.status) == "done"
    )
    return tuple(session.execute(query).one())


def _queues(
    out: Exposition, session: Session, settings: Settings, workers: list[WorkerInfo]
) -> OpsSnapshot:
    snap = snapshot(session=session, settings=settings, failed_limit=0, workers=workers)
    for name, help_text, field in QUEUE_GAUGES:
        out.family(name, "gauge", help_text)
        for queue in snap.queues:
            value = getattr(queue, field)
            out.sample(name, int(value) if isinstance(value, bool) else value, queue=queue.name)
    return snap


def _runs(out: Exposition, session: Session) -> None:
    out.family("tiermem_runs_total", "counter", "runs by queue and status")
    for queue, table in RUN_TABLES.items():
        status_col = col(table.model.status)
        query = select(status_col, func.count()).where(table.scope()).group_by(status_col)
        for status, count in session.execute(query):
            out.sample("tiermem_runs_total", count, queue=queue, status=status)
    out.histogram(
        "tiermem_extraction_duration_seconds",
        "claim to finish, done runs",
        SECONDS_BUCKETS,
        _histogram_row(session, col(ExtractionRun.duration_ms) / 1000.0, SECONDS_BUCKETS),
    )
    out.histogram(
        "tiermem_extraction_llm_seconds",
        "the LLM call of done runs",
        SECONDS_BUCKETS,
        _histogram_row(session, col(ExtractionRun.llm_ms) / 1000.0, SECONDS_BUCKETS),
    )
    out.histogram(
        "tiermem_facts_per_turn",
        "valid facts extracted per turn",
        FACT_BUCKETS,
        _histogram_row(session, col(ExtractionRun.facts_extracted), FACT_BUCKETS),
    )
    added, merged, superseded, invalid = session.execute(
        select(
            func.sum(ExtractionRun.facts_added),
            func.sum(ExtractionRun.facts_merged),
            func.sum(ExtractionRun.facts_superseded),
            func.sum(ExtractionRun.facts_invalid),
        )
    ).one()
    out.family("tiermem_dedup_total", "counter", "what the writer did with extracted facts")
    for outcome, value in (("added", added), ("merged", merged), ("superseded", superseded)):
        out.sample("tiermem_dedup_total", int(value or 0), outcome=outcome)
    out.family("tiermem_facts_invalid_total", "counter", "extracted items dropped by validation")
    out.sample("tiermem_facts_invalid_total", int(invalid or 0))


def _llm(out: Exposition, session: Session) -> None:
    out.family("tiermem_llm_tokens_total", "counter", "LLM tokens by model, stage and kind")
    rows: list[tuple[str, Any]] = []
    for stage, table, model_col in (
        ("extraction", ExtractionRun, col(ExtractionRun.model)),
        ("compression", CompressionRun, col(CompressionRun.summarizer)),
    ):
        status = col(table.status)
        query = select(
            model_col,
            func.sum(table.prompt_tokens),
            func.sum(table.completion_tokens),
            func.sum(case((status == "failed", 1), else_=0)),
        ).group_by(model_col)
        rows += [(stage, row) for row in session.execute(query)]
    for stage, (model, prompt, completion, _) in rows:
        for kind, value in (("prompt", prompt), ("completion", completion)):
            out.sample(
                "tiermem_llm_tokens_total",
                int(value or 0),
                model=model or "offline",
                stage=stage,
                kind=kind,
            )
    out.family("tiermem_llm_errors_total", "counter", "failed runs by model and stage")
    for stage, (model, _, _, failed) in rows:
        out.sample(
            "tiermem_llm_errors_total", int(failed or 0), model=model or "offline", stage=stage
        )


def _format_fallbacks(out: Exposition, fallbacks: list[FormatFallback]) -> None:
    name = "tiermem_llm_structured_output_fallbacks_total"
    out.family(
        name, "counter", "extraction runs that used json_object: the server rejected json_schema"
    )
    for fallback in fallbacks:
        out.sample(name, fallback.runs, model=fallback.model)


def _guard(out: Exposition, session: Session) -> None:
    out.family("tiermem_facts_quarantined", "gauge", "facts kept out of prompts by the guard")
    quarantined = session.execute(
        select(func.count()).where(col(Fact.quarantine_reason).is_not(None))
    ).scalar_one()
    out.sample("tiermem_facts_quarantined", int(quarantined))
    out.family(
        "tiermem_injection_guard_hits_total",
        "counter",
        "texts the guard flagged in this process (memories, history, facts)",
    )
    for sample in metrics.COUNTERS.snapshot():
        if sample.name == HITS_METRIC:
            out.sample("tiermem_injection_guard_hits_total", sample.value, **sample.label_dict())


def _workers(out: Exposition, workers: list[WorkerInfo]) -> None:
    out.family("tiermem_workers", "gauge", "live workers (a heartbeat within three intervals)")
    out.sample("tiermem_workers", len(workers))
    out.family("tiermem_worker_active_tasks", "gauge", "tasks executing per worker")
    for worker in workers:
        out.sample("tiermem_worker_active_tasks", worker.active, worker=worker.hostname)


def _tenants(out: Exposition, tenants: list[Any]) -> None:
    for name, kind, help_text, field in TENANT_SERIES:
        out.family(name, kind, help_text)
        for tenant in tenants:
            value = (
                tenant.llm_prompt_tokens + tenant.llm_completion_tokens
                if field == "llm_tokens"
                else getattr(tenant, field)
            )
            out.sample(name, value, tenant=tenant.name)


def _vectors(out: Exposition, stats: VectorStats) -> None:
    out.family("tiermem_vector_store_info", "gauge", "where vectors live (labels), always 1")
    out.sample("tiermem_vector_store_info", 1, engine=stats.engine, layout=stats.layout)
    for name, help_text, field in VECTOR_GAUGES:
        out.family(name, "gauge", help_text)
        out.sample(name, getattr(stats, field))
    out.family("tiermem_vector_points", "gauge", "points per layout of their collection")
    for layout, points in (stats.points_by_layout or {}).items():
        out.sample("tiermem_vector_points", points, layout=layout)
    name = "tiermem_vector_collections_by_optimizer"
    out.family(
        name, "gauge", "collections per optimizer state (ok, optimizing, pending, none, error)"
    )
    for state, count in (stats.optimizer or {}).items():
        out.sample(name, count, state=state.split(":", 1)[0])


def render(*, session: Session, settings: Settings, vectors: VectorStats | None = None) -> str:
    out = Exposition()
    workers = HeartbeatStore.from_settings(settings).read()  # once: queues and workers
    snap = _queues(out, session, settings, workers)
    _runs(out, session)
    _llm(out, session)
    _format_fallbacks(out, snap.llm_format_fallbacks)
    _guard(out, session)
    _workers(out, workers)
    _tenants(out, list(snap.tenants))
    if vectors is not None:
        _vectors(out, vectors)
    # the process's prometheus_client metrics, in the same text format, after the rest
    return out.text() + generate_latest(metrics.REGISTRY).decode()
