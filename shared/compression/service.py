"""Compression as the worker and the API use it: runs, compaction, tiers, settings, continuation."""

from __future__ import annotations

import logging
import threading
import time
import uuid
import weakref
from dataclasses import asdict, dataclass

from sqlalchemy.exc import OperationalError, SQLAlchemyError
from sqlmodel import Session, col, func, select

from shared.compression.budget import DISPLAY_ORDER
from shared.compression.engine import (
    Entry,
    Step,
    TierState,
    budget_for,
    compress,
    needs_compression,
)
from shared.compression.locks import CompressionBusy, session_locks
from shared.compression.models import (
    CompressionRunList,
    CompressionRunPublic,
    CompressionSettingsIn,
    CompressionSettingsPublic,
    ContinueIn,
    ContinuePublic,
    SessionSettingsView,
    SpanPublic,
    TierEntryPublic,
    TierPublic,
    TiersPublic,
)
from shared.compression.offline import OfflineSummarizer
from shared.compression.store import (
    check,
    effective_settings,
    ensure_state,
    estimate_tokens,
    load,
    persist_step,
    seed_child,
)
from shared.compression.summary import Summarizer
from shared.config import CompressionSettings, Settings
from shared.db.engine import session_scope
from shared.db.models import ChatSession, CompressionRun, CompressionState, User, utcnow
from shared.errors import Conflict, NotFound, TransientError
from shared.runs import record_run_error
from shared.runtime import Runtime

log = logging.getLogger(__name__)

OFFLINE = OfflineSummarizer()
# A run in one of these may still be executed (running: its worker died; the task came back).
OPEN_RUN = ("pending", "running", "retrying")


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


_summarizers: weakref.WeakKeyDictionary[Runtime, Summarizer] = weakref.WeakKeyDictionary()
_guard = threading.Lock()


def summarizer_for(runtime: Runtime) -> Summarizer:
    """The LLM summarizer when an LLM is configured (one client per process), else offline."""
    with _guard:
        summarizer = _summarizers.get(runtime)
        if summarizer is None:
            if runtime.settings.llm.base_url:
                from shared.compression.llm import LLMSummarizer

                summarizer = LLMSummarizer(runtime.settings.llm)
            else:
                summarizer = OFFLINE
            _summarizers[runtime] = summarizer
        return summarizer


def use_summarizer(runtime: Runtime, summarizer: Summarizer) -> None:
    """Give a runtime another summarizer (tests and benchmarks script one)."""
    with _guard:
        _summarizers[runtime] = summarizer


# -- the run (worker side) -------------------------------------------------------------------


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
        if run is not None and run.status not in OPEN_RUN:
            return CompressOutcome(chat_id, run.status, run_id)  # a redelivered, finished run
        if run is None:
            waiting = _nothing_to_do(session, chat, base)
            if waiting is not None:
                return waiting
    try:
        with session_locks(runtime).hold(chat_id):
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
    summarizer = summarizer_for(runtime)
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


# -- the API side ----------------------------------------------------------------------------


def find_session(*, session: Session, tenant_id: str, session_external_id: str) -> ChatSession:
    chat = session.exec(
        select(ChatSession).where(
            ChatSession.tenant_id == tenant_id, ChatSession.external_id == session_external_id
        )
    ).first()
    if chat is None:
        raise NotFound(
            f"session {session_external_id!r} not found",
            details={"session_id": session_external_id},
        )
    return chat


def request_compaction(*, session: Session, chat: ChatSession, focus: str | None) -> CompressionRun:
    """A pending compact run; the caller commits, then enqueues it."""
    run = CompressionRun(
        session_id=chat.id,
        tenant_id=chat.tenant_id,
        trigger="compact",
        focus=(focus or "").strip() or None,
    )
    session.add(run)
    session.flush()
    return run


def mark_unqueued(*, session: Session, run: CompressionRun) -> None:
    run.status, run.error = "failed", "the compression queue was unreachable"
    run.finished_at = run.updated_at = utcnow()
    session.add(run)


def run_public(run: CompressionRun, chat: ChatSession) -> CompressionRunPublic:
    data = run.model_dump()
    data["session_id"] = chat.external_id
    return CompressionRunPublic.model_validate(data)


def list_runs(
    *, session: Session, chat: ChatSession, limit: int, offset: int
) -> CompressionRunList:
    rows = session.exec(
        select(CompressionRun)
        .where(CompressionRun.session_id == chat.id)
        .order_by(col(CompressionRun.created_at).desc(), col(CompressionRun.id))
        .offset(offset)
        .limit(limit)
    ).all()
    count = session.exec(
        select(func.count()).select_from(CompressionRun).where(CompressionRun.session_id == chat.id)
    ).one()
    return CompressionRunList(data=[run_public(r, chat) for r in rows], count=int(count))


def get_run(*, session: Session, chat: ChatSession, run_id: str) -> CompressionRunPublic:
    run = session.get(CompressionRun, run_id)
    if run is None or run.session_id != chat.id:
        raise NotFound(f"compression run {run_id!r} not found", details={"run_id": run_id})
    return run_public(run, chat)


def tiers_view(*, session: Session, chat: ChatSession, settings: Settings) -> TiersPublic:
    loaded = load(session, chat)
    state, cfg = loaded.state, effective_settings(settings.compression, loaded.overrides)
    budget = budget_for(state, cfg)
    external = _external_ids(session, state, chat)
    tiers: list[TierPublic] = []
    for name in DISPLAY_ORDER:
        limit = None if name == "head" else budget.of(name)
        cost = state.cost(name)
        tiers.append(
            TierPublic(
                name=name,
                budget_tokens=limit,
                tokens=cost,
                fits=limit is None or cost <= limit,
                entries=[_entry_public(e, external) for e in state.entries(name)],
            )
        )
    problems = check(session, chat, loaded)
    return TiersPublic(
        session_id=chat.external_id,
        version=loaded.version,
        context_limit_tokens=budget.limit,
        trigger_tokens=budget.trigger,
        target_tokens=budget.target,
        total_tokens=state.history_cost(budget.reserve),
        tiers=tiers,
        partition_ok=not problems,
        problems=problems,
        last_run_id=loaded.row.last_run_id if loaded.row is not None else None,
    )


def _external_ids(session: Session, state: TierState, chat: ChatSession) -> dict[str, str]:
    ids = {r.session_id for span in state.spans_in_order() for r in span} - {chat.id}
    out = {chat.id: chat.external_id}
    if ids:
        rows = session.exec(select(ChatSession).where(col(ChatSession.id).in_(ids))).all()
        out.update({r.id: r.external_id for r in rows})
    return out


def _entry_public(e: Entry, external: dict[str, str]) -> TierEntryPublic:
    return TierEntryPublic(
        id=e.id,
        kind=e.kind,
        level=e.level,
        role=e.role,
        speaker=e.speaker,
        text=e.text,
        tokens=e.tokens,
        cost_tokens=e.cost,
        message_count=e.message_count,
        spans=[
            SpanPublic(
                session_id=external.get(r.session_id, r.session_id),
                first_seq=r.first_seq,
                last_seq=r.last_seq,
                first_message_id=r.first_message_id,
                last_message_id=r.last_message_id,
            )
            for r in e.spans
        ],
        summarizer=e.summarizer,
        model=e.model,
        created_by_run=e.created_by_run,
        span_end_at=e.span_end_at,
    )


def session_settings(
    *, session: Session, chat: ChatSession, settings: Settings
) -> CompressionSettingsPublic:
    row = session.get(CompressionState, chat.id)
    overrides = dict(row.settings) if row is not None else {}
    cfg = effective_settings(settings.compression, overrides)
    return CompressionSettingsPublic(
        session_id=chat.external_id, effective=SessionSettingsView.of(cfg), overrides=overrides
    )


def update_session_settings(
    *, session: Session, chat: ChatSession, body: CompressionSettingsIn, settings: Settings
) -> CompressionSettingsPublic:
    """Replace the session's overrides (validated with the defaults); the caller commits."""
    overrides = body.model_dump(exclude_none=True)
    cfg = effective_settings(settings.compression, overrides)
    row = ensure_state(session, chat)
    row.settings = overrides
    row.updated_at = utcnow()
    session.add(row)
    return CompressionSettingsPublic(
        session_id=chat.external_id, effective=SessionSettingsView.of(cfg), overrides=overrides
    )


def continue_session(
    *, session: Session, parent: ChatSession, body: ContinueIn, settings: Settings
) -> tuple[ChatSession, ContinuePublic]:
    """A child session seeded with the parent's tiers; the caller commits, then enqueues
    the child's compression (the seed may be over its trigger)."""
    external_id = body.session_id or f"{parent.external_id[:100]}.cont-{uuid.uuid4().hex[:8]}"
    taken = session.exec(
        select(ChatSession.id).where(
            ChatSession.tenant_id == parent.tenant_id, ChatSession.external_id == external_id
        )
    ).first()
    if taken is not None:
        raise Conflict(
            f"session {external_id!r} already exists; pick a new session id",
            details={"session_id": external_id},
        )
    child = ChatSession(
        tenant_id=parent.tenant_id,
        user_id=parent.user_id,
        external_id=external_id,
        parent_session_id=parent.id,
    )
    session.add(child)
    session.flush()
    entries, tokens = seed_child(session, parent=parent, child=child)
    user = session.get(User, parent.user_id)
    return child, ContinuePublic(
        session_id=child.external_id,
        parent_session_id=parent.external_id,
        user_id=user.external_id if user else "",
        seeded_entries=entries,
        seeded_tokens=tokens,
    )
