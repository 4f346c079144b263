"""joined_tokens: the prompt's exact count from per-line counts."""

from __future__ import annotations

import random

import pytest

from shared.tokens import count_tokens, joined_tokens, line_tokens

# Line ends and starts that meet at the newline: punctuation, digits, contractions,
# trailing spaces, non-Latin text, special-token text, markup.
PARTS = [
    "Ana",
    "lives",
    "in",
    "Berlin",
    ".",
    "!",
    "?!",
    "...",
    "'s",
    "'",
    "12",
    "2023",
    "345",
    "  ",
    " ",
    "\t",
    "—",
    "é",
    "東京",
    "🙂",
    "<|endoftext|>",
    "</memories>",
    "- (8 May 2023)",
    "Ana:",
    "http://x.y/z?q=1",
    "`code`",
    '"quoted"',
    "(",
    ")",
    ":",
    "\u200b",
    "\n",
    "x\n\ny",
]


def _line(rng: random.Random) -> str:
    text = "".join(rng.choice(PARTS) + rng.choice(["", " "]) for _ in range(rng.randint(1, 8)))
    return text or "x"


@pytest.mark.parametrize("seed", range(40))
def test_joined_tokens_equals_counting_the_joined_text(seed: int) -> None:
    rng = random.Random(seed)
    for _ in range(50):
        lines = [_line(rng) for _ in range(rng.randint(1, 12))]
        if rng.random() < 0.7:  # mostly the per-line path (no line starts with whitespace)
            lines = [line.lstrip() or "x" for line in lines]
        assert joined_tokens(lines) == count_tokens("\n".join(lines)), lines


def test_line_tokens_counts_the_newline_with_the_line() -> None:
    assert line_tokens("Ana lives in Berlin.") == count_tokens("Ana lives in Berlin.\n")
    assert joined_tokens([]) == 0
    assert joined_tokens(["one line"]) == count_tokens("one line")
