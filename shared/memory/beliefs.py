"""When one fact ends another, and when two active facts cannot both be true.

The writer's supersede and the context builder's contradiction check read these rules, so
what is retired on write and what is kept out of a prompt never disagree. Everything here
is deterministic string work on a fact's type, slot and details: no LLM, no embeddings.

A slot is `type/attribute` (every fact of a user is about that user); a multi-valued
attribute carries its value after a colon (`identity/language:french`,
`relationship/sister:maria`, `preference/about:jazz`): the part before the colon is the
slot's *family*.
"""

from __future__ import annotations

import functools
import re
from collections.abc import Mapping
from typing import Any, Protocol

from shared.extraction.schemas import core_words
from shared.memory.normalize import normalize

# An ended value that names no particular value: "I don't have any pets anymore".
WILDCARDS = frozenset({"*", "any", "all", "every", "anything", "everything"})
# What may follow one name of an organisation in another: "Siemens" / "Siemens AG".
_NAME_SUFFIXES = frozenset(
    {"ag", "gmbh", "inc", "ltd", "llc", "plc", "co", "corp", "corporation", "company"}
    | {"sa", "se", "bv", "nv", "group", "university", "uni", "college", "hospital"}
)


class FactLike(Protocol):
    """What the rules read of a fact: a stored row (shared.db.models.Fact) or a view."""

    @property
    def type(self) -> str: ...
    @property
    def slot(self) -> str | None: ...
    @property
    def slot_value(self) -> str | None: ...
    @property
    def details(self) -> Mapping[str, Any]: ...


def is_ending(fact: FactLike) -> bool:
    return bool(fact.details.get("ended"))


def held_value(type_: str, details: Mapping[str, Any]) -> str:
    """The thing a fact is about, for matching an ending to it: the employer, the pet's
    name, the liked thing, the person."""
    key = {"relationship": "person", "decision": "choice", "goal": "goal"}.get(type_, "value")
    return str(details.get(key) or "")


def family(slot: str) -> str:
    """`fact/pet:rex` → `fact/pet`; a single-valued slot is its own family."""
    head, _, attribute = slot.rpartition("/")
    return f"{head}/{attribute.split(':', 1)[0]}"


def type_prefix(slot: str) -> str:
    """`fact/pet:rex` → `fact/`: every slot of this type."""
    return slot.rpartition("/")[0] + "/"


def values_match(ended: str, held: str) -> bool:
    """An ended value names a held one: the same words, or one an organisation's name and
    the other that name with a legal or kind suffix ("Siemens" / "Siemens AG"); a wildcard
    names any. Never a word inside another value: "London" is not "London School of
    Economics", "coffee" not "decaf coffee" — a wrong ending loses a true memory."""
    a, b = _core(ended), _core(held)
    if a in WILDCARDS:
        return True
    if not a or not b:
        return False
    short, long = sorted((a, b), key=len)
    if short == long:
        return True
    rest = long[len(short) :].split() if long.startswith(short + " ") else None
    return rest is not None and set(rest) <= _NAME_SUFFIXES


def ends(ending: FactLike, held: FactLike) -> bool:
    """True when `ending` (a fact stating a value ended) retires the active fact `held`.

    Same type; a relationship by its person whatever the relation was called
    ("broke up with Tom" ends "Tom is her boyfriend"); a preference by the thing liked,
    whatever its topic; any other type within the slot's family, by value. An ending whose
    attribute is `*` ("I left Manchester", "I meant Hamburg, not Bremen": the value is
    known, not what it was) ends an identity or fact holding that value, whatever its
    attribute.
    """
    if not held.slot or is_ending(held):
        return False
    ended_value = held_value(ending.type, ending.details)
    if any_attribute(ending):
        # people end only by a death said as a fact ("Lakshmi passed away"), never by an
        # identity's "I left Mia with my mum"
        # (or a correction, "I meant Maria, not Marta", which is a fact too)
        kinds = ("identity", "fact", "relationship") if ending.type == "fact" else ("identity",)
        return (
            held.type in kinds
            and _core(ended_value) not in WILDCARDS
            and values_match(ended_value, held_value(held.type, held.details))
        )
    if not ending.slot or ending.type != held.type:
        return False
    if ending.type == "relationship":
        # the relation must agree ("coworker Sam left" is not "son Sam"), partners among
        # themselves; unnamed ("my husband and I split"), the relation alone says whom
        if not _relation_kin(ending.details, held.details):
            return False
        return _core(ended_value) in WILDCARDS or values_match(
            ended_value, held_value(held.type, held.details)
        )
    if ending.type == "preference" and _core(ended_value) in WILDCARDS:
        return False  # "I don't like anything anymore" ends no particular liking
    if ending.type not in ("relationship", "preference") and family(ending.slot) != family(
        held.slot
    ):
        return False
    return values_match(ended_value, held_value(held.type, held.details))


def any_attribute(fact: FactLike) -> bool:
    """An identity or fact whose attribute is `*`: about a value, whatever it was of."""
    return fact.type in ("identity", "fact") and str(fact.details.get("attribute")) == "*"


def reopens(fact: FactLike, ended: FactLike) -> bool:
    """True when a new positive `fact` says again what the active ending `ended` closed
    ("I'm back into F1" after "I stopped watching F1"): the ending is history then."""
    if is_ending(fact) or not is_ending(ended):
        return False
    return ends(ended, fact)


def contradicts(a: FactLike, b: FactLike) -> bool:
    """Two active facts that cannot both be true now: one slot with two values, an ending
    beside the value it ended, or one liked thing with two sentiments."""
    # Endings first: an ending shares its slot with the value it ended, and with any other
    # value of a single-valued slot ("quit Siemens" beside "works at SAP"), which it does
    # not contradict; two endings say only that things stopped, which all can have.
    if is_ending(a) or is_ending(b):
        if is_ending(a) == is_ending(b):
            return False
        ending, other = (a, b) if is_ending(a) else (b, a)
        return ends(ending, other)
    if a.slot and a.slot == b.slot:
        return normalize(a.slot_value or "") != normalize(b.slot_value or "")
    if a.type == b.type == "preference":
        sentiments = {a.details.get("sentiment"), b.details.get("sentiment")}
        liked = {"likes", "prefers"}
        return (
            bool(sentiments & liked)
            and bool(sentiments - liked)
            and _core(held_value("preference", a.details))
            == _core(held_value("preference", b.details))
        )
    return False


# Relations one person has one of at a time: a break-up with "my partner" ends any of them.
PARTNERS = frozenset(
    {"partner", "boyfriend", "girlfriend", "husband", "wife", "spouse", "fiance", "fiancee"}
)


_RELATION_ALIASES = {"mom": "mother", "mum": "mother", "dad": "father", "hubby": "husband"}


def _relation_kin(ending: Mapping[str, Any], held: Mapping[str, Any]) -> bool:
    a, b = (_core(str(d.get("relation"))) for d in (ending, held))
    a, b = _RELATION_ALIASES.get(a, a), _RELATION_ALIASES.get(b, b)
    return a == b or (a in PARTNERS and b in PARTNERS)


_COUNTS = re.compile(r"^(?:two|three|four|five|\d+)\s+")


@functools.lru_cache(maxsize=4096)
def _core(value: str) -> str:
    # cached: the context builder compares every pair of its candidate preferences
    if value.strip() == "*":
        return "*"
    words = _COUNTS.sub("", core_words(value)).split()
    if len(words) > 1 and words[0].endswith("ing"):
        words = words[1:]  # "watching F1" is about F1, "playing tennis" about tennis
    return " ".join(words)
