"""An item that names the known fact it ends (`ends_known`), checked against the turn.

The extraction prompt numbers the person's known facts; an item may say "this ends [2]".
A small model writes "Jade handed in her notice." as a decision, not as an ending of the
employer, so the slot rules (shared.memory.beliefs) cannot see that Tesco ended: the number
can. A number is honoured only where the item bears it out, since a wrong one would retire
a true memory: it must name a fact that was shown, not restate it, and either be an ending
of that fact's type or share a word of substance with it.
"""

from __future__ import annotations

from typing import Literal

from shared.extraction.base import KnownFact, TurnInput
from shared.extraction.schemas import TypedFact, core_words

# Words two facts share without being about one thing: function words, the verbs a
# fact's sentence is built on, and the words of an ending itself.
_PLAIN_TEXT = """\
a an the and or but of in on at to for from with by as into about over after before
is are was were be been being am has have had do does did not no never now still just
also very really more most some any all every this that these those it its it's they
them their there here he she his her him who which what when where why how
works work working worked lives live living lived likes like liked loves love loved
enjoys enjoy prefers prefer wants want goes go went gets got getting make makes made
since until anymore longer quit quits left leave leaves ended ends stopped stop stops
gave give given moved move moves sold lost split broke up started starts new old
job person one two years year months month week weeks day days time"""
_PLAIN_WORDS = frozenset(_PLAIN_TEXT.split())


def link_ending(fact: TypedFact, turn: TurnInput) -> Literal["linked", "refused"] | None:
    """Ties `fact` to the stored fact its `ends_known` names (the writer retires it), or
    says why not: "refused" for a number the turn does not bear out; None for no number."""
    number = fact.ends_known
    if number is None:
        return None
    known = turn.known_facts[number - 1] if 1 <= number <= len(turn.known_facts) else None
    if known is None or known.id is None or _restates(fact, known):
        return "refused"
    same_kind_ending = fact.ended and fact.type == known.type
    if not same_kind_ending and not _shared_words(fact, known, turn.user_speaker):
        return "refused"
    fact.link_ended_fact(known.id)
    return "linked"


def _restates(fact: TypedFact, known: KnownFact) -> bool:
    """The item says the known fact again (a model that numbers what it repeats)."""
    if fact.ended:
        return False
    if core_words(fact.content) == core_words(known.content):
        return True
    return (
        fact.type == known.type
        and known.value is not None
        and core_words(known.value) in {core_words(v) for v in _values(fact)}
    )


def _shared_words(fact: TypedFact, known: KnownFact, person: str) -> bool:
    said = _words(fact.content, *_values(fact))
    held = _words(known.content, known.value or "")
    return bool((said & held) - _words(person))


def _values(fact: TypedFact) -> list[str]:
    """What the fact is about: its value, person, choice or goal."""
    return [str(fact.details.get(k) or "") for k in ("value", "person", "choice", "goal")]


def _words(*texts: str) -> set[str]:
    words = {w for text in texts for w in core_words(text).split()}
    return {w for w in words if len(w) > 2 and w not in _PLAIN_WORDS}
