"""What a known value is now (ADR 0032): asked of the model, over the scripted server, for
the known facts the turn's reply touched."""

from __future__ import annotations

import datetime as dt
from typing import Any

import pytest

from shared.config import ExtractionSettings, LLMSettings
from shared.extraction.base import KnownFact, TurnInput
from shared.extraction.llm_extractor import LLMExtractor
from shared.extraction.value_now import changed_fact, touched_facts, value_question
from tests.scripted_llm import ScriptedLLM

VEGAN = KnownFact(
    type="identity", content="Sofia is vegan.", attribute="diet", value="vegan", id="f-vegan",
    slot="diet",
)  # fmt: skip
CAT = KnownFact(
    type="fact", content="Sofia has a cat called Miso.", attribute="pet", value="Miso",
    id="f-cat", slot="pet:miso",
)  # fmt: skip
BROTHER = KnownFact(
    type="relationship", content="Sofia's brother is Aiden.", value="Aiden", id="f-aiden",
    slot="brother:aiden",
)  # fmt: skip
TURN = TurnInput(
    user_message="welp. anemia. adding fish + eggs back in. pescatarian now i guess",
    assistant_message="Sorry to hear that. Are you taking iron supplements?",
    session_date=dt.datetime(2024, 5, 28, 12, tzinfo=dt.UTC),
    user_speaker="Sofia",
    known_facts=(VEGAN, CAT),
)


def _item(content: str, **fields: Any) -> dict[str, Any]:
    return {
        "content": content, "type": "identity", "attribute": "diet", "value": "vegan",
        "ended": False, "valid_from": None, "confidence": 0.9, "tags": [], **fields,
    }  # fmt: skip


@pytest.fixture
def extractor(scripted_llm: ScriptedLLM) -> LLMExtractor:
    llm = LLMSettings(base_url=scripted_llm.base_url, api_key="sk-test", model="test-model")
    return LLMExtractor(llm, ExtractionSettings())


def _questions(llm: ScriptedLLM) -> list[str]:
    return [
        r["messages"][-1]["content"]
        for r in llm.chat_requests()
        if r["messages"][-1]["content"].startswith("Known before this turn")
    ]


def test_a_new_value_in_the_persons_words_replaces_the_known_fact_it_touched(
    scripted_llm: ScriptedLLM, extractor: LLMExtractor
) -> None:
    # The small model's habit: the old fact restated, nothing for the new state.
    scripted_llm.script("pescatarian", {"facts": [_item("Sofia is vegan."), _item(
        "Sofia has anemia.", type="fact", attribute="condition", value="anemia")]})  # fmt: skip
    scripted_llm.script_value_now("diet", {"now": "pescatarian"})
    result = extractor.extract(TURN)

    # Asked about the fact the reply touched, in a follow-up of the same conversation; not
    # about the cat (untouched, and one of several values).
    (question,) = _questions(scripted_llm)
    assert question.startswith('Known before this turn: Sofia\'s diet was "vegan".')
    assert '"welp. anemia. adding fish + eggs back in. pescatarian now i guess"' in question
    extraction, asked = scripted_llm.chat_requests()
    assert asked["messages"][:2] == extraction["messages"]
    changed = result.facts[0]
    assert changed.content == "Sofia's diet is pescatarian."
    assert changed.details["attribute"] == "diet" and changed.details["value"] == "pescatarian"
    assert changed.ends_fact_ids == ("f-vegan",) and not changed.ended
    # The restatement is dropped: written after the change it would keep "vegan" believed.
    assert [f.content for f in result.facts] == [
        "Sofia's diet is pescatarian.",
        "Sofia has anemia.",
    ]
    assert result.ending_checks == 1 and result.values_changed == 1
    assert result.prompt_tokens > extraction_tokens(scripted_llm, extraction)


def extraction_tokens(llm: ScriptedLLM, request: dict[str, Any]) -> int:
    return max(1, -(-sum(len(m["content"]) for m in request["messages"]) // 4))


def test_the_known_value_again_changes_nothing(
    scripted_llm: ScriptedLLM, extractor: LLMExtractor
) -> None:
    scripted_llm.script("pescatarian", {"facts": [_item("Sofia is vegan.")]})
    result = extractor.extract(TURN)  # unscripted, the model answers the known value
    assert [f.content for f in result.facts] == ["Sofia is vegan."]
    assert result.ending_checks == 1 and result.values_changed == 0


@pytest.mark.parametrize(
    ("now", "why"),
    [
        ("vegetarian", "a value the person did not say in this turn: made up"),
        ("Vegan", "the known value, however written"),
    ],
)
def test_an_answer_that_is_not_a_new_value_in_their_words_changes_nothing(
    scripted_llm: ScriptedLLM, extractor: LLMExtractor, now: str, why: str
) -> None:
    scripted_llm.script("pescatarian", {"facts": [_item("Sofia eats fish again.", type="fact",
                                                        attribute=None, value=None)]})  # fmt: skip
    scripted_llm.script_value_now("diet", {"now": now})
    result = extractor.extract(TURN)
    assert [f.content for f in result.facts] == ["Sofia eats fish again."], why


@pytest.mark.parametrize("now", ["none", "0", "nothing"])
def test_none_left_ends_the_known_fact(now: str) -> None:
    turn = TurnInput(
        user_message="handed my notice in!! last shift friday",
        assistant_message=None,
        session_date=TURN.session_date,
        user_speaker="Jade",
    )
    tesco = KnownFact(type="identity", content="Jade works at Tesco.", attribute="employer",
                      value="Tesco", id="f-tesco", slot="employer")  # fmt: skip
    ending = changed_fact(tesco, now, turn)
    assert ending is not None and ending.ended
    assert ending.content == "It is no longer true that Jade works at Tesco."
    assert ending.ends_fact_ids == ("f-tesco",)


def test_a_relationship_is_asked_for_its_relation() -> None:
    turn = TurnInput(
        user_message="wait sorry aiden is my cousin not my brother lol",
        assistant_message=None,
        session_date=TURN.session_date,
        user_speaker="Sofia",
        known_facts=(BROTHER,),
    )
    question = value_question(BROTHER, turn)
    assert question is not None
    assert question.startswith('Known before this turn: Sofia\'s relation to Aiden was "brother".')
    cousin = changed_fact(BROTHER, "cousin", turn)
    assert cousin is not None and cousin.content == "Aiden is Sofia's cousin."
    assert cousin.details["relation"] == "cousin" and cousin.ends_fact_ids == ("f-aiden",)


def test_only_touched_facts_with_one_current_value_are_asked_about() -> None:
    untouched = KnownFact(type="identity", content="Sofia lives in Leeds.", attribute="location",
                          value="Leeds", id="f-leeds", slot="location")  # fmt: skip
    no_id = KnownFact(type="identity", content="Sofia is 30.", attribute="age", value="30",
                      slot="age")  # fmt: skip
    turn = TurnInput(
        user_message="x", assistant_message=None, session_date=TURN.session_date,
        user_speaker="Sofia", known_facts=(CAT, untouched, no_id, VEGAN, BROTHER),
    )  # fmt: skip
    items = [
        {"content": "Sofia feeds Miso fish.", "attribute": "diet"},  # the cat: several values
        {"content": "Sofia is 30 and Aiden visited."},  # no stored id; the relationship
    ]
    assert touched_facts(turn, items, limit=5) == [VEGAN, BROTHER]
    assert touched_facts(turn, items, limit=1) == [VEGAN]


def test_the_question_can_be_turned_off(scripted_llm: ScriptedLLM) -> None:
    llm = LLMSettings(base_url=scripted_llm.base_url, api_key="sk-test", model="test-model")
    off = LLMExtractor(llm, ExtractionSettings(ending_checks_per_turn=0))
    scripted_llm.script("pescatarian", {"facts": [_item("Sofia is vegan.")]})
    scripted_llm.script_value_now("diet", {"now": "pescatarian"})
    result = off.extract(TURN)
    assert len(scripted_llm.chat_requests()) == 1 and result.ending_checks == 0


def test_a_question_that_fails_changes_nothing(
    scripted_llm: ScriptedLLM, extractor: LLMExtractor
) -> None:
    scripted_llm.script("pescatarian", {"facts": [_item("Sofia is vegan.")]})
    scripted_llm.misbehave("500", match="known before this turn", times=5)
    result = extractor.extract(TURN)
    assert [f.content for f in result.facts] == ["Sofia is vegan."]
    assert result.ending_checks == 0
