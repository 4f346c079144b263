"""The tier summary prompt: what a summary keeps, its JSON shape, and how it reads."""

from __future__ import annotations

from string import Template
from typing import Any

# Bump when the summary prompt or its output contract changes meaningfully.
SUMMARY_VERSION = "summary-1"

# Static, like the extraction prompt: the part, its level and its length limit go in the
# user message.
SUMMARY_SYSTEM_PROMPT = """\
You compress part of a conversation between a person and an assistant, so the assistant \
can keep working with it after the messages themselves leave its context window.

Keep, as short self-contained statements that name who they concern:
- decisions: what was chosen or agreed, with the reason when one was given;
- constraints: requirements, limits, deadlines, budgets, things ruled in or out;
- open_items: questions not yet answered, tasks promised or still pending;
- facts: names, numbers, dates, versions, places and anything else a later turn may \
refer to.
Drop greetings, thanks, small talk, repetition, and the assistant's explanations unless \
they hold a decision or a fact. Never invent anything. Write absolute dates when the \
text gives them. When a later message changes an earlier decision, keep only the later one.

The request says which tier the summary is for:
- topic: one block of recent-but-older exchanges; group by topic, medium detail.
- bulk: the oldest history, merged with earlier summaries; compress hard and keep only \
what still matters.
Lines marked [summary] are earlier summaries: keep their decisions, constraints and open \
items unless the conversation settled or reversed them.

Stay within the length the request gives; shorter is better. Answer with JSON only: \
{"topic": "...", "decisions": [...], "constraints": [...], "open_items": [...], \
"facts": [...]}, every list present (empty when nothing qualifies).
"""

SUMMARY_USER_TEMPLATE = """\
Summarize this part of the conversation for the $level tier.
The whole summary must stay under $max_tokens tokens (about $max_words words).
$focus_line
<conversation>
$transcript
</conversation>"""

_FOCUS_LINE = "Pay particular attention to: $focus\n"

SUMMARY_SCHEMA: dict[str, Any] = {
    "type": "object",
    "properties": {
        "topic": {"type": "string"},
        "decisions": {"type": "array", "items": {"type": "string"}},
        "constraints": {"type": "array", "items": {"type": "string"}},
        "open_items": {"type": "array", "items": {"type": "string"}},
        "facts": {"type": "array", "items": {"type": "string"}},
    },
    "required": ["topic", "decisions", "constraints", "open_items", "facts"],
    "additionalProperties": False,
}

# How a structured summary reads in the context, section by section.
SUMMARY_SECTIONS = (
    ("decisions", "Decisions"),
    ("constraints", "Constraints"),
    ("open_items", "Open items"),
    ("facts", "Facts"),
)


def build_summary_messages(
    *, level: str, lines: list[tuple[str, str, bool]], max_tokens: int, focus: str | None
) -> tuple[str, str]:
    """The (system, user) messages for one summary; `lines` are (label, text, is_summary)."""
    transcript = "\n".join(
        f"[summary] {text}" if is_summary else f"{label}: {text}"
        for label, text, is_summary in lines
    )
    focus_line = Template(_FOCUS_LINE).substitute(focus=focus.strip()) if focus else ""
    user = Template(SUMMARY_USER_TEMPLATE).substitute(
        level=level,
        max_tokens=max_tokens,
        # ~0.75 words a token in English; asking for a little less leaves room for the JSON.
        max_words=max(5, int(max_tokens * 0.6)),
        focus_line=focus_line,
        transcript=transcript,
    )
    return SUMMARY_SYSTEM_PROMPT, user
