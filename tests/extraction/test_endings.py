"""An item's `ends_known` number is honoured only where the item bears it out: a wrong
number from a small model must not retire a true memory."""

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
    id="fact-mochi",
)  # fmt: skip
TURN = TurnInput(
    user_message="ok so i finally did it lol handed my notice in on friday!!",
    assistant_message="Wow, congrats!",
    session_date=dt.datetime(2024, 2, 19, tzinfo=dt.UTC),
    user_speaker="Jade",
    known_facts=(TESCO, MOCHI),
)


def _fact(item: dict[str, Any], ends_known: int | None) -> TypedFact:
    return typed_fact_adapter.validate_python({**item, "ends_known": ends_known})


QUIT = f.decision("Jade", "job", "hand in notice", "Jade handed in her notice at Tesco.")


def test_an_item_that_names_what_it_ends_is_linked_to_that_stored_fact() -> None:
    fact = _fact(QUIT, 1)
    assert link_ending(fact, TURN) == "linked"
    assert fact.ends_fact_id == "fact-tesco"


def test_an_ending_of_the_same_type_needs_no_shared_word() -> None:
    # "rip 😢" -> the model writes the ending of the pet it was shown as [2]
    fact = _fact(f.ended(f.pet("Jade", "her cat", "Jade's cat passed away.")), 2)
    assert link_ending(fact, TURN) == "linked" and fact.ends_fact_id == "fact-mochi"


@pytest.mark.parametrize(
    ("item", "number", "why"),
    [
        (QUIT, 2, "the quit shares nothing with the cat"),
        (f.general("Jade", "Jade works at a coffee place now."), 1, "one verb is not a link"),
        (QUIT, 3, "no third fact was shown"),
        (QUIT, 0, "numbers start at 1"),
        (f.pet("Jade", "Mochi", "Jade has a cat called Mochi."), 2, "a restatement ends nothing"),
    ],
)
def test_a_number_the_item_does_not_bear_out_links_nothing(
    item: dict[str, Any], number: int, why: str
) -> None:
    fact = _fact(item, number)
    assert link_ending(fact, TURN) == "refused", why
    assert fact.ends_fact_id is None


def test_no_number_is_no_ending() -> None:
    fact = _fact(QUIT, None)
    assert link_ending(fact, TURN) is None and fact.ends_fact_id is None


def test_a_number_into_facts_with_no_stored_id_links_nothing() -> None:
    unsaved = TurnInput(**{**TURN.__dict__, "known_facts": (KnownFact("fact", TESCO.content),)})
    assert link_ending(_fact(QUIT, 1), unsaved) == "refused"


def test_an_ending_written_as_the_known_sentence_reads_as_an_ending() -> None:
    """The 1.5B model marks the known sentence itself ended ("Jade works nights at
    Tesco.", ended): stored so, it would read as the belief it ends, and merge into it."""
    item = f.ended(f.identity("Jade", "employer", "Tesco", "Jade works nights at Tesco."))
    checked = review(TURN)(_fact(item, 1))
    assert not isinstance(checked, Rejection)
    assert checked.content == "It is no longer true that Jade works nights at Tesco."
    assert link_ending(checked, TURN) == "linked" and checked.ends_fact_id == "fact-tesco"
    # Its own words stay its own: an ending that says what ended is not rewritten.
    said = f.ended(f.identity("Jade", "employer", "Tesco", "Jade quit Tesco."))
    assert review(TURN)(_fact(said, 1)).content == "Jade quit Tesco."  # type: ignore[union-attr]


def test_a_known_ending_said_again_is_not_rewritten() -> None:
    """A rerun sees its own ending among the known facts: said again, it stays as it is."""
    quit_ = KnownFact(type="identity", content="Jade quit Tesco.", id="fact-quit", ended=True)
    turn = TurnInput(**{**TURN.__dict__, "known_facts": (quit_,)})
    item = f.ended(f.identity("Jade", "employer", "Tesco", "Jade quit Tesco."))
    assert review(turn)(_fact(item, None)).content == "Jade quit Tesco."  # type: ignore[union-attr]
