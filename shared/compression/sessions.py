"""A session's compression as the API reads and sets it: its runs, compaction requests, tiers,
settings and continuation. SQL only; the run itself is shared/flows/compress_session.py."""

from __future__ import annotations

import uuid

from sqlmodel import Session, col, func, select

from shared.compression.budget import DISPLAY_ORDER
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
from shared.compression.store import (
    check,
    effective_settings,
    ensure_state,
    load,
    seed_child,
)
from shared.compression.tiers import Entry, TierState, budget_for
from shared.config import Settings
from shared.db.models import ChatSession, CompressionRun, CompressionState, User, utcnow
from shared.errors import Conflict, NotFound


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
    ids = {r.chat_id for span in state.spans_in_order() for r in span} - {chat.id}
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
                session_id=external.get(r.chat_id, r.chat_id),
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
