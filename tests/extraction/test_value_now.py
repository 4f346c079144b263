"""What a known value is now (ADR 0032): asked of the model, over the scripted server, for
the known facts the turn's reply touched."""

from __future__ import annotations

import dataclasses
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
    assert changed.content == "Sofia's diet is pescatarian, no longer vegan."
    assert changed.details["attribute"] == "diet" and changed.details["value"] == "pescatarian"
    assert changed.ends_fact_ids == ("f-vegan",) and not changed.ended
    # The restatement is dropped: written after the change it would keep "vegan" believed.
    assert [f.content for f in result.facts] == [
        "Sofia's diet is pescatarian, no longer vegan.",
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
    # The value question, then (the fact is the nearest the turn) whether it is still true:
    # unscripted, "yes".
    assert result.ending_checks == 2 and result.values_changed == 0


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


# A known liking, habit or hobby (no one value to ask for): how the person feels about it
# now (llm-11).
PADEL = KnownFact(type="fact", content="Georgia plays padel in a league.", id="f-padel")
FLAT_WHITES = KnownFact(
    type="preference", content="Georgia loves flat whites.", attribute="coffee",
    value="flat whites", id="f-flat-white", slot="about:flat_whites", sentiment="likes",
)  # fmt: skip
PADEL_TURN = TurnInput(
    user_message="ok padel is dead to me. tore my calf and bex moved to spain 😒",
    assistant_message="Ouch, sorry about the calf. Will you find a new partner?",
    session_date=TURN.session_date,
    user_speaker="Georgia",
    known_facts=(PADEL, FLAT_WHITES),
)


def test_a_hobby_the_persons_words_touch_is_asked_how_they_feel_and_ended(
    scripted_llm: ScriptedLLM, extractor: LLMExtractor
) -> None:
    # The reply names only the injury; the person's message names padel.
    calf = _item("Georgia tore her calf.", type="fact", attribute="condition", value="torn calf")
    scripted_llm.script("dead to me", {"facts": [calf]})
    scripted_llm.script_value_now("padel", {"now": "Georgia no longer plays padel."})
    result = extractor.extract(PADEL_TURN)

    (question,) = _questions(scripted_llm)  # not the flat whites: nothing touched them
    assert question.startswith("Known before this turn: Georgia plays padel in a league.\n")
    assert question.endswith(
        "How does Georgia feel about Georgia plays padel in a league now? "
        'Answer with JSON only: {"now": "..."}'
    )
    ending = result.facts[0]
    assert ending.ended and ending.ends_fact_ids == ("f-padel",)
    assert ending.content == "It is no longer true that Georgia plays padel in a league."
    assert result.ending_checks == 1 and result.values_changed == 1


def test_the_fact_said_again_ends_nothing(
    scripted_llm: ScriptedLLM, extractor: LLMExtractor
) -> None:
    again = _item("Georgia plays padel in a league.", type="fact", attribute=None, value=None)
    scripted_llm.script("dead to me", {"facts": [again]})
    result = extractor.extract(PADEL_TURN)  # unscripted, the model says the fact again
    assert [f.content for f in result.facts] == ["Georgia plays padel in a league."]
    assert result.ending_checks == 1 and result.values_changed == 0


@pytest.mark.parametrize(
    ("message", "now", "ends"),
    [
        ("cold turkey on the flat whites 😭", "Georgia no longer likes flat whites.", True),
        ("cold turkey on the flat whites 😭", "She has given up flat whites.", True),
        ("cold turkey on the flat whites 😭", "dislikes", True),
        # A bare "dislikes" ends only what the person's own words name.
        ("cold turkey on the coffee 😭", "dislikes", False),
        ("cold turkey on the flat whites 😭", "Georgia loves flat whites.", False),
        # It stopped, but about something else.
        ("cold turkey on the flat whites 😭", "Georgia is sad she no longer plays padel.", False),
    ],
)
def test_a_liking_ends_when_the_answer_says_it_stopped(message: str, now: str, ends: bool) -> None:
    turn = TurnInput(user_message=message, assistant_message=None,
                     session_date=TURN.session_date, user_speaker="Georgia")  # fmt: skip
    question = value_question(FLAT_WHITES, turn)
    assert question is not None and "How does Georgia feel about flat whites now?" in question
    ending = changed_fact(FLAT_WHITES, now, turn)
    assert (ending is not None) == ends
    if ending is not None:
        assert ending.type == "preference" and ending.ended
        assert ending.details["value"] == "flat whites" and ending.details["sentiment"] == "likes"
        assert ending.ends_fact_ids == ("f-flat-white",)


def test_a_dislike_a_pet_and_a_goal_are_not_asked_how_they_feel() -> None:
    dislike = KnownFact(type="preference", content="Georgia hates running.", attribute="running",
                        value="running", id="f-run", sentiment="dislikes")  # fmt: skip
    goal = KnownFact(type="goal", content="Georgia wants to win the padel league.", id="f-goal")
    turn = TurnInput(user_message="padel running and the cat, all done", assistant_message=None,
                     session_date=TURN.session_date, user_speaker="Georgia",
                     known_facts=(dislike, CAT, goal, PADEL))  # fmt: skip
    assert touched_facts(turn, [], limit=5) == [PADEL]
    assert touched_facts(turn, [], limit=5, likings=False) == []
    assert value_question(dislike, turn) is None and value_question(goal, turn) is None


def test_facts_with_one_value_are_asked_about_before_likings() -> None:
    turn = TurnInput(user_message="so tired", assistant_message=None,
                     session_date=TURN.session_date, user_speaker="Sofia",
                     known_facts=(PADEL, VEGAN))  # fmt: skip
    items = [{"content": "Sofia is vegan and plays padel."}]
    assert touched_facts(turn, items, limit=2) == [VEGAN, PADEL]
    assert touched_facts(turn, items, limit=1) == [VEGAN]


def test_facts_the_persons_message_names_are_asked_about_first() -> None:
    skin = KnownFact(type="fact", content="Sofia's skin is so much better.", attribute="skin",
                     value="so much better", id="f-skin", slot="skin")  # fmt: skip
    turn = TurnInput(user_message="ok padel is dead to me", assistant_message=None,
                     session_date=TURN.session_date, user_speaker="Sofia",
                     known_facts=(skin, VEGAN, PADEL))  # fmt: skip
    # The model's items touch the skin and the diet; the person names only padel.
    items = [{"content": "Sofia's skin is fine.", "attribute": "skin"}, {"attribute": "diet"}]
    assert touched_facts(turn, items, limit=2) == [PADEL, skin]
    assert touched_facts(turn, items, limit=5) == [PADEL, skin, VEGAN]


def test_liking_questions_can_be_turned_off(scripted_llm: ScriptedLLM) -> None:
    llm = LLMSettings(base_url=scripted_llm.base_url, api_key="sk-test", model="test-model")
    off = LLMExtractor(llm, ExtractionSettings(liking_checks=False))
    scripted_llm.script("dead to me", {"facts": [_item("Georgia tore her calf.")]})
    scripted_llm.script_value_now("padel", {"now": "Georgia no longer plays padel."})
    result = off.extract(PADEL_TURN)
    assert len(scripted_llm.chat_requests()) == 1 and result.ending_checks == 0


# A known active goal the turn touched is asked what the goal is now (llm-12).
MARATHON = KnownFact(
    type="goal", content="Grace is running the Edinburgh marathon in May.",
    attribute="run the Edinburgh marathon", id="f-marathon", slot="run_edinburgh_marathon",
    status="active",
)  # fmt: skip
FRACTURE_TURN = TurnInput(
    user_message="stress fracture 😭 physio says no running for 8 wks so marathon is deffo off",
    assistant_message="I'm so sorry, Grace. Will you defer to next year?",
    session_date=TURN.session_date,
    user_speaker="Grace",
    known_facts=(MARATHON,),
)


def test_a_goal_the_persons_words_touch_is_asked_what_it_is_now_and_ended(
    scripted_llm: ScriptedLLM,
) -> None:
    # Without the still-true question, which takes the goals the message names (llm-13).
    llm = LLMSettings(base_url=scripted_llm.base_url, api_key="sk-test", model="test-model")
    extractor = LLMExtractor(llm, ExtractionSettings(still_true_checks=False))
    foot = _item("Grace has a stress fracture in her foot.", type="fact", attribute="injury",
                 value="stress fracture")  # fmt: skip
    scripted_llm.script("deffo off", {"facts": [foot]})
    scripted_llm.script_value_now(
        "goal", {"now": "Grace is not running the Edinburgh marathon in May anymore."}
    )
    result = extractor.extract(FRACTURE_TURN)

    (question,) = _questions(scripted_llm)
    assert question.startswith(
        'Known before this turn: Grace\'s goal was "run the Edinburgh marathon".\n'
    )
    assert question.endswith('What is Grace\'s goal now? Answer with JSON only: {"now": "..."}')
    ending = result.facts[0]
    assert ending.type == "goal" and ending.ended and ending.ends_fact_ids == ("f-marathon",)
    assert ending.details["goal"] == "run the Edinburgh marathon"
    assert ending.details["status"] == "abandoned"
    assert ending.content == (
        "It is no longer true that Grace is running the Edinburgh marathon in May."
    )
    assert result.ending_checks == 1 and result.values_changed == 1


def test_the_goal_said_again_ends_nothing(scripted_llm: ScriptedLLM) -> None:
    llm = LLMSettings(base_url=scripted_llm.base_url, api_key="sk-test", model="test-model")
    extractor = LLMExtractor(llm, ExtractionSettings(still_true_checks=False))
    scripted_llm.script("deffo off", {"facts": [_item("Grace hurt her foot.", type="fact")]})
    result = extractor.extract(FRACTURE_TURN)  # unscripted, the model says the goal again
    assert [f.content for f in result.facts] == ["Grace hurt her foot."]
    assert result.ending_checks == 1 and result.values_changed == 0


@pytest.mark.parametrize(
    ("now", "ends"),
    [
        ("Grace is not running the Edinburgh marathon in May anymore.", True),
        ("She gave up on the marathon.", True),
        ("none", True),
        ("run the Edinburgh marathon", False),
        ("Grace wants to run the Edinburgh marathon next year.", False),
        # It stopped, but about something else.
        ("Grace no longer goes to the gym.", False),
    ],
)
def test_a_goal_ends_when_the_answer_says_it_stopped(now: str, ends: bool) -> None:
    assert (changed_fact(MARATHON, now, FRACTURE_TURN) is not None) == ends


def test_a_goal_reached_or_dropped_is_not_asked_again(scripted_llm: ScriptedLLM) -> None:
    done = dataclasses.replace(MARATHON, status="achieved")
    turn = dataclasses.replace(FRACTURE_TURN, known_facts=(done,))
    assert touched_facts(turn, [], limit=2) == [] and value_question(done, turn) is None
    assert touched_facts(FRACTURE_TURN, [], limit=2) == [MARATHON]
    assert touched_facts(FRACTURE_TURN, [], limit=2, goals=False) == []


def test_goal_questions_can_be_turned_off(scripted_llm: ScriptedLLM) -> None:
    llm = LLMSettings(base_url=scripted_llm.base_url, api_key="sk-test", model="test-model")
    off = LLMExtractor(llm, ExtractionSettings(goal_checks=False, still_true_checks=False))
    scripted_llm.script("deffo off", {"facts": [_item("Grace hurt her foot.", type="fact")]})
    result = off.extract(FRACTURE_TURN)
    assert len(scripted_llm.chat_requests()) == 1 and result.ending_checks == 0


# A known fact the person's message names, with no other question or none that changed it,
# is asked whether it is still true (llm-13).
CASHEWS = KnownFact(type="preference", content="Ellie is allergic to cashews.",
                    attribute="allergy", value="cashews", id="f-cashews",
                    sentiment="dislikes")  # fmt: skip
PISTACHIO_TURN = TurnInput(
    user_message="update from allergist: its actually pistachios not cashews lol",
    assistant_message=None, session_date=TURN.session_date, user_speaker="Ellie",
    known_facts=(CASHEWS,),
)  # fmt: skip
STILL_TRUE_ENDING = (
    'Is the known fact still true? Answer with JSON only: {"now": "yes"} or {"now": "no"}'
)


def test_a_fact_the_message_names_is_asked_whether_it_is_still_true_and_no_ends_it(
    scripted_llm: ScriptedLLM, extractor: LLMExtractor
) -> None:
    pistachios = _item("Ellie is allergic to pistachios.", type="preference",
                       topic="allergy", sentiment="dislikes", value="pistachios")  # fmt: skip
    scripted_llm.script("pistachios not cashews", {"facts": [pistachios]})
    scripted_llm.script_value_now("allergic to cashews", {"now": "no"})
    result = extractor.extract(PISTACHIO_TURN)

    (question,) = _questions(scripted_llm)
    assert question == (
        'Known before this turn: "Ellie is allergic to cashews."\n'
        'In this turn Ellie said: "update from allergist: its actually pistachios not cashews'
        f' lol"\n{STILL_TRUE_ENDING}'
    )
    # The answer is decoded as one of the two words.
    (asked,) = [r for r in scripted_llm.chat_requests() if r["messages"][-1]["content"] == question]
    schema = asked["response_format"]["json_schema"]["schema"]
    assert schema["properties"]["now"]["enum"] == ["yes", "no"]
    ending, kept = result.facts
    assert ending.content == "It is not (or no longer) true that Ellie is allergic to cashews."
    assert ending.ended and ending.ends_fact_ids == ("f-cashews",)
    assert ending.type == "preference" and ending.details["value"] == "cashews"
    assert kept.content == "Ellie is allergic to pistachios."
    assert result.ending_checks == 1 and result.values_changed == 1


def test_still_true_ends_nothing_and_is_asked_only_of_what_the_message_names(
    scripted_llm: ScriptedLLM, extractor: LLMExtractor
) -> None:
    scripted_llm.script("pistachios not cashews", {"facts": [_item("Ellie saw an allergist.")]})
    result = extractor.extract(PISTACHIO_TURN)  # unscripted, the model answers "yes"
    assert [f.content for f in result.facts] == ["Ellie saw an allergist."]
    assert result.ending_checks == 1 and result.values_changed == 0

    # A message that names no known fact: only the one nearest it by meaning (shown first)
    # is asked about, not the allergy behind it.
    bag = KnownFact(type="fact", content="Ellie's bag is always full.", attribute="bag",
                    id="f-bag")  # fmt: skip
    elsewhere = dataclasses.replace(
        PISTACHIO_TURN, user_message="2 epipens to carry now 🙄", known_facts=(bag, CASHEWS)
    )
    assert touched_facts(elsewhere, [_item("Ellie carries two EpiPens.")], still_true=True) == [
        bag
    ]
    assert touched_facts(PISTACHIO_TURN, [], still_true=True) == [CASHEWS]
    assert touched_facts(PISTACHIO_TURN, [], still_true=False) == []
    assert touched_facts(elsewhere, [], still_true=False) == []


def test_the_known_fact_nearest_the_turn_is_asked_whether_still_true_without_a_shared_word(
    scripted_llm: ScriptedLLM, extractor: LLMExtractor
) -> None:
    # "the caffeine" names no word of "4 coffees a day"; the memory shows that fact first,
    # as the nearest by meaning, and the model's "no" ends it.
    coffees = KnownFact(type="fact", content="Maya drinks 4 coffees a day.", attribute="coffee",
                        value="4 a day", id="f-coffees")  # fmt: skip
    turn = TurnInput(user_message="gp thinks its the caffeine so im going cold turkey 😭",
                     assistant_message=None, session_date=TURN.session_date,
                     user_speaker="Maya", known_facts=(coffees,))  # fmt: skip
    scripted_llm.script("cold turkey", {"facts": [_item("Maya has heart palpitations.")]})
    scripted_llm.script_value_now("still true", {"now": "no"})
    result = extractor.extract(turn)

    (question,) = _questions(scripted_llm)
    assert question.startswith('Known before this turn: "Maya drinks 4 coffees a day."')
    assert question.endswith(STILL_TRUE_ENDING)
    ending = result.facts[0]
    assert ending.ended and ending.ends_fact_ids == ("f-coffees",)
    assert ending.content == "It is not (or no longer) true that Maya drinks 4 coffees a day."


def test_a_message_that_only_asks_or_supposes_asks_nothing_about_known_facts(
    scripted_llm: ScriptedLLM, extractor: LLMExtractor
) -> None:
    # "is it normal to pay 1800 for a room here??" ended "The rain here is crazy lol." when
    # the 1.5B model was asked whether it was still true (ADR 0033): a question ends nothing.
    turn = dataclasses.replace(
        TURN, user_message="is it ok to eat fish if ur vegan?? or is that cheating lol"
    )
    scripted_llm.script("cheating", {"facts": [_item("Sofia is vegan.")]})
    scripted_llm.script_value_now("still true", {"now": "no"})
    result = extractor.extract(turn)
    assert _questions(scripted_llm) == [] and result.ending_checks == 0
    # The model's restatement, "vegan" only in the question, is not kept either.
    assert result.facts == [] and not result.all_dropped


def test_a_new_value_the_person_only_asks_about_changes_nothing() -> None:
    turn = dataclasses.replace(
        TURN, user_message="still vegan tbh. would pescatarian be healthier? asking for a friend"
    )
    assert changed_fact(VEGAN, "pescatarian", turn) is None
    stated = dataclasses.replace(TURN, user_message="pescatarian now. would eggs be ok?")
    changed = changed_fact(VEGAN, "pescatarian", stated)
    assert changed is not None and changed.details["value"] == "pescatarian"


def test_a_named_value_the_value_question_left_is_asked_whether_still_true(
    scripted_llm: ScriptedLLM, extractor: LLMExtractor
) -> None:
    leicester = KnownFact(type="identity", content="Tom lives in Leicester.",
                          attribute="location", value="Leicester", id="f-leicester",
                          slot="location")  # fmt: skip
    turn = TurnInput(user_message="omg sorry autocorrect, LEEDS not leicester 🤦",
                     assistant_message="Welcome to Leicester!", session_date=TURN.session_date,
                     user_speaker="Tom", known_facts=(leicester,))  # fmt: skip
    scripted_llm.script("autocorrect", {"facts": [_item("Tom lives in Leicester.",
                                                        attribute="location")]})  # fmt: skip
    scripted_llm.script_value_now('was "Leicester"', {"now": "Leicester"})
    scripted_llm.script_value_now("still true", {"now": "no"})
    result = extractor.extract(turn)

    value, still = _questions(scripted_llm)
    assert value.endswith('What is Tom\'s location now? Answer with JSON only: {"now": "..."}')
    assert still.endswith(STILL_TRUE_ENDING)
    # The restated old value is dropped with it, as the value question's endings drop it.
    assert [f.content for f in result.facts] == [
        "It is not (or no longer) true that Tom lives in Leicester."
    ]
    assert result.ending_checks == 2 and result.values_changed == 1


def test_a_goal_the_message_names_is_asked_whether_it_is_still_true(
    scripted_llm: ScriptedLLM, extractor: LLMExtractor
) -> None:
    scripted_llm.script("deffo off", {"facts": [_item("Grace hurt her foot.", type="fact")]})
    scripted_llm.script_value_now("still true", {"now": "no"})
    result = extractor.extract(FRACTURE_TURN)
    (question,) = _questions(scripted_llm)
    assert question.endswith(STILL_TRUE_ENDING)
    ending = result.facts[0]
    assert ending.type == "goal" and ending.details["status"] == "abandoned"
    assert ending.ends_fact_ids == ("f-marathon",)


def test_still_true_questions_can_be_turned_off(scripted_llm: ScriptedLLM) -> None:
    llm = LLMSettings(base_url=scripted_llm.base_url, api_key="sk-test", model="test-model")
    off = LLMExtractor(llm, ExtractionSettings(still_true_checks=False))
    scripted_llm.script("pistachios not cashews", {"facts": [_item("Ellie saw an allergist.")]})
    result = off.extract(PISTACHIO_TURN)
    assert len(scripted_llm.chat_requests()) == 1 and result.ending_checks == 0


def test_the_questions_a_turn_asks_stop_at_the_limit(scripted_llm: ScriptedLLM) -> None:
    llm = LLMSettings(base_url=scripted_llm.base_url, api_key="sk-test", model="test-model")
    one = LLMExtractor(llm, ExtractionSettings(ending_checks_per_turn=1))
    leicester = KnownFact(type="identity", content="Tom lives in Leicester.",
                          attribute="location", value="Leicester", id="f-leicester",
                          slot="location")  # fmt: skip
    turn = dataclasses.replace(PISTACHIO_TURN, user_message="leicester not cashews",
                               known_facts=(leicester, CASHEWS))  # fmt: skip
    scripted_llm.script("leicester not cashews", {"facts": [_item("Ellie moved.")]})
    result = one.extract(turn)
    assert len(_questions(scripted_llm)) == 1 and result.ending_checks == 1


@pytest.mark.parametrize(
    ("old", "content"),
    [
        ("junior", "Liam's level is mid level, no longer junior."),
        # A value that is the person's whole sentence is not said again.
        ("junior dev at a fintech 2nd yr my manager hints", "Liam's level is mid level."),
    ],
)
def test_a_changed_value_says_the_short_value_it_replaced(old: str, content: str) -> None:
    level = KnownFact(type="identity", content=f"Liam is {old}.", attribute="level", value=old,
                      id="f-level", slot="level")  # fmt: skip
    turn = TurnInput(user_message="GOT PROMOTED TO MID LEVEL!!! 🎉", assistant_message=None,
                     session_date=TURN.session_date, user_speaker="Liam")  # fmt: skip
    changed = changed_fact(level, "mid level", turn)
    assert changed is not None and changed.content == content
    assert changed.details["value"] == "mid level" and changed.ends_fact_ids == ("f-level",)
