"""tiermem.integrations.langgraph with the real `langgraph` and `langchain-core` packages
against a real `tiermem serve`: a graph's node puts and searches memories through
TiermemStore (namespaces kept apart, values as they were put, tiermem's own extracted
memories found beside them), and a chain keeps its conversation in TiermemChatMessageHistory
(LangChain's fake chat model as the model), message for message."""

from __future__ import annotations

import time
from collections.abc import Iterator
from typing import Any, TypedDict

import pytest

pytest.importorskip("langgraph", reason="langgraph is not installed: pip install .[langgraph]")

from langchain_core.language_models.fake_chat_models import FakeListChatModel  # noqa: E402
from langchain_core.messages import (  # noqa: E402
    AIMessage,
    BaseMessage,
    HumanMessage,
    SystemMessage,
    ToolMessage,
)
from langchain_core.prompts import ChatPromptTemplate, MessagesPlaceholder  # noqa: E402
from langchain_core.runnables.history import RunnableWithMessageHistory  # noqa: E402
from langgraph.graph import END, START, StateGraph  # noqa: E402
from langgraph.store.base import BaseStore  # noqa: E402

from tests.factories import APP_KEY, new_id  # noqa: E402
from tiermem import Client  # noqa: E402
from tiermem.integrations.langgraph import (  # noqa: E402
    TiermemChatMessageHistory,
    TiermemStore,
)
from tiermem.models import MemoryPublic  # noqa: E402


@pytest.fixture(name="client")
def client_fixture(server: str) -> Iterator[Client]:
    with Client(server, APP_KEY, timeout=30) as client:
        yield client


def until_memories(client: Client, user: str, timeout: float = 60) -> list[MemoryPublic]:
    deadline = time.monotonic() + timeout
    while not (found := client.list_memories(user).data):
        assert time.monotonic() < deadline, f"no memory of {user} within {timeout}s"
        time.sleep(0.25)
    return list(found)


def test_put_get_search_replace_and_delete_in_namespaces(client: Client) -> None:
    user = new_id("ana")
    store = TiermemStore(client)
    music, profile = (user, "memories"), (user, "profile")
    store.put(music, "jazz", {"content": "I love jazz.", "kind": "music"})
    store.put(profile, "home", {"content": "I live in Lisbon."})

    item = store.get(music, "jazz")
    assert item is not None and item.key == "jazz" and item.namespace == music
    assert item.value == {"content": "I love jazz.", "kind": "music"}
    assert store.get(profile, "jazz") is None and store.get(music, "home") is None

    hits = store.search(music, query="what music do I like?")
    assert [h.key for h in hits] == ["jazz"] and hits[0].score and hits[0].score > 0.2
    assert [h.key for h in store.search((user,), query="where do I live?")][0] == "home"
    assert [h.key for h in store.search((user,), filter={"kind": "music"})] == ["jazz"]
    assert {h.key for h in store.search((user,))} == {"jazz", "home"}
    assert store.list_namespaces(prefix=(user,)) == [music, profile]
    assert store.list_namespaces(prefix=(user,), max_depth=1) == [(user,)]

    store.put(music, "jazz", {"content": "I love bebop above all.", "kind": "music"})
    again = store.get(music, "jazz")
    assert again is not None and again.value["content"] == "I love bebop above all."
    assert again.created_at <= again.updated_at
    assert [h.key for h in store.search(music)] == ["jazz"]

    store.delete(music, "jazz")
    assert store.get(music, "jazz") is None
    assert [h.key for h in store.search(music)] == []
    assert store.get(music, "not an id: spaces") is None
    store.put(music, "a key: any text", {"content": "I play the banjo."})
    banjo = store.get(music, "a key: any text")
    assert banjo is not None and banjo.value == {"content": "I play the banjo."}
    with pytest.raises(ValueError, match="names no tiermem user"):
        store.get((), "jazz")
    with pytest.raises(ValueError, match="'content' string"):
        store.put(music, "x", {"a": "one", "b": "two"})


def test_memories_tiermem_extracted_are_in_every_namespace_of_their_user(client: Client) -> None:
    user = new_id("ben")
    client.store_turn(new_id("chat"), user_id=user, user_message="I'm a nurse in Leeds.")
    extracted = until_memories(client, user)
    store = TiermemStore(client, user_at=1)  # ("memories", user): LangMem's convention
    namespace = ("memories", user)
    hits = store.search(namespace, query="what is my job?")
    assert hits and any("nurse" in h.value["content"] for h in hits)
    assert all(h.namespace == namespace and h.key in {m.id for m in extracted} for h in hits)
    first = store.get(namespace, extracted[0].id)
    assert first is not None and first.value["type"] == extracted[0].type


class State(TypedDict):
    user: str
    said: str
    recalled: list[str]


def remember(state: State, *, store: BaseStore) -> dict[str, Any]:
    namespace = (state["user"], "memories")
    store.put(namespace, new_id("m"), {"content": state["said"]})
    found = store.search(namespace, query="Where does the user live?", limit=3)
    return {"recalled": [h.value["content"] for h in found]}


def test_a_graph_node_writes_and_reads_through_the_store(client: Client) -> None:
    graph = StateGraph(State)
    graph.add_node("remember", remember)
    graph.add_edge(START, "remember")
    graph.add_edge("remember", END)
    app = graph.compile(store=TiermemStore(client))
    user = new_id("cy")
    out = app.invoke({"user": user, "said": "I moved to Porto last spring.", "recalled": []})
    assert out["recalled"] == ["I moved to Porto last spring."]


@pytest.mark.anyio
async def test_the_async_api_answers_as_the_blocking_one(client: Client) -> None:
    store, user = TiermemStore(client), new_id("dee")
    await store.aput((user, "notes"), "k", {"content": "I play the cello."})
    item = await store.aget((user, "notes"), "k")
    assert item is not None and item.value == {"content": "I play the cello."}
    assert [h.key for h in await store.asearch((user,), query="instrument")] == ["k"]


MESSAGES: list[BaseMessage] = [
    SystemMessage("You are brief."),
    HumanMessage("I'm Eve and I keep bees."),
    AIMessage("Lovely!", id="run-1"),
    AIMessage("", tool_calls=[{"name": "hive", "args": {"n": 2}, "id": "t1"}]),
    ToolMessage("2 hives", tool_call_id="t1"),
    HumanMessage([{"type": "text", "text": "parts"}]),
    AIMessage("Noted.", response_metadata={"model_name": "fake"}),
]


def test_a_chat_history_gives_every_message_back_and_clear_hides_them(client: Client) -> None:
    user, session = new_id("eve"), new_id("chat")
    history = TiermemChatMessageHistory(session, user_id=user, client=client)
    assert history.messages == []
    history.clear()  # nothing stored: nothing to clear
    history.add_messages(MESSAGES)
    assert history.messages == MESSAGES

    stored = client.list_messages(session).data
    assert (stored[1].role, stored[1].content) == ("user", "I'm Eve and I keep bees.")
    assert [m.role for m in stored[2:5]] == ["assistant", "tool", "tool"]

    history.clear()
    assert history.messages == []
    history.add_user_message("after the clear")
    assert history.messages == [HumanMessage("after the clear")]
    assert client.list_messages(session).count == len(MESSAGES) + 2  # tiermem keeps them


def test_a_chain_keeps_its_conversation_in_the_history(client: Client) -> None:
    user, session = new_id("fay"), new_id("chat")
    prompt = ChatPromptTemplate.from_messages(
        [MessagesPlaceholder("history"), ("human", "{question}")]
    )
    model = FakeListChatModel(responses=["Hi Fay.", "In Galway."])
    chain = RunnableWithMessageHistory(
        prompt | model,
        lambda session_id: TiermemChatMessageHistory(session_id, user_id=user, client=client),
        input_messages_key="question",
        history_messages_key="history",
    )
    config: Any = {"configurable": {"session_id": session}}
    chain.invoke({"question": "I'm Fay and I live in Galway."}, config=config)
    chain.invoke({"question": "Where do I live?"}, config=config)

    said = TiermemChatMessageHistory(session, user_id=user, client=client).messages
    assert [m.content for m in said] == [
        "I'm Fay and I live in Galway.", "Hi Fay.", "Where do I live?", "In Galway."
    ]  # fmt: skip
    assert any("Galway" in m.content for m in until_memories(client, user))


def test_tiermem_keeps_one_memory_per_fact_whatever_the_keys(client: Client) -> None:
    """A value that says what a stored memory says merges into it (found under its first
    key); one that contradicts it (another city) supersedes it."""
    user = new_id("gil")
    store, namespace = TiermemStore(client), (user, "memories")
    store.put(namespace, "a", {"content": "I love jazz."})
    store.put(namespace, "b", {"content": "I love jazz."})
    assert store.get(namespace, "a") is not None and store.get(namespace, "b") is None
    store.put(namespace, "home", {"content": "I live in Lisbon."})
    store.put(namespace, "moved", {"content": "I live in Porto."})
    assert store.get(namespace, "home") is None
    assert {h.key for h in store.search(namespace)} == {"a", "moved"}
