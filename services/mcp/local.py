"""The tools inside the API process (/mcp): the flows the /v1 routes call, one per tool,
reaching the users of the caller's key's tenant, as /v1 does."""

from __future__ import annotations

from collections.abc import Callable
from typing import TypeVar

from sqlmodel import Session
from starlette.concurrency import run_in_threadpool

from shared.context.models import ContextPublic
from shared.db.models import User
from shared.extraction.schemas import FactType
from shared.flows.build_context import build_context
from shared.flows.forget import delete_memory
from shared.flows.read_memories import list_memories
from shared.flows.search_history import search_user_history
from shared.flows.search_memories import search_memories
from shared.flows.store_turn import TurnWriter
from shared.memory.models import MemoriesPublic, MessageHitsPublic, SearchIn
from shared.records.models import TurnAccepted, TurnIn
from shared.records.tenancy import Principal
from shared.records.users import find_user
from shared.runtime import Runtime

T = TypeVar("T")


class LocalBackend:
    def __init__(self, *, runtime: Runtime, turn_writer: TurnWriter, principal: Principal) -> None:
        self.runtime = runtime
        self.turn_writer = turn_writer
        self.principal = principal

    async def search_memories(self, *, user_id: str, search: SearchIn) -> MemoriesPublic:
        return await self._as_user(
            user_id,
            lambda session, user: search_memories(
                runtime=self.runtime,
                session=session,
                user=user,
                query=search.query,
                k=search.k,
                types=search.types,
                min_score=search.min_score,
            ),
        )

    async def add_memory(self, *, session_id: str, turn: TurnIn) -> TurnAccepted:
        return await self.turn_writer.store_turn(
            turn, tenant_id=self.principal.user_tenant(), session_external_id=session_id
        )

    async def list_memories(
        self,
        *,
        user_id: str,
        types: list[FactType],
        include_superseded: bool,
        limit: int,
        offset: int,
    ) -> MemoriesPublic:
        return await self._as_user(
            user_id,
            lambda session, user: list_memories(
                session=session,
                user=user,
                types=types,
                include_superseded=include_superseded,
                limit=limit,
                offset=offset,
            ),
        )

    async def delete_memory(self, *, user_id: str, memory_id: str) -> None:
        await self._as_user(
            user_id,
            lambda session, user: delete_memory(
                runtime=self.runtime, session=session, user=user, memory_id=memory_id
            ),
            write=True,
        )

    async def search_history(
        self,
        *,
        user_id: str,
        query: str,
        k: int,
        exclude_session_id: str | None,
        around: int,
    ) -> MessageHitsPublic:
        return await self._as_user(
            user_id,
            lambda session, user: search_user_history(
                runtime=self.runtime,
                session=session,
                user=user,
                query=query,
                k=k,
                exclude_session_external_id=exclude_session_id,
                around=around,
            ),
        )

    async def get_context(
        self,
        *,
        session_id: str,
        query: str | None,
        budget_tokens: int | None,
        user_id: str | None,
    ) -> ContextPublic:
        tenant_id = self.principal.user_tenant()

        def build() -> ContextPublic:
            with Session(self.runtime.read_engine, expire_on_commit=False) as session:
                return build_context(
                    runtime=self.runtime,
                    session=session,
                    tenant_id=tenant_id,
                    user_external_id=user_id,
                    session_external_id=session_id,
                    query=query,
                    budget_tokens=budget_tokens,
                )

        return await run_in_threadpool(build)

    async def _as_user(
        self, user_id: str, work: Callable[[Session, User], T], *, write: bool = False
    ) -> T:
        """`work` on the user of the key's tenant (404 for another tenant's), in a thread, with
        a session on the write engine only when it writes (as /v1's GET routes read)."""
        tenant_id = self.principal.user_tenant()
        engine = self.runtime.engine if write else self.runtime.read_engine

        def run() -> T:
            with Session(engine, expire_on_commit=False) as session:
                user = find_user(session=session, tenant_id=tenant_id, user_external_id=user_id)
                return work(session, user)

        return await run_in_threadpool(run)
