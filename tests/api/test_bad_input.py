"""Bad requests get the right 4xx, an actionable `{"error": {...}}` body, and store nothing.

One API over a real SQLite file and in-memory Qdrant, seeded once with two users' turns
(extracted inline by the offline extractor through the real pipeline, so the counts
cannot move under a test); every bad request is then checked against a snapshot of
every table and every vector.
"""

from __future__ import annotations

from collections.abc import Iterator
from dataclasses import dataclass, field
from typing import Any

import pytest
from fastapi.testclient import TestClient
from sqlmodel import Session, func, select

from shared.db.models import ChatSession, ExtractionRun, Fact, Message, User
from shared.flows.extract_turn import run_extraction
from shared.runtime import Runtime
from tests import factories as f
from tests.factories import APP_KEY, make_settings

LIMIT = 200  # TIERMEM_EXTRACTION__MAX_MESSAGE_CHARS for this module
TABLES = (Message, ExtractionRun, Fact, User, ChatSession)
JSON = {"content-type": "application/json"}


@dataclass
class Seeded:
    client: TestClient
    runtime: Runtime
    memory_id: str  # one of ana's
    bob_memory_id: str

    def snapshot(self) -> dict[str, int]:
        with Session(self.runtime.engine) as s:
            state = {
                t.__tablename__: s.exec(select(func.count()).select_from(t)).one() for t in TABLES
            }
            # a refused turn must not even take message positions in its session
            state["next_seq"] = s.exec(select(func.sum(ChatSession.next_seq))).one() or 0
        vectors = self.runtime.vectors
        state["points"] = sum(vectors.count(c) for c in vectors.list_collections())
        return state


@pytest.fixture(name="seeded", scope="module")
def seeded_fixture(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Seeded]:
    from services.api.main import create_app
    from shared.db.migrate import upgrade_to_head

    settings = make_settings(
        tmp_path_factory.mktemp("bad-input"),
        qdrant={"in_memory": True},
        extraction={"max_message_chars": LIMIT},
    )
    upgrade_to_head(settings)
    runtime = Runtime(settings)

    def extract_now(run_ids: list[str]) -> None:
        for run_id in run_ids:
            run_extraction(runtime, run_id)

    with TestClient(create_app(settings, runtime=runtime, enqueue=extract_now)) as client:
        client.headers["Authorization"] = f"Bearer {APP_KEY}"
        for user, session, text in (
            ("ana", "s1", "I live in Berlin and I love jazz."),
            ("bob", "b1", "I work as a pilot and I have a dog."),
        ):
            response = client.post(f"/v1/sessions/{session}/turns", json=f.turn(user, text))
            assert response.status_code == 202, response.text
        memories = {u: client.get(f"/v1/users/{u}/memories").json()["data"] for u in ("ana", "bob")}
        assert memories["ana"] and memories["bob"], memories
        yield Seeded(client, runtime, memories["ana"][0]["id"], memories["bob"][0]["id"])
    runtime.close()


@dataclass
class Case:
    method: str
    path: str
    status: int
    code: str
    mentions: tuple[str, ...]  # fragments the message must contain: the field, what to fix
    json: Any = None
    content: bytes | None = None
    params: dict[str, Any] = field(default_factory=dict)
    headers: dict[str, str] = field(default_factory=lambda: dict(JSON))  # with `content`


def case(
    id: str, method: str, path: str, status: int, code: str, *mentions: str, **request: Any
) -> Any:
    return pytest.param(Case(method, path, status, code, mentions, **request), id=id)


TURN = "/v1/sessions/s1/turns"  # ana's session: it already holds a turn and memories
NEW_TURN = "/v1/sessions/fresh/turns"  # a session (and user) the request would create
ID_HINT = "letters, digits"  # the id rule every refused id is told about
PATTERN_HINT = "invalid id; use 1-128 characters"


def line(**overrides: Any) -> dict[str, Any]:
    return {
        "user_id": "ana",
        "session_id": "s9",
        "role": "user",
        "content": "I like tea.",
        **overrides,
    }


def turn(content: Any = "I like tea.", **overrides: Any) -> dict[str, Any]:
    return {"user_id": "ana", "user_message": content, **overrides}


BAD_TURNS = [
    case("empty", "POST", TURN, 422, "invalid_input", "user_message", "empty", json=turn("")),
    case(
        "whitespace",
        "POST",
        TURN,
        422,
        "invalid_input",
        "user_message",
        "blank",
        json=turn(" \n\t "),
    ),
    case(
        "whitespace-object",
        "POST",
        TURN,
        422,
        "invalid_input",
        "user_message.content",
        "blank",
        json=turn({"content": "   ", "speaker": "Ana"}),
    ),
    case(
        "whitespace-new-user",
        "POST",
        NEW_TURN,
        422,
        "invalid_input",
        "user_message",
        "blank",
        json=turn("  ", user_id="zed"),
    ),
    case(
        "empty-reply",
        "POST",
        TURN,
        422,
        "invalid_input",
        "assistant",
        "empty",
        json=turn(assistant_message=""),
    ),
    case(
        "too-long",
        "POST",
        TURN,
        422,
        "invalid_input",
        "content",
        f"limit is {LIMIT}",
        "TIERMEM_EXTRACTION__MAX_MESSAGE_CHARS",
        json=turn("x" * (LIMIT + 1)),
    ),
    case(
        "too-long-reply",
        "POST",
        NEW_TURN,
        422,
        "invalid_input",
        "assistant",
        f"limit is {LIMIT}",
        json=turn(user_id="zed", assistant_message="y" * (LIMIT + 1)),
    ),
    case(
        "nul", "POST", TURN, 422, "invalid_input", "user_message", "NUL", json=turn("tea\x00time")
    ),
    case(
        "user-id-space",
        "POST",
        NEW_TURN,
        422,
        "invalid_input",
        "user_id",
        ID_HINT,
        json=turn(user_id="a b"),
    ),
    case(
        "user-id-dotdot",
        "POST",
        NEW_TURN,
        422,
        "invalid_input",
        "user_id",
        ID_HINT,
        json=turn(user_id="../x"),
    ),
    case(
        "user-id-129",
        "POST",
        NEW_TURN,
        422,
        "invalid_input",
        "user_id",
        ID_HINT,
        json=turn(user_id="a" * 129),
    ),
    case(
        "user-id-empty",
        "POST",
        NEW_TURN,
        422,
        "invalid_input",
        "user_id",
        ID_HINT,
        json=turn(user_id=""),
    ),
    case(
        "session-id-space",
        "POST",
        "/v1/sessions/a%20b/turns",
        422,
        "invalid_input",
        "session_id",
        PATTERN_HINT,
        json=turn(),
    ),
    case(
        "session-id-129",
        "POST",
        f"/v1/sessions/{'s' * 129}/turns",
        422,
        "invalid_input",
        "session_id",
        PATTERN_HINT,
        json=turn(),
    ),
    case(
        "session-id-leading-dot",
        "POST",
        "/v1/sessions/.hidden/turns",
        422,
        "invalid_input",
        "session_id",
        PATTERN_HINT,
        json=turn(),
    ),
    # "%2F" is decoded before routing: no route has that shape
    case(
        "session-id-dotdot",
        "POST",
        "/v1/sessions/..%2Fx/turns",
        404,
        "not_found",
        "Not Found",
        json=turn(),
    ),
    case(
        "external-id",
        "POST",
        TURN,
        422,
        "invalid_input",
        "external_id",
        ID_HINT,
        json=turn({"content": "I like tea.", "external_id": "m 1"}),
    ),
    case(
        "speaker-too-long",
        "POST",
        TURN,
        422,
        "invalid_input",
        "speaker",
        "at most 100",
        json=turn({"content": "I like tea.", "speaker": "A" * 101}),
    ),
    case(
        "extra-field",
        "POST",
        TURN,
        422,
        "invalid_input",
        "mood",
        "Extra inputs",
        json=turn(mood="happy"),
    ),
    case(
        "extra-nested-field",
        "POST",
        TURN,
        422,
        "invalid_input",
        "user_message",
        "lang",
        "Extra inputs",
        json=turn({"content": "I like tea.", "lang": "en"}),
    ),
    case(
        "user-id-number",
        "POST",
        TURN,
        422,
        "invalid_input",
        "user_id",
        "valid string",
        json=turn(user_id=5),
    ),
    case("message-number", "POST", TURN, 422, "invalid_input", "user_message", json=turn(5)),
    case(
        "created-at-text",
        "POST",
        TURN,
        422,
        "invalid_input",
        "created_at",
        "datetime",
        json=turn(created_at="yesterday"),
    ),
    case("body-is-a-list", "POST", TURN, 422, "invalid_input", "dictionary", json=[turn()]),
    case(
        "missing-user-message",
        "POST",
        TURN,
        422,
        "invalid_input",
        "user_message",
        "Field required",
        json={"user_id": "ana"},
    ),
    case(
        "missing-user-id",
        "POST",
        TURN,
        422,
        "invalid_input",
        "user_id",
        "Field required",
        json={"user_message": "I like tea."},
    ),
    case("no-body", "POST", TURN, 422, "invalid_input", "Field required"),
    case(
        "malformed-json",
        "POST",
        TURN,
        400,
        "malformed_json",
        "JSON",
        "Content-Type",
        content=b'{"user_id": "ana", "user_message": "I like tea."',
    ),
    case(
        "non-utf8-bom",
        "POST",
        TURN,
        400,
        "malformed_json",
        "UTF-8",
        content=b'\xff\xfe{"user_id": "ana", "user_message": "I like tea."}',
    ),
    case(
        "non-utf8-in-string",
        "POST",
        TURN,
        400,
        "malformed_json",
        "UTF-8",
        content=b'{"user_id": "ana", "user_message": "I like t\xe9a."}',
    ),
    # the session exists and is ana's: neither bob (known) nor carol (new) may write to it
    case(
        "session-of-another-user",
        "POST",
        TURN,
        409,
        "conflict",
        "'s1'",
        "another user",
        "new session id",
        json=turn(user_id="bob"),
    ),
    case(
        "session-of-another-new-user",
        "POST",
        TURN,
        409,
        "conflict",
        "'s1'",
        "another user",
        json=turn(user_id="carol"),
    ),
]

IMPORT = "/v1/import"
BAD_IMPORTS = [
    case(
        "unknown-role",
        "POST",
        IMPORT,
        422,
        "invalid_input",
        "messages.0.role",
        "'assistant'",
        json={"messages": [line(role="robot")]},
    ),
    case(
        "empty",
        "POST",
        IMPORT,
        422,
        "invalid_input",
        "messages.0.content",
        "empty",
        json={"messages": [line(content="")]},
    ),
    case(
        "whitespace",
        "POST",
        IMPORT,
        422,
        "invalid_input",
        "messages.0.content",
        "blank",
        json={"messages": [line(content="\n  ")]},
    ),
    # the first two lines are fine (another session, ana's existing one): all or nothing
    case(
        "third-line-empty",
        "POST",
        IMPORT,
        422,
        "invalid_input",
        "messages.2.content",
        "blank",
        json={
            "messages": [
                line(session_id="s8"),
                line(session_id="s1", content="Hi there."),
                line(content=" "),
            ]
        },
    ),
    case(
        "too-long",
        "POST",
        IMPORT,
        422,
        "invalid_input",
        "messages[1]",
        f"limit is {LIMIT}",
        json={"messages": [line(), line(role="assistant", content="z" * (LIMIT + 1))]},
    ),
    case(
        "nul",
        "POST",
        IMPORT,
        422,
        "invalid_input",
        "messages[0].content",
        "NUL",
        json={"messages": [line(content="\x00")]},
    ),
    case(
        "user-id-space",
        "POST",
        IMPORT,
        422,
        "invalid_input",
        "messages.0.user_id",
        ID_HINT,
        json={"messages": [line(user_id="a b")]},
    ),
    case(
        "session-id-dotdot",
        "POST",
        IMPORT,
        422,
        "invalid_input",
        "messages.0.session_id",
        ID_HINT,
        json={"messages": [line(session_id="../x")]},
    ),
    case(
        "session-id-129",
        "POST",
        IMPORT,
        422,
        "invalid_input",
        "messages.1.session_id",
        ID_HINT,
        json={"messages": [line(), line(session_id="s" * 129)]},
    ),
    case(
        "extra-field",
        "POST",
        IMPORT,
        422,
        "invalid_input",
        "messages.0.mood",
        "Extra inputs",
        json={"messages": [line(mood="happy")]},
    ),
    case(
        "extra-top-field",
        "POST",
        IMPORT,
        422,
        "invalid_input",
        "tenant",
        "Extra inputs",
        json={"messages": [line()], "tenant": "other"},
    ),
    case(
        "content-number",
        "POST",
        IMPORT,
        422,
        "invalid_input",
        "messages.0.content",
        "valid string",
        json={"messages": [line(content=42)]},
    ),
    case(
        "missing-content",
        "POST",
        IMPORT,
        422,
        "invalid_input",
        "messages.0.content",
        "Field required",
        json={"messages": [{"user_id": "ana", "session_id": "s9", "role": "user"}]},
    ),
    case(
        "no-messages",
        "POST",
        IMPORT,
        422,
        "invalid_input",
        "messages",
        "at least one",
        json={"messages": []},
    ),
    case(
        "too-many",
        "POST",
        IMPORT,
        422,
        "invalid_input",
        "messages",
        "at most 1000",
        json={"messages": [line(external_id=f"x{i}") for i in range(1001)]},
    ),
    case(
        "messages-not-a-list",
        "POST",
        IMPORT,
        422,
        "invalid_input",
        "messages",
        "list",
        json={"messages": line()},
    ),
    case(
        "malformed-json", "POST", IMPORT, 400, "malformed_json", "JSON", content=b'{"messages": [}'
    ),
    case(
        "non-utf8",
        "POST",
        IMPORT,
        400,
        "malformed_json",
        "UTF-8",
        content=b'\xff\xfe\x00\x01{"messages": []}',
    ),
    case(
        "session-of-another-user",
        "POST",
        IMPORT,
        409,
        "conflict",
        "'s1'",
        "another user",
        json={"messages": [line(session_id="s8"), line(session_id="s1", user_id="carol")]},
    ),
]

SEARCH = "/v1/users/ana/memories/search"
LIST = "/v1/users/ana/memories"
BAD_MEMORY_CALLS = [
    case(
        "search-k-0",
        "POST",
        SEARCH,
        422,
        "invalid_input",
        "k",
        "greater than or equal to 1",
        json={"query": "tea", "k": 0},
    ),
    case(
        "search-k-1000",
        "POST",
        SEARCH,
        422,
        "invalid_input",
        "k",
        "less than or equal to 100",
        json={"query": "tea", "k": 1000},
    ),
    case(
        "search-k-text",
        "POST",
        SEARCH,
        422,
        "invalid_input",
        "k",
        "valid integer",
        json={"query": "tea", "k": "many"},
    ),
    case(
        "search-unknown-type",
        "POST",
        SEARCH,
        422,
        "invalid_input",
        "types.0",
        "'identity'",
        json={"query": "tea", "types": ["hobby"]},
    ),
    case(
        "search-empty-query",
        "POST",
        SEARCH,
        422,
        "invalid_input",
        "query",
        "empty",
        json={"query": ""},
    ),
    case(
        "search-min-score",
        "POST",
        SEARCH,
        422,
        "invalid_input",
        "min_score",
        "less than or equal to 1",
        json={"query": "tea", "min_score": 2},
    ),
    case(
        "search-extra-field",
        "POST",
        SEARCH,
        422,
        "invalid_input",
        "limit",
        "Extra inputs",
        json={"query": "tea", "limit": 3},
    ),
    case(
        "search-malformed-json",
        "POST",
        SEARCH,
        400,
        "malformed_json",
        "JSON",
        content=b"{'query': 'tea'}",
    ),
    case(
        "search-non-utf8",
        "POST",
        SEARCH,
        400,
        "malformed_json",
        "UTF-8",
        content=b'{"query": "t\xff"}',
    ),
    case(
        "search-unknown-user",
        "POST",
        "/v1/users/nobody/memories/search",
        404,
        "not_found",
        "'nobody'",
        json={"query": "tea"},
    ),
    case(
        "list-unknown-type",
        "GET",
        LIST,
        422,
        "invalid_input",
        "type",
        "'identity'",
        params={"type": ["identity", "hobby"]},
    ),
    case(
        "list-limit-0",
        "GET",
        LIST,
        422,
        "invalid_input",
        "limit",
        "greater than or equal",
        params={"limit": 0},
    ),
    case(
        "list-limit-huge",
        "GET",
        LIST,
        422,
        "invalid_input",
        "limit",
        "less than or equal",
        params={"limit": 100_000},
    ),
    case(
        "list-offset-negative",
        "GET",
        LIST,
        422,
        "invalid_input",
        "offset",
        "greater than or equal",
        params={"offset": -1},
    ),
    case(
        "list-include-superseded",
        "GET",
        LIST,
        422,
        "invalid_input",
        "include_superseded",
        "boolean",
        params={"include_superseded": "maybe"},
    ),
    case("list-unknown-user", "GET", "/v1/users/nobody/memories", 404, "not_found", "'nobody'"),
    case(
        "list-user-id-space",
        "GET",
        "/v1/users/a%20b/memories",
        422,
        "invalid_input",
        "user_id",
        PATTERN_HINT,
    ),
    case(
        "list-user-id-129",
        "GET",
        f"/v1/users/{'u' * 129}/memories",
        422,
        "invalid_input",
        "user_id",
        PATTERN_HINT,
    ),
    case("list-user-id-dotdot", "GET", "/v1/users/..%2Fx/memories", 404, "not_found", "Not Found"),
    case("get-unknown-memory", "GET", "/v1/users/ana/memories/0000", 404, "not_found", "0000"),
    case("get-unknown-user", "GET", "/v1/users/nobody/memories/0000", 404, "not_found", "'nobody'"),
    case(
        "delete-unknown-memory", "DELETE", "/v1/users/ana/memories/0000", 404, "not_found", "0000"
    ),
    case(
        "delete-memory-bad-user-id",
        "DELETE",
        "/v1/users/a%20b/memories/0000",
        422,
        "invalid_input",
        "user_id",
    ),
    case("delete-unknown-user", "DELETE", "/v1/users/nobody", 404, "not_found", "'nobody'"),
    case("delete-user-bad-id", "DELETE", "/v1/users/a%20b", 422, "invalid_input", "user_id"),
    case("export-unknown-user", "GET", "/v1/users/nobody/export", 404, "not_found", "'nobody'"),
    case(
        "export-user-id-129",
        "GET",
        f"/v1/users/{'u' * 129}/export",
        422,
        "invalid_input",
        "user_id",
    ),
    case("wrong-method", "PUT", LIST, 405, "method_not_allowed", "Method Not Allowed"),
]


# Issue 12's drills: inputs that crashed the API (500) or stored ids no route can reach.
LONE = "I live in \\ud800 Lima"  # a JSON escape of a lone surrogate: parses, cannot be stored
UNICODE_HINT = "not valid Unicode"
TIMESTAMP_HINT = "0001-01-01T00:00:00Z to 9999-12-31T23:59:59Z"
OVERFLOWS = ("9999-12-31T23:59:59-23:59", "0001-01-01T00:00:00+23:59")


def raw(body: str) -> bytes:
    """A JSON body as bytes, with LONE in place of each "%s"."""
    return body.replace("%s", LONE).encode()


DRILLED = [
    case(
        "lone-surrogate-turn",
        "POST",
        TURN,
        422,
        "invalid_input",
        "user_message",
        UNICODE_HINT,
        content=raw('{"user_id": "ana", "user_message": "%s"}'),
    ),
    case(
        "lone-surrogate-turn-object",
        "POST",
        NEW_TURN,
        422,
        "invalid_input",
        "user_message.content",
        UNICODE_HINT,
        content=raw('{"user_id": "zed", "user_message": {"content": "%s"}}'),
    ),
    case(
        "lone-surrogate-speaker",
        "POST",
        TURN,
        422,
        "invalid_input",
        "assistant_message.speaker",
        UNICODE_HINT,
        content=raw(
            '{"user_id": "ana", "user_message": "hi", '
            '"assistant_message": {"content": "ok", "speaker": "\\udfff"}}'
        ),
    ),
    case(
        "lone-surrogate-import",
        "POST",
        IMPORT,
        422,
        "invalid_input",
        "messages[1].content",
        UNICODE_HINT,
        content=raw(
            '{"messages": [{"user_id": "ana", "session_id": "s9", "role": "user", '
            '"content": "fine"}, {"user_id": "ana", "session_id": "s9", "role": "assistant", '
            '"content": "%s"}]}'
        ),
    ),
    case(
        "lone-surrogate-chat",
        "POST",
        "/v1/chat",
        422,
        "invalid_input",
        "message",
        UNICODE_HINT,
        content=raw('{"user_id": "ana", "session_id": "s1", "message": "%s"}'),
    ),
    case(
        "lone-surrogate-chat-completions",
        "POST",
        "/v1/chat/completions",
        422,
        "invalid_input",
        "messages[0].content",
        UNICODE_HINT,
        content=raw(
            '{"model": "m", "user": "ana", "messages": [{"role": "user", "content": "%s"}]}'
        ),
    ),
    case(
        "lone-surrogate-search",
        "POST",
        "/v1/users/ana/memories/search",
        422,
        "invalid_input",
        "query",
        UNICODE_HINT,
        content=raw('{"query": "%s"}'),
    ),
    *[
        case(
            f"created-at-overflow-{i}",
            "POST",
            TURN,
            422,
            "invalid_input",
            "created_at",
            TIMESTAMP_HINT,
            json=turn(created_at=at),
        )
        for i, at in enumerate(OVERFLOWS)
    ],
    case(
        "created-at-overflow-message",
        "POST",
        TURN,
        422,
        "invalid_input",
        "user_message.created_at",
        TIMESTAMP_HINT,
        json=turn({"content": "I like tea.", "created_at": OVERFLOWS[0]}),
    ),
    case(
        "created-at-overflow-import",
        "POST",
        IMPORT,
        422,
        "invalid_input",
        "messages.0.created_at",
        TIMESTAMP_HINT,
        json={"messages": [line(created_at=OVERFLOWS[1])]},
    ),
    case(
        "offset-2-63",
        "GET",
        LIST,
        422,
        "invalid_input",
        "offset",
        "less than or equal to 1000000",
        params={"offset": 2**63},
    ),
    case(
        "compression-runs-offset-2-63",
        "GET",
        "/v1/sessions/s1/compression/runs",
        422,
        "invalid_input",
        "offset",
        "less than or equal",
        params={"offset": 2**63},
    ),
    case(
        "context-budget-huge",
        "GET",
        "/v1/sessions/s1/context",
        422,
        "invalid_input",
        "budget_tokens",
        "less than or equal",
        params={"budget_tokens": 2**63},
    ),
    case(
        "user-id-trailing-newline",
        "POST",
        NEW_TURN,
        422,
        "invalid_input",
        "user_id",
        ID_HINT,
        json=turn(user_id="abc\n"),
    ),
    case(
        "import-user-id-trailing-newline",
        "POST",
        IMPORT,
        422,
        "invalid_input",
        "messages.0.user_id",
        ID_HINT,
        json={"messages": [line(user_id="abc\n")]},
    ),
    case(
        "import-session-id-trailing-newline",
        "POST",
        IMPORT,
        422,
        "invalid_input",
        "messages.0.session_id",
        ID_HINT,
        json={"messages": [line(session_id="s9\n")]},
    ),
    case(
        "external-id-trailing-newline",
        "POST",
        TURN,
        422,
        "invalid_input",
        "external_id",
        ID_HINT,
        json=turn({"content": "I like tea.", "external_id": "m1\n"}),
    ),
    case(
        "path-user-id-trailing-newline",
        "GET",
        "/v1/users/ana%0A/memories",
        422,
        "invalid_input",
        "user_id",
        PATTERN_HINT,
    ),
    case(
        "context-user-id-dotdot",
        "GET",
        "/v1/sessions/fresh/context",
        422,
        "invalid_input",
        "user_id",
        PATTERN_HINT,
        params={"user_id": "../x"},
    ),
    case(
        "context-user-id-trailing-newline",
        "GET",
        "/v1/sessions/fresh/context",
        422,
        "invalid_input",
        "user_id",
        PATTERN_HINT,
        params={"user_id": "abc\n"},
    ),
]

# Issue 24: what mem0's routes answered with a 500.
MEM0_ADD = "/mem0/v3/memories/add/"
MEM0_RANGE_HINT = "-62135596800 to 253402300799"
BAD_MEM0 = [
    case(
        f"mem0-timestamp-{at}-infer-{infer}",
        "POST",
        MEM0_ADD,
        422,
        "invalid_input",
        "timestamp",
        MEM0_RANGE_HINT,
        TIMESTAMP_HINT,
        json={
            "user_id": "ana",
            "messages": [{"role": "user", "content": "I like tea."}],
            "timestamp": at,
            "infer": infer,
        },
    )  # fmt: skip
    for at in (253402300800, 99999999999999, -62135596801)
    for infer in (True, False)
]

# Issue 24 item 8 and beside it: bodies that are not JSON, text that is not UTF-8, and
# timestamps given as numbers.
A_TURN = b'{"user_id": "ana", "user_message": "I like tea."}'
TYPE_HINT = "Content-Type: application/json"
HISTORY = "/v1/users/ana/history/search"
NOT_JSON = [
    case(
        "form-encoded",
        "POST",
        TURN,
        415,
        "unsupported_media_type",
        "JSON",
        TYPE_HINT,
        "application/x-www-form-urlencoded",
        content=b"user_id=ana&user_message=I+like+tea.",
        headers={"content-type": "application/x-www-form-urlencoded"},
    ),
    case(
        "text-plain",
        "POST",
        TURN,
        415,
        "unsupported_media_type",
        TYPE_HINT,
        "text/plain",
        content=A_TURN,
        headers={"content-type": "text/plain"},
    ),
    case(
        "no-content-type",
        "POST",
        TURN,
        415,
        "unsupported_media_type",
        TYPE_HINT,
        content=A_TURN,
        headers={},
    ),
    case(
        "text-plain-import",
        "POST",
        IMPORT,
        415,
        "unsupported_media_type",
        TYPE_HINT,
        content=b'{"messages": []}',
        headers={"content-type": "text/plain"},
    ),
    case(
        "text-plain-search",
        "POST",
        SEARCH,
        415,
        "unsupported_media_type",
        TYPE_HINT,
        content=b'{"query": "tea"}',
        headers={"content-type": "text/plain; charset=utf-8"},
    ),
    case(
        "form-mem0-add",
        "POST",
        MEM0_ADD,
        415,
        "unsupported_media_type",
        TYPE_HINT,
        content=b"user_id=ana",
        headers={"content-type": "application/x-www-form-urlencoded"},
    ),
    case(
        "utf-16",
        "POST",
        TURN,
        400,
        "malformed_json",
        "UTF-8",
        content=A_TURN.decode().encode("utf-16"),
    ),
    case(
        "utf-16-le",
        "POST",
        TURN,
        400,
        "malformed_json",
        "UTF-8",
        content=A_TURN.decode().encode("utf-16-le"),
    ),
    case(
        "utf-32",
        "POST",
        TURN,
        400,
        "malformed_json",
        "UTF-8",
        content=A_TURN.decode().encode("utf-32"),
    ),
    case(
        "utf-8-bom",
        "POST",
        TURN,
        400,
        "malformed_json",
        "byte order mark",
        content=b"\xef\xbb\xbf" + A_TURN,
    ),
    case("history-q-nul", "GET", HISTORY, 422, "invalid_input", "q", "NUL", params={"q": "a\x00b"}),
    case("history-q-not-utf8", "GET", HISTORY + "?q=t%FFa", 422, "invalid_input", "q", "UTF-8"),
    case(
        "context-query-not-utf8",
        "GET",
        "/v1/sessions/s1/context?query=%C3",
        422,
        "invalid_input",
        "query",
        "UTF-8",
    ),
    case("list-type-not-utf8", "GET", LIST + "?type=%E9", 422, "invalid_input", "type", "UTF-8"),
    *[
        case(
            f"created-at-{name}",
            "POST",
            TURN,
            422,
            "invalid_input",
            "created_at",
            "not a number",
            json=turn(created_at=at),
        )
        for name, at in (("number", -1), ("digits", "-1"), ("decimal-text", "1715178600.5"))
    ],  # fmt: skip
    case(
        "created-at-number-message",
        "POST",
        TURN,
        422,
        "invalid_input",
        "user_message.created_at",
        "not a number",
        json=turn({"content": "I like tea.", "created_at": 1715178600}),
    ),
    case(
        "created-at-number-import",
        "POST",
        IMPORT,
        422,
        "invalid_input",
        "messages.0.created_at",
        "not a number",
        json={"messages": [line(created_at=-1)]},
    ),
]


def send(seeded: Seeded, c: Case) -> Any:
    # params=None, not {}: httpx would replace a query string written into the path
    kwargs: dict[str, Any] = {"params": c.params or None}
    if c.content is not None:
        kwargs.update(content=c.content, headers=c.headers)
    elif c.json is not None:
        kwargs["json"] = c.json
    return seeded.client.request(c.method, c.path, **kwargs)


def check_error(response: Any, status: int, code: str, mentions: tuple[str, ...]) -> None:
    assert response.status_code == status, response.text
    body = response.json()
    assert set(body) == {"error"}, body
    error = body["error"]
    assert set(error) == {"code", "message", "details"}, error
    assert error["code"] == code and isinstance(error["details"], dict), error
    for fragment in mentions:
        assert fragment in error["message"], (fragment, error["message"])


@pytest.mark.parametrize(
    "c", BAD_TURNS + BAD_IMPORTS + BAD_MEMORY_CALLS + DRILLED + BAD_MEM0 + NOT_JSON
)
def test_bad_request_is_refused_with_an_actionable_error_and_stores_nothing(
    seeded: Seeded, c: Case
) -> None:
    before = seeded.snapshot()
    check_error(send(seeded, c), c.status, c.code, c.mentions)
    assert seeded.snapshot() == before


def test_refused_delete_of_another_users_memory_keeps_it(seeded: Seeded) -> None:
    before = seeded.snapshot()
    response = seeded.client.delete(f"/v1/users/ana/memories/{seeded.bob_memory_id}")
    check_error(response, 404, "not_found", (seeded.bob_memory_id,))
    assert seeded.snapshot() == before
    assert seeded.client.get(f"/v1/users/bob/memories/{seeded.bob_memory_id}").status_code == 200


def test_too_long_message_details_carry_the_numbers(seeded: Seeded) -> None:
    response = seeded.client.post(TURN, json=turn("x" * (LIMIT + 5)))
    assert response.json()["error"]["details"] == {"length": LIMIT + 5, "limit": LIMIT}


def test_the_limits_themselves_are_accepted(seeded: Seeded) -> None:
    """The refusals above are not off by one: exactly LIMIT characters and a 128-character
    id are fine (stored in a session of their own, after the table ran or not)."""
    long_id = "u" * 128
    response = seeded.client.post(
        f"/v1/sessions/{'s' * 128}/turns", json=turn("a" * LIMIT, user_id=long_id)
    )
    assert response.status_code == 202, response.text
    listed = seeded.client.get(f"/v1/users/{long_id}/memories")
    assert listed.status_code == 200, listed.text
    hits = seeded.client.post(
        f"/v1/users/{long_id}/memories/search", json={"query": "tea", "k": 100}
    )
    assert hits.status_code == 200, hits.text


def test_valid_calls_after_the_refusals_still_work(seeded: Seeded) -> None:
    client = seeded.client
    assert client.get(f"/v1/users/ana/memories/{seeded.memory_id}").status_code == 200
    hits = client.post(SEARCH, json={"query": "where does Ana live?", "k": 1}).json()
    assert hits["count"] == 1


def test_astral_text_as_a_surrogate_pair_is_stored(seeded: Seeded) -> None:
    """The escape of an emoji is two surrogates that make one character: valid, stored."""
    body = raw('{"user_id": "emoji", "user_message": "I love \\ud83c\\udfb7 jazz"}')
    response = seeded.client.post("/v1/sessions/e1/turns", content=body, headers=JSON)
    assert response.status_code == 202, response.text
    exported = seeded.client.get("/v1/users/emoji/export").json()
    assert "I love \U0001f3b7 jazz" in str(exported)


@pytest.mark.parametrize("text", ["ok", "0", "!!", "?", "  ab  "])
def test_mem0_update_with_text_too_short_to_be_a_memory_is_refused(
    seeded: Seeded, text: str
) -> None:
    """The rules type no fact from it (it was a 500): 422 naming `text`, the memory as it was."""
    path = f"/mem0/v1/memories/{seeded.memory_id}/"
    before, memory = seeded.snapshot(), seeded.client.get(path).json()
    response = seeded.client.put(path, json={"text": text})
    check_error(response, 422, "invalid_input", ("text", "at least 3 characters"))
    assert seeded.snapshot() == before
    assert seeded.client.get(path).json() == memory


@pytest.mark.parametrize(
    ("method", "path", "allow"),
    [("GET", SEARCH, "POST"), ("PUT", LIST, "GET"), ("GET", TURN, "POST"),
     ("POST", f"/mem0/v1/memories/{'0' * 8}/", "DELETE, GET, PUT")],
)  # fmt: skip
def test_a_method_the_path_does_not_serve_is_405_naming_those_it_does(
    seeded: Seeded, method: str, path: str, allow: str
) -> None:
    """GET …/memories/search was a 404: /memories/{memory_id} took "search" for an id."""
    before = seeded.snapshot()
    response = seeded.client.request(method, path, json={"query": "tea"})
    check_error(response, 405, "method_not_allowed", ("Method Not Allowed",))
    assert response.headers["allow"] == allow
    assert seeded.snapshot() == before


@pytest.mark.parametrize(
    ("method", "path", "route"),
    [
        ("GET", LIST + "/", LIST),
        ("POST", TURN + "/", TURN),
        ("GET", "/mem0/v1/ping", "/mem0/v1/ping/"),
    ],
)
def test_a_trailing_slash_the_route_has_not_is_a_404_naming_the_route(
    seeded: Seeded, method: str, path: str, route: str
) -> None:
    """Not a bare 307 to follow: an API client is told which path to call."""
    before = seeded.snapshot()
    response = seeded.client.request(method, path, json=turn(), follow_redirects=False)
    check_error(response, 404, "not_found", (route, "trailing slash"))
    assert response.json()["error"]["details"] == {"path": route}
    assert seeded.snapshot() == before


def test_every_router_checks_requests_with_the_api_route() -> None:
    """services.api.routing.ApiRoute refuses bodies that are not JSON and query text that is
    not UTF-8, and leaves a literal path to its route: a router without it would not."""
    import pkgutil
    from importlib import import_module

    import services.api.routes as routes
    from services.api.routing import ApiRoute

    for info in pkgutil.iter_modules(routes.__path__):
        router = import_module(f"{routes.__name__}.{info.name}").router
        assert router.route_class is ApiRoute, info.name
