"""The benchmarks' token-counting proxy: what it forwards and what it counts of each call."""

from __future__ import annotations

import httpx

from bench.token_proxy import TokenProxy, refused_prompt_tokens
from tests.scripted_llm import ScriptedLLM

# llama-cpp-python's answer to a prompt longer than its context (HTTP 400).
LLAMA_CPP_TOO_LONG = (
    "This model's maximum context length is 4096 tokens. However, you requested 9618 tokens "
    "(7618 in the messages, 2000 in the completion). Please reduce the length of the messages "
    "or completion."
)


def chat(base_url: str, text: str, **extra: object) -> httpx.Response:
    body = {"model": "m", "messages": [{"role": "user", "content": text}], **extra}
    return httpx.post(f"{base_url}/chat/completions", json=body, timeout=10)


def test_each_call_is_forwarded_and_counted_as_the_server_reports_it(
    scripted_llm: ScriptedLLM,
) -> None:
    scripted_llm.script("tea", {"facts": []})
    with TokenProxy(scripted_llm.base_url) as proxy:
        first = chat(proxy.base_url, "I like tea", response_format={"type": "json_object"})
        mark = proxy.mark()
        second = chat(proxy.base_url, "I like green tea a lot")
        models = httpx.get(f"{proxy.base_url}/models", timeout=10)

        assert first.json()["choices"][0]["message"]["content"] == '{"facts": []}'
        assert models.status_code == 200  # forwarded, not counted
        calls = proxy.calls
        assert [c.status for c in calls] == [200, 200]
        for call, reply in zip(calls, (first, second), strict=True):
            usage = reply.json()["usage"]
            assert (call.prompt_tokens, call.completion_tokens) == (
                usage["prompt_tokens"],
                usage["completion_tokens"],
            )
        assert [c.response_format for c in calls] == ["json_object", None]
        assert proxy.calls_since(mark) == calls[1:]


def test_a_refused_call_counts_as_a_call_without_tokens(scripted_llm: ScriptedLLM) -> None:
    scripted_llm.reject_json_schema(500)
    scripted_llm.misbehave("503", match="busy")
    fmt = {"type": "json_schema", "json_schema": {"name": "x", "schema": {}}}
    with TokenProxy(scripted_llm.base_url) as proxy:
        chat(proxy.base_url, "hello", response_format=fmt)
        chat(proxy.base_url, "hello", response_format={"type": "json_object", "schema": {}})
        chat(proxy.base_url, "busy now?")

        refused, answered, unavailable = proxy.calls
    assert (refused.status, refused.response_format, refused.ok) == (500, "json_schema", False)
    assert (refused.prompt_tokens, refused.completion_tokens) == (0, 0)
    assert refused.error is not None and "json_schema" in refused.error
    assert (answered.status, answered.response_format) == (200, "json_object+schema")
    assert answered.prompt_tokens > 0
    assert unavailable.status == 503


def test_an_unreachable_upstream_is_a_counted_502() -> None:
    with TokenProxy("http://127.0.0.1:9/v1") as proxy:
        reply = chat(proxy.base_url, "hello")
        (call,) = proxy.calls
    assert reply.status_code == call.status == 502
    assert "unreachable" in reply.json()["error"]["message"]


def test_a_length_refusal_keeps_the_prompt_the_server_counted() -> None:
    assert refused_prompt_tokens(LLAMA_CPP_TOO_LONG) == 7618
    assert refused_prompt_tokens("Requested tokens (5000) exceed context window of 4096") == 5000
    assert refused_prompt_tokens("The server had an error") is None
