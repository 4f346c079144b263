"""Offline extractor builders for what a person did, is doing or has done: events and activities.

In conversational chat most of what people later ask about is events ("When did Ana go to
the support group?"), not profile attributes. These rules run last, after every profile,
preference, plan and decision rule had its turn, and keep only concrete statements: a verb
of doing (not of thinking, feeling or saying), an object that stands on its own (not "it",
"that", "there"), and no negation (negated clauses never reach them). Events are facts with
no slot: they accumulate, nothing supersedes them.
"""

from __future__ import annotations

import re
from dataclasses import replace

from shared.extraction.offline.dates import find_date
from shared.extraction.offline.items import Item
from shared.extraction.offline.lexicon import (
    POINTERS,
    TASK_WORDS,
    Ctx,
    Match,
    clean,
    keyword,
    past_date,
    points_elsewhere,
    words,
)

# Past tenses that are not "-ed", of verbs people do things with.
IRREGULAR_PAST = words(
    "went made got took saw bought began became brought built came chose drew drove ate fell "
    "flew gave grew held kept left lost met paid ran sold sent sang sat slept spent swam taught "
    "threw won wore wrote read found caught rode shot stole struck hung dug fed fought lent "
    "split quit put cut hit hurt set"
)
# "-ed" verbs that say what someone thought, felt, said or wanted, not what they did; verbs
# other rules own (likes, plans, decisions); and past states ("I lived in Rome"): where a
# person lived or worked is a profile slot, and its ending is not an event.
NOT_DOINGS = words(
    "lived worked resided owned dated stayed belonged "
    "needed wanted hoped wished loved liked hated enjoyed preferred adored disliked decided "
    "planned intended wondered guessed realized realised noticed figured imagined assumed "
    "believed supposed considered remembered forgot forgotten seemed appeared looked sounded "
    "felt thought knew meant said told asked mentioned replied answered explained agreed "
    "disagreed apologized apologised thanked texted messaged called emailed used tried "
    "expected supposed worried feared missed meant deserved managed happened mattered "
    "need want hope wish love like hate enjoy prefer"
)
# Participles after "I have": the "-ed" past and these.
IRREGULAR_PARTICIPLES = words(
    "been gone made got gotten taken seen bought begun become brought built come chosen drawn "
    "driven eaten flown given grown held kept left lost met paid run sold sent sung spent swum "
    "taught thrown won worn written read found caught ridden dug fed fought quit put cut set"
)
# "-ing" verbs of states of mind or talk: "I'm thinking ...", "I'm wondering ...".
NOT_ONGOING = words(
    "thinking feeling wondering hoping guessing kidding joking saying asking telling "
    "talking chatting trying looking going getting having being doing wanting needing "
    "planning considering dying starting living staying"
)
# Words that end an object pointing back into the conversation: "I've been there".
ELSEWHERE = words("there here too again before")
MAX_WORDS = 16  # longer objects are stories, cut at their first comma or dropped
_CUT_AT = re.compile(
    r",|\s+(?:because|since|so that|so|but|and then|which|where|when|while|although|though|"
    r"and it|and they|and he|and she|and that|and this)\b",
    re.I,
)


def _verb_ok(verb: str, irregular: frozenset[str]) -> bool:
    verb = verb.lower()
    if verb in NOT_DOINGS:
        return False
    again = verb.removeprefix("re")  # "retook", "rebuilt"
    return verb in irregular or again in irregular or (verb.endswith("ed") and len(verb) > 4)


def _object(raw: str, ctx: Ctx) -> tuple[str | None, Ctx]:
    """The object of the doing, cut at its first clause break, and the context with the date
    said inside it ("I went to the show yesterday, it was packed": the clause's date finder
    looks at its end); None when the object does not stand on its own."""
    value, phrase = find_date(_CUT_AT.split(raw, maxsplit=1)[0])
    if phrase is not None and ctx.date is None:
        ctx = replace(ctx, date=phrase)
    value = clean(value)
    words_ = value.lower().split()
    if (
        not words_
        or points_elsewhere(value)
        or words_[-1] in POINTERS | ELSEWHERE
        or "the same" in " ".join(words_[:3])  # "went through the same thing"
        or words_[0] == "by"  # a passive: "painted by my daughter" is not the speaker's doing
        or (len(words_) == 1 and (len(words_[0]) < 4 or not words_[0].isalpha()))
        or len(words_) > MAX_WORDS
        or TASK_WORDS & set(words_[:2])
    ):
        return None, ctx
    return value, ctx


def _event(ctx: Ctx, verb: str, obj: str, *, conf: float) -> list[Item]:
    when, day = past_date(ctx)  # " on 7 May 2023", resolved against the session's date
    return [
        ctx.fact(
            f"{ctx.who} {verb} {obj}{when}",
            ["events", *keyword(obj)],
            conf=conf,
            valid_from=day,
        )
    ]


def did(match: Match, ctx: Ctx) -> list[Item]:
    """ "I went to a support group yesterday" → "Ana went to a support group on 7 May 2023"."""
    obj, ctx = _object(match["value"], ctx)
    if not _verb_ok(match["verb"], IRREGULAR_PAST) or obj is None:
        return []
    return _event(ctx, match["verb"].lower(), obj, conf=0.8)


def has_done(match: Match, ctx: Ctx) -> list[Item]:
    """ "I've been to Paris", "I have finished the course" (not "I've been so busy")."""
    verb = match["verb"].lower()
    obj, ctx = _object(match["value"], ctx)
    if not _verb_ok(verb, IRREGULAR_PARTICIPLES) or obj is None:
        return []
    if verb == "got" and obj.lower().startswith(("their ", "them")):
        return []  # "I've got my friends" is having, not doing
    if verb == "been" and obj.split()[0].lower() not in ("to", "on", "at"):
        return []
    return _event(ctx, f"has {verb}", obj, conf=0.8)


def doing(match: Match, ctx: Ctx) -> list[Item]:
    """ "I'm taking pottery classes", "I've been researching adoption agencies"."""
    verb = match["verb"].lower()
    obj, ctx = _object(match["value"], ctx)
    if verb in NOT_ONGOING or len(verb) < 6 or obj is None:
        return []
    aux = "has been" if match["aux"].lower().startswith("have") else "is"
    return _event(ctx, f"{aux} {verb}", obj, conf=0.8)
