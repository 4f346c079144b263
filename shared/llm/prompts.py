"""What the client adds to a caller's prompt: the schema in JSON mode, and the repair request."""

from __future__ import annotations

import json
from string import Template
from typing import Any

# JSON mode (response_format json_object) does not send the schema to the model, so it
# has to be in the prompt.
JSON_MODE_INSTRUCTIONS = """\

Your answer must be one JSON object that validates against this JSON Schema:
$schema
"""

# A second and last chance after output that was not the JSON we asked for.
REPAIR_INSTRUCTIONS = """\
Your previous reply could not be used: $problem.
Reply again with the corrected JSON only: no prose, no code fences, nothing before or \
after the JSON object."""


def json_mode_instructions(schema: dict[str, Any]) -> str:
    return Template(JSON_MODE_INSTRUCTIONS).substitute(
        schema=json.dumps(schema, separators=(",", ":"))
    )


def repair_instructions(problem: str) -> str:
    return Template(REPAIR_INSTRUCTIONS).substitute(problem=problem)
