"""`tiermem ops status` and `tiermem ops watch`: the ops view in the terminal.

Reads SQL, the broker and the worker heartbeats directly (the same numbers as
GET /v1/ops/queues and /v1/ops/workers), so it works with the API down.
"""

from __future__ import annotations

import sys
import time
from typing import TYPE_CHECKING, Annotated

import typer
from rich.console import Console, Group
from rich.table import Table

from services.cli.settings import load_settings

if TYPE_CHECKING:  # loaded by the commands when they run, not by their --help
    from sqlmodel import Session

    from shared.config import Settings
    from shared.ops.models import OpsSnapshot, QueueStats
    from shared.ops.workers import WorkerInfo

ops_cli = typer.Typer(help="Queues, workers and failed runs.", no_args_is_help=True)


def _value(value: object) -> str:
    return "–" if value is None else str(value)


def _table(title: str, *headers: str, left: int = 1) -> Table:
    """A table whose first `left` columns are text, the rest numbers."""
    table = Table(title=title)
    for i, header in enumerate(headers):
        table.add_column(header, justify="left" if i < left else "right")
    return table


def render(snap: OpsSnapshot, workers: list[WorkerInfo], *, failed: int = 5) -> Group:
    queues = _table(
        f"queues · broker: {snap.broker} · {snap.at:%Y-%m-%d %H:%M:%S} UTC",
        "queue", "depth", "reserved", "pending", "running", "orphaned", "oldest s",
        "done/min 1m", "5m", "15m", "fail % 5m", "retried 15m", "paused",
    )  # fmt: skip
    for q in snap.queues:
        w = {window.minutes: window for window in q.windows}
        queues.add_row(
            q.name, _value(q.depth), _value(q.reserved), _pending(q), str(q.running),
            f"[red]{q.orphaned}[/red]" if q.orphaned else "0", _value(q.oldest_pending_age_s),
            f"{w[1].per_minute:g}", f"{w[5].per_minute:g}", f"{w[15].per_minute:g}",
            f"{100 * w[5].failure_rate:.1f}", str(w[15].retried),
            "[yellow]paused[/yellow]" if q.paused else "",
        )  # fmt: skip
    live = _table(
        f"workers ({len(workers)} live)",
        "worker", "queues", "pool", "concurrency", "active", "processed", "beat s", left=3,
    )  # fmt: skip
    for wk in workers:
        live.add_row(
            wk.hostname, ", ".join(wk.queues), wk.pool, str(wk.concurrency), str(wk.active),
            str(wk.processed), f"{wk.heartbeat_age_s:g}",
        )  # fmt: skip
    tenants = _table(
        "tenants", "tenant", "turns pending", "facts 15m", "facts active", "LLM tokens", "est. USD"
    )
    for t in snap.tenants:
        tenants.add_row(
            t.name, str(t.turns_pending), str(t.facts_written_15m), str(t.facts_active),
            str(t.llm_prompt_tokens + t.llm_completion_tokens), f"{t.estimated_cost_usd:.4f}",
        )  # fmt: skip
    parts: list[Table] = [queues, live, tenants]
    orphans = [(q, r) for q in snap.queues for r in q.orphaned_runs]
    if orphans:
        note = next(q.orphaned_note for q, _ in orphans if q.orphaned_note)
        orphaned = _table(f"orphaned runs: {note}", "run", "queue", "worker", "resend in s", left=3)
        for q, orphan in orphans[:failed]:
            orphaned.add_row(orphan.id, q.name, orphan.worker, f"{orphan.resend_in_s:g}")
        parts.append(orphaned)
    if snap.llm_format_fallbacks:
        fallbacks = _table(
            "LLM models in json_object fallback (their server rejected json_schema)",
            "model", "latest note", "runs", "runs 15m", left=2,
        )  # fmt: skip
        for fb in snap.llm_format_fallbacks:
            fallbacks.add_row(fb.model, (fb.note or "")[:120], str(fb.runs), str(fb.runs_15m))
        parts.append(fallbacks)
    failed_runs = [r for q in snap.queues for r in q.failed_runs][:failed]
    if failed_runs:
        runs = _table(
            "latest failed runs (retry: POST /v1/ops/runs/retry)",
            "run", "kind", "attempts", "error", left=4,
        )  # fmt: skip
        for r in failed_runs:
            runs.add_row(r.id, r.kind, str(r.attempts), (r.error or "")[:120])
        parts.append(runs)
    return Group(*parts)


def _read(settings: Settings, session: Session) -> tuple[OpsSnapshot, list[WorkerInfo]]:
    from shared.ops.queues import snapshot
    from shared.ops.workers import HeartbeatStore

    workers = HeartbeatStore.from_settings(settings).read()
    return snapshot(session=session, settings=settings, workers=workers), workers


def _console() -> Console:
    """Rich draws to the terminal's width, and to 80 columns when piped, which cut error
    texts and run ids: piped output gets room instead."""
    return Console() if sys.stdout.isatty() else Console(width=200)


@ops_cli.command()
def status() -> None:
    """Print the queues, workers, tenants and latest failed runs once."""
    from sqlmodel import Session

    from shared.db.engine import make_engine

    settings = load_settings()
    engine = make_engine(settings)
    try:
        with Session(engine) as session:
            _console().print(render(*_read(settings, session)))
        _console().print(vectors_line(settings))
    finally:
        engine.dispose()


def vectors_line(settings: Settings) -> str:
    """What the files say (the folder may be another process's): points need the API."""
    from shared.ops.vectors import vector_stats

    v = vector_stats(settings=settings, store=None)
    disk = "–" if v.disk_bytes is None else f"{v.disk_bytes / 1e6:,.0f} MB"
    return (
        f"vectors: engine {v.engine} · layout {v.layout} · disk {disk} "
        "(collections and points: GET /v1/ops/vectors)"
    )


@ops_cli.command()
def watch(
    interval: Annotated[float, typer.Option(min=0.5, help="seconds between refreshes")] = 2.0,
    count: Annotated[int, typer.Option(min=0, help="stop after this many (0 = until Ctrl-C)")] = 0,
) -> None:
    """The same view, refreshed in place until Ctrl-C."""
    from rich.live import Live
    from sqlmodel import Session

    from shared.db.engine import make_engine

    settings = load_settings()
    engine = make_engine(settings)
    shown = 0
    try:
        with Live(console=_console(), auto_refresh=False) as live:
            while True:
                with Session(engine) as session:
                    live.update(render(*_read(settings, session)), refresh=True)
                shown += 1
                if count and shown >= count:
                    break
                time.sleep(interval)
    except KeyboardInterrupt:
        pass
    finally:
        engine.dispose()


def _pending(q: QueueStats) -> str:
    """Turns waiting for their session's batch (ADR 0024) are pending, and said to be."""
    return f"{q.pending} ({q.waiting} waiting for a batch)" if q.waiting else str(q.pending)
