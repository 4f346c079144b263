"""The six typed fact schemas an extractor may emit, and the slot keys behind contradictions."""

from __future__ import annotations

import datetime as dt
import re
import unicodedata
from typing import Annotated, Any, Literal

from pydantic import BaseModel, ConfigDict, Field, PrivateAttr, TypeAdapter, field_validator

ENDED = "ended"  # the slot value of a fact that states its value ended
FactType = Literal["identity", "preference", "fact", "decision", "goal", "relationship"]
FACT_TYPES: tuple[FactType, ...] = (
    "identity",
    "preference",
    "fact",
    "decision",
    "goal",
    "relationship",
)


# A fact's sentence: shorter says nothing, longer is more than one fact.
CONTENT_MIN, CONTENT_MAX = 3, 500


class _FactBase(BaseModel):
    """Fields every fact carries. `content` is one third-person sentence naming the person."""

    model_config = ConfigDict(extra="forbid", str_strip_whitespace=True)

    content: str = Field(min_length=CONTENT_MIN, max_length=CONTENT_MAX)
    subject: str = Field(min_length=1, max_length=100, description="who the fact is about")
    confidence: float = Field(ge=0.0, le=1.0)
    tags: list[str] = Field(default_factory=list, max_length=8)
    valid_from: dt.date | None = Field(
        default=None, description="the absolute date the fact became true, if stated"
    )
    ended: bool = Field(
        default=False,
        description=(
            "true when the fact states that its value stopped being true (quit a job, moved "
            "away, broke up, a pet died, no longer likes it): the same type and fields the "
            "fact it ends has, and that fact is retired"
        ),
    )

    # The stored facts this ending names (shared.extraction.endings): the writer retires
    # them. Found by the product from the known facts shown, never asked of the model.
    _ends_fact_ids: tuple[str, ...] = PrivateAttr(default=())

    @property
    def ends_fact_ids(self) -> tuple[str, ...]:
        """The stored facts this ending names, found among the known facts shown."""
        return self._ends_fact_ids

    def link_ended_facts(self, fact_ids: tuple[str, ...]) -> None:
        self._ends_fact_ids = fact_ids

    @field_validator("tags")
    @classmethod
    def _clean_tags(cls, tags: list[str]) -> list[str]:
        return sorted({t.strip().lower() for t in tags if t.strip()})[:8]

    def slot_attribute(self) -> str | None:
        """The attribute whose single value this fact asserts; None → never superseded."""
        return None

    def slot_value(self) -> str:
        """The value held in the slot: a different value in the same slot is a contradiction."""
        return ""

    def slot_state(self) -> str:
        """What the slot holds after this fact: its value, or that the value ended."""
        return ENDED if self.ended else self.slot_value()

    @property
    def slot(self) -> str | None:
        attribute = self.slot_attribute()
        if not attribute:
            return None
        # "pet:rex": the attribute's family before the colon, the value it holds after it.
        # No subject: every fact of a user is about that user (other people are in
        # relationships), and the name they go by may come or change ("I'm Ben").
        parts = ":".join(p if p == "*" else slot_part(p) for p in attribute.split(":", 1))
        kind = self.type  # type: ignore[attr-defined]
        if kind == "fact" and parts.split(":", 1)[0] in IDENTITY_ATTRIBUTES:
            kind = "identity"  # "works at Arup" filed as a fact still replaces the employer
        return f"{kind}/{parts}"

    @property
    def details(self) -> dict[str, Any]:
        """The type-specific fields, as stored in the fact row."""
        common = set(_FactBase.model_fields) | {"type"}
        details = self.model_dump(mode="json", exclude=common)
        return {**details, "ended": True} if self.ended else details


# Attributes a person can hold several values of at once: never superseded by a new value.
MULTI_VALUED_ATTRIBUTES = frozenset(
    {
        "language",
        "pet",
        "hobby",
        "child",
        "sport",
        "instrument",
        "allergy",
        "intolerance",
        "condition",
    }
)
# "languages" and "language" must name one slot, or one fact is stored twice.
_SINGULAR = {
    "languages": "language",
    "pets": "pet",
    "hobbies": "hobby",
    "children": "child",
    "kids": "child",
    "kid": "child",
    "sports": "sport",
    "instruments": "instrument",
}


# One thing is one slot whatever a model calls it: "job", "company" and "employer" name the
# same attribute, so a new job replaces the old one (issue 25).
ATTRIBUTE_ALIASES = {
    **{name: "employer" for name in (
        "job", "work", "company", "workplace", "works_at", "work_place", "employer_name",
        "current_employer", "current_job", "current_company", "organization", "organisation",
        "firm", "job_company", "place_of_work",
    )},
    **{name: "location" for name in (
        "city", "lives_in", "live", "living_in", "residence", "home", "home_city", "current_city",
        "current_location", "place_of_residence", "residence_city", "town", "address",
        "city_of_residence", "living_location",
    )},
    **{name: "occupation" for name in (
        "job_title", "title", "profession", "role", "position", "career", "work_role",
    )},
    **{name: "hometown" for name in ("birthplace", "home_town", "place_of_birth", "origin")},
    **{name: "name" for name in ("first_name", "full_name", "given_name")},
    "citizenship": "nationality",
    "marital_status": "relationship_status",
    "dog": "pet",
    "cat": "pet",
    "pet_name": "pet",
    "dietary_preference": "diet",
    "diet_type": "diet",
    "spoken_language": "language",
}  # fmt: skip
# Attributes of who the person is: one slot whether a model files them as identity or fact.
IDENTITY_ATTRIBUTES = frozenset(
    {
        "name", "age", "birthday", "location", "hometown", "occupation", "employer",
        "nationality", "language", "pronouns", "relationship_status",
    }
)  # fmt: skip


def canonical_attribute(attribute: str) -> str:
    """The attribute's one name: case and spaces folded, plurals and aliases mapped."""
    if attribute.strip() == "*":
        return "*"
    key = slot_part(attribute)
    key = _SINGULAR.get(key, key)
    return ATTRIBUTE_ALIASES.get(key, key) or attribute


def _attribute_slot(attribute: str, value: str) -> str | None:
    """The slot attribute of an attribute/value fact: a multi-valued attribute keeps one
    slot per value ("pet:rex"), any other one slot whose value a new fact replaces."""
    if attribute.strip() == "*":
        return None  # "whatever it was": an ending found by its value (memory.beliefs)
    attribute = canonical_attribute(attribute)
    if attribute in MULTI_VALUED_ATTRIBUTES:
        return f"{attribute}:{value}"
    return attribute


class IdentityFact(_FactBase):
    type: Literal["identity"]
    attribute: str = Field(
        min_length=1, max_length=60, description="location, employer, occupation, name, age..."
    )
    value: str = Field(min_length=1, max_length=200)

    @field_validator("attribute")
    @classmethod
    def _one_name(cls, attribute: str) -> str:
        return canonical_attribute(attribute)

    def slot_attribute(self) -> str | None:
        return _attribute_slot(self.attribute, self.value)

    def slot_value(self) -> str:
        return self.value


class PreferenceFact(_FactBase):
    type: Literal["preference"]
    topic: str = Field(min_length=1, max_length=100, description="what the preference is about")
    sentiment: Literal["likes", "dislikes", "prefers", "avoids"]
    value: str = Field(min_length=1, max_length=200)

    def slot_attribute(self) -> str | None:
        # "prefers" picks one option for a topic (a new pick replaces it); likes and
        # dislikes accumulate, one slot per thing whatever its topic, so "loves jazz",
        # "no longer likes jazz" and "likes jazz again" take turns in one slot.
        if self.sentiment == "prefers":
            return self.topic
        return f"about:{thing_key(self.value)}"

    def slot_value(self) -> str:
        return self.value if self.sentiment == "prefers" else self.sentiment


class GeneralFact(_FactBase):
    type: Literal["fact"]
    attribute: str | None = Field(
        default=None, max_length=60, description="set only when the fact has one current value"
    )
    value: str | None = Field(default=None, max_length=200)

    @field_validator("attribute")
    @classmethod
    def _one_name(cls, attribute: str | None) -> str | None:
        return canonical_attribute(attribute) if attribute else attribute

    def slot_attribute(self) -> str | None:
        if not (self.attribute and self.value):
            return None
        return _attribute_slot(self.attribute, self.value)

    def slot_value(self) -> str:
        return self.value or ""


class DecisionFact(_FactBase):
    type: Literal["decision"]
    topic: str = Field(min_length=1, max_length=100)
    choice: str = Field(min_length=1, max_length=200)
    reason: str | None = Field(default=None, max_length=300)

    def slot_attribute(self) -> str | None:
        return self.topic

    def slot_value(self) -> str:
        return self.choice


class GoalFact(_FactBase):
    type: Literal["goal"]
    goal: str = Field(min_length=1, max_length=200)
    target_date: dt.date | None = None
    status: Literal["active", "achieved", "abandoned"] = "active"

    def slot_attribute(self) -> str | None:
        return self.goal  # the same goal, reported achieved or abandoned, replaces "active"

    def slot_value(self) -> str:
        return self.status


class RelationshipFact(_FactBase):
    type: Literal["relationship"]
    person: str = Field(min_length=1, max_length=100, description="the other person's name")
    relation: str = Field(min_length=1, max_length=60, description="sister, manager, friend...")

    def slot_attribute(self) -> str | None:
        return f"{self.relation}:{self.person}"


TypedFact = Annotated[
    IdentityFact | PreferenceFact | GeneralFact | DecisionFact | GoalFact | RelationshipFact,
    Field(discriminator="type"),
]
FACT_MODELS: dict[str, type[_FactBase]] = {
    "identity": IdentityFact,
    "preference": PreferenceFact,
    "fact": GeneralFact,
    "decision": DecisionFact,
    "goal": GoalFact,
    "relationship": RelationshipFact,
}
typed_fact_adapter: TypeAdapter[TypedFact] = TypeAdapter(TypedFact)

_SLOT_JUNK = re.compile(r"[^a-z0-9]+")
_NON_WORD = re.compile(r"[^\w\s]+")
_ARTICLES = re.compile(r"^(?:a|an|the|my|their|his|her|our|some)\s+")


def slot_part(text: str) -> str:
    return _SLOT_JUNK.sub("_", text.lower()).strip("_")


def core_words(value: str) -> str:
    """A value's words, case-folded, without punctuation or a leading article or
    possessive: what two wordings of one thing share ("the jazz", "Jazz!" → "jazz")."""
    text = " ".join(_NON_WORD.sub(" ", unicodedata.normalize("NFKC", value).casefold()).split())
    while (stripped := _ARTICLES.sub("", text)) != text:
        text = stripped
    return text


def thing_key(value: str) -> str:
    """The liked thing's key in a preference slot."""
    return slot_part(core_words(value))


_BASE_FIELDS_FIRST = ("content",)
_BASE_FIELDS_LAST = ("ended", "valid_from", "confidence", "tags")


def strict_json_schema(
    *, server_filled: tuple[str, ...] = ("subject",), max_facts: int | None = None
) -> dict[str, Any]:
    """The response schema sent to the LLM: OpenAI "strict" rules (every key required,
    no extra keys, optional values as nullable). The `server_filled` fields are not asked
    of the model: the server sets them (the subject is the person the request names).

    With `max_facts`, the lengths stay in and the list holds at most that many: the form a
    server decodes by (llama.cpp's grammar), where a small model otherwise repeats facts
    until its context is full (10 of 88 turns of Qwen2.5-1.5B on casual chat)."""
    bounded = max_facts is not None

    def strictify(node: Any) -> Any:
        if isinstance(node, dict):
            node = {k: strictify(v) for k, v in node.items() if k not in ("title", "default")}
            if "properties" in node:
                # The model writes keys in this order under a grammar: the sentence first,
                # then its type and fields, then the rest. Type first, Qwen2.5-1.5B filed
                # most turns as the person's name and wrote half the facts (ADR 0029).
                props = {k: v for k, v in node["properties"].items() if k not in server_filled}
                lead = [k for k in _BASE_FIELDS_FIRST if k in props]
                rest = [k for k in props if k not in _BASE_FIELDS_FIRST + _BASE_FIELDS_LAST]
                last = [k for k in _BASE_FIELDS_LAST if k in props]
                node["properties"] = {k: props[k] for k in lead + rest + last}
            if node.get("type") == "object" and "properties" in node:
                node["required"] = list(node["properties"])
                node["additionalProperties"] = False
            for key in ("maxLength", "minLength", "maxItems", "minimum", "maximum", "format"):
                if not (bounded and key in ("maxLength", "maxItems")):
                    node.pop(key, None)
            return node
        if isinstance(node, list):
            return [strictify(v) for v in node]
        return node

    items = [strictify(model.model_json_schema()) for model in FACT_MODELS.values()]
    facts: dict[str, Any] = {"type": "array", "items": {"anyOf": items}}
    if max_facts is not None:
        facts["maxItems"] = max_facts
    return {
        "type": "object",
        "properties": {"facts": facts},
        "required": ["facts"],
        "additionalProperties": False,
    }
