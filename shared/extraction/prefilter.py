"""A cheap check that skips small talk ("thanks!", "ok") before any LLM call."""

from __future__ import annotations

import re

_SMALL_TALK = {
    "hi",
    "hey",
    "hello",
    "yo",
    "hiya",
    "ok",
    "okay",
    "k",
    "kk",
    "sure",
    "yes",
    "no",
    "yep",
    "nope",
    "yeah",
    "nah",
    "thanks",
    "thank you",
    "thx",
    "ty",
    "thanks a lot",
    "cool",
    "nice",
    "great",
    "awesome",
    "perfect",
    "got it",
    "sounds good",
    "lol",
    "haha",
    "bye",
    "goodbye",
    "see you",
    "good morning",
    "good night",
    "good evening",
    "np",
    "no problem",
    "alright",
    "fine",
    "wow",
    "hmm",
    "right",
    "exactly",
    "agreed",
    "makes sense",
    "i see",
    "gotcha",
    "thank you so much",
    "thanks so much",
    "you too",
    "same",
    "ok thanks",
    "ok thank you",
    "great thanks",
    "cool thanks",
    "nice thanks",
    "how are you",
    "what's up",
    "whats up",
}
_PUNCT = re.compile(r"[^\w\s']+")
_WORDS = re.compile(r"\w+")


def is_small_talk(text: str) -> bool:
    """True when the message carries nothing worth remembering.

    Deliberately conservative: only short messages made of known pleasantries are skipped;
    anything with a first-person statement or more than a few words goes to the extractor.
    """
    cleaned = _PUNCT.sub(" ", text.lower())
    cleaned = " ".join(cleaned.split())
    if not cleaned:
        return True
    if cleaned in _SMALL_TALK:
        return True
    words = _WORDS.findall(cleaned)
    if len(words) > 6:
        return False
    # "ok thanks!! see you" → every chunk is a pleasantry
    remaining = cleaned
    for phrase in sorted(_SMALL_TALK, key=len, reverse=True):
        remaining = re.sub(rf"\b{re.escape(phrase)}\b", " ", remaining)
    return not remaining.strip()
