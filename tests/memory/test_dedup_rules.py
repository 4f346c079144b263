"""The dedup rules the writer applies before any vector is compared
(shared.memory.normalize): one content is one fact however it is typed, and the cheap
vetoes that keep near neighbours in embedding space apart."""

from __future__ import annotations

import pytest

from shared.memory.normalize import content_hash, may_be_paraphrases, normalize


def test_one_content_however_it_is_typed() -> None:
    assert normalize("Ana  LIKES jazz!!") == "ana likes jazz"
    assert content_hash("Ana likes jazz.") == content_hash("ana likes JAZZ")
    assert content_hash("Ana likes jazz.") != content_hash("Ana likes blues.")
    assert normalize("Ｆｕｌｌ width") == "full width"  # NFKC


@pytest.mark.parametrize(
    ("a", "b", "may_merge"),
    [
        ("Ana lives in Berlin.", "Ana is living in Berlin.", True),
        ("Ana has 2 kids.", "Ana has 3 kids.", False),  # another number: another fact
        ("Ana likes jazz.", "Ana does not like jazz.", False),  # a negation on one side
        ("Ana doesn't eat meat.", "Ana never eats meat.", True),  # negated on both sides
    ],
)
def test_what_may_be_merged_by_meaning(a: str, b: str, may_merge: bool) -> None:
    assert may_be_paraphrases(a, b) is may_merge
