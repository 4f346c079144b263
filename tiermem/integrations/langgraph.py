"""LangGraph and LangChain over tiermem (pip install tiermem[langgraph]): `TiermemStore`, a
LangGraph `BaseStore` over a user's memories, and `TiermemChatMessageHistory`, a LangChain
chat message history over a tiermem session.

Namespaces. The tenant is the client's app key's (a key reaches one tenant); the label at
`user_at` (the first, by default: `("ana", "memories")`) is the tiermem user; the whole
namespace is kept with each item put, so `get`, `search` and `list_namespaces` tell apart
`("ana", "memories")` from `("ana", "profile")`. Memories tiermem extracted from the user's
turns belong to every namespace of their user: keyed by their memory id, their value is
`{"content", "type", "slot", "confidence", "details", "tags"}`.

Writes. `put` writes its value as a memory at once through the mem0-compatible add with
`infer=false` (`POST /mem0/v3/memories/add/`, the one route that writes a memory directly:
typed by the offline rules, deduplicated as every memory is), the namespace, key and value
kept in its metadata; its text is `value["content"]`, or the value's only string. `get`
answers the value as it was put. A put of a key that exists replaces it (mem0's update keeps
the memory's id and history); `put(..., None)` and `delete` delete it. tiermem keeps one
memory per fact: a value that says what a memory already holds merges into that memory and
is found under the key it was first put with; a value that contradicts one (a new city)
supersedes it, and the superseded key is gone from `get` and `search`.

Reads. `search` with a `query` is tiermem's memory search (best first, `score` its cosine);
without, the user's memories, newest first. `get` by a caller's key reads the user's memories
(one request a thousand); by a memory id, that memory."""

from __future__ import annotations

import asyncio
import json
from collections.abc import Iterable, Iterator, Mapping, Sequence
from typing import Any, TypeVar, cast

from langchain_core.chat_history import BaseChatMessageHistory
from langchain_core.messages import (
    AIMessage,
    BaseMessage,
    HumanMessage,
    SystemMessage,
    message_to_dict,
    messages_from_dict,
)
from langgraph.store.base import (
    BaseStore,
    GetOp,
    Item,
    ListNamespacesOp,
    Op,
    PutOp,
    Result,
    SearchItem,
    SearchOp,
)

# The in-memory store's own matching, so a filter and a match condition mean here what they
# mean there.
from langgraph.store.memory import _compare_values, _does_match

from shared.mem0_compat.memories import Mem0Memory
from shared.mem0_compat.models import AddIn, AddOut, UpdateIn
from tiermem._calls import Call, body, reads, segment
from tiermem.client import Client
from tiermem.errors import NotFound, ValidationFailed
from tiermem.integrations._stored import (
    CLEAR,
    JSON_FORM,
    Stored,
    TextForm,
    form_of,
    marker,
    store,
    text_form,
)
from tiermem.models import MemoryPublic, MessageExported

__all__ = ["TiermemChatMessageHistory", "TiermemStore"]

ItemT = TypeVar("ItemT", bound=Item)
META = "langgraph"  # the metadata key of an item put through the store
_SEARCH_MAX = 100  # the API's k bound
_PAGE = 1000


class TiermemStore(BaseStore):
    """`TiermemStore(Client(url, app_key))`: a user's tiermem memories as a LangGraph store
    (`graph.compile(store=...)`, `create_react_agent(..., store=...)`)."""

    def __init__(self, client: Client, *, user_at: int = 0) -> None:
        self.client = client
        self.user_at = user_at

    def batch(self, ops: Iterable[Op]) -> list[Result]:
        return [self._one(op) for op in ops]

    async def abatch(self, ops: Iterable[Op]) -> list[Result]:
        # The blocking client in a thread: one client, one set of retry rules, no twin class.
        return await asyncio.to_thread(self.batch, list(ops))

    def _one(self, op: Op) -> Result:
        if isinstance(op, GetOp):
            return self._get(op.namespace, op.key)
        if isinstance(op, SearchOp):
            return self._search(op)
        if isinstance(op, PutOp):
            self._put(op.namespace, op.key, op.value)
            return None
        if isinstance(op, ListNamespacesOp):
            return self._namespaces(op)
        raise TypeError(f"unknown store operation {type(op).__name__}")

    # -- reads ----------------------------------------------------------------------------

    def _get(self, namespace: tuple[str, ...], key: str) -> Item | None:
        user = self._user(namespace)
        for memory in self._keyed(user, namespace, key):
            return _item(memory, namespace, Item)
        try:
            memory = self.client.get_memory(user, key)
        except (NotFound, ValidationFailed):  # not a memory id, or not an id at all
            return None
        if memory.active and _put_as(memory) is None:
            return _item(memory, namespace, Item)
        return None

    def _search(self, op: SearchOp) -> list[SearchItem]:
        user = self._user(op.namespace_prefix)
        if op.query:
            # Hits the namespace or the filter leave out make room for more: ask the most then.
            narrowed = op.filter or len(op.namespace_prefix) > self.user_at + 1
            k = _SEARCH_MAX if narrowed else min(_SEARCH_MAX, op.offset + op.limit)
            try:
                found: Iterable[MemoryPublic] = self.client.search_memories(
                    user, op.query, k=k
                ).data
            except NotFound:
                return []
        else:
            found = self._memories(user)
        hits: list[SearchItem] = []
        for memory in found:
            item = _item(memory, op.namespace_prefix, SearchItem)
            if item.namespace[: len(op.namespace_prefix)] != op.namespace_prefix:
                continue
            if op.filter and not all(
                _compare_values(item.value.get(k), v) for k, v in op.filter.items()
            ):
                continue
            hits.append(item)
            if len(hits) >= op.offset + op.limit:
                break
        return hits[op.offset :]

    def _namespaces(self, op: ListNamespacesOp) -> list[tuple[str, ...]]:
        user = next(
            (
                c.path[self.user_at]
                for c in op.match_conditions or ()
                if c.match_type == "prefix"
                and len(c.path) > self.user_at
                and c.path[self.user_at] != "*"
            ),
            None,
        )
        if user is None:
            raise ValueError(
                "tiermem lists one user's namespaces: give a prefix match condition naming "
                f"the user at position {self.user_at}"
            )
        found = {
            tuple(put["namespace"]) for m in self._memories(user) if (put := _put_as(m)) is not None
        }
        matching = sorted(
            ns[: op.max_depth] if op.max_depth is not None else ns
            for ns in found
            if all(_does_match(c, ns) for c in op.match_conditions or ())
        )
        unique = list(dict.fromkeys(matching))
        return unique[op.offset : op.offset + op.limit]

    # -- writes ---------------------------------------------------------------------------

    def _put(self, namespace: tuple[str, ...], key: str, value: Mapping[str, Any] | None) -> None:
        user = self._user(namespace)
        existing = list(self._keyed(user, namespace, key))
        if value is None:
            for memory in existing:
                self.client.delete_memory(user, memory.id)
            return
        metadata = {META: {"namespace": list(namespace), "key": key, "value": dict(value)}}
        text = _text_of(value)
        if len(existing) == 1:
            update = body(UpdateIn, text=text, metadata=metadata)
            path = f"/mem0/v1/memories/{segment(existing[0].id)}/"
            self.client._run(Call("PUT", path, reads(Mem0Memory), body=update))
            return
        for memory in existing:
            self.client.delete_memory(user, memory.id)
        add = body(
            AddIn,
            user_id=user,
            messages=[{"role": "user", "content": text}],
            metadata=metadata,
            infer=False,
        )
        self.client._run(Call("POST", "/mem0/v3/memories/add/", reads(AddOut), body=add))

    # -- helpers --------------------------------------------------------------------------

    def _user(self, namespace: tuple[str, ...]) -> str:
        if len(namespace) <= self.user_at:
            raise ValueError(
                f"namespace {namespace!r} names no tiermem user (its label {self.user_at} is)"
            )
        return namespace[self.user_at]

    def _memories(self, user: str) -> Iterator[MemoryPublic]:
        """The user's active memories, newest first (none for a user tiermem does not know)."""
        try:
            yield from self.client.iter_memories(user, page_size=_PAGE)
        except NotFound:
            return

    def _keyed(self, user: str, namespace: tuple[str, ...], key: str) -> Iterator[MemoryPublic]:
        """The user's active memories put under `namespace` and `key`."""
        for memory in self._memories(user):
            put = _put_as(memory)
            if put is not None and put["key"] == key and tuple(put["namespace"]) == namespace:
                yield memory


def _put_as(memory: MemoryPublic) -> dict[str, Any] | None:
    """What the store put this memory as (`namespace`, `key`, `value`); None if extracted."""
    origin = memory.details.get("mem0")
    put = (origin.get("metadata") or {}).get(META) if isinstance(origin, dict) else None
    return put if isinstance(put, dict) else None


def _item(memory: MemoryPublic, namespace: tuple[str, ...], kind: type[ItemT]) -> ItemT:
    put = _put_as(memory)
    if put is not None:
        namespace, key, value = tuple(put["namespace"]), str(put["key"]), dict(put["value"])
    else:
        key = memory.id
        details = {k: v for k, v in memory.details.items() if k != "mem0"}
        value = {
            "content": memory.content,
            "type": memory.type,
            "slot": memory.slot,
            "confidence": memory.confidence,
            "details": details,
            "tags": memory.tags,
        }
    times = {"created_at": memory.first_seen_at, "updated_at": memory.last_seen_at}
    if kind is SearchItem:
        return cast(ItemT, SearchItem(namespace, key, value, score=memory.score, **times))
    return kind(value=value, key=key, namespace=namespace, **times)


def _text_of(value: Mapping[str, Any]) -> str:
    if isinstance(value.get("content"), str):
        return str(value["content"])
    strings = [v for v in value.values() if isinstance(v, str)]
    if len(strings) == 1:
        return strings[0]
    raise ValueError(
        "a tiermem memory is a text: give the value a 'content' string (or only one string)"
    )


# -- chat message history -------------------------------------------------------------------

HISTORY_PREFIX = "lc"  # every external id the history writes starts "lc."
_KINDS: dict[str, tuple[str, type[BaseMessage]]] = {
    "h": ("user", HumanMessage),
    "a": ("assistant", AIMessage),
    "s": ("system", SystemMessage),
}
_PLAIN: dict[str, type[BaseMessage]] = {"user": HumanMessage, "assistant": AIMessage,
                                         "system": SystemMessage}  # fmt: skip


def _forms(message: BaseMessage) -> list[TextForm]:
    if not isinstance(message.content, str):
        return []
    return [
        TextForm(name, role, message.content, extra)
        for name, (role, kind) in _KINDS.items()
        if isinstance(message, kind)
        for extra in ("", message.id or "")
    ]


def _rebuild(form: TextForm) -> BaseMessage | None:
    role_kind = _KINDS.get(form.name)
    if role_kind is None:
        return None
    return role_kind[1](content=form.text, id=form.extra or None)


def encode_message(message: BaseMessage) -> Stored:
    return store(HISTORY_PREFIX, message, _forms(message), _rebuild, message_to_dict)


def decode_message(message: MessageExported) -> BaseMessage | None:
    form = form_of(HISTORY_PREFIX, message)
    if form is None:
        plain = _PLAIN.get(message.role)
        return plain(content=message.content) if plain is not None else None
    if form.name == JSON_FORM:
        return messages_from_dict([json.loads(message.content)])[0]
    return _rebuild(text_form(form, message))


class TiermemChatMessageHistory(BaseChatMessageHistory):
    """The messages of tiermem session `session_id`, owned by `user_id`, as a LangChain chat
    history (`RunnableWithMessageHistory(chain, lambda sid: TiermemChatMessageHistory(sid,
    user_id=..., client=...))`). Human, AI and system messages of text are stored as their
    text (the user's are extracted into memories as any turn), others as JSON; `clear` hides
    what came before from the history and keeps it in tiermem."""

    def __init__(self, session_id: str, *, user_id: str, client: Client) -> None:
        self.session_id = session_id
        self.user_id = user_id
        self.client = client

    @property
    def messages(self) -> list[BaseMessage]:  # type: ignore[override]
        stored: list[MessageExported] = []
        try:
            while True:
                page = self.client.list_messages(self.session_id, limit=_PAGE, offset=len(stored))
                stored += page.data
                if len(page.data) < _PAGE:
                    break
        except NotFound:
            return []
        cleared = [n for n, m in enumerate(stored) if _is_clear(m)]
        after = stored[cleared[-1] + 1 :] if cleared else stored
        return [m for m in map(decode_message, after) if m is not None]

    def add_messages(self, messages: Sequence[BaseMessage]) -> None:
        self._store([encode_message(m) for m in messages])

    def clear(self) -> None:
        try:
            self.client.list_messages(self.session_id, limit=1)
        except NotFound:
            return
        self._store([marker(HISTORY_PREFIX, CLEAR, "the chat history was cleared")])

    def _store(self, stored: Sequence[Stored]) -> None:
        lines = [s.line(user_id=self.user_id, session_id=self.session_id) for s in stored]
        for start in range(0, len(lines), _PAGE):
            self.client.import_messages(lines[start : start + _PAGE])


def _is_clear(message: MessageExported) -> bool:
    form = form_of(HISTORY_PREFIX, message)
    return form is not None and form.name == CLEAR
