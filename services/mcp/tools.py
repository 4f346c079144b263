"""The MCP server: six memory tools written once against a MemoryBackend, and domain errors
as MCP tool errors carrying the API's error body."""

from __future__ import annotations

import json
from collections.abc import Callable
from typing import Annotated, Any

from mcp.server.mcpserver import Context, MCPServer
from mcp.server.mcpserver.exceptions import ToolError
from mcp.types import CallToolResult, InputRequiredResult, TextContent
from pydantic import Field, ValidationError

from services.api.errors import error_body, invalid_input
from services.mcp.backend import MemoryBackend, MemoryDeleted
from shared.context.models import ContextPublic
from shared.errors import DomainError
from shared.extraction.schemas import FactType
from shared.inputs import ID_RULE, MAX_BUDGET_TOKENS, MAX_OFFSET, Identifier
from shared.memory.models import MAX_AROUND, MemoriesPublic, MessageHitsPublic, SearchIn
from shared.records.models import MessageIn, TurnAccepted, TurnIn

INSTRUCTIONS = (
    "tiermem is long-term memory for chat users. Before answering, call get_context (or "
    "search_memories / search_history) for what is known about the user; after each exchange, "
    "call add_memory with the user's message and your reply so facts are extracted from it. "
    "user_id and session_id are the ids of your own system; a tool error's text is the API's "
    '{"error": {"code", "message", "details"}}.'
)

UserId = Annotated[Identifier, Field(description=f"the user's id in your system; {ID_RULE}")]
SessionId = Annotated[
    Identifier, Field(description=f"the conversation's id in your system; {ID_RULE}")
]
Types = Annotated[
    list[FactType] | None,
    Field(description="only memories of these types (default: all six)"),
]
BackendOf = Callable[[Context[Any, Any]], MemoryBackend]


class TiermemMCP(MCPServer[Any]):
    """MCPServer whose tool errors are the API's: a DomainError (not found, wrong tenant, bad
    input) or invalid arguments become an is_error result with the API's error body, in the
    text and as structured content, instead of the SDK's generic crash message."""

    async def call_tool(
        self, name: str, arguments: dict[str, Any], context: Context[Any, Any] | None = None
    ) -> CallToolResult | InputRequiredResult:
        try:
            return await super().call_tool(name, arguments, context)
        except ToolError as exc:
            error = _domain_error(exc.__cause__)
            if error is None:
                raise
            body = error_body(error.code, error.message, error.details)
            return CallToolResult(
                content=[TextContent(type="text", text=json.dumps(body))],
                structured_content=body,
                is_error=True,
            )


def _domain_error(cause: BaseException | None) -> DomainError | None:
    if isinstance(cause, DomainError):
        return cause
    if isinstance(cause, ValidationError):
        return invalid_input(cause.errors())
    return None


def build_server(backend_of: BackendOf) -> TiermemMCP:
    """The tools; `backend_of(ctx)` gives the backend a call runs against (the caller's key's
    in the API, the configured API's over stdio)."""
    server = TiermemMCP("tiermem", instructions=INSTRUCTIONS, version="0.1.0")

    @server.tool()
    async def search_memories(
        user_id: UserId,
        query: Annotated[str, Field(min_length=1, max_length=4000, description="a question")],
        ctx: Context[Any, Any],
        k: Annotated[int, Field(ge=1, le=100, description="how many memories")] = 10,
        types: Types = None,
        min_score: Annotated[
            float | None, Field(ge=-1.0, le=1.0, description="cosine floor")
        ] = None,
    ) -> MemoriesPublic:
        """The user's memories (typed facts) most relevant to the query, best first, each with
        its cosine score and the messages it came from."""
        search = SearchIn(query=query, k=k, types=types or [], min_score=min_score)
        return await backend_of(ctx).search_memories(user_id=user_id, search=search)

    @server.tool()
    async def add_memory(
        user_id: UserId,
        session_id: SessionId,
        user_message: Annotated[str, Field(description="what the user said")],
        ctx: Context[Any, Any],
        assistant_message: Annotated[
            str | None, Field(description="the reply to it, if any")
        ] = None,
        speaker: Annotated[
            str | None, Field(max_length=100, description="the user's name, as they go by")
        ] = None,
    ) -> TurnAccepted:
        """Store one chat turn (the user's message and the reply) and queue the extraction of
        its facts, as POST /v1/sessions/{session_id}/turns does; poll nothing: the facts are
        searchable once the job is done (usually within seconds)."""
        turn = TurnIn(
            user_id=user_id,
            user_message=MessageIn(content=user_message, speaker=speaker),
            assistant_message=assistant_message,
        )
        return await backend_of(ctx).add_memory(session_id=session_id, turn=turn)

    @server.tool()
    async def list_memories(
        user_id: UserId,
        ctx: Context[Any, Any],
        types: Types = None,
        include_superseded: Annotated[
            bool, Field(description="also facts replaced by a newer one")
        ] = False,
        limit: Annotated[int, Field(ge=1, le=1000)] = 100,
        offset: Annotated[int, Field(ge=0, le=MAX_OFFSET)] = 0,
    ) -> MemoriesPublic:
        """Everything remembered about the user, newest first, with `count` of all of them."""
        return await backend_of(ctx).list_memories(
            user_id=user_id,
            types=types or [],
            include_superseded=include_superseded,
            limit=limit,
            offset=offset,
        )

    @server.tool()
    async def delete_memory(
        user_id: UserId,
        memory_id: Annotated[
            Identifier, Field(description=f"a memory's id, from a list or a search; {ID_RULE}")
        ],
        ctx: Context[Any, Any],
    ) -> MemoryDeleted:
        """Forget one memory of the user (its row and its vector)."""
        await backend_of(ctx).delete_memory(user_id=user_id, memory_id=memory_id)
        return MemoryDeleted(user_id=user_id, memory_id=memory_id)

    @server.tool()
    async def search_history(
        user_id: UserId,
        query: Annotated[
            str, Field(min_length=1, max_length=4000, description="words or a question")
        ],
        ctx: Context[Any, Any],
        k: Annotated[int, Field(ge=1, le=100)] = 10,
        exclude_session_id: Annotated[
            Identifier | None, Field(description="leave this session's messages out")
        ] = None,
        around: Annotated[
            int, Field(ge=0, le=MAX_AROUND, description="messages shown before and after a hit")
        ] = 0,
    ) -> MessageHitsPublic:
        """The user's earlier messages from any session, found by their words and by meaning,
        best first, each with its session, time and score."""
        return await backend_of(ctx).search_history(
            user_id=user_id,
            query=query,
            k=k,
            exclude_session_id=exclude_session_id,
            around=around,
        )

    @server.tool()
    async def get_context(
        session_id: SessionId,
        ctx: Context[Any, Any],
        query: Annotated[
            str | None, Field(max_length=4000, description="default: the last user message")
        ] = None,
        budget_tokens: Annotated[int | None, Field(ge=0, le=MAX_BUDGET_TOKENS)] = None,
        user_id: Annotated[
            Identifier | None, Field(description="needed only before the session's first turn")
        ] = None,
    ) -> ContextPublic:
        """What to put in front of the model before the next message, within a token budget:
        memories by type, earlier messages from other sessions, this session's history, and
        all of it as one system prompt."""
        return await backend_of(ctx).get_context(
            session_id=session_id, query=query, budget_tokens=budget_tokens, user_id=user_id
        )

    return server
