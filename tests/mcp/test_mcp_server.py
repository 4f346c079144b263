"""The MCP server through the `mcp` SDK's own client, over both transports, against a real
`tiermem serve` (offline extractor): streamable HTTP at /mcp with the caller's key, and
`tiermem mcp --url … --key …` spawned over stdio. Each tool is called; errors are MCP tool
errors carrying the API's error body; a tenant's key reaches only its tenant's users."""

from __future__ import annotations

import time
import uuid
from collections.abc import AsyncIterator, Awaitable, Callable, Iterator
from contextlib import asynccontextmanager
from pathlib import Path
from typing import Any

import anyio
import httpx
import httpx2
import pytest
from mcp import Client
from mcp.client.stdio import StdioServerParameters
from mcp.client.streamable_http import streamable_http_client
from mcp.types import CallToolResult

from tests import processes
from tests.factories import ADMIN_KEY, APP_KEY, TIERMEM, free_port, tiermem_serve

TOOLS = {
    "search_memories",
    "add_memory",
    "list_memories",
    "delete_memory",
    "search_history",
    "get_context",
}
Connect = Callable[[str], Any]  # key -> an async context manager of a connected Client


@pytest.fixture(name="server", scope="module")
def server_fixture(tmp_path_factory: pytest.TempPathFactory) -> Iterator[str]:
    with tiermem_serve(tmp_path_factory.mktemp("mcp")) as url:
        yield url


@pytest.fixture(name="other_key", scope="module")
def other_key_fixture(server: str) -> str:
    """The app key of a second tenant."""
    response = httpx.post(
        f"{server}/v1/admin/tenants",
        json={"name": f"other-{uuid.uuid4().hex[:6]}"},
        headers={"Authorization": f"Bearer {ADMIN_KEY}"},
    )
    assert response.status_code == 201, response.text
    key: str = response.json()["app_key"]["key"]
    return key


@asynccontextmanager
async def over_http(server: str, key: str) -> AsyncIterator[Client]:
    http = httpx2.AsyncClient(headers={"Authorization": f"Bearer {key}"}, timeout=60)
    async with http, Client(streamable_http_client(f"{server}/mcp", http_client=http)) as client:
        yield client


@asynccontextmanager
async def over_stdio(server: str, key: str, cwd: Path) -> AsyncIterator[Client]:
    params = StdioServerParameters(
        command=TIERMEM, args=["mcp", "--url", server, "--key", key], cwd=cwd
    )
    async with Client(params) as client:
        yield client


@pytest.fixture(name="connect", params=["http", "stdio"])
def connect_fixture(request: pytest.FixtureRequest, server: str, tmp_path: Path) -> Connect:
    if request.param == "http":
        return lambda key: over_http(server, key)
    return lambda key: over_stdio(server, key, tmp_path)


def run(connect: Connect, key: str, scenario: Callable[[Client], Awaitable[None]]) -> None:
    async def main() -> None:
        async with connect(key) as client:
            await scenario(client)

    anyio.run(main)


def ok(result: CallToolResult) -> dict[str, Any]:
    assert not result.is_error, result.content
    assert result.structured_content is not None
    return result.structured_content


def error(result: CallToolResult) -> dict[str, Any]:
    """An MCP tool error whose structured content (and text) is the API's error body."""
    assert result.is_error, result.structured_content
    assert result.structured_content is not None, result.content
    body: dict[str, Any] = result.structured_content["error"]
    assert body["code"] in result.content[0].text  # type: ignore[union-attr]
    return body


def wait_job(server: str, job_id: str) -> dict[str, Any]:
    deadline = time.monotonic() + 60
    while True:
        response = httpx.get(
            f"{server}/v1/jobs/{job_id}", headers={"Authorization": f"Bearer {APP_KEY}"}
        )
        assert response.status_code == 200, response.text
        job: dict[str, Any] = response.json()
        if job["status"] in ("done", "skipped", "failed", "dropped"):
            return job
        assert time.monotonic() < deadline, f"job {job_id} did not finish: {job}"
        time.sleep(0.1)


def test_lists_the_six_tools_with_typed_described_arguments(connect: Connect) -> None:
    async def scenario(client: Client) -> None:
        tools = {t.name: t for t in (await client.list_tools()).tools}
        assert set(tools) == TOOLS
        search = tools["search_memories"].input_schema
        assert set(search["required"]) == {"user_id", "query"}
        assert "description" in search["properties"]["user_id"]
        assert search["properties"]["k"]["maximum"] == 100
        assert tools["search_memories"].output_schema is not None

    run(connect, APP_KEY, scenario)


def test_every_tool_from_a_stored_turn_to_its_deletion(connect: Connect, server: str) -> None:
    user, session = f"ana-{uuid.uuid4().hex[:6]}", f"s-{uuid.uuid4().hex[:6]}"

    async def scenario(client: Client) -> None:
        added = ok(
            await client.call_tool(
                "add_memory",
                {
                    "user_id": user,
                    "session_id": session,
                    "user_message": "I live in Berlin and I love jazz.",
                    "assistant_message": "Nice!",
                    "speaker": "Ana",
                },
            )
        )
        assert added["user_id"] == user and added["extractor"] == "offline"
        assert len(added["message_ids"]) == 2
        job = await anyio.to_thread.run_sync(wait_job, server, added["job_id"])
        assert job["status"] == "done", job

        found = ok(
            await client.call_tool(
                "search_memories", {"user_id": user, "query": "Where does Ana live?", "k": 5}
            )
        )
        assert any("Berlin" in m["content"] for m in found["data"]), found
        listed = ok(await client.call_tool("list_memories", {"user_id": user}))
        assert listed["count"] >= 2
        berlin = next(m for m in listed["data"] if "Berlin" in m["content"])

        hits = ok(
            await client.call_tool("search_history", {"user_id": user, "query": "jazz", "k": 3})
        )
        assert hits["data"][0]["session_id"] == session
        assert "jazz" in hits["data"][0]["content"]

        context = ok(
            await client.call_tool(
                "get_context", {"session_id": session, "query": "where do I live?"}
            )
        )
        assert "Berlin" in context["system_prompt"]
        assert context["token_count"] <= context["budget_tokens"]

        deleted = ok(
            await client.call_tool("delete_memory", {"user_id": user, "memory_id": berlin["id"]})
        )
        assert deleted == {"user_id": user, "memory_id": berlin["id"], "deleted": True}
        after = ok(await client.call_tool("list_memories", {"user_id": user}))
        assert berlin["id"] not in {m["id"] for m in after["data"]}

    run(connect, APP_KEY, scenario)


def test_errors_are_tool_errors_with_the_apis_code(connect: Connect) -> None:
    async def scenario(client: Client) -> None:
        missing = error(
            await client.call_tool("search_memories", {"user_id": "nobody-here", "query": "x"})
        )
        assert missing["code"] == "not_found"
        too_many = error(
            await client.call_tool("search_memories", {"user_id": "ana", "query": "x", "k": 1000})
        )
        assert too_many["code"] == "invalid_input" and "k" in too_many["message"]
        bad_id = error(await client.call_tool("list_memories", {"user_id": "no spaces"}))
        assert bad_id["code"] == "invalid_input"
        blank = error(
            await client.call_tool(
                "add_memory", {"user_id": "ana", "session_id": "s1", "user_message": "  "}
            )
        )
        assert blank["code"] == "invalid_input"
        # the connection survives its errors
        assert {t.name for t in (await client.list_tools()).tools} == TOOLS

    run(connect, APP_KEY, scenario)


def test_a_tenants_key_does_not_reach_another_tenants_user(
    connect: Connect, server: str, other_key: str
) -> None:
    user = f"ana-{uuid.uuid4().hex[:6]}"
    stored = httpx.post(
        f"{server}/v1/sessions/s-{user}/turns",
        json={"user_id": user, "user_message": "I live in Lisbon."},
        headers={"Authorization": f"Bearer {APP_KEY}"},
    )
    assert stored.status_code == 202, stored.text

    async def scenario(client: Client) -> None:
        for tool, args in [
            ("list_memories", {"user_id": user}),
            ("search_memories", {"user_id": user, "query": "Lisbon"}),
            ("search_history", {"user_id": user, "query": "Lisbon"}),
            ("delete_memory", {"user_id": user, "memory_id": "any"}),
        ]:
            assert error(await client.call_tool(tool, args))["code"] == "not_found", tool
        context = error(await client.call_tool("get_context", {"session_id": f"s-{user}"}))
        assert context["code"] == "not_found"

    run(connect, other_key, scenario)


def test_the_operator_key_reads_no_user_data(server: str) -> None:
    async def scenario(client: Client) -> None:
        result = await client.call_tool("list_memories", {"user_id": "ana"})
        assert error(result)["code"] == "forbidden"

    run(lambda key: over_http(server, key), ADMIN_KEY, scenario)


@pytest.mark.parametrize("headers", [{}, {"Authorization": "Bearer wrong-key"}, {"X-API-Key": "x"}])
def test_mcp_without_a_valid_key_is_the_apis_401(server: str, headers: dict[str, str]) -> None:
    response = httpx.post(
        f"{server}/mcp",
        json={"jsonrpc": "2.0", "id": 1, "method": "tools/list"},
        headers={"Accept": "application/json, text/event-stream", **headers},
    )
    assert response.status_code == 401
    assert response.json()["error"]["code"] == "unauthorized"
    assert response.headers["www-authenticate"] == "Bearer"


def stdio_until_eof(tmp_path: Path, *args: str) -> tuple[int, str, str]:
    """`tiermem mcp ARGS` with its input closed at once: its exit code, stdout and stderr
    (with the line breaks of the terminal's width taken out)."""
    done = processes.run(
        [TIERMEM, "mcp", *args],
        input="", capture_output=True, text=True, cwd=tmp_path, timeout=60, env={},
    )  # fmt: skip
    return done.returncode, done.stdout, " ".join(done.stderr.split())


def test_stdio_without_a_key_says_how_to_get_one(tmp_path: Path) -> None:
    code, out, said = stdio_until_eof(tmp_path)
    assert code == 2
    assert "TIERMEM_MCP__API_KEY" in said and out == ""


@pytest.mark.parametrize(
    ("key", "reason"),
    [
        ("wrong-key", "unauthorized"),
        (ADMIN_KEY, "user data is reached with an app key"),  # the operator key
    ],
)
def test_stdio_with_a_key_the_api_refuses_exits_at_start(
    server: str, tmp_path: Path, key: str, reason: str
) -> None:
    """A wrong key is said at start, with what to do, not at the first tool call."""
    code, out, said = stdio_until_eof(tmp_path, "--url", server, "--key", key)
    assert code == 2, said
    assert f"the tiermem API at {server} refused the key" in said, said
    assert reason in said and "TIERMEM_MCP__API_KEY" in said
    assert out == ""  # the protocol's stream stays clean


def test_stdio_with_the_api_down_starts_and_says_it(tmp_path: Path) -> None:
    """An MCP client may start `tiermem mcp` before `tiermem serve`: the key is checked when
    the API answers; meanwhile the tools answer `unavailable`, naming the URL."""
    url = f"http://127.0.0.1:{free_port()}"
    code, _, said = stdio_until_eof(tmp_path, "--url", url, "--key", APP_KEY)
    assert code == 0, said
    assert f"the tiermem API at {url} cannot be reached" in said, said
