"""Read a user's memories from SQL: a page of them, one by its id, everything stored about
the user (the export) and the timeline of their beliefs. Each is one domain call; they are
here so an adapter calls a flow for every use case and never the rooms below."""

from __future__ import annotations

from sqlmodel import Session

from shared.db.models import User
from shared.memory.models import MemoryPublic
from shared.memory.reader import get_memory, list_memories, memories_public
from shared.memory.timeline import belief_timeline
from shared.memory.user_rows import export_user

__all__ = ["belief_timeline", "export_user", "list_memories", "memory_by_id"]


def memory_by_id(*, session: Session, user: User, memory_id: str) -> MemoryPublic:
    """The user's memory of that id (NotFound for none, or another user's)."""
    [memory] = memories_public(
        session, [get_memory(session=session, user=user, memory_id=memory_id)]
    )
    return memory
