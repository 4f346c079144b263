"""Checks on the LLM's facts that need the turn: an item a schema accepts can still not be
the person's own statement.

Small models (Qwen2.5-1.5B on casual chat, issue 25) write the message back in the first
person ("I'm Dan's brother."), write down the assistant's words ("Two years of you stealing
my hoodies…"), and copy the prompt's examples into facts about someone else
("Grace drives a 2019 Honda Civic."). Each of these is dropped with its reason, counted
like any invalid item, so a reply of nothing else ends `dropped`, never a quiet `done`.
"""

from __future__ import annotations

import re
from collections.abc import Callable

from shared.extraction.base import TurnInput
from shared.extraction.prompts import example_values
from shared.extraction.schemas import TypedFact, core_words

# "I", "I'm", "my", "me", … as words ("My" only first: "My Chemical Romance" is a band): a
# fact is one sentence in the third person.
_FIRST_PERSON = re.compile(
    r"(?<![\w'’])(?:I|I['’](?:m|ve|d|ll)|my|me|mine|myself)(?![\w'’])|^(?:My|Myself)\b"
)
# Detail fields that hold what a fact is about (not its kind: attribute names, sentiments).
_VALUE_FIELDS = ("value", "person", "choice")


def first_person(content: str) -> bool:
    return _FIRST_PERSON.search(content) is not None


def rejections(turn: TurnInput) -> Callable[[TypedFact], str | None]:
    """The check for this turn's items: why an item is not the person's own statement, or
    None to keep it. The conversation's words are read once per turn, not once per item."""
    said = _padded(_conversation_text(turn))

    def rejection(fact: TypedFact) -> str | None:
        if first_person(fact.content):
            return "content in the first person (copied from a message, not a fact about them)"
        if (example := _copied_example(fact, said)) is not None:
            return f"copied from the prompt's examples ({example!r} is not in the conversation)"
        return None

    return rejection


def _copied_example(fact: TypedFact, said: str) -> str | None:
    """The example value this fact repeats when the conversation (`said`) never says it."""
    words = _padded(fact.content)
    values = {core_words(str(fact.details.get(k) or "")) for k in _VALUE_FIELDS}
    for example in example_values():
        if (example in values or f" {example} " in words) and f" {example} " not in said:
            return example
    return None


def _padded(text: str) -> str:
    """`core_words` with a space each side: " x " in it is x as whole words."""
    return f" {core_words(text)} "


def _conversation_text(turn: TurnInput) -> str:
    parts = [turn.user_speaker, turn.user_message, turn.assistant_message or ""]
    parts += [text for _, text in turn.earlier_messages]
    parts += [fact.content for fact in turn.known_facts]
    return " ".join(parts)
