"""The facts the offline rules build: one typed dict per fact type, with the keys of its
schema in shared.extraction.schemas, so a misspelt or missing key is a type error.

They stay dicts, not the pydantic models: they go through `validate_items` as the LLM's
items do, which repairs, validates and counts what it drops in the same way for both.
"""

from __future__ import annotations

import datetime as dt
from typing import Literal, NotRequired, TypedDict

Sentiment = Literal["likes", "dislikes", "prefers", "avoids"]
GoalStatus = Literal["active", "achieved", "abandoned"]


class _Stated(TypedDict):
    """What every fact carries besides its type's own fields."""

    content: str
    subject: str
    confidence: float
    tags: list[str]
    valid_from: dt.date | None
    ended: NotRequired[bool]  # set (True) only on a fact that states its value ended


class IdentityItem(_Stated):
    type: Literal["identity"]
    attribute: str
    value: str


class PreferenceItem(_Stated):
    type: Literal["preference"]
    topic: str
    sentiment: Sentiment
    value: str


class GeneralItem(_Stated):
    type: Literal["fact"]
    attribute: NotRequired[str]  # only when the fact holds a slot ("diet", "pet")
    value: NotRequired[str]


class DecisionItem(_Stated):
    type: Literal["decision"]
    topic: str
    choice: str
    reason: str | None


class GoalItem(_Stated):
    type: Literal["goal"]
    goal: str
    target_date: dt.date | None
    status: GoalStatus


class RelationshipItem(_Stated):
    type: Literal["relationship"]
    person: str
    relation: str


Item = IdentityItem | PreferenceItem | GeneralItem | DecisionItem | GoalItem | RelationshipItem
