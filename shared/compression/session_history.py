"""A session's own history as the context shows it: head, bulks, topics, then current.

Summaries are entries with role "system" and speaker "Earlier (summary)"; their
`message_id` is the tier entry's id (GET /v1/sessions/{id}/tiers lists its spans). A
message moved down verbatim keeps its role, speaker and message id.
"""

from __future__ import annotations

from sqlmodel import Session

from shared.compression.budget import DISPLAY_ORDER, SUMMARY_LABEL
from shared.compression.models import HistoryEntry
from shared.compression.store import load
from shared.compression.tiers import Entry
from shared.db.models import ChatSession, utcnow


def session_history(
    session: Session,
    chat: ChatSession,
    *,
    current_limit: int | None = None,
    user_name: str | None = None,
) -> list[HistoryEntry]:
    """`current_limit` keeps only the newest current messages (a session never compressed
    may hold thousands; the context could not show them anyway); `user_name` is the
    session's user name when the caller already has it."""
    loaded = load(
        session, chat, current_limit=current_limit, exact_costs=False, user_name=user_name
    )
    return [_history_entry(e, tier) for tier in DISPLAY_ORDER for e in loaded.state.entries(tier)]


def _history_entry(e: Entry, tier: str) -> HistoryEntry:
    summary = e.kind == "summary"
    message_id = e.id if summary or tier in ("head", "current") else e.spans[0].first_message_id
    # Every field comes typed from SQL or the engine: construct without re-validating
    # (up to 500 entries per context build).
    return HistoryEntry.model_construct(
        tier=tier,
        message_id=message_id,
        role=e.role,
        speaker=SUMMARY_LABEL if summary else e.speaker,
        content=e.text,
        created_at=e.span_end_at or utcnow(),
        tokens=e.tokens,
    )
