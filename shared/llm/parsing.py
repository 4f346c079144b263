"""A reply's JSON read out of the model's text: fences stripped, the top level checked."""

from __future__ import annotations

import json
import re
from typing import Any

_FENCE = re.compile(r"^\s*```[a-zA-Z0-9_-]*\s*\n?(.*?)\n?\s*```\s*$", re.DOTALL)


_JSON_TYPES: dict[str, type | tuple[type, ...]] = {
    "object": dict,
    "array": list,
    "string": str,
    "boolean": bool,
    "number": (int, float),
    "integer": int,
}


def parse_reply(text: str, schema: dict[str, Any]) -> tuple[Any, str | None]:
    """(data, None) when `text` is JSON whose top level fits `schema`, else (None, problem).

    Only the top level is checked: items inside are validated one by one by the caller,
    so one bad item costs that item, not a repair call.
    """
    fenced = _FENCE.match(text)
    if fenced:  # ```json ... ``` is common and harmless; not worth a repair call
        text = fenced.group(1)
    if not text.strip():
        return None, "the reply was empty"
    try:
        data = json.loads(text)
    except ValueError as exc:
        return None, f"it is not valid JSON ({exc})"
    return data, _top_level_problem(data, schema)


def _top_level_problem(data: Any, schema: dict[str, Any]) -> str | None:
    expected = schema.get("type")
    if expected == "object":
        if not isinstance(data, dict):
            return f"expected a JSON object, got {type(data).__name__}"
        properties = schema.get("properties", {})
        for key in schema.get("required", []):
            if key not in data:
                return f"the object has no {key!r} key"
            want = properties.get(key, {}).get("type")
            python_type = _JSON_TYPES.get(want) if isinstance(want, str) else None
            if python_type and not isinstance(data[key], python_type):
                return f"{key!r} should be a JSON {want}, got {type(data[key]).__name__}"
    elif expected == "array" and not isinstance(data, list):
        return f"expected a JSON array, got {type(data).__name__}"
    return None
