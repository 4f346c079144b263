"""Compress a session: the trigger check, then the 50/30/20 loop under the session's lock, one
transaction per step (the worker's compression task and a compact request's run)."""

from __future__ import annotations

import logging
import time
from dataclasses import asdict, dataclass

from sqlalchemy.exc import OperationalError, SQLAlchemyError
from sqlmodel import Session, select

from shared.compression.engine import compress
from shared.compression.locks import CompressionBusy
from shared.compression.offline import OfflineSummarizer
from shared.compression.store import (
    effective_settings,
    ensure_state,
    estimate_tokens,
    load,
    persist_step,
)
from shared.compression.tiers import Step, needs_compression
from shared.config import CompressionSettings
from shared.db.engine import session_scope
from shared.db.models import ChatSession, CompressionRun, CompressionState, utcnow
from shared.errors import TransientError
from shared.records.events import COMPRESSION_DONE, record_event
from shared.records.runs import OPEN, record_run_error
from shared.runtime import Runtime

log = logging.getLogger(__name__)

OFFLINE = OfflineSummarizer()


@dataclass
class CompressOutcome:
    session_id: str
    status: str
    run_id: str | None = None
    iterations: int = 0
    tokens_before: int = 0
    tokens_after: int = 0
    # Stopped at max_iterations: a pending "resume" run the task enqueues next (forced, so
    # it finishes the job even when the history is already back under the trigger).
    next_run_id: str | None = None

    def as_dict(self) -> dict[str, object]:
        return asdict(self)


def _nothing_to_do(
    session: Session, chat: ChatSession, base: CompressionSettings
) -> CompressOutcome | None:
    """Why there is nothing to do for the session (disabled, below its trigger), or None
    when its history is over the trigger."""
    row = session.get(CompressionState, chat.id)
    cfg = effective_settings(base, row.settings if row else {})
    if not cfg.enabled:
        return CompressOutcome(chat.id, "disabled")
    tokens, trigger = estimate_tokens(session, chat, cfg)
    if tokens <= trigger:
        return CompressOutcome(chat.id, "below_trigger", tokens_before=tokens)
    return None


def compress_session(
    runtime: Runtime, chat_id: str, *, run_id: str | None = None, last_attempt: bool = True
) -> CompressOutcome:
    """Check the trigger and, above it (or for a compact run), run the loop under the
    session's lock. Raises TransientError (a busy lock, a locked database) to be retried."""
    base = runtime.settings.compression
    with Session(runtime.read_engine) as session:
        chat = session.get(ChatSession, chat_id)
        run = session.get(CompressionRun, run_id) if run_id else None
        if chat is None or (run_id and run is None):
            return CompressOutcome(chat_id, "gone", run_id)
        if run is not None and run.status not in OPEN:
            return CompressOutcome(chat_id, run.status, run_id)  # a redelivered, finished run
        if run is None:
            waiting = _nothing_to_do(session, chat, base)
            if waiting is not None:
                return waiting
    try:
        with runtime.session_locks.hold(chat_id):
            return _run_locked(runtime, chat_id, run_id, last_attempt=last_attempt)
    except CompressionBusy as exc:
        if run_id:
            record_run_error(
                runtime.engine, CompressionRun, run_id, exc.message, final=last_attempt
            )
        raise


def over_trigger(runtime: Runtime, chat_id: str) -> bool:
    """The trigger check alone (a few SQL sums), for callers deciding whether to queue a
    compression task at all: most turns leave the history below its trigger. True when the
    database cannot answer, so the task (which checks again) decides."""
    try:
        with Session(runtime.read_engine) as session:
            chat = session.get(ChatSession, chat_id)
            if chat is None:
                return False
            return _nothing_to_do(session, chat, runtime.settings.compression) is None
    except SQLAlchemyError:
        return True


def _run_locked(
    runtime: Runtime, chat_id: str, run_id: str | None, *, last_attempt: bool
) -> CompressOutcome:
    started = time.perf_counter()
    base = runtime.settings.compression
    with session_scope(runtime.engine) as session:
        chat = session.get(ChatSession, chat_id)
        if chat is None:
            return CompressOutcome(chat_id, "gone", run_id)
        ensure_state(session, chat)
    with Session(runtime.read_engine) as session:
        chat = session.get(ChatSession, chat_id)
        assert chat is not None
        loaded = load(session, chat)
    cfg = effective_settings(base, loaded.overrides)
    if run_id is None and not needs_compression(loaded.state, cfg):
        return CompressOutcome(chat_id, "below_trigger")
    summarizer = runtime.summarizer
    run_id, focus = _start_run(runtime, chat, run_id, loaded.version, summarizer.name)
    load_ms = (time.perf_counter() - started) * 1000
    version = loaded.version

    def on_step(step: Step) -> None:
        nonlocal version
        version = persist_step(
            runtime.engine, chat_id=chat_id, expected_version=version, step=step, run_id=run_id
        )

    try:
        result = compress(
            loaded.state,
            config=cfg,
            summarizer=summarizer,
            fallback=OFFLINE,
            focus=focus,
            force=True,
            on_step=on_step,
            run_id=run_id,
        )
    except OperationalError as exc:  # database locked / connection lost between steps
        record_run_error(
            runtime.engine, CompressionRun, run_id, f"database: {exc.orig}", final=last_attempt
        )
        raise TransientError(f"database error: {exc.orig}") from exc
    except Exception as exc:
        record_run_error(
            runtime.engine, CompressionRun, run_id, f"{type(exc).__name__}: {exc}", final=True
        )
        raise
    stats = result.stats
    next_run_id = None
    with session_scope(runtime.engine) as session:
        if stats.status == "partial":
            follow = CompressionRun(session_id=chat.id, tenant_id=chat.tenant_id, trigger="resume")
            session.add(follow)
            next_run_id = follow.id
        run = session.get(CompressionRun, run_id)
        if run is not None:
            run.status = stats.status
            run.error = stats.detail if stats.status != "done" else None
            run.iterations = stats.iterations
            run.tokens_before = stats.tokens_before
            run.tokens_after = stats.tokens_after
            run.target_tokens = stats.target
            run.llm_calls = stats.llm_calls
            run.fallbacks = stats.fallbacks
            run.prompt_tokens = stats.prompt_tokens
            run.completion_tokens = stats.completion_tokens
            run.version_after = version
            run.steps = stats.steps[:200]
            run.llm_ms = round(stats.summarizer_ms, 3)
            run.engine_ms = round(stats.engine_ms + load_ms, 3)
            run.finished_at = utcnow()
            run.updated_at = run.finished_at
            run.duration_ms = round((time.perf_counter() - started) * 1000, 3)
            session.add(run)
            if stats.status == "done":
                _announce_done(session, chat, run)
    log.info(
        "compression run finished",
        extra={
            "run_id": run_id,
            "session_id": chat_id,
            "status": stats.status,
            "iterations": stats.iterations,
            "tokens_before": stats.tokens_before,
            "tokens_after": stats.tokens_after,
            "fallbacks": stats.fallbacks,
        },
    )
    return CompressOutcome(
        chat_id,
        stats.status,
        run_id,
        stats.iterations,
        stats.tokens_before,
        stats.tokens_after,
        next_run_id=next_run_id,
    )


def _announce_done(session: Session, chat: ChatSession, run: CompressionRun) -> None:
    """compression.done, in the transaction that finishes the run (ADR 0027)."""
    record_event(
        session,
        tenant_id=chat.tenant_id,
        user_id=chat.user_id,
        type_=COMPRESSION_DONE,
        data={
            "compression": {
                "run_id": run.id,
                "session_id": chat.external_id,
                "trigger": run.trigger,
                "iterations": run.iterations,
                "tokens_before": run.tokens_before,
                "tokens_after": run.tokens_after,
            }
        },
    )


def _start_run(
    runtime: Runtime, chat: ChatSession, run_id: str | None, version: int, summarizer: str
) -> tuple[str, str | None]:
    with session_scope(runtime.engine) as session:
        # We hold the session's lock: a run still "running" lost its worker mid-way. Its
        # persisted steps stand (each was one transaction); the run itself is closed.
        for dead in session.exec(
            select(CompressionRun).where(
                CompressionRun.session_id == chat.id,
                CompressionRun.status == "running",
                CompressionRun.id != (run_id or ""),
            )
        ):
            dead.status, dead.error = "failed", "interrupted (its worker stopped mid-run)"
            dead.finished_at = dead.updated_at = utcnow()
            session.add(dead)
        run = session.get(CompressionRun, run_id) if run_id else None
        if run is None:
            run = CompressionRun(session_id=chat.id, tenant_id=chat.tenant_id, trigger="auto")
        run.status = "running"
        run.attempts += 1
        run.started_at = utcnow()
        run.updated_at = run.started_at
        run.version_before = version
        run.summarizer = summarizer
        session.add(run)
        return run.id, run.focus
