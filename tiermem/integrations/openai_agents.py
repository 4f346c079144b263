"""The OpenAI Agents SDK over tiermem (pip install tiermem[openai-agents]): `TiermemSession`
keeps an agent's conversation in a tiermem session, `memory_instructions` puts what tiermem
remembers about the user in front of each run.

Each item the Runner saves is one tiermem message, stored through `POST /v1/import` in the
order given, so the user's messages are extracted into memories as any turn is. An item is
stored as its text whenever its text and its message's `external_id` give it back exactly
(`{"role", "content"}` input messages, and assistant output messages of one text part:
their id and status go in the external id); any other item (tool calls and their outputs,
reasoning, refusals, …) is stored whole as JSON in a `tool` message. Each form is checked
when it is chosen: what `get_items` answers equals what `add_items` was given.

Messages are never deleted by the session (tiermem keeps them: memories point at them):
`pop_item` and `clear_session` store a marker that `get_items` honours, so the agent stops
seeing what was removed, while the user's memories and history search keep it. Forgetting
is `Client.delete_memory` / `delete_user`."""

from __future__ import annotations

import json
from collections.abc import AsyncIterator, Awaitable, Callable, Sequence
from typing import Any, cast

from agents import Agent, RunContextWrapper, TResponseInputItem
from agents.memory import SessionSettings
from agents.memory.session_settings import resolve_session_limit

from tiermem.client import AsyncClient
from tiermem.errors import NotFound
from tiermem.integrations._stored import (
    CLEAR,
    JSON_FORM,
    TEXT_ROLES,
    Stored,
    TextForm,
    form_of,
    marker,
    store,
    text_form,
)
from tiermem.models import MessageExported

__all__ = ["TiermemSession", "decode_item", "encode_item", "memory_instructions"]

PREFIX = "ag"  # every external id this session writes starts "ag."
POP = "pop"
_PAGE = 100
_IMPORT_MAX = 1000  # lines per POST /v1/import


def _forms(item: dict[str, Any]) -> list[TextForm]:
    """Text forms that could give the item back: an input message (`t`, or `m` with its
    type), an assistant output message of one text part (`o`: its status and id kept)."""
    role, content = item.get("role"), item.get("content")
    if role in TEXT_ROLES and isinstance(content, str):
        return [TextForm("t", role, content), TextForm("m", role, content)]
    if role == "assistant" and isinstance(content, list) and len(content) == 1:
        text = content[0].get("text") if isinstance(content[0], dict) else None
        if isinstance(text, str):
            return [TextForm("o", role, text, f"{item.get('status')}.{item.get('id')}")]
    return []


def _rebuild(form: TextForm) -> dict[str, Any] | None:
    if form.name == "t":
        return {"role": form.role, "content": form.text}
    if form.name == "m":
        return {"type": "message", "role": form.role, "content": form.text}
    if form.name == "o":
        status, _, item_id = form.extra.partition(".")
        part = {"annotations": [], "text": form.text, "type": "output_text", "logprobs": []}
        return {
            "id": item_id,
            "content": [part],
            "role": "assistant",
            "status": status,
            "type": "message",
        }
    return None


def encode_item(item: TResponseInputItem) -> Stored:
    """The message that stores `item`: its text where that gives it back exactly, else JSON."""
    as_dict = cast(dict[str, Any], item)
    return store(PREFIX, as_dict, _forms(as_dict), _rebuild, lambda d: d)


def decode_item(message: MessageExported) -> TResponseInputItem | None:
    """The item a stored message holds; a message stored otherwise (a turn, a chat) is read
    as `{"role", "content"}`; markers and tool messages stored otherwise are None."""
    form = form_of(PREFIX, message)
    if form is None:
        plain = {"role": message.role, "content": message.content}
        return cast(TResponseInputItem, plain) if message.role in TEXT_ROLES else None
    if form.name == JSON_FORM:
        return cast(TResponseInputItem, json.loads(message.content))
    return cast(TResponseInputItem | None, _rebuild(text_form(form, message)))


class TiermemSession:
    """An Agents SDK `Session` whose items are the messages of tiermem session `session_id`,
    owned by `user_id`: `Runner.run(agent, input, session=TiermemSession(...))`."""

    def __init__(
        self,
        session_id: str,
        *,
        user_id: str,
        client: AsyncClient,
        session_settings: SessionSettings | None = None,
    ) -> None:
        self.session_id = session_id
        self.user_id = user_id
        self.client = client
        self.session_settings = session_settings

    async def get_items(self, limit: int | None = None) -> list[TResponseInputItem]:
        """The latest `limit` items (all without one), oldest first."""
        wanted = resolve_session_limit(limit, self.session_settings)
        live = [item async for _, item in self._live_items(wanted)]
        return live[::-1]

    async def add_items(self, items: list[TResponseInputItem]) -> None:
        encoded = [encode_item(item) for item in items]
        for start in range(0, len(encoded), _IMPORT_MAX):
            await self._store(encoded[start : start + _IMPORT_MAX])

    async def pop_item(self) -> TResponseInputItem | None:
        async for message_id, item in self._live_items(1):
            await self._store([marker(PREFIX, POP, "removed from the agent's view", message_id)])
            return item
        return None

    async def clear_session(self) -> None:
        try:
            await self.client.list_messages(self.session_id, limit=1)
        except NotFound:
            return
        await self._store([marker(PREFIX, CLEAR, "the agent's session was cleared")])

    async def _live_items(self, limit: int | None) -> AsyncIterator[tuple[str, TResponseInputItem]]:
        """(message id, item) newest first, skipping popped items, up to the last clear."""
        popped: set[str] = set()
        found, offset = 0, 0
        while limit is None or found < limit:
            try:
                page = await self.client.list_messages(
                    self.session_id, limit=_PAGE, offset=offset, newest_first=True
                )
            except NotFound:
                return
            for message in page.data:
                form = form_of(PREFIX, message)
                if form is not None and form.name == CLEAR:
                    return
                if form is not None and form.name == POP:
                    popped.add(form.extra)
                    continue
                item = decode_item(message)
                if item is None or message.id in popped:
                    continue
                yield message.id, item
                found += 1
                if limit is not None and found >= limit:
                    return
            offset += len(page.data)
            if len(page.data) < _PAGE:
                return

    async def _store(self, stored: Sequence[Stored]) -> None:
        lines = [s.line(user_id=self.user_id, session_id=self.session_id) for s in stored]
        await self.client.import_messages(lines)


def memory_instructions(
    client: AsyncClient,
    *,
    user_id: str,
    session_id: str,
    instructions: str = "",
    budget_tokens: int | None = None,
) -> Callable[[RunContextWrapper[Any], Agent[Any]], Awaitable[str]]:
    """Dynamic `instructions` for an `Agent`: `instructions`, then what tiermem remembers about
    the user and their relevant earlier messages from other sessions (the context's system
    message), fetched before every model call. The session's own history is left out: the
    agent's session already gives it. The context is asked about the session's last user
    message, which the Runner has saved by then."""

    async def build(context: RunContextWrapper[Any], agent: Agent[Any]) -> str:
        found = await client.get_context(session_id, user_id=user_id, budget_tokens=budget_tokens)
        memory = next((m.content for m in found.messages if m.role == "system"), "")
        return "\n\n".join(part for part in (instructions, memory) if part)

    return build
