"""The scripted LLM server behaves like an OpenAI-compatible endpoint to the real openai client."""

from __future__ import annotations

import base64
import json
import math
import struct
import time
from concurrent.futures import ThreadPoolExecutor

import httpx
import openai
import pytest

from tests.scripted_llm import MALFORMED_REPLY, ScriptedLLM, plausible_facts


def _client(llm: ScriptedLLM, timeout: float = 10.0) -> openai.OpenAI:
    return openai.OpenAI(base_url=llm.base_url, api_key="test-key", timeout=timeout, max_retries=0)


def _ask(client: openai.OpenAI, text: str) -> str:
    reply = client.chat.completions.create(
        model="m-under-test",
        messages=[
            {"role": "system", "content": "You are a test."},
            {"role": "user", "content": text},
        ],
    )
    content = reply.choices[0].message.content
    assert content is not None
    return content


def test_scripted_answer_and_default(scripted_llm: ScriptedLLM) -> None:
    client = _client(scripted_llm)
    scripted_llm.script("berlin", {"facts": [{"content": "Ana lives in Berlin."}]})
    scripted_llm.script("BERLIN in May", "later scripts win")

    first = _ask(client, "I moved to Berlin last year")
    assert json.loads(first) == {"facts": [{"content": "Ana lives in Berlin."}]}
    assert _ask(client, "Berlin in may was lovely") == "later scripts win"
    assert _ask(client, "nothing scripted here") == '{"facts": []}'

    scripted_llm.script("echo me", "<echo>")
    assert _ask(client, "please ECHO ME back") == "please ECHO ME back"


def test_matches_only_the_last_user_message(scripted_llm: ScriptedLLM) -> None:
    scripted_llm.script("needle", "found")
    reply = _client(scripted_llm).chat.completions.create(
        model="m",
        messages=[
            {"role": "user", "content": "needle in an earlier turn"},
            {"role": "assistant", "content": "needle from the assistant"},
            {"role": "user", "content": "the last one has nothing"},
        ],
    )
    assert reply.choices[0].message.content == '{"facts": []}'


def test_response_shape_usage_and_recorded_requests(scripted_llm: ScriptedLLM) -> None:
    client = _client(scripted_llm)
    text = "x" * 400
    reply = client.chat.completions.create(
        model="my-model",
        messages=[{"role": "user", "content": text}],
        response_format={"type": "json_object"},
    )
    assert reply.model == "my-model"
    assert reply.id.startswith("chatcmpl-")
    assert reply.choices[0].finish_reason == "stop"
    assert reply.usage is not None
    assert reply.usage.prompt_tokens == 100
    assert reply.usage.completion_tokens == math.ceil(len('{"facts": []}') / 4)
    assert reply.usage.total_tokens == 100 + reply.usage.completion_tokens

    (request,) = scripted_llm.chat_requests()
    assert request["path"] == "/v1/chat/completions"
    assert request["model"] == "my-model"
    assert request["response_format"] == {"type": "json_object"}
    assert request["messages"][0]["content"] == text

    scripted_llm.reset()
    assert scripted_llm.requests == []
    assert _ask(client, "after reset") == '{"facts": []}'


@pytest.mark.parametrize(
    ("mode", "error", "status"),
    [
        ("429", openai.RateLimitError, 429),
        ("500", openai.InternalServerError, 500),
        ("503", openai.InternalServerError, 503),
        ("401", openai.AuthenticationError, 401),
        ("400", openai.BadRequestError, 400),
    ],
)
def test_status_misbehaviours(
    scripted_llm: ScriptedLLM, mode: str, error: type[openai.APIStatusError], status: int
) -> None:
    client = _client(scripted_llm)
    scripted_llm.misbehave(mode, times=2)
    for _ in range(2):
        with pytest.raises(error) as info:
            _ask(client, "hello there")
        assert info.value.status_code == status
        assert isinstance(info.value.body, dict)
        assert info.value.body["message"]  # OpenAI-style {"error": {"message": ...}}
    if status == 429:
        assert info.value.response.headers["retry-after"] == "0"
    # `times` used up: the third call succeeds.
    assert _ask(client, "hello there") == '{"facts": []}'


def test_misbehaviour_match_only_hits_matching_requests(scripted_llm: ScriptedLLM) -> None:
    client = _client(scripted_llm)
    scripted_llm.misbehave("500", match="Poison")
    assert _ask(client, "a clean request") == '{"facts": []}'
    with pytest.raises(openai.InternalServerError):
        _ask(client, "this one is poisoned")
    assert _ask(client, "poison again, but only once") == '{"facts": []}'


def test_malformed_and_bad_schema(scripted_llm: ScriptedLLM) -> None:
    client = _client(scripted_llm)
    scripted_llm.script("facts", {"facts": []})
    scripted_llm.misbehave("malformed")
    scripted_llm.misbehave("bad_schema")

    malformed = _ask(client, "give me facts")
    assert malformed == MALFORMED_REPLY
    with pytest.raises(json.JSONDecodeError):
        json.loads(malformed)

    bad = json.loads(_ask(client, "give me facts"))
    assert isinstance(bad, dict) and "facts" not in bad

    assert json.loads(_ask(client, "give me facts")) == {"facts": []}


def test_timeout(scripted_llm: ScriptedLLM) -> None:
    scripted_llm.misbehave("timeout", delay_s=2.0)
    started = time.monotonic()
    with pytest.raises(openai.APITimeoutError):
        _ask(_client(scripted_llm, timeout=0.3), "slow please")
    assert time.monotonic() - started < 1.5


def test_disconnect(scripted_llm: ScriptedLLM) -> None:
    client = _client(scripted_llm)
    scripted_llm.misbehave("disconnect")
    with pytest.raises(openai.APIConnectionError) as info:
        _ask(client, "hang up on me")
    assert not isinstance(info.value, openai.APITimeoutError)
    assert _ask(client, "still alive?") == '{"facts": []}'


def test_streaming(scripted_llm: ScriptedLLM) -> None:
    reply = json.dumps({"facts": [{"content": "Ana likes long replies that span chunks."}]})
    scripted_llm.script("stream", reply)
    stream = _client(scripted_llm).chat.completions.create(
        model="m",
        messages=[{"role": "user", "content": "stream it"}],
        stream=True,
        stream_options={"include_usage": True},
    )
    pieces: list[str] = []
    finish = None
    usage = None
    for chunk in stream:
        if chunk.usage is not None:
            usage = chunk.usage
        for choice in chunk.choices:
            pieces.append(choice.delta.content or "")
            finish = choice.finish_reason or finish
    assert "".join(pieces) == reply
    assert sum(1 for p in pieces if p) >= len(reply) // 16  # really streamed in pieces
    assert finish == "stop"
    assert usage is not None and usage.completion_tokens == math.ceil(len(reply) / 4)


def test_embeddings_float_and_base64(scripted_llm: ScriptedLLM) -> None:
    client = _client(scripted_llm)
    texts = ["Ana lives in Berlin.", "Ana likes tea.", "Ana lives in Berlin."]
    # The openai client asks for base64 unless told otherwise; both must decode the same.
    b64 = client.embeddings.create(model="emb", input=texts)
    floats = client.embeddings.create(model="emb", input=texts, encoding_format="float")
    assert len(b64.data) == 3
    for a, b in zip(b64.data, floats.data, strict=True):
        assert len(a.embedding) == 384
        assert a.embedding == pytest.approx(b.embedding, abs=1e-6)
        assert math.sqrt(sum(v * v for v in a.embedding)) == pytest.approx(1.0, abs=1e-5)
    same = floats.data[0].embedding
    assert same == floats.data[2].embedding  # deterministic per text
    assert sum(x * y for x, y in zip(same, floats.data[1].embedding, strict=True)) < 0.5
    assert b64.usage.prompt_tokens > 0
    # The wire format really is base64 of little-endian float32 when asked for.
    raw = httpx.post(
        f"{scripted_llm.base_url}/embeddings",
        json={"model": "emb", "input": texts[:1], "encoding_format": "base64"},
    ).json()
    packed = base64.b64decode(raw["data"][0]["embedding"])
    assert list(struct.unpack("<384f", packed)) == pytest.approx(same, abs=1e-6)
    single = client.embeddings.create(model="emb", input="Ana likes tea.", encoding_format="float")
    assert single.data[0].embedding == floats.data[1].embedding


def test_embedding_dimension_and_misbehaviour() -> None:
    with ScriptedLLM(embedding_dim=8) as llm:
        client = _client(llm)
        result = client.embeddings.create(model="e", input=["a"], encoding_format="float")
        assert len(result.data[0].embedding) == 8
        llm.misbehave("503")
        with pytest.raises(openai.InternalServerError):
            client.embeddings.create(model="e", input=["a"])
        llm.misbehave("bad_schema")
        wrong = client.embeddings.create(model="e", input=["a"], encoding_format="float")
        assert len(wrong.data[0].embedding) != 8
        assert [r["path"] for r in llm.requests] == ["/v1/embeddings"] * 3


def test_models(scripted_llm: ScriptedLLM) -> None:
    models = _client(scripted_llm).models.list()
    assert [m.id for m in models.data] == ["scripted-model"]


@pytest.mark.parametrize("parallel", [20, 64])  # 64: what the throughput benchmark runs
def test_concurrent_requests_overlap(scripted_llm: ScriptedLLM, parallel: int) -> None:
    scripted_llm.latency_s = 0.5
    client = _client(scripted_llm)
    started = time.monotonic()
    with ThreadPoolExecutor(max_workers=parallel) as pool:
        replies = list(pool.map(lambda i: _ask(client, f"call {i}"), range(parallel)))
    elapsed = time.monotonic() - started
    assert replies == ['{"facts": []}'] * parallel
    assert 0.5 <= elapsed < 5.0  # serial would take parallel × 0.5 s
    assert len(scripted_llm.chat_requests()) == parallel


def test_facts_per_turn_default_answer(scripted_llm: ScriptedLLM) -> None:
    from shared.extraction.base import validate_items

    scripted_llm.facts_per_turn = 7
    turn = '<user name="Ana">\nI adopted a greyhound and started pottery classes.\n</user>'
    facts = json.loads(_ask(_client(scripted_llm), turn))["facts"]
    assert len(facts) == 7
    validated = validate_items(facts, max_facts=10, min_confidence=0.3)
    kept = validated.facts
    assert (validated.dropped_invalid, validated.dropped_over_limit, validated.reasons) == (
        0, 0, []
    )  # fmt: skip
    assert {f.type for f in kept} == {
        "fact",
        "preference",
        "goal",
        "decision",
        "relationship",
        "identity",
    }
    assert all(f.subject == "Ana" and "Ana" in f.content for f in kept)
    assert len({f.content for f in kept}) == 7
    assert any("greyhound" in f.content for f in kept)
    # More facts than keywords still yields distinct, valid facts.
    many = plausible_facts("tea", 14)
    assert len({f["content"] for f in many}) == 14
    assert validate_items(many, max_facts=20, min_confidence=0.3).dropped_invalid == 0
