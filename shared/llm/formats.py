"""The response formats a server is asked for, the ladder down from json_schema, and what
each server was seen to reject (ADR 0018, 0021)."""

from __future__ import annotations

import re
import threading
from dataclasses import dataclass
from typing import Any

JSON_SCHEMA, JSON_OBJECT = "json_schema", "json_object"
# llama.cpp's servers (and llama-cpp-python's) constrain decoding to a schema given inside
# a json_object response_format: the server keeps the schema when it rejects json_schema.
JSON_OBJECT_SCHEMA = "json_object+schema"
# The ladder down (ADR 0018, 0021): a server that rejects a format gets the next one at once.
NEXT_FORMAT = {JSON_SCHEMA: JSON_OBJECT_SCHEMA, JSON_OBJECT_SCHEMA: JSON_OBJECT}
FORMAT_RANK = {JSON_SCHEMA: 0, JSON_OBJECT_SCHEMA: 1, JSON_OBJECT: 2}
# ADR 0018: how a server that cannot do structured outputs is told from a failing one.
_NAMES_THE_FORMAT = re.compile(r"response_format|json_schema|structured output", re.IGNORECASE)
_SAYS_UNSUPPORTED = re.compile(
    r"not supported|unsupported|not implemented|unknown parameter|unrecognized|"
    r"extra inputs are not permitted",
    re.IGNORECASE,
)


# A run's response_format_note holds at most NOTE_CHARS; the server's words get REASON_CHARS.
NOTE_CHARS, REASON_CHARS = 500, 400


def rejects_structured_output(status: int, said: str) -> bool:
    """True when an HTTP error answering a json_schema request says the server cannot do it.

    A 400/422 qualifies when it names the format or says something is unsupported: it is a
    permanent error either way, so a wrong guess costs one extra request. A 500 qualifies
    only when it names the format (llama.cpp's server answers a validation error naming
    json_schema with 500): any other 500 is the server failing, retried as transient.
    """
    if status in (400, 422):
        return bool(_NAMES_THE_FORMAT.search(said) or _SAYS_UNSUPPORTED.search(said))
    if status == 500:
        return bool(_NAMES_THE_FORMAT.search(said))
    return False


@dataclass(frozen=True)
class LearnedFormat:
    type: str  # the format the server took after rejecting the one(s) before it
    reason: str  # why: the rejection, in the server's words


class StructuredOutputFallbacks:
    """The (base_url, model) pairs seen to reject json_schema, with the format they took and
    why, for the life of the process: later calls go straight to that format."""

    def __init__(self) -> None:
        self._lock = threading.Lock()
        self._learned: dict[tuple[str, str], LearnedFormat] = {}

    def learned(self, base_url: str, model: str) -> LearnedFormat | None:
        with self._lock:
            return self._learned.get((base_url, model))

    def remember(self, base_url: str, model: str, fmt: str, reason: str) -> None:
        with self._lock:
            known = self._learned.get((base_url, model))
            if known is None or FORMAT_RANK[fmt] > FORMAT_RANK[known.type]:
                self._learned[(base_url, model)] = LearnedFormat(fmt, reason)

    def items(self) -> dict[tuple[str, str], LearnedFormat]:
        with self._lock:
            return dict(self._learned)

    def clear(self) -> None:
        with self._lock:
            self._learned.clear()


# One per process, shared by every LLMClient (extraction and summaries make their own).
FALLBACKS = StructuredOutputFallbacks()


@dataclass(frozen=True)
class CallFormat:
    """The response_format a call used; `note` says why json_object when json_schema was
    configured (None when the configured format was used)."""

    type: str  # json_schema | json_object+schema | json_object
    note: str | None = None

    def details(self) -> dict[str, Any]:
        return {"response_format": self.type, "response_format_note": self.note}
