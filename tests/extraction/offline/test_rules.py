"""Each offline rule builds the examples it carries, and no rule tried before it does: the
order of the rule tables (shared/extraction/offline/rules.py, endings.py) is a checked fact,
so a rule added or moved above another cannot quietly take that rule's statements."""

from __future__ import annotations

import datetime as dt

import pytest

from shared.extraction.offline.endings import ENDING_MENTIONS, ENDINGS, NEGATED_ENDINGS
from shared.extraction.offline.extractor import _NEGATION
from shared.extraction.offline.lexicon import Ctx, Rule
from shared.extraction.offline.rules import MENTIONS, RULES

CTX = Ctx("Ana", "Ana's", "Ana", 0.9, dt.datetime(2024, 5, 8, 14, 30, tzinfo=dt.UTC))


def _tried_before(rule: Rule, negated: bool) -> list[Rule]:
    """The clause rules tried on a clause before `rule`, in the order the extractor tries
    them (`_clause_items`): the endings (and, on a negated clause, the negated endings),
    then the ordinary rules of the clause's polarity."""
    order = [
        *ENDINGS,
        *(NEGATED_ENDINGS if negated else ()),
        *(r for r in RULES if r.negated == negated),
    ]
    return order[: next(i for i, r in enumerate(order) if r is rule)]


def _builds(rule: Rule, clause: str) -> bool:
    match = rule.pattern.match(clause)
    return bool(match and rule.build(match, CTX))


def _cases(table: tuple[Rule, ...], name: str) -> list[object]:
    return [
        pytest.param(rule, example, id=f"{name}[{i}] {rule.build.__name__}: {example}")
        for i, rule in enumerate(table)
        for example in rule.examples
    ]


def test_every_rule_carries_an_example() -> None:
    for rule in (*RULES, *ENDINGS, *NEGATED_ENDINGS, *MENTIONS, *ENDING_MENTIONS):
        assert rule.examples, rule.pattern.pattern


@pytest.mark.parametrize(
    ("rule", "clause"),
    [
        *_cases(ENDINGS, "ENDINGS"),
        *_cases(NEGATED_ENDINGS, "NEGATED_ENDINGS"),
        *_cases(RULES, "RULES"),
    ],
)
def test_a_clause_rule_builds_its_examples_first(rule: Rule, clause: str) -> None:
    negated = bool(_NEGATION.search(clause))
    assert negated == (rule.negated or rule in NEGATED_ENDINGS), "the example's polarity"
    assert _builds(rule, clause)
    taken_by = [r.build.__name__ for r in _tried_before(rule, negated) if _builds(r, clause)]
    assert not taken_by, f"built first by {taken_by[0]}"


@pytest.mark.parametrize(
    ("rule", "sentence"),
    [*_cases(MENTIONS, "MENTIONS"), *_cases(ENDING_MENTIONS, "ENDING_MENTIONS")],
)
def test_a_mention_rule_builds_its_examples(rule: Rule, sentence: str) -> None:
    # Mention rules are searched anywhere in a sentence, all of them: none takes another's.
    assert any(rule.build(match, CTX) for match in rule.pattern.finditer(sentence))
