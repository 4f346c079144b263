"""Several turns of one session in one extraction call (ADR 0024): the prompt, the schema
whose items name their turn, the items sorted back to their turns, and the packing of
turns into calls that fit the model's context."""

from __future__ import annotations

import copy
import hashlib
from collections.abc import Callable, Sequence
from string import Template
from typing import Any, Protocol, runtime_checkable

from shared.extraction.base import ExtractionResult, KnownFact, TurnInput
from shared.extraction.prompts import (
    assistant_block,
    context_blocks,
    prompt_hash,
    system_prompt,
)

# Static, and after the one-turn system prompt: a batch call's prompt starts with the same
# cached prefix as a one-turn call's, then this, then the batch's own details.
BATCH_SYSTEM_ADDENDUM = """
Several turns: when the request shows numbered turns (<turn n="1">, <turn n="2">, ...) \
instead of one, read each of them as the latest turn in its place: at most $max_facts facts \
from each, from what the person says in that turn only (earlier turns, like the earlier \
conversation, are context for understanding the later ones). Every fact has a "turn" field: \
the number of the turn it comes from.
"""

BATCH_USER_TEMPLATE = """\
Session date: $date ($weekday)
Person: $user
$context_blocks
Extract facts about $user from each numbered turn below; give every fact its turn number.

$turns"""

_TURN_BLOCK = """\
<turn n="$n" date="$date">
<user name="$user">
$user_message
</user>

$assistant_block</turn>
"""


@runtime_checkable
class BatchExtractor(Protocol):
    """An extractor that can read several turns of one session in one call."""

    def extract_batch(self, turns: Sequence[TurnInput]) -> list[ExtractionResult]: ...


def build_batch_messages(
    turns: Sequence[TurnInput], *, max_facts: int, known_facts: Sequence[KnownFact]
) -> tuple[str, str]:
    """(system, user) for one call over `turns` (oldest first, one session, one person):
    the conversation before the first turn and `known_facts` (shown_known_facts of the
    turns, numbered in that order) as context, then the turns numbered from 1."""
    first = turns[0]
    context = TurnInput(
        user_message="",
        assistant_message=None,
        session_date=first.session_date,
        user_speaker=first.user_speaker,
        earlier_messages=first.earlier_messages,
        known_facts=tuple(known_facts),
    )
    blocks = "\n".join(
        Template(_TURN_BLOCK).substitute(
            n=n,
            date=turn.session_date.date().isoformat(),
            user=turn.user_speaker,
            user_message=turn.user_message.strip(),
            assistant_block=assistant_block(turn),
        )
        for n, turn in enumerate(turns, start=1)
    )
    user = Template(BATCH_USER_TEMPLATE).substitute(
        date=first.session_date.date().isoformat(),
        weekday=first.session_date.strftime("%A"),
        user=first.user_speaker,
        context_blocks=context_blocks(context),
        turns=blocks,
    )
    return batch_system_prompt(max_facts), user


def shown_known_facts(
    turns: Sequence[TurnInput], *, max_known: int | None = None
) -> tuple[KnownFact, ...]:
    """The known facts one call over `turns` shows, numbered in this order: each turn's
    nearest first, each fact once, at most `max_known`."""
    known: dict[str, KnownFact] = {}
    for rank in range(max((len(turn.known_facts) for turn in turns), default=0)):
        for turn in turns:
            if rank < len(turn.known_facts):
                known.setdefault(turn.known_facts[rank].content, turn.known_facts[rank])
    shown = tuple(known.values())
    return shown if max_known is None else shown[:max_known]


def batch_system_prompt(max_facts: int) -> str:
    return system_prompt(max_facts) + Template(BATCH_SYSTEM_ADDENDUM).substitute(
        max_facts=max_facts
    )


def with_turn_numbers(schema: dict[str, Any], turns: int) -> dict[str, Any]:
    """`schema` (shared.extraction.schemas.strict_json_schema) whose every item starts with
    a required "turn": one of 1..turns, so a constrained decoder cannot name another."""
    out = copy.deepcopy(schema)
    for item in out["properties"]["facts"]["items"]["anyOf"]:
        item["properties"] = {
            "turn": {"type": "integer", "enum": list(range(1, turns + 1))},
            **item["properties"],
        }
        item["required"] = ["turn", *item["required"]]
    return out


def items_by_turn(items: list[Any], turns: int) -> list[list[Any]]:
    """The reply's items sorted to their turns (the "turn" key taken out). An item without
    a readable turn number goes to the last turn: the one a single-turn prompt calls "the
    latest", and where a model that ignores the numbering most likely read it."""
    out: list[list[Any]] = [[] for _ in range(turns)]
    for item in items:
        n = turns
        if isinstance(item, dict):
            item = dict(item)
            n = _turn_number(item.pop("turn", None), turns)
        out[n - 1].append(item)
    return out


def _turn_number(said: Any, turns: int) -> int:
    try:
        n = int(str(said).strip())
    except ValueError:
        return turns
    return n if 1 <= n <= turns else turns


def pack_turns(
    indexes: Sequence[int], prompt_tokens: Callable[[Sequence[int]], int], *, budget: int
) -> list[list[int]]:
    """`indexes` (turns in order) cut into runs of consecutive turns whose prompt fits in
    `budget` tokens; a turn too long to share a call is sent alone (as without batching)."""
    calls: list[list[int]] = []
    for index in indexes:
        if calls and prompt_tokens([*calls[-1], index]) <= budget:
            calls[-1].append(index)
        else:
            calls.append([index])
    return calls


def share(total: int, parts: int) -> list[int]:
    """`total` split into `parts` whole shares that add up to it (the first ones larger)."""
    base, extra = divmod(total, parts)
    return [base + (1 if i < extra else 0) for i in range(parts)]


def batch_prompt_hash() -> str:
    """Identifies the batch prompt: the one-turn prompt's hash and the batch templates."""
    digest = hashlib.sha256(prompt_hash().encode())
    for part in (BATCH_SYSTEM_ADDENDUM, BATCH_USER_TEMPLATE, _TURN_BLOCK):
        digest.update(b"\0")
        digest.update(part.encode())
    return digest.hexdigest()[:16]
