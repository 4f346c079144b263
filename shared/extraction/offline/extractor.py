"""The labelled rule-based extractor used when no LLM is configured.

It splits the user's message into sentences and clauses, spells out contractions, takes
hedges, conditions and dates off each clause, and hands it to the rule tables
(rules.py, endings.py); `VERSION` names the rules' generation, so a replay
(`POST /v1/ops/replay`) can extract again what an older one left out.
"""

from __future__ import annotations

import datetime as dt
import re
from collections.abc import Iterator, Sequence
from typing import Literal

from shared.config import ExtractionSettings
from shared.extraction.base import (
    ExtractionResult,
    TurnInput,
    is_generic_speaker,
    validate_items,
)
from shared.extraction.offline.dates import find_date, warm_up
from shared.extraction.offline.ended import ENDING_CUE, no_longer, settle
from shared.extraction.offline.endings import ENDING_MENTIONS, ENDINGS, NEGATED_ENDINGS, UNSAID
from shared.extraction.offline.items import Item
from shared.extraction.offline.lexicon import Ctx, Rule, strip_fillers
from shared.extraction.offline.rules import MENTIONS, RULES
from shared.extraction.prefilter import is_small_talk
from shared.extraction.schemas import typed_fact_adapter

VERSION = "offline-3"

# Sentence ends, except after the usual abbreviations ("Dr. Smith", "St. Mary's").
_SENTENCES = re.compile(
    r"(?<!\bDr\.)(?<!\bMr\.)(?<!\bMs\.)(?<!\bMrs\.)(?<!\bSt\.)(?<!\be\.g\.)(?<!\bi\.e\.)"
    r"(?<=[.!?])\s+|\s*\n+\s*|\s+[-–—]\s+"
)
_CONTRACTIONS = [
    (re.compile(p, re.I), r)
    for p, r in [
        (r"\bi'm\b|\bim\b", "I am"),
        (r"\bi've\b", "I have"),
        (r"\bi'd\b", "I would"),
        (r"\bi'll\b", "I will"),
        (r"\bwe're\b", "we are"),
        (r"\bwe've\b", "we have"),
        (r"\bwe'd\b", "we would"),
        (r"\bwe'll\b", "we will"),
        (r"\bcan't\b", "cannot"),
        (r"\bwon't\b", "will not"),
        (r"\b(\w+)n't\b", r"\1 not"),
        (r"\bname's\b", "name is"),
        (r"\bi\b", "I"),
    ]
]
_OPENERS = re.compile(
    r"^(?:(?:well|so|oh|also|actually|btw|by the way|anyway|anyways|honestly|and|but|plus|"
    r"yeah|yes|no|nope|ok|okay|hey|hi|hello|fun fact|fyi|just so you know|as you know|"
    r"as I said|as I mentioned|like I said|um|uh|hmm|sure|right|basically|personally|"
    r"for the record|now|then|lol|haha|wait|true|nowadays|these days|currently|technically|"
    r"good news|bad news|big news|great news|funny|update|lately|recently|sadly|"
    r"unfortunately)\b[,:!.]?\s*)+",
    re.I,
)
# Hedges lower confidence rather than block: "I think I live in Berlin" is still a fact.
_HEDGE_LEAD = re.compile(
    r"^(?:I (?:think|guess|believe|suppose|reckon|feel like)|I am (?P<sure>pretty sure|"
    r"fairly sure|not sure)(?: but)?)(?: that)?,?\s+",
    re.I,
)
_HEDGE_WORDS = re.compile(r"\b(?:maybe|perhaps|probably|possibly)\b,?\s*", re.I)
_MILD_WORDS = re.compile(r"\b(?:kind of|sort of|kinda|sorta)\b\s*", re.I)
# "would" makes a clause hypothetical unless it is a wish about the person's own life.
_HYPOTHETICAL = re.compile(r"^I wish\b|\bwould\b(?! (?:like|love|rather|prefer)\b)", re.I)
_HYPOTHETICAL_SENTENCE = re.compile(
    r"^(?:if|suppose|supposing|imagine|pretend|assuming|what if|even if|unless|in case|"
    r"hypothetically|let us say|let's say)\b",
    re.I,
)
_CONDITION_TAIL = re.compile(r",?\s+(?:if|unless)\b.*$", re.I)
_ADVERBS = re.compile(
    r"^((?:I|we)(?: am| are| have| have been| do| did)?)\s+(?:(?:really|also|actually|"
    r"currently|still|now|just|totally|absolutely|definitely|honestly|truly|genuinely|"
    r"usually|generally|always|mostly|finally|recently|already|seriously|even|"
    r"particularly|especially|officially)\s+)+",
    re.I,
)
_EMPHATIC_DO = re.compile(r"^I do (?=like|love|enjoy|have|live|work|speak|want|prefer)", re.I)
# "can't stand" is a dislike, not a negation.
_NEGATION = re.compile(
    r"\b(?:not|never|no|no longer|anymore|any more|cannot(?! stand)|nobody)\b", re.I
)
_QUESTION_START = re.compile(
    r"^(?:what|where|when|who|whom|whose|why|how|which|do|does|did|can|could|would|should|"
    r"shall|will|is|are|am|was|were|have|has|had)\b",
    re.I,
)
_ASKS = re.compile(  # questions without a question mark: "can you tell me where I live"
    r"^(?:(?:can|could|would|will|do|does|did|should)\s+you|(?:what|where|who|why|how|which)"
    r"\s+(?:is|are|do|does|did|should|would|can|could|will|was|were|am))\b",
    re.I,
)
_FIRST_PERSON = r"(?:I|my|we|our)\b"
# A verb after "and" whose subject is left out: "I'm from Lisbon but live in Berlin".
_BARE_VERB = (
    r"(?:live|work|love|like|enjoy|hate|prefer|have|own|speak|want|plan|hope|moved|"
    r"grew|decided|chose|am|play|drive|study|turned|joined|started)\b"
)
# What may follow "I'm vegetarian and ...": another thing the speaker is.
_STATE = (
    r"(?:also |severely |very )?(?:allergic|lactose|gluten|vegetarian|vegan|pescatarian|married|"
    r"single|divorced|engaged|retired|a|an|from|originally|based|fluent)\b"
)
_CLAUSES = re.compile(
    rf"\s*;\s*|,?\s+(?:and|but|so|plus|while|although|though|whereas)\s+"
    rf"(?=(?:{_FIRST_PERSON}|{_BARE_VERB}))|,\s+(?=(?:{_FIRST_PERSON}|{_BARE_VERB}))"
    rf"|,\s+(?=[^,]{{1,40}}? (?:is|are) (?:my|our|home)\b)"  # "…, Miles Davis is my hero"
    # a comment on what came before, or what holds now: "I quit coffee, it kept me up",
    # "I used to work at Yandex, now I'm at JetBrains"
    r"|,\s+(?=(?:now|it|that|this|so|not|the|starting|joining|moving|relocating)\b)"
    r"|,\s+(?=[^,]{1,30} to be (?:precise|exact)\b)",  # "in South Australia, Tanunda to be precise"
    re.I,
)
# Reported speech about the speaker: "the allergist says I'm not allergic to cats anymore".
_REPORTED = re.compile(
    r"^(?:the|my|our) [\w ]{1,20}? (?:says|said|told me|confirmed|thinks)(?: that)?\s+(?=I\b)",
    re.I,
)
_BARE_VERB_START = re.compile(rf"^{_BARE_VERB}", re.I)
_AM_AND = re.compile(rf"(?<=^I am )(.+?),?\s+and\s+(?={_STATE})", re.I)
# A clause whose subject is the speaker: "I", "we", "my wife and I", "last year I".
_SPEAKER_SUBJECT = re.compile(r"\b(?:I|we)\b", re.I)
_EMOJI = re.compile("[\U0001f000-\U0001faff\u2600-\u27bf]+\\s*")
# "Big change: ...", "Quick update: ...": a heading before what is said.
_LEAD_IN = re.compile(r"^(?!I\b)[A-Za-z][A-Za-z ]{0,24}:\s+")
# A clause that starts with one of these verbs has dropped its "I" ("Got promoted today",
# "had to rehome Bruno", "Left Manchester last month").
_DROPPED_I = re.compile(
    r"^(?:got|left|moved|quit|started|joined|finished|graduated|retired|adopted|bought|"
    r"sold|switched|became|lost|broke up|split up|stopped|gave up|had to|just got|just moved|"
    r"just started|just quit|just left|finally got|finally moved)\b",
    re.I,
)
_DROPPED_I_AM = re.compile(r"^(?:starting|joining|moving|relocating)\b", re.I)
# ... or its "I am" at the start: "not into crossfit anymore", "officially retiring"
_DROPPED_I_AM_FIRST = re.compile(
    r"^(?:not into|no longer|not a fan of|officially retiring|retiring|(?:so |really )?into)\b",
    re.I,
)
# Comma parts after "I am X" that are another thing the speaker is: an age, "a/an ...".
_APPOSED = re.compile(
    r",\s+(?=(?:a|an)\s|\d{1,3}\b(?:\s*(?:yrs?|years?|y/?o)\b[\w ]*)?(?:,|$))", re.I
)


class OfflineExtractor:
    """Maps common first-person statements in the user's message to typed facts.

    A fallback, labelled as such: no network, no model, well under a millisecond for a
    typical turn. It reads only what the user said (never the assistant's reply), and its
    output goes through the same validation and limits as the LLM path.
    """

    kind: Literal["llm", "offline"] = "offline"
    version = VERSION

    def __init__(self, extraction: ExtractionSettings) -> None:
        self._settings = extraction
        warm_up()

    def extract(self, turn: TurnInput) -> ExtractionResult:
        text = turn.user_message[: self._settings.max_message_chars]
        if self._settings.prefilter and is_small_talk(text):
            return ExtractionResult([], "offline", VERSION, skipped_reason="small_talk")
        items = extract_items(text, speaker=turn.user_speaker, session_date=turn.session_date)
        validated = validate_items(
            items,
            max_facts=self._settings.max_facts_per_turn,
            min_confidence=self._settings.min_confidence,
        )
        return ExtractionResult(
            validated.facts,
            "offline",
            VERSION,
            items_returned=len(items),
            dropped_invalid=validated.dropped_invalid,
            dropped_low_confidence=validated.dropped_low_confidence,
            dropped_over_limit=validated.dropped_over_limit,
            repaired=validated.repaired,
            rejected=validated.rejected,
        )


def extract_items(text: str, *, speaker: str, session_date: dt.datetime) -> list[Item]:
    """Raw fact dicts, in message order and without duplicates, not yet validated."""
    name = speaker.strip()
    if is_generic_speaker(name):
        items = _items(text, _ctx(None, session_date))
        # "I'm Ben, 34": the rest of the message is about Ben, not "the user"; the name
        # fact itself keeps saying whose name it is
        introduced = [i for i in items if i.get("attribute") == "name" and not i.get("ended")]
        if not introduced:
            return items
        named = _items(text, _ctx(str(introduced[0].get("value")), session_date))
        return _dedup([*introduced[:1], *named])
    return _items(text, _ctx(name, session_date))


def _ctx(name: str | None, session_date: dt.datetime) -> Ctx:
    who, possessive = (name, f"{name}'s") if name else ("the user", "the user's")
    return Ctx(who, possessive, name or "User", 0.9, session_date)


def _items(text: str, base: Ctx) -> list[Item]:
    items: list[Item] = []
    for sentence in _sentences(text):
        for rule in (*MENTIONS, *ENDING_MENTIONS):
            for match in rule.pattern.finditer(sentence):
                items.extend(rule.build(match, base))
        for clause in _clauses(sentence):
            items.extend(_clause_items(clause, base))
    return _dedup(settle(items))


def _sentences(text: str) -> Iterator[str]:
    text = _EMOJI.sub(". ", text.replace("’", "'").replace("‘", "'"))  # an emoji ends one
    for raw in _SENTENCES.split(text):
        sentence = _OPENERS.sub("", _LEAD_IN.sub("", raw.strip()))
        if not sentence or _HYPOTHETICAL_SENTENCE.match(sentence) or _ASKS.match(sentence):
            continue
        if sentence.rstrip(" !.").endswith("?"):
            # Keep the statements before a trailing question: "I love jazz, do you?"
            kept = []
            for part in re.split(r",\s*", sentence.rstrip(" ?!.")):
                if _QUESTION_START.match(_OPENERS.sub("", part)):
                    break
                kept.append(part)
            else:
                continue  # no question word at all ("I live in Berlin?"): doubtful, skip
            sentence = ", ".join(kept)
        if sentence:
            yield sentence


def _clauses(sentence: str) -> Iterator[str]:
    for pattern, repl in _CONTRACTIONS:
        sentence = pattern.sub(repl, sentence)
    speaker = True  # whether the clause before had the speaker as its subject
    for i, part in enumerate(_parts(sentence)):
        clause = part.strip(" \t,.!;:\"'()")
        if not i and _DROPPED_I.match(clause):
            clause = f"I {clause}"  # chat drops the "I": "Got promoted today", "left Tesco"
        elif not i and _DROPPED_I_AM_FIRST.match(clause):
            clause = f"I am {clause}"
        elif i and speaker and _DROPPED_I_AM.match(clause):
            clause = f"I am {clause}"  # "I quit X, starting at Y next month"
        elif i and _BARE_VERB_START.match(clause):
            if not speaker:
                continue  # "My brother quit and moved to Cork": the brother moved
            clause = f"I {clause}"
        speaker = bool(_SPEAKER_SUBJECT.search(clause))
        # "I'm vegetarian and allergic to peanuts": two things the speaker is
        for j, state in enumerate(_AM_AND.sub(r"\1\n", clause).split("\n")):
            if state := state.strip(" ,"):
                yield f"I am {state}" if j else state


def _parts(sentence: str) -> list[str]:
    """The sentence's clauses; after "I am ...", a comma part that is another thing the
    speaker is ("I'm Zainab, 29, a civil engineer at Arup", "a pastry chef in Hanoi, 27 yrs
    old") gets its "I am"."""
    parts = _CLAUSES.split(sentence)
    if not parts or not re.match(r"I am\b", parts[0], re.I):
        return parts
    first, *rest = _APPOSED.split(parts[0])
    return [first, *(f"I am {p}" for p in rest), *parts[1:]]


def _clause_items(clause: str, base: Ctx) -> list[Item]:
    text, confidence = _REPORTED.sub("", _OPENERS.sub("", clause)), base.confidence
    if hedge := _HEDGE_LEAD.match(text):
        sure = (hedge["sure"] or "").lower()
        confidence = min(confidence, 0.8 if sure in ("pretty sure", "fairly sure") else 0.6)
        text = _OPENERS.sub("", text[hedge.end() :])
    if _HEDGE_WORDS.search(text):
        confidence, text = min(confidence, 0.5), _HEDGE_WORDS.sub("", text)
    if _MILD_WORDS.search(text):
        confidence, text = min(confidence, 0.7), _MILD_WORDS.sub("", text)
    if _HYPOTHETICAL.search(text):
        return []
    if condition := _CONDITION_TAIL.search(text):  # "I'll move to Paris if I get the job"
        confidence, text = min(confidence, 0.6), text[: condition.start()]
    negated = bool(_NEGATION.search(text))  # before "anymore" goes with the fillers
    ending = bool(ENDING_CUE.search(text))
    text, date = find_date(strip_fillers(text))
    text = _EMPHATIC_DO.sub("I ", _ADVERBS.sub(r"\1 ", _OPENERS.sub("", strip_fillers(text))))
    ctx = Ctx(base.who, base.possessive, base.subject, confidence, base.session, date)
    if built := _first_built((*ENDINGS, *(NEGATED_ENDINGS if negated else ())), text, ctx):
        return built
    if (negated and ending) or text.lower().startswith(("i used to ", "we used to ")):
        # "I don't live in Berlin anymore", "I used to work at Yandex": the positive clause's
        # facts, ended
        for form in UNSAID:
            if said := form.match(text):
                rest = ENDING_CUE.sub("", said["rest"].split(",")[0])  # "anymore, the tests..."
                positive = f"I {said['be'] if form.groupindex.get('be') else ''} {rest}"
                positive = " ".join(strip_fillers(positive).split())
                found = _first_built([r for r in RULES if not r.negated], positive, ctx)
                return no_longer(found, ctx, positive, used_to="used to" in form.pattern)
    return _first_built([r for r in RULES if r.negated == negated], text, ctx)


def _first_built(rules: Sequence[Rule], text: str, ctx: Ctx) -> list[Item]:
    """What the first rule that matches and builds anything builds."""
    for rule in rules:
        if (match := rule.pattern.match(text)) and (built := rule.build(match, ctx)):
            return list(built)
    return []


def _dedup(items: list[Item]) -> list[Item]:
    """One item per slot (the later statement wins: "I lived in Rome, now I live in Paris")
    and per content; the first position is kept so the output follows the message."""
    kept: dict[str, Item] = {}
    for item in items:
        try:
            slot = typed_fact_adapter.validate_python(item).slot
        except ValueError:
            slot = None  # invalid items go on to validate_items, which counts them
        # an ending and a new value of one slot both stay: "quit Siemens, starting at SAP"
        ended = "ended|" if item.get("ended") else ""
        key = f"{ended}{item.get('type')}|{slot or str(item.get('content', '')).lower()}"
        kept[key] = item
    return list(kept.values())
