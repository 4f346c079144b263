"""What a known value is now, asked of the model for the known facts a turn's reply
touched (ADR 0032): a value the person's own words give that differs from the known one
replaces it; "none" ends it.

A small model seldom writes an ending or a new value for what a turn changes. It restates
the old fact ("pescatarian now i guess" → "Sofia is vegan."), files the change under
another attribute ("GOT PROMOTED TO MID LEVEL" → `experience`, beside "junior dev"), or
writes nothing. What it does do is touch the fact the turn is about: an item of its reply
shares the known fact's words or its attribute. Asked whether such a fact "is no longer
true", Qwen2.5-1.5B answered the same way for every turn (session 18, and session 21's
probe: "still true?" false for 7 of 8 turns that change nothing; "stopped?" true for 4 of
10 that do). Asked what the value is now, with the known value and the person's words in
the question, it named the new value for 6 of 10 turns that change one and the old value
for 6 of 8 that do not; the value must then be the person's own words in the turn
(or "none": quit, stopped, gave up), which is what it cannot make up. Each question is a
short follow-up of the extraction's own conversation, so llama.cpp reads only its tokens.

A known fact with no one value (a liking, a habit, a hobby: "Maya loves flat whites.",
"Tariq goes bouldering.") is asked how the person feels about it now (llm-11). The model
then wrote the ending itself for 7 of 13 such turns ("Maya no longer likes flat whites.",
"he has given up running for good", "dislikes") and for none of 8 turns that leave the
fact as it was; an answer that says it stopped, about the fact's own words, ends it.

A known active goal ("Grace is running the Edinburgh marathon.") is asked what the person's
goal is now (llm-12). Asked its status, the model answered "achieved" for 13 of 13 turns,
whatever they said; asked how the person felt, "disappointed". Asked what the goal is now,
it said the goal again for the turns that leave it, and "Grace is not running the
Edinburgh marathon in May anymore." for one that ends it; the same reading then ends it.

A known fact the person's own message names is asked whether it is still true, the answer
decoded as "yes" or "no" (llm-13), when no question above covers it (a goal, an allergy, a
decision, a fact of several values) or its value question changed nothing ("LEEDS not
leicester" answered "Leicester"). Asked after the extraction, with the fact quoted, the
model answered "no" for 6 of 11 turns that end or correct the fact and "yes" for all 10
that leave it; "no" ends it. The facts the message names are asked about first. The
known fact nearest the turn by meaning counts as named (llm-14): "the caffeine" names no
word of "4 coffees a day".
"""

from __future__ import annotations

from collections.abc import Iterable
from dataclasses import dataclass
from string import Template
from typing import Any

from pydantic import ValidationError

from shared.extraction.base import KnownFact, TurnInput
from shared.extraction.checks import asked_and_stated, no_longer, padded_words, substance_words
from shared.extraction.prompts import (
    FEELING_NOW_TEMPLATE,
    GOAL_NOW_TEMPLATE,
    STILL_TRUE_TEMPLATE,
    VALUE_NOW_TEMPLATE,
)
from shared.extraction.schemas import (
    MULTI_VALUED_ATTRIBUTES,
    TypedFact,
    canonical_attribute,
    core_words,
    typed_fact_adapter,
)

VALUE_NOW_SCHEMA: dict[str, Any] = {
    "type": "object",
    "properties": {"now": {"type": "string", "maxLength": 200}},
    "required": ["now"],
    "additionalProperties": False,
}
VALUE_NOW_SCHEMA_NAME = "value_now"
# The still-true question's answer: one of two words, decoded so (llm-13).
STILL_TRUE_SCHEMA: dict[str, Any] = {
    "type": "object",
    "properties": {"now": {"type": "string", "enum": ["yes", "no"]}},
    "required": ["now"],
    "additionalProperties": False,
}
# Answers that say the value is gone: the known fact ended, and nothing replaces it.
NO_VALUE = frozenset({"", "none", "nothing", "no", "0", "zero", "n a", "null", "no one", "nobody"})
# The types whose known facts have one current value a question can ask for (a preference's
# liking, a goal's status are not a value the person would name).
_ASKED_TYPES = ("identity", "fact", "decision", "relationship")
# Attributes of several values at once whose values are things a person does or likes, so
# "how do they feel about it now?" can be answered with an ending ("no longer plays padel").
# Not a pet, a child or a language: how one feels about them is not whether they still are.
_FELT_ATTRIBUTES = frozenset({"hobby", "sport", "instrument", "habit"})
# A preference that holds something liked; one of a dislike is not asked (its change back,
# "I love jazz again", is a new liking the belief rules put in the same slot).
_LIKED = frozenset({"likes", "prefers"})
# Words in an answer that say the liking or habit stopped, as core_words writes them.
_STOPPED = (
    "no longer", "anymore", "any more", "stopped", "quit", "gave up", "given up", "giving up",
    "dislikes", "dislike", "hates", "doesn t like", "does not like", "don t like",
    "not a fan", "never again", "done with",
)  # fmt: skip
_STOPPED_WORDS = frozenset(word for phrase in _STOPPED for word in phrase.split())
# Longer values are the person's whole sentence, not a value a changed fact could name.
_NAMED_OLD_VALUE_WORDS = 6


@dataclass(frozen=True)
class FollowUp:
    """One question about a known fact, and the schema its answer is decoded with."""

    known: KnownFact
    text: str
    still_true: bool = False  # the yes/no question, read by `ended_by`

    @property
    def schema(self) -> dict[str, Any]:
        return STILL_TRUE_SCHEMA if self.still_true else VALUE_NOW_SCHEMA

    def answer_fact(self, now: str, turn: TurnInput) -> TypedFact | None:
        """What the answer changed (`changed_fact`, `ended_by`), or None."""
        if self.still_true:
            return ended_by(self.known, now, turn)
        return changed_fact(self.known, now, turn)


def follow_ups(
    known: KnownFact, turn: TurnInput, *, goals: bool = True, still_true: bool = True
) -> list[FollowUp]:
    """The questions for `known`, in order; the next is asked only when the one before
    changed nothing. A liking, habit or hobby: how the person feels now. A fact with one
    value: its value now, then (`still_true`, the message naming it) whether it is still
    true. Any other fact the message names: whether it is still true (`still_true`); an
    active goal it does not name: what the goal is now (`goals`)."""
    if _felt(known):
        return [FollowUp(known, liking_question(known, turn))]
    named = still_true and names_fact(turn, known)
    questions = []
    # A goal the message names is only asked whether it is still true: asked what the
    # goal is now, the model said the goal again on the turns that ended it.
    asks_value = not _open_goal(known) or (goals and not named)
    if asks_value and (text := value_question(known, turn)) is not None:
        questions.append(FollowUp(known, text))
    if named:
        text = Template(STILL_TRUE_TEMPLATE).substitute(
            known=known.content.strip(), user=turn.user_speaker, message=turn.user_message.strip()
        )
        questions.append(FollowUp(known, text, still_true=True))
    return questions


def names_fact(turn: TurnInput, known: KnownFact) -> bool:
    """The person's message in the turn shares a word of substance with the known fact,
    the person's name aside ("ok padel is dead to me" names "Georgia plays padel."), or
    the fact is the one nearest the turn by meaning (`nearest_fact`: "the caffeine" and
    "4 coffees a day" share no word)."""
    if known.id is not None and known.id == nearest_fact(turn):
        return True
    name = substance_words(turn.user_speaker)
    return bool((substance_words(known.content) - name) & substance_words(turn.user_message))


def nearest_fact(turn: TurnInput) -> str | None:
    """The id of the active known fact nearest the turn by meaning: the first shown, as
    the memory lists them best first (`memory.turn_context.known_facts`)."""
    return next((known.id for known in turn.known_facts if not known.ended), None)


def ended_by(known: KnownFact, now: str, turn: TurnInput) -> TypedFact | None:
    """The ending of `known` when the answer whether it is still true is "no", tied to it
    so the writer retires it; else None. "No" does not say whether the fact ended or was
    never true ("LEEDS not leicester"), and the sentence says so."""
    if core_words(now) != "no":
        return None
    clause = known.content.strip().rstrip(".!")
    fact = _fact(known, turn, f"It is not (or no longer) true that {clause}.", None)
    if fact is not None:
        fact.link_ended_facts((known.id,) if known.id else ())
    return fact


def value_question(known: KnownFact, turn: TurnInput) -> str | None:
    """The question for `known`: what its value is now, how the person feels about it now
    when it is a liking, habit or hobby (`liking_question`), what the goal is now when it
    is an active goal, or None."""
    if _felt(known):
        return liking_question(known, turn)
    if _open_goal(known):
        return Template(GOAL_NOW_TEMPLATE).substitute(
            user=turn.user_speaker, goal=known.attribute, message=turn.user_message.strip()
        )
    what = _what(known)
    if what is None or not known.value:
        return None
    value = _relation(known) if known.type == "relationship" else known.value
    return Template(VALUE_NOW_TEMPLATE).substitute(
        user=turn.user_speaker, what=what, value=value, message=turn.user_message.strip()
    )


def liking_question(known: KnownFact, turn: TurnInput) -> str:
    """How the person feels now about a known liking, habit or hobby, the fact quoted."""
    # A liking's or a hobby's value ("flat whites", "padel"); else the fact's sentence.
    named = known.type == "preference" or known.attribute
    return Template(FEELING_NOW_TEMPLATE).substitute(
        known=known.content.strip(),
        user=turn.user_speaker,
        message=turn.user_message.strip(),
        thing=(known.value if named else None) or known.content.strip().rstrip(".!"),
    )


def touched_facts(
    turn: TurnInput,
    items: Iterable[Any],
    *,
    limit: int | None = None,
    likings: bool = True,
    goals: bool = True,
    still_true: bool = False,
) -> list[KnownFact]:
    """The active known facts there is a question for that the reply's items (kept or
    dropped) touch, at most `limit`: an item shares a word of substance with the fact (the
    person's name aside) or names its attribute. Those with one current value, then
    (`likings`) the likings, habits and hobbies and (`goals`) the active goals, which the
    person's message may also touch, then (`still_true`) any other the message names or
    the one nearest the turn (`names_fact`); nearest the turn first within each. The
    named go before all the others: the model files much of a turn under attributes of its
    own ("Sofia's skin"), which touch facts the turn does not change. None when the
    person's message only asks or supposes ("is it normal to pay 1800 for a room here??"):
    that changes nothing they told before (ADR 0033)."""
    if not asked_and_stated(turn.user_message)[1].strip():
        return []
    name = substance_words(turn.user_speaker)
    words: set[str] = set()
    attributes: set[str] = set()
    for item in items:
        if not isinstance(item, dict):
            continue
        words |= substance_words(*(str(item.get(k) or "") for k in ("content", "value")))
        for key in ("attribute", "topic"):
            if isinstance(item.get(key), str) and item[key].strip():
                attributes.add(canonical_attribute(item[key]))
    words -= name
    said = substance_words(turn.user_message) - name
    nearest = nearest_fact(turn) if still_true else None
    valued, liked, others = [], [], []
    named: set[str] = set()  # ids of the facts the person's message names (`names_fact`)
    for known in turn.known_facts:
        if known.id is None or known.ended:
            continue
        fact_words = substance_words(known.content) - name
        if fact_words & said or known.id == nearest:
            named.add(known.id)
        same_attribute = canonical_attribute(known.attribute or "-") in attributes
        if _what(known) is not None and (fact_words & words or same_attribute):
            valued.append(known)
        elif ((likings and _felt(known)) or (goals and _open_goal(known))) and (
            fact_words & (words | said) or same_attribute
        ):
            liked.append(known)
        elif still_true and known.id in named and not _felt(known):
            others.append(known)
    # A stable sort: the named first, each group's order kept.
    touched = sorted([*valued, *liked, *others], key=lambda known: known.id not in named)
    return touched[:limit]


def changed_fact(known: KnownFact, now: str, turn: TurnInput) -> TypedFact | None:
    """What the turn changed about `known`, given the model's answer `now`: a fact with the
    new value (the person's own words in the turn), or an ending when the answer is that
    none is left (for a liking, habit, hobby or goal: that it stopped); tied to `known` so the
    writer retires it. None: unchanged, or a value the person did not say."""
    said = core_words(now)
    old = _relation(known) if known.type == "relationship" else (known.value or "")
    goal = _open_goal(known)
    if _felt(known) or goal:
        # No value to compare: it ended when the answer says so (a goal: or that none is left).
        if not ((goal and said and said in NO_VALUE) or _says_stopped(known, now, turn)):
            return None
        fact: TypedFact | None = _fact(known, turn, no_longer(known.content), None)
    elif said in NO_VALUE:
        fact = _fact(known, turn, no_longer(known.content), None)
    elif _same(said, core_words(old), known) or not _said_in_turn(said, turn):
        return None
    else:
        fact = _fact(known, turn, _sentence(known, turn, now), now)
    if fact is not None:
        fact.link_ended_facts((known.id,) if known.id else ())
    return fact


def _says_stopped(known: KnownFact, now: str, turn: TurnInput) -> bool:
    """Whether the answer how the person feels now about a known liking, habit or hobby
    says it stopped: about the fact's own words ("Maya no longer likes flat whites."), or a
    bare "dislikes" when the person's message names the fact's thing. Not the fact again,
    and not "sad she no longer plays padel" asked about flat whites."""
    answer = padded_words(now)
    if not any(f" {words} " in answer for words in _STOPPED):
        return False
    name = substance_words(turn.user_speaker)
    theirs = substance_words(known.content) - name
    about = substance_words(now) - name - _STOPPED_WORDS
    if about:
        return bool(about & theirs)
    return bool(substance_words(turn.user_message) & theirs)


def restates(fact: TypedFact, known: KnownFact) -> bool:
    """Whether a kept item of the turn says `known` again (not an ending): written beside
    the change it would merge into the old fact and keep it believed."""
    if fact.ended:
        return False
    # Not the person's name, which every fact of theirs shares: "Ellie is allergic to
    # pistachios." does not restate "Ellie is allergic to cashews.".
    name = substance_words(fact.subject)
    mine, theirs = substance_words(fact.content) - name, substance_words(known.content) - name
    if not mine or not theirs:
        return core_words(fact.content) == core_words(known.content)
    return len(mine & theirs) >= 0.5 * len(mine | theirs)


def _what(known: KnownFact) -> str | None:
    """The value's name in a question ("diet", "relation to Aiden"), or None when the known
    fact holds one of several values (a pet, a language) or has no value to ask for."""
    if known.type not in _ASKED_TYPES:
        return None
    if known.type == "relationship":
        return f"relation to {known.value}" if known.value and _relation(known) else None
    if not known.attribute or not known.slot or ":" in known.slot:
        return None
    attribute = canonical_attribute(known.attribute)
    if attribute in MULTI_VALUED_ATTRIBUTES:
        return None
    return attribute.replace("_", " ")


def _felt(known: KnownFact) -> bool:
    """A liking, habit or hobby: no one value to ask for, but how the person feels now."""
    if known.type == "preference":
        return known.sentiment in _LIKED
    if known.type != "fact":
        return False
    attribute = canonical_attribute(known.attribute) if known.attribute else None
    return attribute is None or attribute in _FELT_ATTRIBUTES


def _open_goal(known: KnownFact) -> bool:
    """A goal still pursued, with the goal itself to ask about."""
    return known.type == "goal" and bool(known.attribute) and known.status in (None, "active")


def _relation(known: KnownFact) -> str:
    """A relationship's relation, from its slot ("brother:aiden")."""
    return (known.slot or "").partition(":")[0].replace("_", " ")


def _same(said: str, old: str, known: KnownFact) -> bool:
    """The answer names the known value (or a part of it: "Tesco" of "Tesco Extra")."""
    if not said or not old:
        return True
    return (
        said == old
        or f" {said} " in f" {old} "
        or f" {old} " in f" {said} "
        or (f" {said} " in padded_words(known.content))
    )


def _said_in_turn(said: str, turn: TurnInput) -> bool:
    """Every word of substance of the answer is the person's in this turn, stated, not
    only asked or supposed ("idk maybe lisbon?" moves no one to Lisbon; ADR 0033)."""
    words = substance_words(said) or set(said.split())
    theirs = set(asked_and_stated(turn.user_message)[1].split())
    return bool(words) and words <= theirs


def _sentence(known: KnownFact, turn: TurnInput, now: str) -> str:
    """The changed fact, saying the value it replaced when that is a short value: "Sofia's
    diet is pescatarian, no longer vegan." (a search for "vegan" finds the change)."""
    user, now = turn.user_speaker, now.strip().rstrip(".")
    if known.type == "relationship":
        return f"{known.value} is {user}'s {now}."
    old = (known.value or "").strip().rstrip(".")
    if not old or len(old.split()) > _NAMED_OLD_VALUE_WORDS:
        return f"{user}'s {_what(known)} is {now}."
    return f"{user}'s {_what(known)} is {now}, no longer {old}."


def _fact(known: KnownFact, turn: TurnInput, content: str, now: str | None) -> TypedFact | None:
    """A fact of `known`'s type and fields with the value `now` (None: an ending)."""
    base: dict[str, Any] = {
        "type": known.type,
        "content": content,
        "subject": turn.user_speaker,
        "confidence": 0.8,
        "ended": now is None,
    }
    old = known.value or ""
    fields: dict[str, dict[str, Any]] = {
        "identity": {"attribute": known.attribute, "value": now or old},
        "fact": {"attribute": known.attribute, "value": now or old or None},
        "preference": {
            "topic": known.attribute or old,
            "sentiment": known.sentiment,
            "value": old,
        },
        "decision": {"topic": known.attribute, "choice": now or old},
        "goal": {"goal": known.attribute, "status": "abandoned"},
        "relationship": {"person": known.value, "relation": now or _relation(known)},
    }
    try:
        return typed_fact_adapter.validate_python({**base, **fields[known.type]})
    except ValidationError:
        return None
