"""The known facts an ending names, found by their words: the writer retires them.

A small model writes "Jade quit Tesco." as an ending of a job, while what it ends was
stored as "Jade works nights at Tesco." with no attribute: no slot the belief rules
(shared.memory.beliefs) could close. The ending names what ended ("Tesco"), and the
known facts shown beside the turn are the ones it may name, so an ending (`ended`: true)
is tied to every active known fact it names: a fact with no belief slot by a word of
substance (not the person's name, not a function word, not the verbs facts are built on:
"works", "lives"), a fact with a slot by its whole value, never a person (see `_names`).
An earlier prompt (llm-4) asked the model for the known fact's number instead: on the
real 1.5B model that cost recall .680 → .400 on the development chats (ADR 0015).
"""

from __future__ import annotations

from shared.extraction.base import KnownFact, TurnInput
from shared.extraction.checks import padded_words, substance_words
from shared.extraction.schemas import TypedFact, core_words


def link_ending(fact: TypedFact, turn: TurnInput) -> int:
    """Ties an ending to the known facts it names (the writer retires them); returns how
    many. Not an ending, or one that names no known fact: none."""
    if not fact.ended:
        return 0
    said = substance_words(fact.content, *_values(fact)) - substance_words(turn.user_speaker)
    phrases = " ".join(padded_words(text) for text in (fact.content, *_values(fact)))
    named = tuple(
        known.id
        for known in turn.known_facts
        if known.id is not None and not known.ended and _names(said, phrases, known)
    )
    fact.link_ended_facts(named)
    return len(named)


def _names(said: set[str], phrases: str, known: KnownFact) -> bool:
    """Whether an ending with these words names `known`. A fact with no belief slot: by a
    word of substance. A fact with a slot: by its whole value ("Jade quit Tesco." names
    the employer Tesco; "Ana left London." does not name "London School of Economics"),
    and never a person: a relationship is ended by the belief rules alone, which check
    the relation ("Ana left Mia." must not end "Ana's daughter is Mia.")."""
    if known.slot is None:
        return bool(said & substance_words(known.content))
    value = core_words(known.value or "")
    return known.type != "relationship" and bool(substance_words(value)) and f" {value} " in phrases


def _values(fact: TypedFact) -> list[str]:
    """What the fact is about: its value, person, choice or goal."""
    return [str(fact.details.get(k) or "") for k in ("value", "person", "choice", "goal")]
