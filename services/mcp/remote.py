"""The tools over stdio (`tiermem mcp`): calls to a running tiermem API with an app key.

The embedded engine's folder is held by the `tiermem serve` that owns it (README, Production),
so a stdio server started by an MCP client cannot open it; it asks the API instead (ADR 0016).
The API's error body comes back as a DomainError with the API's code, so the tools report it
as they do in the API.
"""

from __future__ import annotations

from typing import Any
from urllib.parse import quote

import httpx

from shared.context.models import ContextPublic
from shared.errors import DomainError, Unavailable
from shared.extraction.schemas import FactType
from shared.memory.models import MemoriesPublic, MessageHitsPublic, SearchIn
from shared.records.models import TurnAccepted, TurnIn


class ApiError(DomainError):
    """An error the API answered, with its code."""

    def __init__(self, code: str, message: str, details: dict[str, Any] | None = None) -> None:
        super().__init__(message, details=details)
        self.code = code


class RemoteBackend:
    def __init__(self, *, url: str, key: str, timeout_s: float = 30.0) -> None:
        self.url = url.rstrip("/")
        self._client = httpx.AsyncClient(
            base_url=self.url,
            headers={"Authorization": f"Bearer {key}"},
            timeout=timeout_s,
        )

    async def aclose(self) -> None:
        await self._client.aclose()

    async def check_key(self) -> None:
        """Raise what the API says of the key (401: unknown; 403: the operator key, which
        reads no user data) before a tool call would. It asks the route whose one job is
        checking a key for user data (mem0's client calls it at its start), under the same
        rule as the tools' routes: Principal.user_tenant."""
        await self._call("GET", "/mem0/v1/ping/")

    async def search_memories(self, *, user_id: str, search: SearchIn) -> MemoriesPublic:
        body = await self._call(
            "POST", f"{_user(user_id)}/memories/search", json=search.model_dump(mode="json")
        )
        return MemoriesPublic.model_validate(body)

    async def add_memory(self, *, session_id: str, turn: TurnIn) -> TurnAccepted:
        body = await self._call(
            "POST",
            f"/v1/sessions/{quote(session_id, safe='')}/turns",
            json=turn.model_dump(mode="json", exclude_none=True),
        )
        return TurnAccepted.model_validate(body)

    async def list_memories(
        self,
        *,
        user_id: str,
        types: list[FactType],
        include_superseded: bool,
        limit: int,
        offset: int,
    ) -> MemoriesPublic:
        params: list[tuple[str, str | int]] = [("type", t) for t in types]
        params += [
            ("include_superseded", "true" if include_superseded else "false"),
            ("limit", limit),
            ("offset", offset),
        ]
        body = await self._call("GET", f"{_user(user_id)}/memories", params=params)
        return MemoriesPublic.model_validate(body)

    async def delete_memory(self, *, user_id: str, memory_id: str) -> None:
        await self._call("DELETE", f"{_user(user_id)}/memories/{quote(memory_id, safe='')}")

    async def search_history(
        self,
        *,
        user_id: str,
        query: str,
        k: int,
        exclude_session_id: str | None,
        around: int,
    ) -> MessageHitsPublic:
        params: dict[str, str | int] = {"q": query, "k": k, "around": around}
        if exclude_session_id is not None:
            params["exclude_session_id"] = exclude_session_id
        body = await self._call("GET", f"{_user(user_id)}/history/search", params=params)
        return MessageHitsPublic.model_validate(body)

    async def get_context(
        self,
        *,
        session_id: str,
        query: str | None,
        budget_tokens: int | None,
        user_id: str | None,
    ) -> ContextPublic:
        asked = {"query": query, "budget_tokens": budget_tokens, "user_id": user_id}
        params = {name: value for name, value in asked.items() if value is not None}
        body = await self._call(
            "GET", f"/v1/sessions/{quote(session_id, safe='')}/context", params=params
        )
        return ContextPublic.model_validate(body)

    async def _call(self, method: str, path: str, **kwargs: Any) -> Any:
        try:
            response = await self._client.request(method, path, **kwargs)
        except httpx.TransportError as exc:
            raise Unavailable(
                f"the tiermem API at {self.url} cannot be reached ({type(exc).__name__}); "
                "start it with `tiermem serve`, or point --url / TIERMEM_MCP__URL at it"
            ) from exc
        if response.is_success:
            return response.json() if response.content else None
        try:
            error = response.json()["error"]
            raise ApiError(error["code"], error["message"], error.get("details"))
        except (ValueError, KeyError, TypeError):
            raise ApiError(
                "http_error", f"the tiermem API answered {response.status_code}: {response.text}"
            ) from None


def _user(user_id: str) -> str:
    return f"/v1/users/{quote(user_id, safe='')}"
