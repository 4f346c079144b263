"""The rules every entry point (API bodies, paths, queries, the CLI's files) checks input by:
ids, text that is valid Unicode, timestamps that fit in UTC, and the bounds of page sizes."""

from __future__ import annotations

import datetime as dt
import re
from collections.abc import Iterator
from typing import Annotated, Any

from pydantic import (
    AfterValidator,
    BaseModel,
    BeforeValidator,
    ConfigDict,
    Field,
    Strict,
    StringConstraints,
    model_validator,
)
from pydantic_core import PydanticCustomError

# The JSON-schema pattern: a full match in pydantic (Rust regex) and in JSON Schema alike,
# where `$` ends the text. Python's `re` lets `$` match before a final newline, so code
# checks ids with fullmatch on the class below, never re.match on the pattern.
ID_FIRST_CHARS = "A-Za-z0-9"  # a regex character class's contents, as ID_CHARS
ID_CHARS = rf"{ID_FIRST_CHARS}._:@\-"
ID_MAX_LENGTH = 128
_ID = rf"[{ID_FIRST_CHARS}][{ID_CHARS}]{{0,{ID_MAX_LENGTH - 1}}}"
ID_PATTERN = f"^{_ID}$"
ID_RULE = "1-128 characters: letters, digits and . _ : @ -, starting with a letter or digit"
_ID_BODY = re.compile(_ID)

Identifier = Annotated[str, StringConstraints(pattern=ID_PATTERN)]

# Message text must hold something besides spaces, tabs and line breaks (the same set in
# JSON Schema, pydantic and shared.records.ingest.validate_content).
BLANK = " \t\n\r\f\v"
NON_BLANK_PATTERN = r"[^ \t\n\r\f\v]"
NonBlankText = Annotated[str, StringConstraints(min_length=1, pattern=NON_BLANK_PATTERN)]

# Page sizes and offsets: past these a request is refused with 422 (the database's own
# integers would overflow far above them, with a 500).
MAX_OFFSET = 1_000_000
MAX_BUDGET_TOKENS = 1_000_000
MAX_COMPLETION_TOKENS = 1_000_000

TIMESTAMP_RANGE = "0001-01-01T00:00:00Z to 9999-12-31T23:59:59Z once converted to UTC"


def is_identifier(value: str) -> bool:
    return _ID_BODY.fullmatch(value) is not None


def check_identifier(value: str) -> str:
    if not is_identifier(value):
        raise ValueError(f"invalid id {value[:40]!r}: use {ID_RULE}")
    return value


def as_utc(value: dt.datetime) -> dt.datetime:
    """An aware UTC timestamp; one without an offset is taken as UTC (most chat logs are).
    Raises OverflowError when the conversion leaves the datetime range."""
    if value.tzinfo is None:
        return value.replace(tzinfo=dt.UTC)
    return value.astimezone(dt.UTC)


def to_utc(value: dt.datetime) -> dt.datetime:
    """as_utc for validation: out of range is a field error naming the range accepted."""
    try:
        return as_utc(value)
    except OverflowError:
        raise PydanticCustomError(
            "timestamp_range",
            "timestamp {value} is outside the range accepted: {range}",
            {"value": value.isoformat(), "range": TIMESTAMP_RANGE},
        ) from None


# TIMESTAMP_RANGE in unix seconds, for the APIs that send a number (mem0's `timestamp`).
UNIX_SECONDS_MIN = int(dt.datetime(1, 1, 1, tzinfo=dt.UTC).timestamp())
UNIX_SECONDS_MAX = int(dt.datetime(9999, 12, 31, 23, 59, 59, tzinfo=dt.UTC).timestamp())


def _unix_seconds_in_range(value: int) -> int:
    # Past these ends datetime.fromtimestamp raises (ValueError, OverflowError): a 500.
    if not UNIX_SECONDS_MIN <= value <= UNIX_SECONDS_MAX:
        raise PydanticCustomError(
            "timestamp_range",
            "timestamp {value} is outside the range accepted: unix seconds {low} to {high} "
            "(0001-01-01T00:00:00Z to 9999-12-31T23:59:59Z)",
            {"value": value, "low": UNIX_SECONDS_MIN, "high": UNIX_SECONDS_MAX},
        )
    return value


UnixSeconds = Annotated[
    int,
    AfterValidator(_unix_seconds_in_range),
    Field(json_schema_extra={"minimum": UNIX_SECONDS_MIN, "maximum": UNIX_SECONDS_MAX}),
]


# What pydantic would read as seconds since 1970 in a string too: "-1", "1715178600.5".
_NUMBER = re.compile(r"\s*[+-]?(?:\d+\.?\d*|\.\d+)(?:[eE][+-]?\d+)?\s*")


def _timestamp_text(value: Any) -> Any:
    # Request models are strict, but a timestamp arrives as text (ISO 8601) in JSON; a
    # number would otherwise be read as seconds since 1970, which no schema says.
    if isinstance(value, int | float) or (isinstance(value, str) and _NUMBER.fullmatch(value)):
        raise PydanticCustomError(
            "timestamp_type",
            "a timestamp is an ISO 8601 string such as 2024-05-08T14:30:00Z, not a number",
        )
    return value


Timestamp = Annotated[
    dt.datetime, Strict(False), BeforeValidator(_timestamp_text), AfterValidator(to_utc)
]


# Text no database stores, by the error type a request gets for it.
_UNSTORABLE = {
    "invalid_unicode": (
        "{field} holds text that is not valid Unicode (a lone surrogate at character "
        "{index}); send UTF-8 text, with emoji and other astral characters as one "
        "character or as a \\ud83d\\ude00-style surrogate pair"
    ),
    "nul_character": (
        "{field} holds a NUL character (at character {index}), which no database stores; remove it"
    ),
}


def invalid_text(value: Any, path: str = "") -> Iterator[tuple[str, int, str]]:
    """(where, character index, error type) of each string in `value` no database stores:
    a lone surrogate, which JSON's \\ud800 escapes can carry but UTF-8 cannot, or a NUL."""
    if isinstance(value, str):
        if not value.isascii():
            try:
                value.encode("utf-8")
            except UnicodeEncodeError as exc:
                yield path, exc.start, "invalid_unicode"
        if "\x00" in value:
            yield path, value.index("\x00"), "nul_character"
    elif isinstance(value, dict):
        for key, item in value.items():
            yield from invalid_text(key, path)
            yield from invalid_text(item, f"{path}.{key}" if path else str(key))
    elif isinstance(value, list | tuple):
        for i, item in enumerate(value):
            yield from invalid_text(item, f"{path}[{i}]")


class RequestModel(BaseModel):
    """Base of every request body and transcript line: strict types (a number is a number,
    not a string of digits: what the OpenAPI schema says is what is accepted), and text
    that is not valid Unicode refused before any field is read, naming where it is."""

    model_config = ConfigDict(strict=True, extra="forbid")

    @model_validator(mode="before")
    @classmethod
    def _valid_text(cls, data: Any) -> Any:
        return _integral_floats_as_ints(storable(data))


def storable(data: Any) -> Any:
    """`data` as it is, or a validation error naming the first text no database stores."""
    for where, index, kind in invalid_text(data):
        context = {"field": where or "the body", "index": index}
        raise PydanticCustomError(kind, _UNSTORABLE[kind], context)
    return data


def _integral_floats_as_ints(value: Any) -> Any:
    """2.0 is an integer in JSON Schema; strict pydantic would refuse it for an int field
    (a float field takes an int as it is)."""
    if isinstance(value, float) and value.is_integer() and abs(value) < 2**63:
        return int(value)
    if isinstance(value, dict):
        return {k: _integral_floats_as_ints(v) for k, v in value.items()}
    if isinstance(value, list):
        return [_integral_floats_as_ints(v) for v in value]
    return value
