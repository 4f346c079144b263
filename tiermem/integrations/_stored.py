"""What the conversation adapters share: a framework's message (an Agents SDK item, a
LangChain message) as one tiermem message, and the markers that hide messages from the
framework without deleting them from tiermem.

A message is stored as its text whenever its text, role and external id give it back
exactly, so the user's words are what extraction, history search and the context read; any
other is stored whole as JSON in a `tool` message. The form is named in the external id,
`<prefix>.<form>.<nonce>[.<extra>]` (the nonce keeps ids unique in the session), and each
text form is checked when it is chosen: what is read back equals what was given."""

from __future__ import annotations

import json
import re
import uuid
from collections.abc import Callable, Iterable
from dataclasses import dataclass
from typing import Any, TypeVar

from shared.inputs import ID_PATTERN
from tiermem.models import MessageExported, TranscriptLine

T = TypeVar("T")
JSON_FORM = "j"
CLEAR = "clear"
TEXT_ROLES = ("user", "assistant", "system")
_ID = re.compile(ID_PATTERN)


@dataclass(frozen=True)
class TextForm:
    """A way to store a message as its text: `extra` is what the text does not say (an id)."""

    name: str
    role: str
    text: str
    extra: str = ""


@dataclass(frozen=True)
class Stored:
    role: str
    content: str
    external_id: str

    def line(self, *, user_id: str, session_id: str) -> TranscriptLine:
        return TranscriptLine.model_validate(
            {"user_id": user_id, "session_id": session_id, "role": self.role,
             "content": self.content, "external_id": self.external_id}
        )  # fmt: skip


@dataclass(frozen=True)
class Form:
    """A stored message's form, read from its external id."""

    name: str
    extra: str


def external_id(prefix: str, form: str, extra: str = "") -> str:
    return ".".join(filter(None, (prefix, form, uuid.uuid4().hex[:12], extra)))


def store(
    prefix: str,
    value: T,
    forms: Iterable[TextForm],
    rebuild: Callable[[TextForm], T | None],
    as_json: Callable[[T], Any],
) -> Stored:
    """The first text form that gives `value` back, else `as_json(value)` as JSON."""
    for form in forms:
        eid = external_id(prefix, form.name, form.extra)
        usable = form.text.strip() and "\x00" not in form.text and _ID.match(eid)
        if usable and rebuild(form) == value:
            return Stored(form.role, form.text, eid)
    content = json.dumps(as_json(value), ensure_ascii=False, separators=(",", ":"))
    return Stored("tool", content, external_id(prefix, JSON_FORM))


def form_of(prefix: str, message: MessageExported) -> Form | None:
    """The form a message was stored in by the adapter of `prefix`; None for any other."""
    parts = (message.external_id or "").split(".", 3)
    if len(parts) < 3 or parts[0] != prefix:
        return None
    return Form(parts[1], parts[3] if len(parts) > 3 else "")


def text_form(form: Form, message: MessageExported) -> TextForm:
    return TextForm(form.name, message.role, message.content, form.extra)


def marker(prefix: str, kind: str, note: str, target: str = "") -> Stored:
    """A message that tells the adapter to hide others (`pop` one, `clear` those before)."""
    return Stored("tool", f"({note})", external_id(prefix, kind, target))
