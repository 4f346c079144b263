"""An ending is tied to the known facts it names by a word of substance: the writer then
retires them. A shared name, function word or plain verb names nothing, so an ending never
retires an unrelated memory."""

from __future__ import annotations

import datetime as dt
from typing import Any

import pytest

from shared.extraction.base import KnownFact, Rejection, TurnInput
from shared.extraction.checks import review
from shared.extraction.endings import link_ending
from shared.extraction.schemas import TypedFact, typed_fact_adapter
from tests import factories as f

TESCO = KnownFact(
    type="fact", content="Jade works nights at Tesco.", id="fact-tesco"
)  # no attribute: no slot the rules could end
MOCHI = KnownFact(
    type="fact", content="Jade has a cat called Mochi.", attribute="pet", value="Mochi",
    id="fact-mochi", slot="pet:mochi",
)  # fmt: skip
TURN = TurnInput(
    user_message="ok so i finally did it lol handed my notice in on friday!!",
    assistant_message="Wow, congrats!",
    session_date=dt.datetime(2024, 2, 19, tzinfo=dt.UTC),
    user_speaker="Jade",
    known_facts=(TESCO, MOCHI),
)


def _fact(item: dict[str, Any]) -> TypedFact:
    return typed_fact_adapter.validate_python(item)


QUIT = f.ended(f.identity("Jade", "employer", "Tesco", "Jade quit Tesco."))


def test_an_ending_is_tied_to_the_known_fact_it_names() -> None:
    fact = _fact(QUIT)
    assert link_ending(fact, TURN) == 1
    assert fact.ends_fact_ids == ("fact-tesco",)


def test_an_ending_names_every_known_fact_that_holds_its_word() -> None:
    both = TurnInput(
        **{
            **TURN.__dict__,
            "known_facts": (TESCO, KnownFact("fact", "Jade has been at Tesco 3 years.", id="t3")),
        }
    )
    fact = _fact(QUIT)
    assert link_ending(fact, both) == 2 and fact.ends_fact_ids == ("fact-tesco", "t3")


@pytest.mark.parametrize(
    ("item", "why"),
    [
        (f.decision("Jade", "job", "Tesco", "Jade chose Tesco for her shift."), "not an ending"),
        (f.ended(f.general("Jade", "Jade no longer works Sundays.")), "a plain verb names nothing"),
        (f.ended(f.general("Jade", "Jade stopped going to the gym.")), "no word in common"),
        (f.ended(f.pet("Jade", "Rex", "Jade's dog Rex died.")), "'Jade' is the person's name"),
    ],
)
def test_an_item_that_names_no_known_fact_is_tied_to_none(item: dict[str, Any], why: str) -> None:
    fact = _fact(item)
    assert link_ending(fact, TURN) == 0 and fact.ends_fact_ids == (), why


def test_a_fact_with_a_slot_is_named_by_its_whole_value() -> None:
    fact = _fact(f.ended(f.general("Jade", "Jade's cat Mochi passed away.")))
    assert link_ending(fact, TURN) == 1 and fact.ends_fact_ids == ("fact-mochi",)
    employer = KnownFact(
        "identity", "Ana works at LSE.", "employer", "London School of Economics", id="lse",
        slot="employer",
    )  # fmt: skip
    decaf = KnownFact(
        "preference", "Ana dislikes decaf coffee.", "coffee", "decaf coffee", id="decaf",
        slot="coffee:decaf coffee",
    )  # fmt: skip
    daughter = KnownFact(
        "relationship", "Ana's daughter is Mia.", None, "Mia", id="mia", slot="daughter:mia"
    )
    turn = TurnInput(
        **{**TURN.__dict__, "user_speaker": "Ana", "known_facts": (employer, decaf, daughter)}
    )
    for item in (
        f.identity("Ana", "*", "London", "Ana left London."),  # part of a value
        f.preference("Ana", "coffee", "coffee", "Ana quit coffee."),  # part of a value
        f.identity("Ana", "*", "Mia", "Ana left Mia."),  # a person: the belief rules' alone
    ):
        fact = _fact(f.ended(item))
        assert link_ending(fact, turn) == 0, fact.content


def test_known_facts_with_no_stored_id_or_already_endings_are_never_named() -> None:
    ended = KnownFact("fact", "Jade left Tesco once before.", id="old-ending", ended=True)
    turn = TurnInput(**{**TURN.__dict__, "known_facts": (KnownFact("fact", TESCO.content), ended)})
    fact = _fact(QUIT)
    assert link_ending(fact, turn) == 0 and fact.ends_fact_ids == ()


def test_an_ending_written_as_the_known_sentence_reads_as_an_ending() -> None:
    """The 1.5B model marks the known sentence itself ended ("Jade works nights at
    Tesco.", ended): stored so, it would read as the belief it ends, and merge into it."""
    item = f.ended(f.identity("Jade", "employer", "Tesco", "Jade works nights at Tesco."))
    checked = review(TURN)(_fact(item))
    assert not isinstance(checked, Rejection)
    assert checked.content == "It is no longer true that Jade works nights at Tesco."
    assert link_ending(checked, TURN) == 1 and checked.ends_fact_ids == ("fact-tesco",)
    # Its own words stay its own: an ending that says what ended is not rewritten.
    assert review(TURN)(_fact(QUIT)).content == "Jade quit Tesco."  # type: ignore[union-attr]


def test_a_known_ending_said_again_is_not_rewritten() -> None:
    """A rerun sees its own ending among the known facts: said again, it stays as it is."""
    quit_ = KnownFact(type="identity", content="Jade quit Tesco.", id="fact-quit", ended=True)
    turn = TurnInput(**{**TURN.__dict__, "known_facts": (quit_,)})
    assert review(turn)(_fact(QUIT)).content == "Jade quit Tesco."  # type: ignore[union-attr]
