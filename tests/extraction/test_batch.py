"""Several turns of a session in one extraction call (ADR 0024): the real openai client
against the scripted server, the prompt and schema it sends, and what each turn gets back."""

from __future__ import annotations

import dataclasses
import datetime as dt
import json
import re
from typing import Any

import jsonschema
import pytest

from shared.config import ExtractionSettings, LLMSettings
from shared.extraction.base import KnownFact, TurnInput
from shared.extraction.batch import (
    build_batch_messages,
    items_by_turn,
    pack_turns,
    share,
    shown_known_facts,
)
from shared.extraction.llm_extractor import LLMExtractor
from shared.extraction.prompts import build_extraction_messages, prompt_hash
from tests.scripted_llm import ScriptedLLM

DAY = dt.datetime(2024, 5, 8, 14, 30, tzinfo=dt.UTC)


def _turn(text: str, reply: str | None = "Noted.", **fields: Any) -> TurnInput:
    return TurnInput(
        user_message=text, assistant_message=reply, session_date=DAY, user_speaker="Ana", **fields
    )


TURNS = [
    _turn("I moved to Lisbon last month.", "Lisbon is lovely! Where do you work?"),
    _turn("at Arup, the bridges team", "Nice. Any pets?"),
    _turn("a cat called Mo", None),
]
LISBON = {
    "type": "identity",
    "attribute": "location",
    "value": "Lisbon",
    "content": "Ana lives in Lisbon.",
    "confidence": 0.9,
    "tags": [],
    "valid_from": None,
    "ended": False,
}
ARUP = {**LISBON, "attribute": "employer", "value": "Arup", "content": "Ana works at Arup."}
MO = {
    "type": "fact",
    "attribute": "pet",
    "value": "Mo",
    "content": "Ana has a cat called Mo.",
    "confidence": 0.9,
    "tags": [],
    "valid_from": None,
    "ended": False,
}


def _extractor(scripted_llm: ScriptedLLM, **extraction: Any) -> LLMExtractor:
    llm = LLMSettings(base_url=scripted_llm.base_url, model="m", timeout_s=5)
    return LLMExtractor(llm, ExtractionSettings(batch_turns=8, **extraction))


def test_three_turns_are_one_call_and_each_fact_goes_to_its_turn(
    scripted_llm: ScriptedLLM,
) -> None:
    scripted_llm.script(
        "bridges team",
        {"facts": [{"turn": 2, **ARUP}, {"turn": 1, **LISBON}, {"turn": 3, **MO}]},
    )
    results = _extractor(scripted_llm).extract_batch(TURNS)

    assert len(scripted_llm.chat_requests()) == 1
    assert [[f.content for f in r.facts] for r in results] == [
        ["Ana lives in Lisbon."],
        ["Ana works at Arup."],
        ["Ana has a cat called Mo."],
    ]
    assert all(r.batch_size == 3 and r.repaired == 0 and not r.all_dropped for r in results)
    # The call's tokens are shared out: the runs add up to what the server counted.
    request = scripted_llm.chat_requests()[0]
    counted = sum(len(m["content"]) for m in request["messages"])
    assert sum(r.prompt_tokens for r in results) == -(-counted // 4)
    assert results[0].prompt_hash != prompt_hash()  # the batch prompt is told apart


def test_the_prompt_keeps_the_static_prefix_and_numbers_the_turns(
    scripted_llm: ScriptedLLM,
) -> None:
    earlier = (("Ana", "hi!"), ("Assistant", "Hello Ana, what's new?"))
    turns = [dataclasses.replace(TURNS[0], earlier_messages=earlier), *TURNS[1:]]
    _extractor(scripted_llm).extract_batch(turns)

    request = scripted_llm.chat_requests()[0]
    system, user = (m["content"] for m in request["messages"])
    one_turn_system, _ = build_extraction_messages(TURNS[0])
    assert system.startswith(one_turn_system)  # the cached prefix of one-turn calls
    assert 'turn" field' in system[len(one_turn_system) :]
    assert user.index("<earlier_conversation") < user.index('<turn n="1"')
    assert user.index('<turn n="1"') < user.index("Lisbon") < user.index('<turn n="2"')
    assert user.index('<turn n="2"') < user.index("bridges") < user.index('<turn n="3"')
    assert "(no assistant reply in this turn)" in user.split('<turn n="3"')[1]

    schema = request["response_format"]["json_schema"]["schema"]
    jsonschema.validate({"facts": [{"turn": 3, **MO}]}, schema)
    with pytest.raises(jsonschema.ValidationError):  # no turn 4 in a batch of three
        jsonschema.validate({"facts": [{"turn": 4, **MO}]}, schema)
    with pytest.raises(jsonschema.ValidationError):  # every item names its turn
        jsonschema.validate({"facts": [MO]}, schema)


def test_the_decoding_bound_grows_with_the_turns(scripted_llm: ScriptedLLM) -> None:
    """A server that decodes by the schema (llama.cpp's json_object + schema) gets max_facts
    per turn of the batch: bounded, and not one turn's ten for eight turns."""
    scripted_llm.reject_json_schema()
    extractor = _extractor(scripted_llm, max_facts_per_turn=4)
    extractor.extract_batch(TURNS)
    extractor.extract_batch(TURNS[:2])
    bounds = [
        r["response_format"]["schema"]["properties"]["facts"]["maxItems"]
        for r in scripted_llm.chat_requests()
        if "schema" in r["response_format"]
    ]
    assert bounds == [12, 8]


def test_items_without_a_turn_number_go_to_the_last_turn() -> None:
    """A model in plain JSON mode may leave "turn" out or write it as text."""
    items = [{"turn": "1", "a": 1}, {"a": 2}, {"turn": 9, "a": 3}, {"turn": 2, "a": 4}, "x"]
    assert items_by_turn(items, 3) == [[{"a": 1}], [{"a": 4}], [{"a": 2}, {"a": 3}, "x"]]


def test_one_turn_whose_items_are_all_dropped_is_dropped_and_the_others_keep_theirs(
    scripted_llm: ScriptedLLM,
) -> None:
    no_value = {k: v for k, v in ARUP.items() if k not in ("attribute", "value")}
    scripted_llm.script("bridges team", {"facts": [{"turn": 1, **LISBON}, {"turn": 2, **no_value}]})
    first, second, third = _extractor(scripted_llm).extract_batch(TURNS)
    assert [f.content for f in first.facts] == ["Ana lives in Lisbon."]
    assert second.facts == [] and second.all_dropped and second.items_returned == 1
    assert second.invalid_reasons == ["identity.attribute: Field required"]
    assert third.facts == [] and not third.all_dropped  # nothing worth remembering


def test_small_talk_is_left_out_of_the_call(scripted_llm: ScriptedLLM) -> None:
    turns = [TURNS[0], _turn("thanks!"), TURNS[1]]
    results = _extractor(scripted_llm).extract_batch(turns)
    assert [r.skipped_reason for r in results] == [None, "small_talk", None]
    user = scripted_llm.chat_requests()[0]["messages"][1]["content"]
    assert "thanks!" not in user and user.count("<turn n=") == 2


def test_a_batch_that_would_not_fit_the_context_is_split(scripted_llm: ScriptedLLM) -> None:
    """batch_max_tokens is the model's window: the prompt plus one turn's reply room."""
    long = " ".join(["I walked the dog along the river and we saw herons again."] * 40)
    turns = [_turn(f"{long} ({i})") for i in range(4)]
    extractor = _extractor(scripted_llm)
    one = extractor._batch_prompt_tokens(turns[:1])
    two = extractor._batch_prompt_tokens(turns[:2])
    # Room for two turns' prompt and the reply, not three.
    window = two + extractor.llm_settings.max_tokens + (two - one) // 2
    extractor = _extractor(scripted_llm, batch_max_tokens=window)
    results = extractor.extract_batch(turns)
    users = [r["messages"][1]["content"] for r in scripted_llm.chat_requests()]
    assert [u.count("<turn n=") for u in users] == [2, 2]
    assert [r.batch_size for r in results] == [2, 2, 2, 2]
    max_tokens = [r["max_tokens"] for r in scripted_llm.chat_requests()]
    assert all(extractor.llm_settings.max_tokens <= m <= window - one for m in max_tokens)


def test_a_turn_alone_in_its_call_is_extracted_as_without_batching(
    scripted_llm: ScriptedLLM,
) -> None:
    scripted_llm.script("Lisbon", {"facts": [LISBON]})
    (result,) = _extractor(scripted_llm).extract_batch(TURNS[:1])
    (request,) = scripted_llm.chat_requests()
    assert [m["content"] for m in request["messages"]] == list(build_extraction_messages(TURNS[0]))
    assert result.batch_size == 1 and result.prompt_hash == prompt_hash()
    assert [f.content for f in result.facts] == ["Ana lives in Lisbon."]


def test_pack_turns_and_shares() -> None:
    assert pack_turns([0, 1, 2, 3, 4], lambda call: 10 * len(call), budget=20) == [
        [0, 1],
        [2, 3],
        [4],
    ]
    assert pack_turns([0, 1], lambda call: 50, budget=20) == [[0], [1]]
    assert share(10, 3) == [4, 3, 3] and sum(share(7, 7)) == 7


def test_a_reply_in_json_mode_still_names_turns(scripted_llm: ScriptedLLM) -> None:
    """A server with JSON mode only gets the schema (turn numbers included) in its prompt."""
    scripted_llm.reject_json_schema(400)
    scripted_llm.reject_schema_in_json_object(400)
    scripted_llm.script("bridges team", {"facts": [{"turn": 3, **MO}]})
    results = _extractor(scripted_llm).extract_batch(TURNS)
    assert [len(r.facts) for r in results] == [0, 0, 1]
    last = scripted_llm.chat_requests()[-1]
    assert last["response_format"] == {"type": "json_object"}
    assert '"turn":{"type":"integer","enum":[1,2,3]}' in last["messages"][0]["content"]
    assert json.loads(json.dumps(results[2].facts[0].model_dump(mode="json")))["type"] == "fact"


def test_the_known_facts_of_the_turns_are_shown_once_nearest_first_and_bounded() -> None:
    def known(*names: str) -> tuple[KnownFact, ...]:
        return tuple(KnownFact("fact", f"Ana has a {name}.") for name in names)

    turns = [
        dataclasses.replace(TURNS[0], known_facts=known("cat", "bike", "car")),
        dataclasses.replace(TURNS[1], known_facts=known("dog", "cat", "boat")),
    ]
    _, user = build_batch_messages(
        turns, max_facts=10, known_facts=shown_known_facts(turns, max_known=4)
    )
    shown = re.findall(r"Ana has a (\w+)\.", user)
    assert shown == ["cat", "dog", "bike", "car"]  # each turn's nearest first, "cat" once


def test_a_turn_whose_items_are_all_dropped_is_asked_again_in_the_batchs_conversation(
    scripted_llm: ScriptedLLM,
) -> None:
    question = {**ARUP, "content": "Does Ana work at Arup?"}
    scripted_llm.script("bridges team", {"facts": [{"turn": 1, **LISBON}, {"turn": 2, **question}]})
    # The answer may hold other turns' items: only the asked turn's are read.
    answer = {"facts": [{"turn": 2, **ARUP}, {"turn": 1, **LISBON}]}
    scripted_llm.script_asked_again("turn 2, 'does ana work at arup?'", answer)
    first, second, third = _extractor(scripted_llm).extract_batch(TURNS)
    assert [f.content for f in first.facts] == ["Ana lives in Lisbon."]
    assert first.first_reply is None
    assert [f.content for f in second.facts] == ["Ana works at Arup."]
    assert second.first_reply is not None and second.first_reply.all_dropped
    assert third.facts == [] and third.first_reply is None
    batch, again = scripted_llm.chat_requests()
    assert again["messages"][:2] == batch["messages"]
    assert "what Ana said in turn 2 again" in again["messages"][3]["content"]
    # The follow-up's cost is the asked turn's alone.
    assert second.prompt_tokens > first.prompt_tokens
