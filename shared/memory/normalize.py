"""Content normalization for exact-duplicate detection."""

from __future__ import annotations

import hashlib
import re
import unicodedata

_NON_WORD = re.compile(r"[^\w\s]+")


def normalize(text: str) -> str:
    text = unicodedata.normalize("NFKC", text).casefold()
    text = _NON_WORD.sub(" ", text)
    return " ".join(text.split())


def content_hash(text: str) -> str:
    return hashlib.sha256(normalize(text).encode()).hexdigest()
