"""What the server fills in or fixes in a model's item, and the one name per attribute."""

from __future__ import annotations

from typing import Any

import pytest

from shared.extraction.base import validate_items
from shared.extraction.repair import DEFAULT_CONFIDENCE, repair_item
from shared.extraction.schemas import canonical_attribute, typed_fact_adapter


def test_a_complete_item_is_not_repaired_and_its_subject_is_the_servers() -> None:
    item = {"type": "goal", "goal": "run a marathon", "target_date": None, "status": "active",
            "content": "Ana wants to run a marathon.", "ended": False, "valid_from": None,
            "confidence": 0.9, "tags": ["sport"], "subject": "someone else"}  # fmt: skip
    fixed, changes = repair_item(item, subject="Ana")
    assert changes == [] and fixed["subject"] == "Ana"


@pytest.mark.parametrize(
    ("field", "said", "reads"),
    [
        ("confidence", "90", 0.9),
        ("confidence", None, DEFAULT_CONFIDENCE),
        ("confidence", "sure", DEFAULT_CONFIDENCE),
        ("sentiment", "Loves", "likes"),
        ("sentiment", "hate", "dislikes"),
        ("valid_from", "last week", None),
        ("ended", "yes", False),
        ("tags", "food", ["food"]),
    ],
)
def test_a_field_is_read_or_takes_its_default(field: str, said: Any, reads: Any) -> None:
    item = {"type": "preference", "topic": "food", "sentiment": "likes", "value": "sushi",
            "content": "Ana likes sushi.", field: said}  # fmt: skip
    fixed, changes = repair_item(item, subject="Ana")
    assert fixed[field] == reads and field in changes
    typed_fact_adapter.validate_python(fixed)  # and the item is valid now


def test_keys_of_the_models_own_go_and_a_plural_type_is_read() -> None:
    item = {"type": "Relationships", "person": "Marta", "relation": "sister",
            "content": "Ana's sister is Marta.", "mood": "happy"}  # fmt: skip
    fixed, changes = repair_item(item, subject="Ana")
    assert fixed["type"] == "relationship" and "mood" not in fixed
    assert {"type", "-mood"} <= set(changes)


@pytest.mark.parametrize(
    "item",
    [
        {"type": "identity", "content": "Ana is great."},  # no attribute, no value
        {"content": "Ana lives in Lisbon."},  # no type
        {"type": "horoscope", "content": "Ana is a Leo."},
        "Ana likes jazz.",
    ],
)
def test_an_item_whose_meaning_is_missing_is_dropped(item: Any) -> None:
    validated = validate_items([item], max_facts=10, min_confidence=0.3, subject="Ana")
    assert validated.facts == [] and validated.dropped_invalid == 1


@pytest.mark.parametrize(
    ("said", "reads"),
    [
        ("job", "employer"), ("Company", "employer"), ("works at", "employer"),
        ("city", "location"), ("lives_in", "location"), ("job_title", "occupation"),
        ("pets", "pet"), ("kids", "child"), ("favourite_band", "favourite_band"), ("*", "*"),
    ],
)  # fmt: skip
def test_one_name_per_attribute(said: str, reads: str) -> None:
    assert canonical_attribute(said) == reads


def test_an_identity_attribute_filed_as_a_fact_is_the_identity_slot() -> None:
    fact = typed_fact_adapter.validate_python(
        {
            "type": "fact",
            "attribute": "company",
            "value": "Arup",
            "subject": "Priya",
            "content": "Priya works at Arup.",
            "confidence": 0.9,
        }  # fmt: skip
    )
    assert (fact.attribute, fact.slot) == ("employer", "identity/employer")
