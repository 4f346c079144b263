"""A session's compression as its client drives it: compaction asked for now, the session's
own settings, a child session seeded with its compressed context, and the read-only views
(tiers, runs, settings). Each route of /v1/sessions/{id}/… calls one function here."""

from __future__ import annotations

from collections.abc import Callable

from sqlmodel import Session

from shared.compression.models import (
    CompressionRunPublic,
    CompressionSettingsIn,
    CompressionSettingsPublic,
    ContinueIn,
    ContinuePublic,
)
from shared.compression.sessions import (
    continue_session,
    find_session,
    get_run,
    list_runs,
    mark_unqueued,
    request_compaction,
    run_public,
    session_settings,
    tiers_view,
    update_session_settings,
)
from shared.config import Settings
from shared.db.models import ChatSession
from shared.errors import Unavailable

__all__ = [
    "Compress",
    "compact_now",
    "continue_compressed",
    "find_session",
    "get_run",
    "list_runs",
    "session_settings",
    "set_session_settings",
    "tiers_view",
]

# Sends a session's compression (and the run it fills, if any) after the commit; False when
# the broker could not be reached (workers.task_queue.TaskQueue.compress).
Compress = Callable[[str, str | None], bool]


def compact_now(
    *, session: Session, chat: ChatSession, focus: str | None, compress: Compress
) -> CompressionRunPublic:
    """A compaction run (even below the trigger, optionally focused), committed, then sent;
    when it cannot be sent the run is marked so and Unavailable (503) raised."""
    run = request_compaction(session=session, chat=chat, focus=focus)
    session.commit()
    if not compress(chat.id, run.id):
        mark_unqueued(session=session, run=run)
        session.commit()
        raise Unavailable("the compression queue is unreachable; retry the request")
    return run_public(run, chat)


def set_session_settings(
    *,
    session: Session,
    chat: ChatSession,
    body: CompressionSettingsIn,
    settings: Settings,
    compress: Compress,
) -> CompressionSettingsPublic:
    """Replace the session's overrides, then check its compression: a lower limit takes
    effect without waiting for a reply (a check only: lost, it waits for the next reply)."""
    public = update_session_settings(session=session, chat=chat, body=body, settings=settings)
    session.commit()
    compress(chat.id, None)
    return public


def continue_compressed(
    *,
    session: Session,
    parent: ChatSession,
    body: ContinueIn,
    settings: Settings,
    compress: Compress,
) -> ContinuePublic:
    """A child session seeded with the parent's compressed context, committed, then its
    compression checked."""
    child, public = continue_session(session=session, parent=parent, body=body, settings=settings)
    session.commit()
    compress(child.id, None)
    return public
