"""tiermem.integrations.openai_agents with the real `openai-agents` package against a real
`tiermem serve`: an agent (the Agents SDK's own ScriptedModel as its model) keeps its
conversation, tool calls included, in a tiermem session, item for item as the SDK's own
SQLiteSession keeps it; the user's message becomes a memory; the memory is in front of the
next run's model call; pop and clear hide items from the agent and keep them in tiermem."""

from __future__ import annotations

import asyncio
import datetime as dt
from typing import Any

import pytest

pytest.importorskip("agents", reason="openai-agents is not installed: pip install .[openai-agents]")

from agents import Agent, Runner, SQLiteSession, TResponseInputItem, function_tool  # noqa: E402
from agents.testing import ScriptedModel, assistant_message, function_call  # noqa: E402

from tests.factories import APP_KEY, new_id  # noqa: E402
from tiermem import AsyncClient  # noqa: E402
from tiermem.integrations.openai_agents import (  # noqa: E402
    TiermemSession,
    decode_item,
    encode_item,
    memory_instructions,
)
from tiermem.models import MessageExported  # noqa: E402

pytestmark = pytest.mark.anyio

ITEMS: list[dict[str, Any]] = [
    {"role": "user", "content": "What's the weather in Berlin?"},
    {"type": "message", "role": "system", "content": "Be brief."},
    {"role": "developer", "content": "Answer in English."},
    {"role": "user", "content": [{"type": "input_text", "text": "and tomorrow?"}]},
    {"arguments": '{"city":"Berlin"}', "call_id": "c1", "name": "weather", "type": "function_call",
     "id": "c1"},
    {"call_id": "c1", "output": "sunny in Berlin", "type": "function_call_output"},
    {"id": "msg_1", "content": [{"annotations": [], "text": "It is sunny.", "type": "output_text",
     "logprobs": []}], "role": "assistant", "status": "completed", "type": "message"},
    {"id": "msg_2", "content": [{"annotations": [{"type": "url_citation", "url": "https://x.org",
     "title": "x", "start_index": 0, "end_index": 2}], "text": "Cited.", "type": "output_text",
     "logprobs": []}], "role": "assistant", "status": "completed", "type": "message"},
    {"id": "rs_1", "type": "reasoning", "summary": [], "encrypted_content": "gAAA=="},
    {"role": "assistant", "content": "   "},
    {"role": "user", "content": "naïve café — 日本語 🎷"},
]  # fmt: skip


def stored(item: dict[str, Any]) -> MessageExported:
    encoded = encode_item(item)  # type: ignore[arg-type]
    return MessageExported(
        id="m",
        session_id="s",
        seq=1,
        role=encoded.role,
        speaker=None,
        content=encoded.content,
        created_at=dt.datetime.now(dt.UTC),
        external_id=encoded.external_id,
        extraction_status="none",
    )


@pytest.mark.parametrize("item", ITEMS, ids=[str(n) for n in range(len(ITEMS))])
def test_every_item_comes_back_as_it_was_given(item: dict[str, Any]) -> None:
    assert decode_item(stored(item)) == item


def test_messages_are_stored_as_their_text_and_the_rest_as_json() -> None:
    user, output = stored(ITEMS[0]), stored(ITEMS[6])
    assert (user.role, user.content) == ("user", "What's the weather in Berlin?")
    assert (output.role, output.content) == ("assistant", "It is sunny.")
    assert output.external_id and output.external_id.endswith(".completed.msg_1")
    for n in (2, 3, 4, 5, 7, 8, 9):  # no role tiermem has, parts, tools, citations, blank
        assert stored(ITEMS[n]).role == "tool", ITEMS[n]


@function_tool
def weather(city: str) -> str:
    """Today's weather in a city."""
    return f"sunny in {city}"


def scripted_turn(text: str) -> list[Any]:
    return [
        [function_call("weather", {"city": "Berlin"}, call_id=new_id("call"))],
        [assistant_message(text, item_id=new_id("msg"))],
    ]


async def test_an_agent_keeps_its_conversation_in_a_tiermem_session(server: str) -> None:
    user, session_id = new_id("ana"), new_id("agent")
    question = "I live in Berlin and I love jazz. What's the weather here?"
    steps = [*scripted_turn("Sunny, enjoy the jazz."), *scripted_turn("Still sunny.")]
    async with AsyncClient(server, APP_KEY) as client:
        session = TiermemSession(session_id, user_id=user, client=client)
        model = ScriptedModel(steps)
        agent = Agent(name="guide", instructions="Be brief.", model=model, tools=[weather])

        first = await Runner.run(agent, question, session=session)
        assert first.final_output == "Sunny, enjoy the jazz."
        items = await session.get_items()
        reference = SQLiteSession(new_id("ref"))
        await reference.add_items(first.to_input_list())
        assert items == await reference.get_items()  # as the SDK's own session keeps them
        assert [i.get("type") for i in items] == [
            None, "function_call", "function_call_output", "message"
        ]  # fmt: skip

        second = await Runner.run(agent, "And tomorrow?", session=session)
        assert second.final_output == "Still sunny."
        sent = model.calls[2].input  # the second run's first model call
        assert isinstance(sent, list) and sent[: len(items)] == items
        assert len(await session.get_items()) == 8
        assert await session.get_items(limit=2) == (await session.get_items())[-2:]

        page = await client.list_messages(session_id)
        assert [m.role for m in page.data[:4]] == ["user", "tool", "tool", "assistant"]
        assert page.data[0].content == question and page.data[3].content.startswith("Sunny")
        memories = await until_memories(client, user)
        assert any("Berlin" in m.content for m in memories)


async def test_memory_instructions_put_the_users_memories_in_front_of_the_model(
    server: str,
) -> None:
    user = new_id("ben")
    async with AsyncClient(server, APP_KEY) as client:
        await client.store_turn(new_id("chat"), user_id=user, user_message="I'm a nurse in Leeds.")
        await until_memories(client, user)

        session_id = new_id("agent")
        model = ScriptedModel([[assistant_message("Leeds has good hospitals.")]])
        instructions = memory_instructions(
            client, user_id=user, session_id=session_id, instructions="You are a careers coach."
        )
        agent = Agent(name="coach", instructions=instructions, model=model)
        session = TiermemSession(session_id, user_id=user, client=client)
        await Runner.run(agent, "Where should I work?", session=session)

        system = model.calls[0].system_instructions or ""
        assert system.startswith("You are a careers coach.")
        assert "Leeds" in system and "nurse" in system, system


async def test_pop_and_clear_hide_items_from_the_agent_and_tiermem_keeps_them(
    server: str,
) -> None:
    user, session_id = new_id("cy"), new_id("agent")
    items: list[TResponseInputItem] = [
        {"role": "user", "content": f"message {n}"} for n in range(5)
    ]
    async with AsyncClient(server, APP_KEY) as client:
        session = TiermemSession(session_id, user_id=user, client=client)
        assert await session.get_items() == [] and await session.pop_item() is None
        await session.clear_session()  # nothing stored: nothing to clear
        await session.add_items(items)
        assert await session.pop_item() == items[4]
        assert await session.pop_item() == items[3]
        assert await session.get_items() == items[:3]
        assert await session.get_items(limit=2) == items[1:3]
        await session.add_items([items[4]])
        assert await session.get_items() == [*items[:3], items[4]]

        await session.clear_session()
        assert await session.get_items() == [] and await session.pop_item() is None
        await session.add_items([{"role": "user", "content": "after the clear"}])
        assert await session.get_items() == [{"role": "user", "content": "after the clear"}]

        kept = await client.list_messages(session_id)
        said = [m.content for m in kept.data if m.role == "user"]
        assert said == [*(f"message {n}" for n in range(5)), "message 4", "after the clear"]


async def test_a_long_session_is_read_back_across_pages(server: str) -> None:
    user, session_id = new_id("dee"), new_id("agent")
    items: list[TResponseInputItem] = [
        {"role": "user" if n % 2 == 0 else "assistant", "content": f"line {n}"} for n in range(230)
    ]
    async with AsyncClient(server, APP_KEY) as client:
        session = TiermemSession(session_id, user_id=user, client=client)
        await session.add_items(items)
        assert await session.get_items() == items
        assert await session.get_items(limit=150) == items[-150:]


async def until_memories(client: AsyncClient, user: str, timeout: float = 60) -> list[Any]:
    """The user's memories once extraction has written some."""
    for _ in range(int(timeout / 0.25)):
        found = await client.list_memories(user)
        if found.data:
            return list(found.data)
        await asyncio.sleep(0.25)
    raise AssertionError(f"no memory of {user} within {timeout}s")
