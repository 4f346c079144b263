"""Search a user's memories by meaning: what POST /v1/users/{id}/memories/search, the MCP
tool search_memories and mem0's search answer."""

from __future__ import annotations

from collections.abc import Sequence

from sqlmodel import Session

from shared.db.models import User
from shared.extraction.schemas import FactType
from shared.memory.models import MemoriesPublic
from shared.memory.reader import search_memories as search_facts
from shared.runtime import Runtime


def search_memories(
    *,
    runtime: Runtime,
    session: Session,
    user: User,
    query: str,
    k: int = 10,
    types: Sequence[FactType] = (),
    min_score: float | None = None,
) -> MemoriesPublic:
    """The user's k active memories nearest the query, best first, each with its score."""
    return search_facts(
        embedder=runtime.embedder,
        facts=runtime.facts_of(tenant_id=user.tenant_id, user_id=user.id),
        session=session,
        user=user,
        query=query,
        k=k,
        types=types,
        min_score=min_score,
    )
