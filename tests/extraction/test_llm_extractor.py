"""The LLM extractor end to end: real openai client, real HTTP, the scripted server."""

from __future__ import annotations

import dataclasses
import datetime as dt
import json
import logging
import re
import time
from typing import Any

import jsonschema
import pytest

from shared.config import ExtractionSettings, LLMSettings
from shared.errors import PermanentError, TransientError
from shared.extraction.base import Extractor, TurnInput
from shared.extraction.checks import asked_and_stated, third_person
from shared.extraction.llm_extractor import SCHEMA_NAME, LLMExtractor
from shared.extraction.prompts import EXTRACTOR_VERSION, build_extraction_messages, prompt_hash
from shared.extraction.schemas import strict_json_schema
from shared.llm.client import LLMClient, MalformedOutput
from shared.llm.formats import StructuredOutputFallbacks, rejects_structured_output
from tests.scripted_llm import ScriptedLLM

SESSION = dt.datetime(2024, 5, 8, 14, 30, tzinfo=dt.UTC)  # a Wednesday

TURN = TurnInput(
    user_message="I moved to Lisbon last month with my sister Marta. I can't stand cilantro.",
    assistant_message="Lisbon is lovely! Do you like the food there?",
    session_date=SESSION,
    user_speaker="Ana",
)


def _fact(kind: str, confidence: float = 0.9, **fields: Any) -> dict[str, Any]:
    """A schema-valid item of `kind`, as a strict-mode model would send it (all keys; the
    subject is the server's to fill)."""
    base: dict[str, Any] = {
        "type": kind,
        "confidence": confidence,
        "tags": [],
        "valid_from": None,
        "ended": False,
    }
    per_type: dict[str, dict[str, Any]] = {
        "identity": {"content": "Ana lives in Lisbon.", "attribute": "location", "value": "Lisbon"},
        "preference": {
            "content": "Ana dislikes cilantro.",
            "topic": "cilantro",
            "sentiment": "dislikes",
            "value": "cilantro",
        },
        "fact": {"content": "Ana moved in April 2024.", "attribute": None, "value": None},
        "decision": {
            "content": "Ana chose Lisbon over Porto.",
            "topic": "city",
            "choice": "Lisbon",
            "reason": None,
        },
        "goal": {
            "content": "Ana wants to learn Portuguese.",
            "goal": "learn Portuguese",
            "target_date": None,
            "status": "active",
        },
        "relationship": {
            "content": "Ana's sister is Marta.",
            "person": "Marta",
            "relation": "sister",
        },
    }
    return {**base, **per_type[kind], **fields}


ALL_SIX = [
    _fact("identity", 0.95, valid_from="2024-04-01"),
    _fact("preference", 0.9, tags=["Food"]),
    _fact("fact", 0.7),
    _fact("decision", 0.8),
    _fact("goal", 0.6),
    _fact("relationship", 0.92),
]


def _settings(llm: ScriptedLLM, **overrides: Any) -> LLMSettings:
    return LLMSettings(base_url=llm.base_url, api_key="sk-test", model="test-model", **overrides)


@pytest.fixture
def extractor(scripted_llm: ScriptedLLM) -> LLMExtractor:
    return LLMExtractor(_settings(scripted_llm), ExtractionSettings())


def test_is_an_extractor(extractor: LLMExtractor) -> None:
    typed: Extractor = extractor
    assert (typed.kind, typed.version) == ("llm", EXTRACTOR_VERSION)


def test_happy_path_all_six_types(scripted_llm: ScriptedLLM, extractor: LLMExtractor) -> None:
    scripted_llm.script("Lisbon", {"facts": ALL_SIX})
    result = extractor.extract(TURN)

    assert [f.type for f in result.facts] == [
        "identity",
        "relationship",
        "preference",
        "decision",
        "fact",
        "goal",
    ]  # most confident first
    by_type = {f.type: f for f in result.facts}
    assert by_type["identity"].valid_from == dt.date(2024, 4, 1)
    assert by_type["preference"].tags == ["food"]
    assert by_type["identity"].slot == "identity/location"
    assert result.extractor == "llm"
    assert result.extractor_version == EXTRACTOR_VERSION
    assert result.model == "test-model"  # echoed by the server
    assert result.prompt_hash == prompt_hash()
    assert result.skipped_reason is None
    assert (result.dropped_invalid, result.dropped_over_limit, result.invalid_reasons) == (0, 0, [])
    assert result.prompt_tokens > 500  # the system prompt alone is long
    assert result.completion_tokens == -(-len(json.dumps({"facts": ALL_SIX})) // 4)
    assert result.llm_ms > 0
    assert len(scripted_llm.chat_requests()) == 1


def test_request_carries_schema_date_and_speaker(
    scripted_llm: ScriptedLLM, extractor: LLMExtractor
) -> None:
    extractor.extract(TURN)
    (request,) = scripted_llm.chat_requests()

    assert request["model"] == "test-model"
    assert request["temperature"] == 0.0
    fmt = request["response_format"]
    assert fmt["type"] == "json_schema"
    assert fmt["json_schema"]["name"] == SCHEMA_NAME
    assert fmt["json_schema"]["strict"] is True
    assert fmt["json_schema"]["schema"] == strict_json_schema()

    system, user = (m["content"] for m in request["messages"])
    assert [m["role"] for m in request["messages"]] == ["system", "user"]
    assert "Session date: 2024-05-08 (Wednesday)" in user
    assert '<user name="Ana">' in user and "Extract facts about Ana" in user
    assert TURN.user_message in user and str(TURN.assistant_message) in user
    assert "at most 10 facts" in system
    for attribute in ("name", "age", "birthday", "location", "hometown", "occupation"):
        assert attribute in system
    # Every scripted fact is also valid against the schema we send (the test data is honest).
    jsonschema.validate({"facts": ALL_SIX}, strict_json_schema())


def test_an_ending_comes_through_the_schema_and_the_prompt_asks_for_it(
    scripted_llm: ScriptedLLM, extractor: LLMExtractor
) -> None:
    quit_ = _fact(
        "identity", content="Ana quit Bosch.", attribute="employer", value="Bosch", ended=True
    )
    scripted_llm.script("Lisbon", {"facts": [quit_]})
    (fact,) = extractor.extract(TURN).facts
    assert fact.ended and fact.slot == "identity/employer" and fact.slot_state() == "ended"
    assert fact.details["ended"] is True  # stored with the row

    (request,) = scripted_llm.chat_requests()
    schema = request["response_format"]["json_schema"]["schema"]
    for item in schema["properties"]["facts"]["items"]["anyOf"]:
        assert item["properties"]["ended"]["type"] == "boolean"
        assert "ended" in item["required"]
    assert '"ended": true' in request["messages"][0]["content"]


def test_the_model_writes_the_sentence_before_its_type_and_fields(
    scripted_llm: ScriptedLLM, extractor: LLMExtractor
) -> None:
    # Under a grammar the keys come in schema order. Type first, a 1.5B model committed to
    # "identity" and "name" before it had said anything (ADR 0029); the sentence first, it
    # classifies what it wrote. The prompt's examples show the same order.
    extractor.extract(TURN)
    (request,) = scripted_llm.chat_requests()
    schema = request["response_format"]["json_schema"]["schema"]
    for decoded in (schema, strict_json_schema(max_facts=10)):
        for item in decoded["properties"]["facts"]["items"]["anyOf"]:
            keys = list(item["properties"])
            assert keys[:2] == ["content", "type"], keys
            assert keys[-4:] == ["ended", "valid_from", "confidence", "tags"], keys
    facts = re.findall(r'\{"(?!facts")[a-z_]+": [^{}]*\}', request["messages"][0]["content"])
    assert len(facts) == 7  # one example per type, and the ending
    assert all(example.startswith('{"content": ') for example in facts)


def test_invalid_items_dropped_and_counted(
    scripted_llm: ScriptedLLM, extractor: LLMExtractor
) -> None:
    items = [
        _fact("identity"),
        {"type": "identity", "content": "Ana is great."},  # missing fields
        _fact("preference", sentiment="adores"),  # not an allowed sentiment
        _fact("goal", confidence=0.1),  # below min_confidence
        {"type": "horoscope", "content": "Ana is a Leo.", "subject": "Ana", "confidence": 0.9},
        "Ana likes jazz.",  # not even an object
    ]
    scripted_llm.script("Lisbon", {"facts": items})
    result = extractor.extract(TURN)
    assert [f.type for f in result.facts] == ["identity"]
    assert (result.dropped_invalid, result.dropped_low_confidence) == (4, 1)
    assert len(result.invalid_reasons) == 5
    assert result.items_returned == 6 and not result.all_dropped
    assert any("below" in r for r in result.invalid_reasons)
    assert len(scripted_llm.chat_requests()) == 1  # bad items never trigger a repair call


def test_keeps_the_ten_most_confident(scripted_llm: ScriptedLLM, extractor: LLMExtractor) -> None:
    confidences = [0.31, 0.99, 0.5, 0.45, 0.9, 0.35, 0.8, 0.6, 0.7, 0.95, 0.4, 0.85, 0.65, 0.75]
    items = [
        _fact("fact", c, content=f"Ana has fact number {i}.") for i, c in enumerate(confidences)
    ]
    scripted_llm.script("Lisbon", {"facts": items})
    result = extractor.extract(TURN)
    assert [f.confidence for f in result.facts] == sorted(confidences, reverse=True)[:10]
    assert result.dropped_over_limit == 4
    assert result.dropped_invalid == 0


def test_small_talk_makes_no_request(scripted_llm: ScriptedLLM, extractor: LLMExtractor) -> None:
    result = extractor.extract(TurnInput("ok thanks!!", "You're welcome!", SESSION, "Ana"))
    assert result.facts == []
    assert result.skipped_reason == "small_talk"
    assert result.prompt_hash == prompt_hash()
    assert scripted_llm.requests == []


@pytest.mark.parametrize(
    ("mode", "expected"),
    [
        ("429", r"rate-limited \(429\) at http://127\.0\.0\.1:\d+/v1"),
        ("500", r"server error \(500\)"),
        ("503", r"server error \(503\)"),
        ("disconnect", r"connection failed"),
    ],
)
def test_transient_failures(
    scripted_llm: ScriptedLLM, extractor: LLMExtractor, mode: str, expected: str
) -> None:
    scripted_llm.misbehave(mode)
    with pytest.raises(TransientError, match=expected) as info:
        extractor.extract(TURN)
    assert not isinstance(info.value, PermanentError)
    assert len(scripted_llm.chat_requests()) == 1  # max_retries=0: the task retries, not us
    # The failure was one-off; the same extractor works on the next call.
    assert extractor.extract(TURN).facts == []


def test_timeout_is_transient(scripted_llm: ScriptedLLM) -> None:
    extractor = LLMExtractor(_settings(scripted_llm, timeout_s=0.3), ExtractionSettings())
    scripted_llm.misbehave("timeout", delay_s=2.0)
    started = time.monotonic()
    with pytest.raises(TransientError, match=r"timed out after 0\.3s"):
        extractor.extract(TURN)
    assert time.monotonic() - started < 1.5


@pytest.mark.parametrize(
    ("mode", "expected"),
    [
        ("401", r"API key \(401\).*check TIERMEM_LLM__API_KEY"),
        ("400", r"\(400\).*TIERMEM_LLM__RESPONSE_FORMAT=json_object"),
        ("404", r"\(404\).*TIERMEM_LLM__MODEL"),
    ],
)
def test_permanent_failures(
    scripted_llm: ScriptedLLM, extractor: LLMExtractor, mode: str, expected: str
) -> None:
    scripted_llm.misbehave(mode)
    with pytest.raises(PermanentError, match=expected) as info:
        extractor.extract(TURN)
    assert not isinstance(info.value, TransientError)
    assert info.value.details["status"] == int(mode)
    assert len(scripted_llm.chat_requests()) == 1


def test_a_web_page_instead_of_the_api_is_retried_like_a_502(
    scripted_llm: ScriptedLLM, extractor: LLMExtractor
) -> None:
    # A proxy's error page with status 200 is often passing: retried with backoff, and the
    # advice names the base_url for when it is not (the run fails with it once retries end).
    scripted_llm.misbehave("html")
    with pytest.raises(TransientError, match="not answer like an OpenAI-compatible API"):
        extractor.extract(TURN)
    assert extractor.extract(TURN).response_format == "json_schema"  # the next call answers


def test_malformed_once_is_repaired(scripted_llm: ScriptedLLM, extractor: LLMExtractor) -> None:
    scripted_llm.misbehave("malformed")
    # The repair request's last user message is the repair instruction, not the turn.
    scripted_llm.script("corrected JSON only", {"facts": ALL_SIX[:2]})
    result = extractor.extract(TURN)

    assert [f.type for f in result.facts] == ["identity", "preference"]
    first, second = scripted_llm.chat_requests()
    assert second["messages"][:2] == first["messages"]
    assert second["messages"][2] == {
        "role": "assistant",
        "content": "Sure! here are the facts: {facts: [oops",
    }
    assert "not valid JSON" in second["messages"][3]["content"]
    assert second["response_format"] == first["response_format"]
    # Both calls are paid for.
    assert result.prompt_tokens > 2 * len(first["messages"][0]["content"]) // 4


def test_repair_flag_and_summed_usage(scripted_llm: ScriptedLLM) -> None:
    scripted_llm.misbehave("bad_schema")  # JSON, but no "facts" list
    scripted_llm.script("corrected JSON only", {"facts": []})
    with LLMClient(_settings(scripted_llm)) as client:
        reply = client.complete_json(
            system="sys", user="turn", schema=strict_json_schema(), schema_name="x"
        )
    assert reply.repaired is True
    assert reply.data == {"facts": []}
    assert "no 'facts' key" in scripted_llm.chat_requests()[1]["messages"][3]["content"]
    assert reply.completion_tokens > -(-len('{"facts": []}') // 4)  # both replies counted


def test_malformed_twice_raises(scripted_llm: ScriptedLLM, extractor: LLMExtractor) -> None:
    scripted_llm.misbehave("malformed", times=2)
    with pytest.raises(MalformedOutput, match=r"after one repair attempt") as info:
        extractor.extract(TURN)
    assert isinstance(info.value, PermanentError)
    assert "Sure! here are the facts" in info.value.message
    assert len(scripted_llm.chat_requests()) == 2  # exactly one repair, no more


def test_output_head_is_capped(scripted_llm: ScriptedLLM, extractor: LLMExtractor) -> None:
    scripted_llm.script("", "nonsense " * 100)  # every call, the repair too
    with pytest.raises(MalformedOutput) as info:
        extractor.extract(TURN)
    assert len(info.value.details["output_head"]) == 200
    assert "nonsense " * 22 in info.value.message
    assert "nonsense " * 23 not in info.value.message


def test_code_fences_are_not_a_repair(scripted_llm: ScriptedLLM, extractor: LLMExtractor) -> None:
    scripted_llm.script("Lisbon", "```json\n" + json.dumps({"facts": ALL_SIX[:1]}) + "\n```")
    result = extractor.extract(TURN)
    assert [f.type for f in result.facts] == ["identity"]
    assert len(scripted_llm.chat_requests()) == 1


def test_json_object_mode(scripted_llm: ScriptedLLM) -> None:
    extractor = LLMExtractor(
        _settings(scripted_llm, response_format="json_object"), ExtractionSettings()
    )
    scripted_llm.script("Lisbon", {"facts": ALL_SIX})
    result = extractor.extract(TURN)
    assert len(result.facts) == 6
    (request,) = scripted_llm.chat_requests()
    assert request["response_format"] == {"type": "json_object"}
    # JSON mode does not carry the schema, so the prompt must (and must say "JSON").
    system = request["messages"][0]["content"]
    assert "JSON Schema" in system
    # The bounded form: at most 10 facts, lengths kept (OpenAI's strict form drops them).
    bounded = strict_json_schema(max_facts=10)
    assert json.dumps(bounded, separators=(",", ":")) in system


def test_no_content_logged_at_info(
    scripted_llm: ScriptedLLM, extractor: LLMExtractor, caplog: pytest.LogCaptureFixture
) -> None:
    scripted_llm.misbehave("malformed")
    scripted_llm.script("Lisbon", {"facts": ALL_SIX})
    scripted_llm.script("corrected JSON only", {"facts": [*ALL_SIX, {"type": "bogus"}]})
    with caplog.at_level(logging.INFO):
        extractor.extract(TURN)
    assert caplog.records  # something was logged, so the check below means something
    logged = " ".join(
        f"{r.getMessage()} {sorted((k, str(v)) for k, v in vars(r).items())}"
        for r in caplog.records
    )
    for secret in ("Lisbon", "cilantro", "Marta", "oops", "sk-test"):
        assert secret not in logged


def test_long_messages_are_truncated(scripted_llm: ScriptedLLM) -> None:
    extractor = LLMExtractor(_settings(scripted_llm), ExtractionSettings(max_message_chars=50))
    extractor.extract(TurnInput("I like tea. " + "x" * 500, "y" * 500, SESSION, "Ana"))
    user = scripted_llm.chat_requests()[0]["messages"][1]["content"]
    assert "x" * 38 in user and "x" * 39 not in user
    assert "y" * 50 in user and "y" * 51 not in user


def test_prompt_resolves_against_the_turn_date() -> None:
    turn = TurnInput("Yesterday I started at Acme.", None, dt.datetime(2023, 1, 1, 23, 0), "Bo")
    system, user = build_extraction_messages(turn, max_facts=5)
    assert "at most 5 facts" in system
    assert "Session date: 2023-01-01 (Sunday)" in user
    assert "no assistant reply" in user
    assert re.fullmatch(r"[0-9a-f]{16}", prompt_hash())


def test_missing_base_url_is_permanent() -> None:
    with pytest.raises(PermanentError, match="TIERMEM_LLM__BASE_URL"):
        LLMClient(LLMSettings())


# -- servers without structured outputs (ADR 0018) -------------------------------------------


def _formats(llm: ScriptedLLM) -> list[str]:
    """Each request's format: json_object with a schema inside is llama.cpp's form."""
    return [
        "json_object+schema" if "schema" in r["response_format"] else r["response_format"]["type"]
        for r in llm.chat_requests()
    ]


def _with_own_memory(llm: ScriptedLLM) -> tuple[LLMExtractor, StructuredOutputFallbacks]:
    """An extractor whose client remembers formats apart from the process's."""
    fallbacks = StructuredOutputFallbacks()
    settings = _settings(llm)
    client = LLMClient(settings, fallbacks=fallbacks)
    return LLMExtractor(settings, ExtractionSettings(), client=client), fallbacks


@pytest.mark.parametrize("status", [500, 400])
def test_a_server_that_rejects_json_schema_gets_the_schema_inside_json_object_at_once(
    scripted_llm: ScriptedLLM, status: int
) -> None:
    scripted_llm.reject_json_schema(status)  # 500: llama-cpp-python's server; 400: OpenAI's
    scripted_llm.script("Lisbon", {"facts": ALL_SIX})
    extractor, fallbacks = _with_own_memory(scripted_llm)

    result = extractor.extract(TURN)

    assert len(result.facts) == 6
    assert _formats(scripted_llm) == ["json_schema", "json_object+schema"]
    retry = scripted_llm.chat_requests()[1]
    # The server decodes by the schema (llama.cpp's grammar), and the prompt carries it too
    # for a server that takes json_object without decoding by it.
    # The bounded form llama.cpp decodes by: a model that repeats itself stops at 10 facts.
    bounded = strict_json_schema(max_facts=10)
    assert bounded["properties"]["facts"]["maxItems"] == 10
    assert retry["response_format"] == {"type": "json_object", "schema": bounded}
    assert json.dumps(bounded, separators=(",", ":")) in retry["messages"][0]["content"]
    assert result.response_format == "json_object+schema"
    assert result.response_format_note is not None
    assert result.response_format_note.startswith(
        f"fell back to json_object+schema: the server rejected json_schema (HTTP {status}: "
    )
    learned = fallbacks.items()[(scripted_llm.base_url, "test-model")]
    assert learned.type == "json_object+schema" and "json_schema" in learned.reason

    # Remembered for this base_url and model: the next turn goes straight to it.
    again = extractor.extract(TURN)
    assert _formats(scripted_llm)[2:] == ["json_object+schema"]
    assert again.response_format == "json_object+schema"
    assert again.response_format_note is not None
    assert again.response_format_note.startswith("json_object+schema since an earlier call: ")
    # Another model on the same server is asked for json_schema again.
    other = LLMSettings(base_url=scripted_llm.base_url, api_key="sk-test", model="other-model")
    LLMExtractor(other, ExtractionSettings(), client=LLMClient(other, fallbacks=fallbacks)).extract(
        TURN
    )
    assert _formats(scripted_llm)[3:] == ["json_schema", "json_object+schema"]


def test_a_server_that_rejects_both_schema_forms_gets_plain_json_mode(
    scripted_llm: ScriptedLLM,
) -> None:
    scripted_llm.reject_json_schema(400)
    scripted_llm.reject_schema_in_json_object(400)
    scripted_llm.script("Lisbon", {"facts": ALL_SIX})
    extractor, fallbacks = _with_own_memory(scripted_llm)

    result = extractor.extract(TURN)

    assert len(result.facts) == 6
    assert _formats(scripted_llm) == ["json_schema", "json_object+schema", "json_object"]
    assert result.response_format == "json_object"
    assert result.response_format_note is not None
    assert result.response_format_note.startswith(
        "fell back to json_object: the server rejected json_object+schema (HTTP 400: "
    )
    assert fallbacks.items()[(scripted_llm.base_url, "test-model")].type == "json_object"
    extractor.extract(TURN)
    assert _formats(scripted_llm)[3:] == ["json_object"]


def test_fields_a_json_mode_model_leaves_out_are_filled_by_the_server(
    scripted_llm: ScriptedLLM, extractor: LLMExtractor
) -> None:
    # What Qwen2.5-1.5B answered in plain JSON mode: no subject, no confidence, no tags.
    bare = [
        {"type": "identity", "attribute": "job", "value": "Arup", "content": "Ana works at Arup."},
        {"type": "preference", "topic": "food", "sentiment": "hates", "value": "cilantro",
         "content": "Ana hates cilantro.", "confidence": "90", "mood": "grumpy"},
        {"type": "identity", "content": "Ana is great."},  # its meaning is missing
    ]  # fmt: skip
    scripted_llm.script("Lisbon", {"facts": bare})

    result = extractor.extract(TURN)

    assert [(f.type, f.subject) for f in result.facts] == [
        ("preference", "Ana"),
        ("identity", "Ana"),
    ]
    identity = result.facts[1]
    assert (identity.attribute, identity.slot, identity.confidence) == (
        "employer", "identity/employer", 0.8
    )  # fmt: skip
    preference = result.facts[0]
    assert (preference.sentiment, preference.confidence) == ("dislikes", 0.9)
    assert (result.items_returned, result.repaired, result.dropped_invalid) == (3, 2, 1)
    assert result.invalid_reasons == ["identity.attribute: Field required"]


def test_a_reply_whose_every_item_is_dropped_says_so(
    scripted_llm: ScriptedLLM, extractor: LLMExtractor
) -> None:
    scripted_llm.script("Lisbon", {"facts": [{"content": "Ana lives in Lisbon."}, "Lisbon"]})
    result = extractor.extract(TURN)
    assert result.facts == [] and result.all_dropped
    scripted_llm.script("Lisbon", {"facts": []})  # nothing worth remembering: a normal answer
    assert not extractor.extract(TURN).all_dropped


def test_the_memory_is_shared_by_the_clients_of_a_process(scripted_llm: ScriptedLLM) -> None:
    scripted_llm.reject_json_schema()
    LLMExtractor(_settings(scripted_llm), ExtractionSettings()).extract(TURN)
    LLMExtractor(_settings(scripted_llm), ExtractionSettings()).extract(TURN)
    assert _formats(scripted_llm) == ["json_schema", "json_object+schema", "json_object+schema"]


def test_a_plain_server_error_is_still_transient(
    scripted_llm: ScriptedLLM, extractor: LLMExtractor
) -> None:
    scripted_llm.misbehave("500")  # "The server had an error ...": nothing about the format
    with pytest.raises(TransientError, match=r"server error \(500\)") as info:
        extractor.extract(TURN)
    assert info.value.details["response_format"] == "json_schema"
    assert info.value.details["model"] == "test-model"
    assert _formats(scripted_llm) == ["json_schema"]  # no json_object retry
    assert extractor.extract(TURN).response_format == "json_schema"  # nothing remembered


@pytest.mark.parametrize(
    ("status", "said", "rejects"),
    [
        (500, "1 validation error: response_format.type: Input should be 'text'", True),
        (500, "json_schema is not supported by this backend", True),
        (500, "The server had an error while processing your request", False),
        (500, "feature not supported", False),  # a 500 must name the format
        (503, "response_format json_schema: engine overloaded", False),
        (400, "Unsupported parameter: 'response_format'", True),
        (400, "Unsupported parameter: 'temperature'", True),  # costs one request, see ADR
        (422, "Extra inputs are not permitted", True),
        (400, "Invalid request", False),
        (401, "json_schema", False),
    ],
)
def test_what_counts_as_rejecting_structured_output(status: int, said: str, rejects: bool) -> None:
    assert rejects_structured_output(status, said) is rejects


def test_a_fallback_that_fails_is_not_remembered(
    scripted_llm: ScriptedLLM, extractor: LLMExtractor
) -> None:
    # A 400 that names the format, then a 400 to json_object too: one extra request, the
    # permanent error as before, and json_schema is asked for again next time.
    scripted_llm.reject_json_schema(400)
    scripted_llm.misbehave("400", match="Lisbon")
    with pytest.raises(PermanentError, match=r"\(400\)") as info:
        extractor.extract(TURN)
    assert info.value.details["response_format"] == "json_object+schema"
    assert _formats(scripted_llm) == ["json_schema", "json_object+schema"]
    assert extractor.client.fallbacks.items() == {}
    scripted_llm.reject_json_schema(None)
    assert extractor.extract(TURN).response_format == "json_schema"


def test_a_plain_error_to_the_json_object_retry_is_transient_and_forgotten(
    scripted_llm: ScriptedLLM, extractor: LLMExtractor
) -> None:
    scripted_llm.reject_json_schema()
    scripted_llm.misbehave("500", match="Lisbon")  # the retry a step down fails too...
    with pytest.raises(TransientError) as info:  # ...with a plain 500: worth a retry
        extractor.extract(TURN)
    assert info.value.details["response_format"] == "json_object+schema"
    assert info.value.details["response_format_note"].startswith("fell back to json_object+schema")
    assert _formats(scripted_llm) == ["json_schema", "json_object+schema"]
    assert extractor.client.fallbacks.items() == {}  # the step down never answered


def test_the_fallback_can_be_turned_off(scripted_llm: ScriptedLLM) -> None:
    scripted_llm.reject_json_schema()
    extractor = LLMExtractor(
        _settings(scripted_llm, fallback_to_json_object=False), ExtractionSettings()
    )
    with pytest.raises(PermanentError, match="TIERMEM_LLM__RESPONSE_FORMAT=json_object") as info:
        extractor.extract(TURN)
    assert not isinstance(info.value, TransientError)  # not retried six times
    assert _formats(scripted_llm) == ["json_schema"]


def test_a_request_past_the_models_context_says_which_settings_to_lower(
    scripted_llm: ScriptedLLM,
) -> None:
    # llama-cpp-python's words for a prompt and reply room past its n_ctx (HTTP 400).
    said = (
        "This model's maximum context length is 4096 tokens. However, you requested 5651 "
        "tokens (4151 in the messages, 1500 in the completion)."
    )
    advice = LLMClient(_settings(scripted_llm))._advice(400, said)
    assert "does not fit" in advice and "TIERMEM_LLM__MAX_TOKENS" in advice
    assert "RESPONSE_FORMAT" not in advice  # not a structured-output problem


def test_facts_that_are_not_the_persons_statement_are_dropped_with_the_reason(
    scripted_llm: ScriptedLLM, extractor: LLMExtractor
) -> None:
    """What Qwen2.5-1.5B did on casual chat: the assistant's words written down, a question
    written as a fact, and the prompt's own example ("Ana drives a 2019 Honda Civic")
    filed under this person."""
    items = [
        _fact("identity"),  # "Ana lives in Lisbon." stays
        _fact("fact", content="Two years of you stealing my hoodies, Ana."),
        _fact("fact", content="Does Ana like Lisbon?"),
        _fact("fact", content="Ana drives a 2019 Honda Civic.", attribute="car", value="Civic"),
        _fact(
            "relationship", content="Ana's brother is Marco.", person="Marco", relation="brother"
        ),
    ]
    scripted_llm.script("Lisbon", {"facts": items})
    result = extractor.extract(TURN)
    assert [f.content for f in result.facts] == ["Ana lives in Lisbon."]
    assert result.dropped_invalid == 4 and not result.all_dropped
    assert sum("assistant's words" in r for r in result.invalid_reasons) == 1
    assert sum("a question" in r for r in result.invalid_reasons) == 1
    assert sum("prompt's examples" in r for r in result.invalid_reasons) == 2


def test_the_persons_words_written_back_are_put_in_the_third_person(
    scripted_llm: ScriptedLLM, extractor: LLMExtractor
) -> None:
    """The model wrote the message back ("I'm Dan's brother."): the statement is theirs,
    so it is kept with their name in place of "I", and counted as repaired."""
    items = [
        _fact("fact", content="I've had my cat Biscuit since 2019."),
        _fact("fact", content="Ana's sister Marta visits me every May."),
    ]
    scripted_llm.script("Lisbon", {"facts": items})
    result = extractor.extract(TURN)
    assert sorted(f.content for f in result.facts) == [
        "Ana has had Ana's cat Biscuit since 2019.",
        "Ana's sister Marta visits Ana every May.",
    ]
    assert result.repaired == 2 and result.dropped_invalid == 0


@pytest.mark.parametrize(
    ("said", "written"),
    [
        ("I'm Dan's brother.", "Tom is Dan's brother."),
        ("I really love bouldering.", "Tom really loves bouldering."),
        ("I study law and my sister visits me.", "Tom studies law and Tom's sister visits Tom."),
        ("I don't eat meat.", "Tom doesn't eat meat."),
        ("I quit Tesco in March 2024.", "Tom quit Tesco in March 2024."),
        ("I can swim.", "Tom can swim."),
        ("I'd like to move to Spain.", "Tom would like to move to Spain."),
        ("My cat Mo loves My Chemical Romance.", "Tom's cat Mo loves My Chemical Romance."),
        ("You said I left Tesco.", None),
    ],
)
def test_third_person(said: str, written: str | None) -> None:
    assert third_person(said, "Tom") == written


def test_an_example_value_the_turn_does_say_is_kept(
    scripted_llm: ScriptedLLM, extractor: LLMExtractor
) -> None:
    turn = dataclasses.replace(TURN, user_message="Picked up my 2019 Honda Civic in Lisbon!")
    car = _fact("fact", content="Ana drives a 2019 Honda Civic.", attribute="car", value="Civic")
    scripted_llm.script("Civic", {"facts": [car]})
    assert [f.content for f in extractor.extract(turn).facts] == ["Ana drives a 2019 Honda Civic."]


def test_a_reply_of_copies_only_is_a_dropped_run_not_an_empty_done(
    scripted_llm: ScriptedLLM, extractor: LLMExtractor
) -> None:
    copy = _fact("fact", content="Ana drives a 2019 Honda Civic.", attribute="car", value="Civic")
    scripted_llm.script("Lisbon", {"facts": [copy]})
    result = extractor.extract(TURN)
    assert result.facts == [] and result.all_dropped


def test_the_assistants_words_in_the_first_person_are_dropped(
    scripted_llm: ScriptedLLM, extractor: LLMExtractor
) -> None:
    turn = dataclasses.replace(
        TURN,
        user_message="we had to let her go this morning",
        assistant_message="I'm so sorry, Ana. Fourteen years is a long, loved life.",
    )
    items = [_fact("fact", content="I'm so sorry, Ana. Fourteen years is a long, loved life.")]
    scripted_llm.script("let her go", {"facts": items})
    result = extractor.extract(turn)
    assert result.facts == [] and result.invalid_reasons == [
        "the assistant's words, not a fact about them"
    ]


def test_a_fact_made_of_the_assistants_reply_is_dropped_and_the_persons_are_kept(
    scripted_llm: ScriptedLLM, extractor: LLMExtractor
) -> None:
    """What Qwen2.5-1.5B did on casual chat: the reply's advice written as her fact
    ("Make sure you're getting B12 and iron!" -> "Ana is getting B12 and iron."). A fact
    with a word of hers, or of the question she answers, stays, typos and all."""
    turn = dataclasses.replace(
        TURN,
        user_message="thats the plan!! gonna go fully vegan for good, startin at the bakey monday",
        assistant_message="Love that. Make sure you're getting B12 and iron! Bakeries start early.",
        earlier_messages=(("Assistant", "Are you planning to stay vegan after January?"),),
    )
    items = [
        _fact("fact", content="Ana is getting B12 and iron."),
        _fact("goal", content="Ana plans to stay vegan after January.", goal="stay vegan"),
        _fact("fact", content="Ana starts early at the bakery."),
    ]
    scripted_llm.script("the plan", {"facts": items})
    result = extractor.extract(turn)
    assert sorted(f.content for f in result.facts) == [
        "Ana plans to stay vegan after January.",
        "Ana starts early at the bakery.",
    ]
    assert result.invalid_reasons == ["the assistant's reply to the turn, not the person's words"]
    assert result.all_dropped is False


def test_a_fact_taken_from_the_earlier_conversation_is_dropped_and_an_answer_is_kept(
    scripted_llm: ScriptedLLM, extractor: LLMExtractor
) -> None:
    """The earlier messages are context: a value only they say is not this turn's fact,
    unless the turn answers the assistant's question that offered it, or ends it."""
    turn = dataclasses.replace(
        TURN,
        user_message="the first one!! geography",
        assistant_message="Nice! Geography at Arup sounds fun.",
        earlier_messages=(
            ("Ana", "just moved to leicester, got offers from arup and atkins"),
            ("Assistant", "Welcome! Which offer will you take, Arup or Atkins?"),
        ),
    )
    items = [
        _fact(
            "identity", content="Ana lives in Leicester.", attribute="location", value="Leicester"
        ),
        _fact("decision", content="Ana took the job at Arup.", topic="job", choice="Arup"),
        _fact(
            "identity",
            content="Ana no longer lives in Leicester.",
            attribute="location",
            value="Leicester",
            ended=True,
        ),
    ]
    scripted_llm.script("the first one", {"facts": items})
    result = extractor.extract(turn)
    assert sorted(f.content for f in result.facts) == [
        "Ana no longer lives in Leicester.",
        "Ana took the job at Arup.",
    ]
    assert result.invalid_reasons == [
        "from the earlier conversation ('leicester' is not in this turn)"
    ]


def test_a_sentence_restating_the_earlier_conversation_is_dropped(
    scripted_llm: ScriptedLLM, extractor: LLMExtractor
) -> None:
    """A fact with no value field, its words said before and none in this turn, is the
    earlier conversation restated: stored again, it would bring back what this turn ended."""
    turn = dataclasses.replace(
        TURN,
        user_message="done it. officially withdrawn 😬 parents r not thrilled",
        assistant_message=None,
        earlier_messages=(
            ("Ana", "seriously thinking of dropping out, i hate the course"),
            ("Assistant", "That's a big decision. What would you do instead?"),
        ),
    )
    items = [
        _fact("fact", content="Ana is seriously thinking of dropping out."),
        _fact("fact", content="Ana has officially withdrawn from her course."),
    ]
    scripted_llm.script("officially withdrawn", {"facts": items})
    result = extractor.extract(turn)
    assert [f.content for f in result.facts] == ["Ana has officially withdrawn from her course."]
    assert result.invalid_reasons == [
        "from the earlier conversation ('seriously thinking dropping out' is not in this turn)"
    ]
    assert result.dropped_repeats == 1


@pytest.mark.parametrize(
    ("written", "value"),
    [
        ("User is Tom.", "User"),
        ("Tom is the user.", "User"),
        ("I'm Tom.", "User"),
        ("User is Tom.", "Tom"),
    ],
)
def test_a_name_fact_names_the_name_the_person_said(
    scripted_llm: ScriptedLLM, extractor: LLMExtractor, written: str, value: str
) -> None:
    """With no name known yet the request says "User", and the 1.5B model wrote the name
    fact with "User" as its value: the name is the word of its content the person said."""
    turn = dataclasses.replace(TURN, user_speaker="User", user_message="hey, im tom btw 👋")
    item = _fact("identity", content=written, attribute="name", value=value)
    scripted_llm.script("im tom", {"facts": [item]})
    [fact] = extractor.extract(turn).facts
    assert (fact.value, fact.content) == ("Tom", "User's name is Tom.")  # type: ignore[union-attr]


def test_a_reply_that_only_restates_the_earlier_conversation_is_done_with_nothing_new(
    scripted_llm: ScriptedLLM, extractor: LLMExtractor
) -> None:
    """Not a failed reading to retry: the turn said nothing the context did not hold."""
    turn = dataclasses.replace(
        TURN,
        user_message="halls are grim tho",
        earlier_messages=(("Ana", "just moved to leicester for uni"),),
    )
    item = _fact(
        "identity", content="Ana lives in Leicester.", attribute="location", value="Leicester"
    )
    scripted_llm.script("halls are grim", {"facts": [item]})
    result = extractor.extract(turn)
    assert result.facts == [] and not result.all_dropped
    assert (result.dropped_invalid, result.dropped_repeats) == (1, 1)
    assert result.first_reply is None and len(scripted_llm.chat_requests()) == 1  # not asked
    assert result.invalid_reasons == [
        "from the earlier conversation ('leicester' is not in this turn)"
    ]


def test_what_the_person_only_asks_or_supposes_is_not_stored(
    scripted_llm: ScriptedLLM, extractor: LLMExtractor
) -> None:
    """Qwen2.5-1.5B wrote "Ana wants a cockapoo." from "if i got a dog would a cockapoo be
    ok": a question or an "if" states nothing. A reply of nothing else is a "done" with 0
    facts (a question is nothing to remember), never a run to retry."""
    turn = dataclasses.replace(
        TURN,
        user_message="if i got a dog would a cockapoo be ok in a flat? is it normal to pay 1800",
        assistant_message="Cockapoos can do well in flats.",
    )
    items = [
        _fact("fact", content="Ana wants a cockapoo.", attribute="pet", value="cockapoo"),
        _fact("fact", content="Ana pays 1800 for a flat."),
    ]
    scripted_llm.script("cockapoo", {"facts": items})
    result = extractor.extract(turn)
    assert result.facts == [] and not result.all_dropped
    assert result.invalid_reasons == [
        "from the person's question or 'if' ('cockapoo' is not stated)",
        "from the person's question or 'if' ('1800 flat' is not stated)",
    ]
    assert len(scripted_llm.chat_requests()) == 1  # not asked again


def test_a_statement_beside_a_question_is_kept(
    scripted_llm: ScriptedLLM, extractor: LLMExtractor
) -> None:
    turn = dataclasses.replace(
        TURN, user_message="just moved to leeds, any tips? would a bike be worth it"
    )
    items = [
        _fact("identity", content="Ana lives in Leeds.", attribute="location", value="Leeds"),
        _fact("fact", content="Ana wants a bike.", attribute="vehicle", value="bike"),
    ]
    scripted_llm.script("leeds", {"facts": items})
    result = extractor.extract(turn)
    assert [f.content for f in result.facts] == ["Ana lives in Leeds."]
    assert result.invalid_reasons == ["from the person's question or 'if' ('bike' is not stated)"]


@pytest.mark.parametrize(
    ("message", "asked", "stated"),
    [
        ("if i moved id want a beach. lease ends in august", "if i moved id want a beach",
         "lease ends in august"),
        ("idk maybe lisbon? is it overhyped", "idk maybe lisbon is it overhyped", ""),
        ("hmm. would a cat be easier?", "would a cat be easier", "hmm"),
        ("can i still drink beer w type 1 or nah", "can i still drink beer w type 1 or nah", ""),
        ("how much do electricians make", "how much do electricians make", ""),
        ("just moved to leeds, any tips?", "any tips", "just moved to leeds"),
        # Chat drops the "I" of a statement: a bare verb first is not a question.
        ("did a 5k today!! can finally breathe", "", "did a 5k today can finally breathe"),
        ("had a great time in rome, whats next", "", "had a great time in rome whats next"),
    ],
)  # fmt: skip
def test_the_sentences_that_ask_or_suppose(message: str, asked: str, stated: str) -> None:
    assert asked_and_stated(message) == (f" {asked} ", f" {stated} ")


@pytest.mark.parametrize(
    ("speaker", "written", "value"),
    [
        ("Zoe", "Zoe's name is Teal.", "Teal"),  # "might repaint teal": a name is known
        ("User", "User wants to paint it Teal.", "User"),  # not "User is <name>."
        ("User", "To User, it is Teal.", "User"),  # no name statement
    ],
)
def test_a_name_fact_takes_no_word_that_is_not_a_name(
    scripted_llm: ScriptedLLM, extractor: LLMExtractor, speaker: str, written: str, value: str
) -> None:
    """The name is taken from the content only while no name is known, and only a word
    written as a name: never the first word, never a known one, and only one."""
    turn = dataclasses.replace(
        TURN, user_speaker=speaker, user_message="to be honest i might repaint teal lol"
    )
    item = _fact("identity", content=written, attribute="name", value=value)
    scripted_llm.script("repaint teal", {"facts": [item]})
    [fact] = extractor.extract(turn).facts
    assert fact.value == value and fact.content == written  # type: ignore[union-attr]


# -- asking again after a reply of dropped items (ADR 0031) ----------------------------------

QUESTION = _fact("fact", content="Is Ana moving to Lisbon?")
LISBON = _fact("identity")


def test_a_reply_of_dropped_items_is_answered_with_why_and_the_model_asked_again(
    scripted_llm: ScriptedLLM, extractor: LLMExtractor
) -> None:
    scripted_llm.script("Lisbon", {"facts": [QUESTION]})
    scripted_llm.script_asked_again("a question, not a fact", {"facts": [LISBON]})
    result = extractor.extract(TURN)
    assert [f.content for f in result.facts] == ["Ana lives in Lisbon."]
    assert not result.all_dropped
    first = result.first_reply
    assert first is not None and first.all_dropped
    assert first.invalid_reasons == ["a question, not a fact"]
    asked, again = scripted_llm.chat_requests()
    # The follow-up continues the first request: same prefix, the model's answer, then why.
    assert again["messages"][:2] == asked["messages"]
    assert again["messages"][2] == {
        "role": "assistant",
        "content": json.dumps({"facts": [QUESTION]}),
    }
    follow_up = again["messages"][3]["content"]
    assert "'Is Ana moving to Lisbon?': a question, not a fact" in follow_up
    assert "what Ana said in this turn" in follow_up
    assert again["response_format"] == asked["response_format"]
    # The turn cost both calls.
    assert result.prompt_tokens == first.prompt_tokens + _usage(scripted_llm, again)[0]
    assert result.completion_tokens > first.completion_tokens


def _usage(llm: ScriptedLLM, request: dict[str, Any]) -> tuple[int, int]:
    """The tokens the scripted server counts for `request` (a quarter of its characters)."""
    texts = [m["content"] for m in request["messages"]]
    return max(1, -(-sum(len(t) for t in texts) // 4)), 0


def test_asked_again_the_model_may_answer_that_the_turn_states_nothing(
    scripted_llm: ScriptedLLM, extractor: LLMExtractor
) -> None:
    scripted_llm.script("Lisbon", {"facts": [QUESTION]})
    scripted_llm.script_asked_again("a question", {"facts": []})
    result = extractor.extract(TURN)
    # A done with 0 facts, not a dropped run: the first reply's items stay on record.
    assert result.facts == [] and result.items_returned == 0 and not result.all_dropped
    assert result.first_reply is not None and result.first_reply.dropped_invalid == 1


def test_a_model_that_repeats_its_dropped_items_ends_dropped(
    scripted_llm: ScriptedLLM, extractor: LLMExtractor
) -> None:
    scripted_llm.script("Lisbon", {"facts": [QUESTION]})  # answered again the same way
    result = extractor.extract(TURN)
    assert result.facts == [] and result.all_dropped and result.first_reply is not None
    assert len(scripted_llm.chat_requests()) == 2  # asked once more, not in a loop


def test_a_follow_up_that_fails_leaves_the_first_reply_dropped(
    scripted_llm: ScriptedLLM, extractor: LLMExtractor
) -> None:
    scripted_llm.script("Lisbon", {"facts": [QUESTION]})
    scripted_llm.misbehave("500", match="none of the facts you wrote")
    result = extractor.extract(TURN)
    assert result.all_dropped and result.first_reply is None
    assert result.invalid_reasons == ["a question, not a fact"]


@pytest.mark.parametrize(
    "reply",
    [
        {"facts": [LISBON]},  # something kept
        {"facts": []},  # nothing worth remembering
    ],
)
def test_only_a_reply_of_dropped_items_is_asked_again(
    scripted_llm: ScriptedLLM, extractor: LLMExtractor, reply: dict[str, Any]
) -> None:
    scripted_llm.script("Lisbon", reply)
    result = extractor.extract(TURN)
    assert result.first_reply is None and len(scripted_llm.chat_requests()) == 1


def test_asking_again_can_be_turned_off(scripted_llm: ScriptedLLM) -> None:
    off = LLMExtractor(_settings(scripted_llm), ExtractionSettings(ask_again_when_dropped=False))
    scripted_llm.script("Lisbon", {"facts": [QUESTION]})
    scripted_llm.script_asked_again("a question", {"facts": [LISBON]})
    result = off.extract(TURN)
    assert result.all_dropped and len(scripted_llm.chat_requests()) == 1


def test_a_follow_up_after_a_schema_inside_json_object_keeps_that_format(
    scripted_llm: ScriptedLLM,
) -> None:
    scripted_llm.reject_json_schema()
    extractor = LLMExtractor(
        _settings(scripted_llm),
        ExtractionSettings(),
        client=LLMClient(_settings(scripted_llm), fallbacks=StructuredOutputFallbacks()),
    )
    scripted_llm.script("Lisbon", {"facts": [QUESTION]})
    scripted_llm.script_asked_again("a question", {"facts": [LISBON]})
    result = extractor.extract(TURN)
    assert [f.content for f in result.facts] == ["Ana lives in Lisbon."]
    refused, asked, again = scripted_llm.chat_requests()
    assert refused["response_format"]["type"] == "json_schema"
    assert asked["response_format"] == again["response_format"]
    assert (
        again["response_format"]["type"] == "json_object" and "schema" in again["response_format"]
    )
    assert again["messages"][0] == asked["messages"][0]  # the schema in the prompt, unchanged


def test_a_long_reply_is_shown_again_as_the_items_the_question_names(
    scripted_llm: ScriptedLLM, extractor: LLMExtractor
) -> None:
    """Ten items and the prompt came near a 4,096-token context: the follow-up shows the
    five it names, so it fits where the first call did."""
    questions = [_fact("fact", content=f"Is Ana moving to Lisbon in {m}?") for m in range(1, 9)]
    scripted_llm.script("Lisbon", {"facts": questions})
    extractor.extract(TURN)
    _, again = scripted_llm.chat_requests()
    assert json.loads(again["messages"][2]["content"]) == {"facts": questions[:5]}
    follow_up = again["messages"][3]["content"]
    assert "in 5?" in follow_up and "in 6?" not in follow_up
