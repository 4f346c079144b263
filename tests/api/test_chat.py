"""POST /v1/chat and the OpenAI-compatible /v1/chat/completions, the scripted LLM as both models."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import openai
import pytest
from fastapi.testclient import TestClient
from sqlmodel import Session, col, select

from shared.chat.models import ChatTurnIn
from shared.db.models import ChatSession, ExtractionRun, Message, Tenant
from shared.flows.chat_turn import start_chat_stream
from shared.records.ingest import NewMessage
from shared.runtime import Runtime
from tests import factories as f
from tests.factories import APP_KEY, make_settings, wait_job
from tests.scripted_llm import ScriptedLLM

BERLIN = f.identity("Ana", "location", "Berlin", "Ana lives in Berlin.")


@pytest.fixture(name="settings")
def chat_settings(tmp_path: Path, scripted_llm: ScriptedLLM, request: pytest.FixtureRequest) -> Any:
    """Both models on the scripted server; `indirect` params pick "postgres" or "no_chat"."""
    kind = getattr(request, "param", "sqlite")
    if kind == "no_chat":
        return make_settings(tmp_path, qdrant={"in_memory": True})
    database = {"database_url": request.getfixturevalue("pg_url")} if kind == "postgres" else {}
    return make_settings(
        tmp_path,
        llm={"base_url": scripted_llm.base_url, "timeout_s": 5},
        chat={"base_url": scripted_llm.base_url, "model": "chat-model", "timeout_s": 1},
        qdrant={"in_memory": True},
        **database,
    )


def say(llm: ScriptedLLM, message: str, reply: str, *facts: dict[str, Any]) -> None:
    """Script the chat model's reply to `message` and the extraction of the turn holding it.

    The extraction prompt contains the message too, so its script (added last, matched
    first) keys on the closing tag that only the extraction prompt has.
    """
    llm.script(message, reply)
    llm.script(f"{message}\n</user>", f.facts(*facts))


def chat(client: TestClient, message: Any, **extra: Any) -> dict[str, Any]:
    body = {"user_id": "ana", "session_id": "s1", "message": message, **extra}
    response = client.post("/v1/chat", json=body)
    assert response.status_code == 200, response.text
    result: dict[str, Any] = response.json()
    return result


def chat_calls(llm: ScriptedLLM) -> list[list[dict[str, Any]]]:
    """The messages of each chat-model request (extraction requests left out)."""
    return [r["messages"] for r in llm.chat_requests() if r.get("model") != "gpt-4o-mini"]


def sse_events(text: str) -> list[Any]:
    lines = [line[6:] for line in text.splitlines() if line.startswith("data: ")]
    return [line if line == "[DONE]" else json.loads(line) for line in lines]


def stored(runtime: Runtime, session_id: str = "s1") -> list[Message]:
    with Session(runtime.engine) as s:
        chat_row = s.exec(select(ChatSession).where(ChatSession.external_id == session_id)).one()
        return list(
            s.exec(
                select(Message).where(Message.session_id == chat_row.id).order_by(col(Message.seq))
            )
        )


def settle(client: TestClient, runtime: Runtime) -> None:
    """Wait for every extraction run: none may outlive the test's runtime in the shared worker."""
    with Session(runtime.engine) as s:
        run_ids = list(s.exec(select(ExtractionRun.id)))
    for run_id in run_ids:
        wait_job(client, run_id)


def get_run(runtime: Runtime, run_id: str) -> ExtractionRun:
    with Session(runtime.engine) as s:
        run = s.get(ExtractionRun, run_id)
        assert run is not None
        return run


def sdk(client: TestClient, **kwargs: Any) -> openai.OpenAI:
    # The official client, unchanged but for base_url; the TestClient is its httpx client.
    return openai.OpenAI(
        base_url="http://testserver/v1", api_key=APP_KEY, http_client=client, **kwargs
    )


@pytest.mark.parametrize(
    "settings", ["sqlite", pytest.param("postgres", marks=pytest.mark.postgres)], indirect=True
)
def test_chat_stores_the_turn_and_the_next_context_holds_what_was_extracted(
    client: TestClient, scripted_llm: ScriptedLLM, runtime: Runtime
) -> None:
    say(scripted_llm, "I live in Berlin.", "Berlin is lovely in spring.", BERLIN)
    say(scripted_llm, "Which city do I live in?", "You live in Berlin.")
    first = chat(client, {"content": "I live in Berlin.", "speaker": "Ana"})
    assert first["reply"] == "Berlin is lovely in spring."
    assert first["model"] == "chat-model" and first["session_id"] == "s1"
    assert first["usage"]["total_tokens"] > 0 and len(first["message_ids"]) == 2
    job = wait_job(client, first["job_id"])
    assert job["status"] == "done" and job["facts_added"] == 1, job
    messages = stored(runtime)
    assert [(m.role, m.content) for m in messages] == [
        ("user", "I live in Berlin."),
        ("assistant", "Berlin is lovely in spring."),
    ]
    assert [m.id for m in messages] == first["message_ids"]
    assert get_run(runtime, first["job_id"]).reply_message_id == first["message_ids"][1]

    second = chat(client, "Which city do I live in?")
    assert second["reply"] == "You live in Berlin." and second["context"]["memories"] == 1
    sent = chat_calls(scripted_llm)[-1]
    assert sent[0]["role"] == "system" and "Ana lives in Berlin." in sent[0]["content"]
    # the session so far, then the new message once
    assert [(m["role"], m["content"]) for m in sent[1:]] == [
        ("user", "I live in Berlin."),
        ("assistant", "Berlin is lovely in spring."),
        ("user", "Which city do I live in?"),
    ]
    assert wait_job(client, second["job_id"])["status"] in ("done", "skipped")


def test_chat_streams_events_and_stores_the_whole_reply(
    client: TestClient, scripted_llm: ScriptedLLM, runtime: Runtime
) -> None:
    reply = "Berlin has more bridges than Venice, and you live right among them."
    say(scripted_llm, "I live in Berlin.", reply, BERLIN)
    body = {"user_id": "ana", "session_id": "s1", "stream": True,
            "message": {"content": "I live in Berlin.", "speaker": "Ana"}}  # fmt: skip
    with client.stream("POST", "/v1/chat", json=body) as response:
        assert response.status_code == 200
        assert response.headers["content-type"].startswith("text/event-stream")
        events = sse_events(response.read().decode())
    deltas = [e["delta"] for e in events if "delta" in e]
    assert len(deltas) > 1 and "".join(deltas) == reply
    done = events[-1]
    assert done["done"] is True and done["usage"]["completion_tokens"] > 0
    assert len(done["message_ids"]) == 2 and done["finish_reason"] == "stop"
    assert wait_job(client, done["job_id"])["facts_added"] == 1
    assert [m.content for m in stored(runtime)] == ["I live in Berlin.", reply]

    say(scripted_llm, "Which city do I live in?", "In Berlin.")
    with client.stream(
        "POST", "/v1/chat", json={**body, "message": "Which city do I live in?"}
    ) as r:
        r.read()
    assert "Ana lives in Berlin." in chat_calls(scripted_llm)[-1][0]["content"]
    settle(client, runtime)


def test_openai_sdk_gets_memory_by_changing_base_url(
    client: TestClient, scripted_llm: ScriptedLLM, runtime: Runtime
) -> None:
    say(scripted_llm, "I live in Berlin.", "Noted, Berlin!", BERLIN)
    say(scripted_llm, "Which city do I live in?", "You live in Berlin.")
    oai = sdk(client)
    history: list[Any] = [
        {"role": "system", "content": "You are a terse assistant."},
        {"role": "user", "content": "I live in Berlin.", "name": "Ana"},
    ]
    raw = oai.chat.completions.with_raw_response.create(
        model="gpt-4o", messages=history, user="ana"
    )
    completion = raw.parse()
    assert completion.object == "chat.completion" and completion.id.startswith("chatcmpl-")
    assert completion.choices[0].message.content == "Noted, Berlin!"
    assert completion.choices[0].finish_reason == "stop" and completion.usage is not None
    assert raw.headers["x-tiermem-session"] == "ana-default"
    assert wait_job(client, raw.headers["x-tiermem-job-id"])["facts_added"] == 1

    history += [
        {"role": "assistant", "content": "Noted, Berlin!"},
        {"role": "user", "content": "Which city do I live in?"},
    ]
    again = oai.chat.completions.create(model="gpt-4o", messages=history, user="ana")
    assert again.choices[0].message.content == "You live in Berlin."
    sent = chat_calls(scripted_llm)[-1]
    # the client's system prompt first, then the memories, then the client's own history
    assert sent[0] == {"role": "system", "content": "You are a terse assistant."}
    assert sent[1]["role"] == "system" and "Ana lives in Berlin." in sent[1]["content"]
    assert sent[2:] == history[1:]
    assert scripted_llm.chat_requests()[-1]["model"] == "gpt-4o"  # the client's model
    assert [m.content for m in stored(runtime, "ana-default")] == [
        "I live in Berlin.", "Noted, Berlin!", "Which city do I live in?", "You live in Berlin.",
    ]  # fmt: skip
    settle(client, runtime)


def test_openai_sdk_streams_chunks(
    client: TestClient, scripted_llm: ScriptedLLM, runtime: Runtime
) -> None:
    reply = "Berlin it is; I will remember that for next time."
    say(scripted_llm, "I live in Berlin.", reply, BERLIN)
    chunks = list(
        sdk(client).chat.completions.create(
            model="gpt-4o",
            messages=[{"role": "user", "content": "I live in Berlin."}],
            stream=True,
            stream_options={"include_usage": True},
            extra_headers={"X-Tiermem-User": "ana", "X-Tiermem-Session": "web-1"},
        )
    )
    assert all(c.object == "chat.completion.chunk" for c in chunks)
    text = "".join(c.choices[0].delta.content or "" for c in chunks if c.choices)
    assert text == reply
    assert [c.choices[0].finish_reason for c in chunks if c.choices][-1] == "stop"
    assert chunks[-1].usage is not None and chunks[-1].usage.completion_tokens > 0
    messages = stored(runtime, "web-1")
    assert [m.content for m in messages] == ["I live in Berlin.", reply]
    assert messages[0].run_id is not None
    assert wait_job(client, messages[0].run_id)["facts_added"] == 1


@pytest.mark.parametrize("stream", [False, True])
@pytest.mark.parametrize(
    ("mode", "status", "code"),
    [("timeout", 504, "upstream_timeout"), ("429", 502, "upstream_error"),
     ("500", 502, "upstream_error"), ("disconnect", 502, "upstream_error"),
     ("html", 502, "upstream_error")],
)  # fmt: skip
def test_chat_model_failure_keeps_the_users_message(
    client: TestClient, scripted_llm: ScriptedLLM, runtime: Runtime,
    mode: str, status: int, code: str, stream: bool,
) -> None:  # fmt: skip
    scripted_llm.script("My cat is called Miso.\n</user>", f.facts(
        f.general("Ana", "Ana has a cat called Miso.")))  # fmt: skip
    delay = 3.0 if mode == "timeout" else 0.0  # past chat.timeout_s (1 s)
    scripted_llm.misbehave(mode, match="My cat is called Miso.", delay_s=delay)
    body = {"user_id": "ana", "session_id": "s1", "message": "My cat is called Miso.",
            "stream": stream}  # fmt: skip
    response = client.post("/v1/chat", json=body)
    assert response.status_code == status, response.text
    error = response.json()["error"]
    assert error["code"] == code and "stored" in error["message"]
    if mode.isdigit():
        assert error["details"]["upstream_status"] == int(mode)
    [message] = stored(runtime)
    assert error["details"]["user_message_id"] == message.id
    job = wait_job(client, error["details"]["job_id"])  # queued although the model failed
    assert job["status"] == "done" and job["facts_added"] == 1
    assert get_run(runtime, job["id"]).reply_message_id is None


def test_sdk_error_and_its_own_retry_store_the_message_once(
    client: TestClient, scripted_llm: ScriptedLLM, runtime: Runtime
) -> None:
    messages: list[Any] = [{"role": "user", "content": "I live in Berlin."}]
    say(scripted_llm, "I live in Berlin.", "Welcome back.", BERLIN)
    scripted_llm.misbehave("503", match="I live in Berlin.")
    with pytest.raises(openai.InternalServerError) as failed:
        sdk(client, max_retries=0).chat.completions.create(
            model="gpt-4o", messages=messages, user="ana"
        )
    assert failed.value.status_code == 502 and "stored" in failed.value.message
    [message] = stored(runtime, "ana-default")
    # its extraction runs although the model failed; let it finish before the next failure
    assert wait_job(client, message.run_id or "")["facts_added"] == 1

    # the SDK retries a 502 by itself: the same unanswered text is answered, not stored again
    scripted_llm.misbehave("500", match="I live in Berlin.")
    done = sdk(client).chat.completions.create(model="gpt-4o", messages=messages, user="ana")
    assert done.choices[0].message.content == "Welcome back."
    assert [m.role for m in stored(runtime, "ana-default")] == ["user", "assistant"]
    settle(client, runtime)


@pytest.mark.parametrize("stream", [False, True], ids=["json", "stream"])
def test_a_resent_chat_message_gets_its_stored_reply_and_stores_nothing(
    client: TestClient, scripted_llm: ScriptedLLM, runtime: Runtime, stream: bool
) -> None:
    """Issue 24: the same external_id again (a client that lost the answer) called the chat
    model again and stored a second reply; it is answered with the reply stored for it."""
    say(scripted_llm, "I live in Berlin.", "Berlin is lovely in spring.", BERLIN)
    message = {"content": "I live in Berlin.", "external_id": "c-1"}
    first = chat(client, message)
    say(scripted_llm, "I live in Berlin.", "Another reply.")
    body = {"user_id": "ana", "session_id": "s1", "message": message, "stream": stream}
    response = client.post("/v1/chat", json=body)
    assert response.status_code == 200, response.text
    if stream:
        events = sse_events(response.text)
        assert "".join(e["delta"] for e in events if "delta" in e) == first["reply"]
        again = {**events[-1], "reply": first["reply"]}
        assert again.pop("done") is True
    else:
        again = response.json()
    assert again["reply"] == first["reply"] and again["duplicate"] is True
    assert again["message_ids"] == first["message_ids"] and again["job_id"] == first["job_id"]
    assert again["usage"]["total_tokens"] == 0  # no model was called
    assert len(chat_calls(scripted_llm)) == 1
    assert [m.content for m in stored(runtime)] == ["I live in Berlin.", first["reply"]]
    settle(client, runtime)


def test_a_chat_message_resent_after_a_failure_is_answered_once(
    client: TestClient, scripted_llm: ScriptedLLM, runtime: Runtime
) -> None:
    """The first call failed (502, the message stored without a reply): the resend asks the
    model and stores its reply; a resend after that answers with it."""
    say(scripted_llm, "I live in Berlin.", "Welcome back.", BERLIN)
    scripted_llm.misbehave("500", match="I live in Berlin.")
    message = {"content": "I live in Berlin.", "external_id": "c-2"}
    body = {"user_id": "ana", "session_id": "s1", "message": message}
    assert client.post("/v1/chat", json=body).status_code == 502
    answered = chat(client, message)
    assert answered["reply"] == "Welcome back." and answered.get("duplicate") is False
    again = chat(client, message)
    assert again["duplicate"] is True and again["message_ids"] == answered["message_ids"]
    assert [m.role for m in stored(runtime)] == ["user", "assistant"]
    settle(client, runtime)


def test_owner_is_required_and_unambiguous(client: TestClient, scripted_llm: ScriptedLLM) -> None:
    body = {"model": "gpt-4o", "messages": [{"role": "user", "content": "hi"}]}
    missing = client.post("/v1/chat/completions", json=body)
    assert missing.status_code == 422
    assert "X-Tiermem-User" in missing.json()["error"]["message"]
    mismatch = client.post("/v1/chat/completions", json={**body, "user": "ana"},
                           headers={"X-Tiermem-User": "bob"})  # fmt: skip
    assert mismatch.status_code == 422 and "different" in mismatch.json()["error"]["message"]
    no_user_turn = {**body, "user": "ana", "messages": [{"role": "system", "content": "x"}]}
    assert client.post("/v1/chat/completions", json=no_user_turn).status_code == 422
    tools = {**body, "user": "ana", "tools": [{"type": "function", "function": {"name": "f"}}]}
    assert client.post("/v1/chat/completions", json=tools).status_code == 422
    unauthenticated = client.post("/v1/chat/completions", json=body, headers={"Authorization": ""})
    assert unauthenticated.status_code == 401
    # No chat call; an earlier test's extraction follow-ups may still reach the shared server.
    assert [r for r in scripted_llm.chat_requests() if "extract" not in str(r["messages"][0])] == []


def test_client_leaving_mid_stream_stores_the_part_it_was_sent(
    client: TestClient, scripted_llm: ScriptedLLM, runtime: Runtime
) -> None:
    reply = "A long answer that the person stops reading after the first few words of it."
    say(scripted_llm, "Tell me something long.", reply)
    with Session(runtime.engine) as s:
        tenant_id = s.exec(select(Tenant.id).where(Tenant.name == "default")).one()
    sent: list[list[str]] = []
    message = NewMessage(role="user", content="Tell me something long.")
    turn = ChatTurnIn(user_external_id="ana", session_external_id="s1", message=message)
    stream = start_chat_stream(runtime=runtime, tenant_id=tenant_id, turn=turn, enqueue=sent.append)
    events = iter(stream)
    first = next(events)
    events.close()  # what the API does when the client disconnects
    assert stream.interrupted and stream.result is not None
    messages = stored(runtime)
    assert [m.content for m in messages] == ["Tell me something long.", first]
    assert get_run(runtime, stream.result.job_id or "").reply_message_id == messages[1].id
    assert sent == [[stream.result.job_id]]


@pytest.mark.parametrize("settings", ["no_chat"], indirect=True)
def test_no_chat_model_configured_is_a_clear_503(client: TestClient, runtime: Runtime) -> None:
    response = client.post("/v1/chat", json={"user_id": "ana", "session_id": "s1", "message": "hi"})
    assert response.status_code == 503
    assert "TIERMEM_CHAT__BASE_URL" in response.json()["error"]["message"]
    with Session(runtime.engine) as s:
        assert s.exec(select(Message)).first() is None  # nothing stored for a config error
