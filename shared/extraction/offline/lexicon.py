"""Word lists, text helpers and the builder context shared by the offline extractor's rules.

The word lists are read from the data files in lexicon_words/, next to this module.
"""

from __future__ import annotations

import datetime as dt
import re
from collections.abc import Callable, Iterable, Iterator, Sequence
from dataclasses import dataclass

from shared.extraction.offline.dates import DatePhrase, Prefer, When, resolve
from shared.extraction.offline.items import (
    DecisionItem,
    GeneralItem,
    GoalItem,
    GoalStatus,
    IdentityItem,
    Item,
    PreferenceItem,
    RelationshipItem,
    Sentiment,
)
from shared.extraction.schemas import slot_part
from shared.wordlists import read_list

Match = re.Match[str]


@dataclass(frozen=True)
class Ctx:
    """What a builder knows besides its match: who speaks, how sure they sound, and when."""

    who: str  # starts a sentence: "Ana" or "The user"
    possessive: str  # inside a sentence: "Ana's" or "the user's"
    subject: str
    confidence: float
    session: dt.datetime
    date: DatePhrase | None = None

    @property
    def possessive_start(self) -> str:
        return self.possessive[:1].upper() + self.possessive[1:]

    def when(self, prefer: Prefer, *, since: bool = False) -> When | None:
        return resolve(self.date, self.session, prefer, since=since) if self.date else None

    def _stated(self, content: str, conf: float) -> tuple[str, float]:
        """The content as one sentence, capitalised; the confidence, capped by the clause's."""
        content = " ".join(content.split()).rstrip(" .,;") + "."
        return content[:1].upper() + content[1:], round(min(conf, self.confidence), 2)

    def identity(
        self,
        attribute: str,
        value: str,
        content: str,
        *tags: str,
        conf: float = 0.9,
        valid_from: dt.date | None = None,
    ) -> list[Item]:
        """The one-item list most identity builders return."""
        content, confidence = self._stated(content, conf)
        item = IdentityItem(type="identity", content=content, subject=self.subject,
                            confidence=confidence, tags=list(tags)[:3], valid_from=valid_from,
                            attribute=attribute, value=value)  # fmt: skip
        return [item]

    def fact(
        self,
        content: str,
        tags: list[str],
        *,
        attribute: str | None = None,
        value: str | None = None,
        conf: float = 0.9,
        valid_from: dt.date | None = None,
    ) -> GeneralItem:
        """A plain fact; with an attribute and a value, one that holds a slot."""
        content, confidence = self._stated(content, conf)
        item = GeneralItem(type="fact", content=content, subject=self.subject,
                           confidence=confidence, tags=tags[:3], valid_from=valid_from)  # fmt: skip
        if attribute is not None:
            item["attribute"] = attribute
        if value is not None:
            item["value"] = value
        return item

    def preference(
        self, content: str, tags: list[str], *, topic: str, sentiment: Sentiment, value: str
    ) -> PreferenceItem:
        content, confidence = self._stated(content, 0.9)
        return PreferenceItem(type="preference", content=content, subject=self.subject,
                              confidence=confidence, tags=tags[:3], valid_from=None,
                              topic=topic, sentiment=sentiment, value=value)  # fmt: skip

    def decision(
        self,
        content: str,
        tags: list[str],
        *,
        topic: str,
        choice: str,
        reason: str | None,
        valid_from: dt.date | None,
    ) -> DecisionItem:
        content, confidence = self._stated(content, 0.9)
        return DecisionItem(type="decision", content=content, subject=self.subject,
                            confidence=confidence, tags=tags[:3], valid_from=valid_from,
                            topic=topic, choice=choice, reason=reason)  # fmt: skip

    def goal(
        self,
        content: str,
        tags: list[str],
        *,
        goal: str,
        target_date: dt.date | None,
        status: GoalStatus,
        conf: float = 0.9,
    ) -> GoalItem:
        content, confidence = self._stated(content, conf)
        return GoalItem(type="goal", content=content, subject=self.subject,
                        confidence=confidence, tags=tags[:3], valid_from=None,
                        goal=goal, target_date=target_date, status=status)  # fmt: skip

    def relationship(
        self, content: str, tags: list[str], *, person: str, relation: str
    ) -> RelationshipItem:
        content, confidence = self._stated(content, 0.9)
        return RelationshipItem(type="relationship", content=content, subject=self.subject,
                                confidence=confidence, tags=tags[:3], valid_from=None,
                                person=person, relation=relation)  # fmt: skip


Builder = Callable[[Match, Ctx], Sequence[Item]]


def optional_group(match: Match, group: str) -> str | None:
    """A named group that only some of a builder's patterns have."""
    return match.groupdict().get(group)


@dataclass(frozen=True)
class Rule:
    pattern: re.Pattern[str]
    build: Builder  # returns [] when the match turns out not to be its kind of statement
    negated: bool  # True: the pattern states the negation itself ("I don't like X")
    # What the rule exists for, as the rules receive it (one clause, contractions spelled
    # out: "I am", "do not"; no date phrase): tests/extraction/offline/test_rules.py checks
    # that this rule builds each one and that no rule tried before it does.
    examples: tuple[str, ...]


def rule(build: Builder, *parts: str, examples: tuple[str, ...], negated: bool = False) -> Rule:
    """A rule from a pattern written in parts (joined), matched case-insensitively."""
    return Rule(re.compile("".join(parts), re.I), build, negated, examples)


def words(text: str) -> frozenset[str]:
    """A word list written as one string, so it reads as a list and not as a column."""
    return frozenset(text.split())


def _aliases(entries: Iterable[str]) -> dict[str, str]:
    """Word → canonical word, from "mom=mother", "sister" (a bare word maps to itself)."""
    return {word.split("=")[0]: word.split("=")[-1] for word in entries}


def _entries(name: str) -> tuple[str, ...]:
    return read_list("shared.extraction.offline", f"lexicon_words/{name}.txt")


# lexicon_words/<name>.txt says at its top what each list is for.
NOT_NAMES = frozenset(_entries("not_names"))
DEMONYMS = frozenset(_entries("demonyms"))
LANGUAGES = frozenset(_entries("languages"))
JOBS = frozenset(_entries("jobs"))
JOB_SUFFIXES = _entries("job_suffixes")
RELATIONS = _aliases(_entries("relations"))
HAVE_NOUNS = frozenset(_entries("have_nouns"))
POINTERS = frozenset(_entries("pointers"))
POINTER_PHRASES = frozenset(_entries("pointer_phrases"))
IDIOMS = frozenset(_entries("idioms"))
CHAT_VERBS = frozenset(_entries("chat_verbs"))
TASK_WORDS = frozenset(_entries("task_words"))
NOT_PLACES = frozenset(_entries("not_places"))

REL = "(?:" + "|".join(sorted(map(re.escape, RELATIONS), key=len, reverse=True)) + r")\b"
PLURAL_REL = r"(?:brothers|sisters|sons|daughters|kids|children|parents|cousins|friends)\b"
REL_MOD = r"(?:(?:older|younger|little|big|twin|best|new|old|dear|late) )?"
# Names must be capitalised even though the patterns ignore case: "my friend Sam", not
# "my friend said".
NAME = r"(?-i:[A-Z][\w'-]+(?: [A-Z][\w'-]+)?)"
PETS = r"(?:dog|cat|puppy|kitten|parrot|rabbit|bunny|hamster|horse|turtle|snake|bird)"
CONDITIONS = (
    r"(?:type \d )?(?:diabetes|asthma|adhd|autism|celiac disease|epilepsy|arthritis|dyslexia)"
)
DIET = (
    r"(?:vegetarian|vegan|pescatarian|pescetarian|keto|paleo|gluten-free|dairy-free|kosher"
    r"|halal|teetotal|sober)"
)
_CUT = re.compile(
    r"\s+(?:with|where|which|who|because|since|so|but|and|as|when|for|to be)\b.*$", re.I
)
_FILLERS = re.compile(
    r"[\s,]+(?:now|currently|at the moment|these days|nowadays|for now|too|again|as "
    r"well|a lot|so much|very much|lol|haha|though|right now|anymore|someday|one day|eventually|"
    r"at some point|thanks|thank you|thx|please|tbh|tbf|ngl|imo|smh|fr|lmao|xx|x)$",
    re.I,
)
_FIRST_PERSON = [
    (re.compile(p), r)
    for p, r in [
        (r"\b[Mm]y\b", "their"),
        (r"\b[Mm]ine\b", "theirs"),
        (r"\b[Mm]yself\b", "themselves"),
        (r"\b[Mm]e\b", "them"),
        (r"\bI am\b", "they are"),
        (r"\bI was\b", "they were"),
        (r"\bI\b", "they"),
        (r"\b[Oo]ur\b", "their"),
        (r"\bwe\b", "they"),
        (r"\bus\b", "them"),
    ]
]


def third(text: str) -> str:
    """First person → gender-neutral third person inside a captured value."""
    for pattern, repl in _FIRST_PERSON:
        text = pattern.sub(repl, text)
    return text


def strip_fillers(text: str) -> str:
    """Drop trailing words that carry nothing: "I live in Paris now" → "I live in Paris"."""
    text = text.strip(" \t\"'.,;:!?")
    while (stripped := _FILLERS.sub("", text)) != text:
        text = stripped.strip(" \t\"'.,;:!?")
    return text


def clean(value: str | None, *, cut: bool = False) -> str:
    """A captured value made ready to store: trimmed, fillers dropped, in the third person."""
    value = (value or "").strip(" \t\"'.,;:!")
    if cut:
        value = _CUT.sub("", value)
    return third(" ".join(strip_fillers(value).split()).strip(" ,"))


def titled(value: str) -> str:
    return value.title() if value.islower() else value


def snake(text: str) -> str:
    words = [w for w in slot_part(text).split("_") if w not in ("the", "a", "an", "to", "their")]
    return "_".join(words)[:60].strip("_") or slot_part(text)[:60]


def points_elsewhere(value: str) -> bool:
    """True for "it", "that idea", "you": the object lives in the conversation, not in a fact."""
    words = value.lower().split()
    return not words or words[0] in POINTERS or " ".join(words[:2]) in POINTER_PHRASES


def keyword(value: str) -> list[str]:
    """A tag from a value's last word ("Italian food" → "food"), when it is a plain word."""
    last = value.lower().split()[-1] if value.split() else ""
    return [last] if last.isalpha() and 2 < len(last) <= 15 else []


def article(noun: str) -> str:
    return "an" if noun[:1].lower() in "aeiou" else "a"


def place(value: str | None) -> str | None:
    text = clean(value, cut=True)
    if not text or len(text.split()) > 6 or text.lower().split()[0] in NOT_PLACES:
        return None
    return titled(text) if text.split()[0].lower() not in ("a", "an", "the") else text


def items_of(value: str) -> Iterator[str]:
    """Split "hiking, swimming and cooking" into items; "rock and roll" stays whole."""
    if value.lower() in IDIOMS:
        yield value
        return
    for part in re.split(r",\s*(?:and\s+|or\s+)?|\s+(?:and|or|as well as)\s+", value):
        if part.strip():
            yield part.strip()


def when_suffix(when: When | None) -> str:
    return f" {when.text}" if when else ""


def past_date(ctx: Ctx, *, since: bool = False) -> tuple[str, dt.date | None]:
    when = ctx.when("past", since=since)
    return when_suffix(when), when.date if when else None
