"""What the server fills in or fixes in a model's fact item before it is validated.

A small model in JSON mode leaves fields out, names a sentiment "love" or a confidence
"90", and adds keys of its own; none of that changes what the item means, so it is fixed
here and counted as repaired. `subject` is not asked of the model at all: it is always
the person the request names. An item whose meaning is missing (no type, no content, no
value) is left for validation to drop, with the reason.
"""

from __future__ import annotations

import datetime as dt
from typing import Any

from shared.extraction.schemas import FACT_MODELS

# Said "outright or clearly implied" (the prompt's scale) when the model gives none.
DEFAULT_CONFIDENCE = 0.8
SERVER_FILLED = ("subject",)

_TYPE_ALIASES = {
    "identities": "identity",
    "preferences": "preference",
    "facts": "fact",
    "general": "fact",
    "decisions": "decision",
    "goals": "goal",
    "relationships": "relationship",
    "relation": "relationship",
    "person": "relationship",
}
_SENTIMENTS = {
    "like": "likes",
    "love": "likes",
    "loves": "likes",
    "enjoys": "likes",
    "enjoy": "likes",
    "positive": "likes",
    "dislike": "dislikes",
    "hate": "dislikes",
    "hates": "dislikes",
    "negative": "dislikes",
    "prefer": "prefers",
    "preferred": "prefers",
    "avoid": "avoids",
}
_STATUSES = {"done": "achieved", "completed": "achieved", "in_progress": "active"}
# Optional fields with the value they take when left out or unreadable.
_DEFAULTS: dict[str, Any] = {
    "tags": [],
    "valid_from": None,
    "ended": False,
    "attribute": None,  # a plain fact without a single current value
    "value": None,
    "reason": None,
    "target_date": None,
    "status": "active",
}


def repair_item(item: Any, *, subject: str | None) -> tuple[Any, list[str]]:
    """(the item to validate, what was fixed). Items that are not objects pass unchanged."""
    if not isinstance(item, dict):
        return item, []
    fixed = dict(item)
    if subject is not None:
        fixed["subject"] = subject
    kind = fixed.get("type")
    if isinstance(kind, str):
        kind = _TYPE_ALIASES.get(kind.strip().lower(), kind.strip().lower())
    model = FACT_MODELS.get(kind) if isinstance(kind, str) else None
    if model is None:
        return fixed, []  # no type to repair towards: validation says why
    changes: list[str] = []
    if fixed.get("type") != kind:
        fixed["type"] = kind
        changes.append("type")
    fields = model.model_fields
    for key in [k for k in fixed if k not in fields]:
        del fixed[key]
        changes.append(f"-{key}")
    for key, default in _DEFAULTS.items():
        # attribute and value are optional on a plain fact only; elsewhere they are meaning.
        optional = key in fields and (kind == "fact" or key not in ("attribute", "value"))
        if optional and (key not in fixed or not _readable(key, fixed[key])):
            fixed[key] = default
            changes.append(key)
    confidence = _confidence(fixed.get("confidence"))
    if confidence != fixed.get("confidence"):
        fixed["confidence"] = confidence
        changes.append("confidence")
    if kind == "preference" and isinstance(fixed.get("sentiment"), str):
        said = fixed["sentiment"].strip().lower()
        sentiment = _SENTIMENTS.get(said, said)
        if sentiment != fixed["sentiment"]:
            fixed["sentiment"] = sentiment
            changes.append("sentiment")
    if kind == "goal" and isinstance(fixed.get("status"), str):
        status = _STATUSES.get(fixed["status"].strip().lower(), fixed["status"].strip().lower())
        if status != fixed["status"]:
            fixed["status"] = status
            changes.append("status")
    if isinstance(fixed.get("tags"), str):
        fixed["tags"] = [fixed["tags"]]
        changes.append("tags")
    return fixed, changes


def _readable(key: str, value: Any) -> bool:
    if key in ("valid_from", "target_date"):
        if value is None:
            return True
        try:
            dt.date.fromisoformat(str(value))
        except ValueError:
            return False
        return True
    if key == "ended":
        return isinstance(value, bool)
    if key == "tags":
        return isinstance(value, list | str)
    if key == "status":
        return isinstance(value, str)
    return True


def _confidence(value: Any) -> float:
    """The model's confidence as 0-1: "0.9", 90 (a percentage) and a missing one read too."""
    try:
        number = float(value)
    except (TypeError, ValueError):
        return DEFAULT_CONFIDENCE
    if 1 < number <= 100:
        number /= 100
    return number if 0 <= number <= 1 else DEFAULT_CONFIDENCE
