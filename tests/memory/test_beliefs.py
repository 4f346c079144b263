"""The rules of when one fact ends another and when two cannot both be true
(shared.memory.beliefs), on the pure functions: no SQL, no vectors, no processes."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

import pytest

from shared.extraction.schemas import typed_fact_adapter
from shared.memory.beliefs import contradicts, ends, reopens, values_match


@dataclass(frozen=True)
class View:
    """A fact as the writer stores it: type, slot, the slot's state and details."""

    type: str
    slot: str | None
    slot_value: str | None
    details: dict[str, Any]


def fact(kind: str, content: str = "Ana's fact.", **fields: Any) -> View:
    typed = typed_fact_adapter.validate_python(
        {"type": kind, "content": content, "subject": "Ana", "confidence": 0.9, **fields}
    )
    return View(typed.type, typed.slot, typed.slot_state() or None, typed.details)


def employer(value: str, *, ended: bool = False) -> View:
    return fact("identity", attribute="employer", value=value, ended=ended)


@pytest.mark.parametrize(
    ("ended", "held", "match"),
    [
        ("Siemens", "siemens", True),
        ("Siemens", "Siemens AG", True),
        ("*", "anything at all", True),
        ("London", "London School of Economics", False),  # a word inside another value
        ("coffee", "decaf coffee", False),
        ("", "Siemens", False),
        ("watching F1", "F1", True),  # what the activity is about
    ],
)
def test_values_match(ended: str, held: str, match: bool) -> None:
    assert values_match(ended, held) is match


def test_an_ending_retires_the_value_it_names_and_no_other() -> None:
    quit_siemens = employer("Siemens", ended=True)
    assert ends(quit_siemens, employer("Siemens AG"))
    assert not ends(quit_siemens, employer("SAP"))
    assert not ends(quit_siemens, quit_siemens)  # an ending is never retired by one


def test_a_value_ended_whatever_its_attribute() -> None:
    """ "I left Manchester": the value is known, not what it was of."""
    left = fact("identity", attribute="*", value="Manchester", ended=True)
    assert ends(left, fact("identity", attribute="location", value="Manchester"))
    assert not ends(left, fact("identity", attribute="location", value="Leeds"))


def test_a_break_up_ends_the_partner_whatever_the_relation_was_called() -> None:
    boyfriend = fact("relationship", person="Tom", relation="boyfriend")
    split = fact("relationship", person="*", relation="partner", ended=True)
    assert ends(split, boyfriend)
    assert not ends(split, fact("relationship", person="Sam", relation="son"))
    assert not ends(
        fact("relationship", person="Sam", relation="coworker", ended=True),
        fact("relationship", person="Sam", relation="son"),
    )


def test_a_liking_said_again_reopens_its_ending() -> None:
    stopped = fact("preference", topic="sport", sentiment="likes", value="F1", ended=True)
    again = fact("preference", topic="sport", sentiment="likes", value="F1")
    assert reopens(again, stopped) and not reopens(stopped, again)


def test_what_contradicts() -> None:
    assert contradicts(employer("Siemens"), employer("SAP"))  # one slot, two values
    assert not contradicts(employer("Siemens"), employer("siemens"))
    assert contradicts(employer("Siemens", ended=True), employer("Siemens"))
    assert not contradicts(employer("Siemens", ended=True), employer("SAP"))
    likes = fact("preference", topic="food", sentiment="likes", value="sushi")
    dislikes = fact("preference", topic="meals", sentiment="dislikes", value="Sushi")
    assert contradicts(likes, dislikes)
    assert not contradicts(
        likes, fact("preference", topic="food", sentiment="likes", value="ramen")
    )
