"""Typing a free-text memory (mem0's "Lives in Berlin", or a raw message) as tiermem facts.

mem0 stores untyped sentences, mostly without a subject ("Likes pizza", "Name is Alex", "Is
a vegetarian"). The offline extractor reads first-person statements, so a memory is put in
the first person first; what its rules recognise becomes typed facts (with slots, so a
later value supersedes), anything else one `fact` without a slot holding the text as is.
"""

from __future__ import annotations

import datetime as dt
import re
from typing import Any

from shared.errors import InvalidInput
from shared.extraction.base import validate_items
from shared.extraction.offline import extract_items
from shared.extraction.schemas import CONTENT_MAX, CONTENT_MIN, GeneralFact, TypedFact

# Who an untyped memory is about: the extractor's word for a user it has no name for.
SUBJECT = "User"
GENERIC_CONFIDENCE = 0.8

# The subject mem0's memories leave out, or name in the third person.
_THIRD_PERSON_SUBJECT = re.compile(r"^(?:the user|user)(?:'s)?\s+", re.I)
_POSSESSIVE_SUBJECT = re.compile(r"^(?:the user's|user's)\s+", re.I)
# A leading verb in the third person singular, and its first-person form.
_IRREGULAR = {"is": "am", "has": "have", "was": "was", "does": "do", "goes": "go"}
_VERB_S = re.compile(r"^([A-Za-z]+?)(ies|es|s)\b")
_KEEP = re.compile(r"^(?:I|I'm|I've|I'd|My|Me|We|Our)\b")
_NOUN_LEADS = ("name", "favorite", "favourite", "birthday", "age", "job", "wife", "husband")
_STATE_LEADS = ("allergic", "vegetarian", "vegan", "married", "single", "interested", "afraid")
_PAST = re.compile(r"^(?:had|went|was|did|got|met|left|bought|began|took|made|saw|[a-z]+ed)$")


def first_person(text: str) -> str:
    """ "Likes pizza" -> "I like pizza"; "Name is Alex" -> "My name is Alex"; "The user
    lives in Berlin" -> "I live in Berlin". Text already in the first person is kept."""
    text = text.strip()
    if _KEEP.match(text):
        return text
    if _POSSESSIVE_SUBJECT.match(text):
        return "My " + _POSSESSIVE_SUBJECT.sub("", text)
    text = _THIRD_PERSON_SUBJECT.sub("", text)
    head, _, rest = text.partition(" ")
    lowered = head.lower()
    if lowered in _NOUN_LEADS:
        return f"My {lowered} {rest}".strip()
    if lowered in _STATE_LEADS:
        return f"I am {lowered} {rest}".strip()
    if _PAST.match(lowered):
        return f"I {lowered} {rest}".strip()
    if lowered in _IRREGULAR:
        return f"I {_IRREGULAR[lowered]} {rest}".strip()
    match = _VERB_S.match(lowered)
    if match and len(lowered) > 3:
        stem, ending = match.groups()
        verb = stem + ("y" if ending == "ies" else "" if ending == "s" else "")
        if ending == "es" and not stem.endswith(("ss", "sh", "ch", "x", "z", "o")):
            verb = stem + "e"  # "lives" -> "live", "loves" -> "love"
        return f"I {verb} {rest}".strip()
    return text


def require_memory_text(text: str, *, where: str, otherwise: str, **details: Any) -> None:
    """A text that becomes a memory as it is (infer=false, an update) must be able to be
    one: shorter than a fact's content can be, it is refused naming `where`."""
    if len(text.strip()) < CONTENT_MIN:
        raise InvalidInput(
            f"{where}: a memory needs at least {CONTENT_MIN} characters; {otherwise}",
            details={**details, "min_length": CONTENT_MIN},
        )


def typed_facts(text: str, *, said_at: dt.datetime) -> list[TypedFact]:
    """The facts the offline rules read in `text` (at least one: the text itself as a
    `fact` when they recognise nothing), none when it is too short to be a fact."""
    if len(text.strip()) < CONTENT_MIN:
        return []
    items = extract_items(first_person(text), speaker=SUBJECT, session_date=said_at)
    facts = validate_items(items, max_facts=10, min_confidence=0.3).facts
    if facts:
        return facts
    return [
        GeneralFact(
            type="fact",
            content=text.strip()[:CONTENT_MAX],
            subject=SUBJECT,
            confidence=GENERIC_CONFIDENCE,
        )
    ]
