"""A message's words, plus at their weights those of the messages before and after it."""

from __future__ import annotations

import pytest

from shared.vectors.sparse import AFTER_WEIGHT, BEFORE_WEIGHT, blended_terms, document_terms


def weights(text: str) -> dict[int, float]:
    vector = document_terms(text)
    assert vector is not None
    return dict(zip(vector.indices, vector.values, strict=True))


def test_the_words_before_count_at_their_weight_and_the_own_words_in_full() -> None:
    blended = blended_terms("In Porto, by the river.", "Where did you grow up?")
    assert blended is not None
    got = dict(zip(blended.indices, blended.values, strict=True))
    own, before = weights("In Porto, by the river."), weights("Where did you grow up?")
    assert set(got) == set(own) | set(before)
    for term, value in before.items():
        assert got[term] == pytest.approx(own.get(term, 0.0) + BEFORE_WEIGHT * value)
    for term in set(own) - set(before):
        assert got[term] == pytest.approx(own[term])


def test_without_words_before_a_message_is_its_own_words() -> None:
    assert blended_terms("ten days in Zanzibar", None) == document_terms("ten days in Zanzibar")
    assert blended_terms("ten days in Zanzibar", "?!") == document_terms("ten days in Zanzibar")
    only_before = blended_terms("!!", "ten days in Zanzibar")  # no words of its own
    assert only_before is not None and set(only_before.indices) == set(
        weights("ten days in Zanzibar")
    )


def test_the_words_after_count_at_their_weight_too() -> None:
    blended = blended_terms("Porto.", "Where did you grow up?", "Oh, I love the river there!")
    assert blended is not None
    got = dict(zip(blended.indices, blended.values, strict=True))
    before, after = weights("Where did you grow up?"), weights("Oh, I love the river there!")
    own = weights("Porto.")
    assert set(got) == set(own) | set(before) | set(after)
    for term in got:
        expected = (
            own.get(term, 0.0)
            + BEFORE_WEIGHT * before.get(term, 0.0)
            + AFTER_WEIGHT * after.get(term, 0.0)
        )
        assert got[term] == pytest.approx(expected)
