"""Builders for test data: extraction replies the scripted LLM returns, turns, transcripts."""

from __future__ import annotations

import uuid
from typing import Any


def identity(
    subject: str, attribute: str, value: str, content: str, confidence: float = 0.9
) -> dict[str, Any]:
    return {
        "type": "identity",
        "content": content,
        "subject": subject,
        "confidence": confidence,
        "tags": [attribute],
        "valid_from": None,
        "ended": False,
        "attribute": attribute,
        "value": value,
    }


def preference(
    subject: str,
    topic: str,
    value: str,
    content: str,
    sentiment: str = "likes",
    confidence: float = 0.85,
) -> dict[str, Any]:
    return {
        "type": "preference",
        "content": content,
        "subject": subject,
        "confidence": confidence,
        "tags": [topic],
        "valid_from": None,
        "ended": False,
        "topic": topic,
        "sentiment": sentiment,
        "value": value,
    }


def general(subject: str, content: str, confidence: float = 0.8) -> dict[str, Any]:
    return {
        "type": "fact",
        "content": content,
        "subject": subject,
        "confidence": confidence,
        "tags": [],
        "valid_from": None,
        "ended": False,
        "attribute": None,
        "value": None,
    }


def decision(subject: str, topic: str, choice: str, content: str) -> dict[str, Any]:
    return {
        "type": "decision",
        "content": content,
        "subject": subject,
        "confidence": 0.9,
        "tags": [topic],
        "valid_from": None,
        "ended": False,
        "topic": topic,
        "choice": choice,
        "reason": None,
    }


def goal(subject: str, goal_text: str, content: str, status: str = "active") -> dict[str, Any]:
    return {
        "type": "goal",
        "content": content,
        "subject": subject,
        "confidence": 0.8,
        "tags": [],
        "valid_from": None,
        "ended": False,
        "goal": goal_text,
        "target_date": None,
        "status": status,
    }


def relationship(subject: str, person: str, relation: str, content: str) -> dict[str, Any]:
    return {
        "type": "relationship",
        "content": content,
        "subject": subject,
        "confidence": 0.9,
        "tags": [],
        "valid_from": None,
        "ended": False,
        "person": person,
        "relation": relation,
    }


def facts(*items: dict[str, Any]) -> dict[str, Any]:
    return {"facts": list(items)}


def turn(user_id: str, text: str, reply: str = "Noted.", **extra: Any) -> dict[str, Any]:
    return {
        "user_id": user_id,
        "user_message": {"content": text, "speaker": extra.pop("speaker", "Ana")},
        "assistant_message": reply,
        **extra,
    }


def ended(item: dict[str, Any]) -> dict[str, Any]:
    """The same fact, stating that its value ended ("Ana quit Siemens")."""
    return {**item, "ended": True}


def pet(subject: str, name: str, content: str) -> dict[str, Any]:
    return {**general(subject, content), "attribute": "pet", "value": name}


def new_id(prefix: str) -> str:
    """A user, session or tenant id no other test of a shared server uses."""
    return f"{prefix}-{uuid.uuid4().hex[:8]}"
