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


_NUMBER = re.compile(r"\d+(?:[.,]\d+)?")
_NEGATION = re.compile(
    r"\b(?:not|no|never|don't|doesn't|didn't|isn't|aren't|wasn't|won't|can't|cannot)\b|n't\b"
)


def may_be_paraphrases(a: str, b: str) -> bool:
    """Cheap vetoes for cosine merging: embeddings put "has 2 kids" next to "has 3 kids" and
    "likes jazz" next to "does not like jazz"; those are different facts, never merged."""
    if set(_NUMBER.findall(a)) != set(_NUMBER.findall(b)):
        return False
    return bool(_NEGATION.search(a.lower())) == bool(_NEGATION.search(b.lower()))
