"""What the MCP tools call: the API process's own domain functions, or a running tiermem API.

One protocol, two implementations (services.mcp.local, services.mcp.remote); the tools are
written once against it, and the same test suite runs against both transports.
"""

from __future__ import annotations

from typing import Protocol

from pydantic import BaseModel

from shared.context.models import ContextPublic
from shared.extraction.schemas import FactType
from shared.memory.models import MemoriesPublic, MessageHitsPublic, SearchIn
from shared.records.models import TurnAccepted, TurnIn


class MemoryDeleted(BaseModel):
    """DELETE /v1/users/{id}/memories/{memory_id} answers 204; a tool says what it did."""

    user_id: str
    memory_id: str
    deleted: bool = True


class MemoryBackend(Protocol):
    async def search_memories(self, *, user_id: str, search: SearchIn) -> MemoriesPublic: ...

    async def add_memory(self, *, session_id: str, turn: TurnIn) -> TurnAccepted: ...

    async def list_memories(
        self,
        *,
        user_id: str,
        types: list[FactType],
        include_superseded: bool,
        limit: int,
        offset: int,
    ) -> MemoriesPublic: ...

    async def delete_memory(self, *, user_id: str, memory_id: str) -> None: ...

    async def search_history(
        self,
        *,
        user_id: str,
        query: str,
        k: int,
        exclude_session_id: str | None,
        around: int,
    ) -> MessageHitsPublic: ...

    async def get_context(
        self,
        *,
        session_id: str,
        query: str | None,
        budget_tokens: int | None,
        user_id: str | None,
    ) -> ContextPublic: ...
