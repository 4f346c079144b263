"""AsyncClient against the same real `tiermem serve`: the same flows, awaited."""

from __future__ import annotations

import asyncio

import pytest

from tests.factories import ADMIN_KEY, APP_KEY, new_id
from tests.scripted_llm import ScriptedLLM
from tiermem import AsyncClient, Forbidden, NotFound, Unauthorized, ValidationFailed

pytestmark = pytest.mark.anyio


async def test_a_turn_is_stored_extracted_found_and_erased(server: str) -> None:
    user, session = new_id("ana"), new_id("s")
    async with AsyncClient(server, APP_KEY) as client:
        turns = await asyncio.gather(
            client.store_turn(session, user_id=user, user_message="I live in Lisbon."),
            client.store_turn(session, user_id=user, user_message="I love fado music."),
        )
        jobs = await asyncio.gather(
            *(client.wait_for_job(t.job_id or "", timeout=60) for t in turns)
        )
        assert [j.status for j in jobs] == ["done", "done"]

        found = await client.search_memories(user, "Where does the user live?", k=5)
        assert any("Lisbon" in m.content for m in found.data)
        listed = await client.list_memories(user)
        walked = [m.id async for m in client.iter_memories(user, page_size=1)]
        assert walked == [m.id for m in listed.data] and len(walked) >= 2

        context = await client.get_context(session, query="what music do I like?")
        assert any("fado" in m.content for ms in context.memories.values() for m in ms)
        hits = await client.search_history(user, "fado")
        assert hits.data and "fado" in hits.data[0].content
        assert len((await client.export_user(user)).messages) == 2

        assert (await client.delete_user(user)).deleted["messages"] == 2
        with pytest.raises(NotFound):
            await client.get_memory(user, listed.data[0].id)


async def test_chat_stream_and_admin(server: str, scripted_llm: ScriptedLLM) -> None:
    scripted_llm.script("museum", "The Gulbenkian is worth a morning.")
    async with AsyncClient(server, APP_KEY) as client:
        stream = client.chat_stream(
            user_id=new_id("bo"), session_id=new_id("s"), message="A museum tip?"
        )
        deltas = [d async for d in stream]
        assert "".join(deltas) == "The Gulbenkian is worth a morning."
        assert stream.result is not None and stream.result.job_id

    async with AsyncClient(server, ADMIN_KEY) as operator:
        created = await operator.create_tenant(new_id("async"))
        key = await operator.create_key(created.tenant.id, scope="admin")
    async with AsyncClient(server, key.key) as admin:
        assert [t.id for t in await admin.list_tenants()] == [created.tenant.id]
        with pytest.raises(Forbidden):
            await admin.ops_workers()


async def test_errors_are_typed(server: str) -> None:
    async with AsyncClient(server, "wrong") as stranger:
        with pytest.raises(Unauthorized) as refused:
            await stranger.get_job("x")
    assert refused.value.code == "unauthorized"
    async with AsyncClient(server, APP_KEY) as client:
        with pytest.raises(NotFound) as missing:
            await client.get_job("no-such-job")
        assert missing.value.code == "not_found"
        user = new_id("cleo")
        await client.store_turn(new_id("s"), user_id=user, user_message="Hello there.")
        with pytest.raises(ValidationFailed) as invalid:
            await client.search_history(user, "hello", k=1000)
        assert invalid.value.status == 422
        assert invalid.value.details["errors"][0]["loc"] == ["query", "k"]
