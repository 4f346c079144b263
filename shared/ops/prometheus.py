"""GET /metrics: the ops numbers as prometheus_client metric families, in its text format (0.0.4).

Read at scrape time from SQL, the broker and the worker heartbeats, so one API process
reports for every worker process and nothing resets when a worker restarts. What SQL
counts (runs, facts, tokens) is exposed as `_total` counters; they drop only when a user
is deleted, which rate() treats as a counter reset. What leaves no row (guard hits, memories
the context builder dropped as contradicted) is counted in this process, from its start.
"""

from __future__ import annotations

from collections.abc import Iterator, Sequence
from typing import Any

from prometheus_client import generate_latest
from prometheus_client.core import (
    CounterMetricFamily,
    GaugeMetricFamily,
    HistogramMetricFamily,
    Metric,
)
from sqlalchemy import case, func, select
from sqlmodel import Session, col

from shared import metrics
from shared.config import Settings
from shared.db.models import CompressionRun, ExtractionRun, Fact
from shared.memory.guard import HITS_METRIC
from shared.ops.models import FormatFallback, OpsSnapshot
from shared.ops.queues import RUN_TABLES, snapshot
from shared.ops.vectors import VectorStats
from shared.ops.workers import HeartbeatStore, WorkerInfo
from shared.webhooks.status import webhook_ops

CONTENT_TYPE = "text/plain; version=0.0.4; charset=utf-8"
SECONDS_BUCKETS = (0.05, 0.1, 0.25, 0.5, 1, 2, 5, 10, 30, 60, 120)
FACT_BUCKETS = (0, 1, 2, 3, 5, 10)

QUEUE_GAUGES = (
    ("tiermem_queue_depth", "messages waiting in the broker", "depth"),
    ("tiermem_queue_reserved", "messages delivered to workers, not acknowledged", "reserved"),
    ("tiermem_queue_pending", "runs waiting to start (SQL)", "pending"),
    ("tiermem_queue_waiting", "of those, turns waiting for their session's batch", "waiting"),
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
GUARD_LABELS = ("reason", "source")  # what shared.memory.guard counts its hits by
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


_Family = GaugeMetricFamily | CounterMetricFamily
_KINDS: dict[str, type[_Family]] = {"gauge": GaugeMetricFamily, "counter": CounterMetricFamily}


def _family(out: list[Metric], kind: str, name: str, help_text: str, *labels: str) -> _Family:
    family = _KINDS[kind](name, help_text, labels=labels)
    out.append(family)
    return family


def _add(family: _Family, value: float | None, *labels: str) -> None:
    """One sample, its label values in the order the family names them; None is left out."""
    if value is not None:
        family.add_metric(labels, value)  # a bool (paused) is 1.0 or 0.0


def _histogram(
    out: list[Metric], name: str, help_text: str, bounds: Sequence[float], row: Sequence[Any]
) -> None:
    """`row`: the cumulative count per bound, then the sum and the count (_histogram_row)."""
    *cumulative, total, count = row
    buckets = [(f"{b:g}", int(n or 0)) for b, n in zip(bounds, cumulative, strict=True)]
    buckets.append(("+Inf", int(count)))
    out.append(HistogramMetricFamily(name, help_text, buckets, sum_value=float(total or 0)))


def _histogram_row(session: Session, column: Any, bounds: Sequence[float]) -> Sequence[Any]:
    """One pass over the done extraction runs: cumulative bucket counts, sum, count."""
    parts = [func.sum(case((column <= bound, 1), else_=0)) for bound in bounds]
    query = select(*parts, func.sum(column), func.count()).where(
        col(ExtractionRun.status) == "done"
    )
    return tuple(session.execute(query).one())


def _queues(
    out: list[Metric], session: Session, settings: Settings, workers: list[WorkerInfo]
) -> OpsSnapshot:
    snap = snapshot(session=session, settings=settings, failed_limit=0, workers=workers)
    for name, help_text, field in QUEUE_GAUGES:
        family = _family(out, "gauge", name, help_text, "queue")
        for queue in snap.queues:
            _add(family, getattr(queue, field), queue.name)
    return snap


def _runs(out: list[Metric], session: Session) -> None:
    runs = _family(
        out, "counter", "tiermem_runs_total", "runs by queue and status", "queue", "status"
    )
    for queue, table in RUN_TABLES.items():
        status_col = col(table.model.status)
        query = select(status_col, func.count()).where(table.scope()).group_by(status_col)
        for status, count in session.execute(query):
            _add(runs, count, queue, status)
    _histogram(
        out,
        "tiermem_extraction_duration_seconds",
        "claim to finish, done runs",
        SECONDS_BUCKETS,
        _histogram_row(session, col(ExtractionRun.duration_ms) / 1000.0, SECONDS_BUCKETS),
    )
    _histogram(
        out,
        "tiermem_extraction_llm_seconds",
        "the LLM call of done runs",
        SECONDS_BUCKETS,
        _histogram_row(session, col(ExtractionRun.llm_ms) / 1000.0, SECONDS_BUCKETS),
    )
    _histogram(
        out,
        "tiermem_facts_per_turn",
        "valid facts extracted per turn",
        FACT_BUCKETS,
        _histogram_row(session, col(ExtractionRun.facts_extracted), FACT_BUCKETS),
    )
    added, merged, superseded, invalid, repaired, asked_again, checks, changed = session.execute(
        select(
            func.sum(ExtractionRun.facts_added),
            func.sum(ExtractionRun.facts_merged),
            func.sum(ExtractionRun.facts_superseded),
            func.sum(ExtractionRun.facts_invalid),
            func.sum(ExtractionRun.facts_repaired),
            func.count().filter(col(ExtractionRun.asked_again)),
            func.sum(ExtractionRun.ending_checks),
            func.sum(ExtractionRun.values_changed),
        )
    ).one()
    dedup = _family(
        out, "counter", "tiermem_dedup_total", "what the writer did with extracted facts", "outcome"
    )
    for outcome, value in (("added", added), ("merged", merged), ("superseded", superseded)):
        _add(dedup, int(value or 0), outcome)
    dropped = _family(
        out, "counter", "tiermem_facts_invalid_total", "extracted items dropped by validation"
    )
    _add(dropped, int(invalid or 0))
    fixed = _family(
        out,
        "counter",
        "tiermem_facts_repaired_total",
        "extracted items kept after the server filled in or fixed a field",
    )
    _add(fixed, int(repaired or 0))
    again = _family(
        out,
        "counter",
        "tiermem_extraction_asked_again_total",
        "runs whose model reply was all dropped and the model was asked again (ADR 0031)",
    )
    _add(again, int(asked_again or 0))
    values = _family(
        out,
        "counter",
        "tiermem_extraction_value_checks_total",
        "known values the model was asked for after a turn touched them (ADR 0032), by answer",
        "answer",
    )
    _add(values, int(changed or 0), "changed")
    _add(values, int(checks or 0) - int(changed or 0), "unchanged")


def _llm(out: list[Metric], session: Session) -> None:
    tokens = _family(
        out,
        "counter",
        "tiermem_llm_tokens_total",
        "LLM tokens by model, stage and kind",
        "model",
        "stage",
        "kind",
    )
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
            _add(tokens, int(value or 0), model or "offline", stage, kind)
    errors = _family(
        out,
        "counter",
        "tiermem_llm_errors_total",
        "failed runs by model and stage",
        "model",
        "stage",
    )
    for stage, (model, _, _, failed) in rows:
        _add(errors, int(failed or 0), model or "offline", stage)


def _format_fallbacks(out: list[Metric], fallbacks: list[FormatFallback]) -> None:
    family = _family(
        out,
        "counter",
        "tiermem_llm_structured_output_fallbacks_total",
        "extraction runs that used json_object: the server rejected json_schema",
        "model",
    )
    for fallback in fallbacks:
        _add(family, fallback.runs, fallback.model)


def _guard(out: list[Metric], session: Session) -> None:
    quarantined = _family(
        out, "gauge", "tiermem_facts_quarantined", "facts kept out of prompts by the guard"
    )
    count = session.execute(
        select(func.count()).where(col(Fact.quarantine_reason).is_not(None))
    ).scalar_one()
    _add(quarantined, int(count))
    hits = _family(
        out,
        "counter",
        "tiermem_injection_guard_hits_total",
        "texts the guard flagged in this process (memories, history, facts)",
        *GUARD_LABELS,
    )
    for sample in metrics.COUNTERS.snapshot():
        if sample.name == HITS_METRIC:
            labels = sample.label_dict()
            _add(hits, sample.value, *(labels[k] for k in GUARD_LABELS))


def _workers(out: list[Metric], workers: list[WorkerInfo]) -> None:
    live = _family(
        out, "gauge", "tiermem_workers", "live workers (a heartbeat within three intervals)"
    )
    _add(live, len(workers))
    active = _family(
        out, "gauge", "tiermem_worker_active_tasks", "tasks executing per worker", "worker"
    )
    for worker in workers:
        _add(active, worker.active, worker.hostname)


def _tenants(out: list[Metric], tenants: list[Any]) -> None:
    for name, kind, help_text, field in TENANT_SERIES:
        family = _family(out, kind, name, help_text, "tenant")
        for tenant in tenants:
            value = (
                tenant.llm_prompt_tokens + tenant.llm_completion_tokens
                if field == "llm_tokens"
                else getattr(tenant, field)
            )
            _add(family, value, tenant.name)


def _vectors(out: list[Metric], stats: VectorStats) -> None:
    info = _family(
        out,
        "gauge",
        "tiermem_vector_store_info",
        "where vectors live (labels), always 1",
        "engine",
        "layout",
    )
    _add(info, 1, stats.engine, stats.layout)
    for name, help_text, field in VECTOR_GAUGES:
        _add(_family(out, "gauge", name, help_text), getattr(stats, field))
    points = _family(
        out, "gauge", "tiermem_vector_points", "points per layout of their collection", "layout"
    )
    for layout, count in (stats.points_by_layout or {}).items():
        _add(points, count, layout)
    optimizer = _family(
        out,
        "gauge",
        "tiermem_vector_collections_by_optimizer",
        "collections per optimizer state (ok, optimizing, pending, none, error)",
        "state",
    )
    for state, count in (stats.optimizer or {}).items():
        _add(optimizer, count, state.split(":", 1)[0])


def _webhooks(out: list[Metric], session: Session) -> None:
    """Per subscription (few per tenant): deliveries made and failed attempts (SQL counters
    on its row), deliveries owed, disabled or not; the age of the oldest owed delivery."""
    state = webhook_ops(session=session, tenant_id=None, failing_limit=0)
    labels = ("tenant", "webhook")
    total = _family(
        out, "counter", "tiermem_webhook_deliveries", "webhook delivery attempts",
        *labels, "outcome",
    )  # fmt: skip
    pending = _family(
        out, "gauge", "tiermem_webhook_deliveries_pending", "deliveries owed", *labels
    )
    disabled = _family(
        out, "gauge", "tiermem_webhook_disabled", "1 while the subscription is off", *labels
    )
    for hook in state.webhooks:
        _add(total, hook.delivered_total, hook.tenant_id, hook.id, "delivered")
        _add(total, hook.failed_attempts_total, hook.tenant_id, hook.id, "failed")
        _add(pending, hook.pending, hook.tenant_id, hook.id)
        _add(disabled, not hook.enabled, hook.tenant_id, hook.id)
    summary = (
        ("tiermem_webhooks_disabled", "subscriptions disabled", state.disabled),
        ("tiermem_webhooks_pending", "deliveries owed, all subscriptions", state.pending),
        (
            "tiermem_webhooks_oldest_pending_age_seconds",
            "age of the oldest delivery owed",
            state.oldest_pending_age_s,
        ),
    )
    for name, help_text, value in summary:
        _add(_family(out, "gauge", name, help_text), value)


class Scrape:
    """A prometheus_client collector: the families one scrape reads from SQL, the broker and
    the heartbeats, then the process's own prometheus_client metrics."""

    def __init__(
        self, *, session: Session, settings: Settings, vectors: VectorStats | None = None
    ) -> None:
        self._session = session
        self._settings = settings
        self._vectors = vectors

    def collect(self) -> Iterator[Metric]:
        out: list[Metric] = []
        workers = HeartbeatStore.from_settings(self._settings).read()  # once: queues, workers
        snap = _queues(out, self._session, self._settings, workers)
        _runs(out, self._session)
        _llm(out, self._session)
        _format_fallbacks(out, snap.llm_format_fallbacks)
        _guard(out, self._session)
        _workers(out, workers)
        _tenants(out, list(snap.tenants))
        _webhooks(out, self._session)
        if self._vectors is not None:
            _vectors(out, self._vectors)
        yield from out
        yield from metrics.REGISTRY.collect()


def render(*, session: Session, settings: Settings, vectors: VectorStats | None = None) -> str:
    return generate_latest(Scrape(session=session, settings=settings, vectors=vectors)).decode()
