"""Offline extractor builders for how the person lives: health, possessions, likes, plans."""

from __future__ import annotations

import re

from shared.extraction.offline.lexicon import (
    CHAT_VERBS,
    HAVE_NOUNS,
    PETS,
    TASK_WORDS,
    Ctx,
    Item,
    clean,
    items_of,
    keyword,
    past_date,
    points_elsewhere,
    snake,
    when_suffix,
    words,
)
from shared.extraction.offline.pets import pets_in
from shared.extraction.offline.profile import M, opt

# --- health, diet, possessions ------------------------------------------------------


def diet(m: M, c: Ctx) -> list[Item]:
    v = m["v"].lower()
    when, day = past_date(c, since=True)
    content = f"{c.who} has been {v}{when}" if when else f"{c.who} is {v}"
    return [c.item("fact", content, ["food", "diet"], attribute="diet", value=v, valid_from=day)]


def health(m: M, c: Ctx) -> list[Item]:
    v = clean(m["v"])
    if not v or len(v.split()) > 6:
        return []
    said = m[0].lower()
    # multi-valued attributes (shared.extraction.schemas): one slot per allergy, so "not
    # allergic to cats anymore" ends that one
    if "allergic" in said:
        content, attribute = f"{c.who} is allergic to {v}", "allergy"
    elif "intolerant" in said:
        content, v, attribute = f"{c.who} is {v} intolerant", f"{v} intolerant", "intolerance"
    else:
        content, attribute = f"{c.who} has {v}", "condition"
    return [c.item("fact", content, ["health"], attribute=attribute, value=v)]


_HAVE_VERBS = {
    "have": "has",
    "have got": "has",
    "own": "owns",
    "got": "got",
    "bought": "bought",
    "adopted": "adopted",
}


_CHILDREN = words("kid kids child children son sons daughter daughters baby twins")


def have(m: M, c: Ctx) -> list[Item]:
    verb = m["verb"].lower()
    # the pets first, each its own fact; what is left ("two kids and") may be had too
    pets, rest = pets_in(clean(m["v"]), verb, c)
    v = (
        clean(re.sub(r"^(?:\W|and\b|or\b)+|(?:\W|\band|\bor)+$", "", rest))
        if pets
        else clean(m["v"])
    )
    # the thing had, before its names or details: "two cats, Mochi and Bean" → "two cats"
    head_part = re.split(r",|\s+(?:named|called|who|that|which|with|from|in|at|of)\b", v)[0]
    head = head_part.split()[-1].lower() if head_part else ""
    known = head in HAVE_NOUNS or head.rstrip("s") in HAVE_NOUNS or head == "children"
    if not v or len(v.split()) > 10 or (verb not in ("own", "bought") and not known):
        return pets
    if pets and (head in ("pet", "pets", "animal", "animals") or re.fullmatch(PETS + "s?", head)):
        return pets  # "3 pets: a husky called Bruno, ...": each pet says it, not the count
    when, day = past_date(c) if verb in ("got", "bought", "adopted") else ("", None)
    tag = "pets" if re.search(PETS, head) else "family" if head in _CHILDREN else "life"
    content = f"{c.who} {_HAVE_VERBS[verb]} {v}{when}"
    count = re.match(r"(\d+|one|two|three|four|five|six|seven|eight) (?:kids|children|sons|"
                     r"daughters|kid|child|son|daughter)$", v, re.I)  # fmt: skip
    if count and verb in ("have", "have got"):
        # how many: one value, so "two kids, not three" replaces "three kids"
        number = count[1].lower()
        return [c.item("fact", content, [tag], attribute="number_of_children", value=number), *pets]
    return [c.item("fact", content, [tag], value=v, valid_from=day), *pets]


def drive(m: M, c: Ctx) -> list[Item]:
    car = clean(m["v"])
    return [c.item("fact", f"{c.who} drives {car}", ["car"], attribute="car", value=car)]


def play(m: M, c: Ctx) -> list[Item]:
    v = clean(m["v"])
    if points_elsewhere(v) or v.split()[0].lower() in ("with", "around") or len(v.split()) > 6:
        return []  # "I play with my kids", "I play around with Rust"
    verb = (opt(m, "verb") or "play").lower()
    if verb != "play" and (len(v.split()) > 3 or v.split()[0].lower() in _NOT_PASTIMES):
        return []  # "I do the dishes", "I do my best": no pastime
    shown = {"play": "plays", "do": "does"}.get(verb, "practises")
    return [c.item("fact", f"{c.who} {shown} {v}", ["hobby"], value=v)]


_NOT_PASTIMES = words("the my their a an it that this what some any nothing everything")


# --- preferences --------------------------------------------------------------------


def favorite(m: M, c: Ctx) -> list[Item]:
    thing, v = clean(m["t"]), clean(m["v"])
    if not thing or points_elsewhere(v):
        return []
    return [
        c.item(
            "preference",
            f"{c.poss_start} favorite {thing} {m['be'].lower()} {v}",
            ["preferences", *keyword(thing)],
            topic=f"favorite_{snake(thing)}",
            sentiment="prefers",
            value=v,
        )
    ]


def _preference(c: Ctx, content: str, value: str, topic: str, sentiment: str) -> Item:
    tags = ["preferences", *keyword(value)]
    return c.item("preference", content, tags, topic=topic, sentiment=sentiment, value=value)


def is_my(m: M, c: Ctx) -> list[Item]:
    """ "Miles Davis is my hero", "Salmon is my favourite", "Chess club is the highlight of
    my week": what the speaker holds dear, said with the thing first."""
    v, said = clean(m["v"]), " ".join(m["what"].lower().split()).removeprefix("my ")
    if points_elsewhere(v) or len(v.split()) > 8 or FIRST_WORDS.search(v):
        return []
    poss = c.poss
    if said.startswith("the highlight"):
        content, topic = f"{v} is the highlight of {poss} {said.split()[-1]}", snake(v)
    elif said.endswith(("favorite", "favourite")):
        content, topic = f"{v} is {poss} favourite", f"favorite_{snake(v)}"
    else:
        content, topic = f"{c.poss_start} {said} is {v}", snake(said)
    return [_preference(c, content, v, topic, "likes")]


# A captured value that is a clause of its own, not a thing: "Miles Davis is their hero".
FIRST_WORDS = re.compile(r"\b(?:is|are|was|were|their|they)\b", re.I)


def _third_verb(verb: str) -> str:
    words = verb.lower().split()
    if words[0] in ("am", "are"):
        return " ".join(["is", *words[1:]])
    if words[0] in ("cannot", "can", "would", "will", "might", "may", "have"):
        return " ".join(["has" if words[0] == "have" else words[0], *words[1:]])
    return " ".join([words[0] + ("es" if words[0].endswith(("sh", "ch")) else "s"), *words[1:]])


# What follows a comma after a liked thing and is not another thing: "jazz, especially
# Coltrane", "running, always have", "horror films, the cheesier the better".
_ASIDE = re.compile(
    r"^(?:especially|particularly|mainly|mostly|always|never|ever|even|except|like|"
    r"though|honestly|obviously)\b|^the \w+ the \w+$",
    re.I,
)


_AGAIN = re.compile(r"\s+(?:again|once more|all over again)$", re.I)


def likes(m: M, c: Ctx, sentiment: str, *, verb: str | None = None) -> list[Item]:
    """One preference per liked thing in the match's `v`; `verb` as said in the content
    (default: the match's own verb in the third person)."""
    out = []
    said = m["v"] + (f" {c.date.raw}" if c.date else "")  # "Paris in summer" is not a date fact
    for item in items_of(clean(said)):
        value = _AGAIN.sub("", item)  # "likes jazz again": the same slot as "likes jazz"
        if (
            points_elsewhere(value)
            or len(value.split()) > 10
            or _ASIDE.search(value)
            or FIRST_WORDS.search(value)
        ):
            continue
        out.append(
            c.item(
                "preference",
                f"{c.who} {verb or _third_verb(m['verb'])} {value}",
                ["preferences", *keyword(value)],
                topic=snake(value),
                sentiment=sentiment,
                value=value,
            )
        )
    return out


def positive(m: M, c: Ctx) -> list[Item]:
    return likes(m, c, "likes")


def negative(m: M, c: Ctx) -> list[Item]:
    return likes(m, c, "avoids" if m["verb"].lower() == "avoid" else "dislikes")


_NOT_LIKE = {"fan of": "is not a fan of", "into": "is not into", "keen on": "is not keen on"}


def not_like(m: M, c: Ctx) -> list[Item]:
    out = likes(m, c, "dislikes")
    base = m["base"].lower()
    for item in out:  # "Ana does not like X", however the negation was put
        item["content"] = f"{c.who} {_NOT_LIKE.get(base, 'does not ' + base)} {item['value']}."
    return out


def not_eat(m: M, c: Ctx) -> list[Item]:
    verb = m["base"].lower()
    v = clean(opt(m, "v")) or ("alcohol" if verb == "drink" else "")
    if points_elsewhere(v):
        return []
    return [
        c.item(
            "preference",
            f"{c.who} does not {verb} {v}",
            ["food", "diet"],
            topic=snake(v),
            sentiment="avoids",
            value=v,
        )
    ]


def prefer(m: M, c: Ctx) -> list[Item]:
    v, sep, other = clean(m["v"]), (opt(m, "sep") or "").lower(), clean(opt(m, "o"))
    if sep == "to" and v.lower().startswith("to "):  # "prefer to travel to Italy"
        v, other = f"{v} to {other}", ""
    if points_elsewhere(v):
        return []
    topic = "_vs_".join(sorted([snake(v), snake(other)])) if other else snake(v)
    if "rather" in m[0].lower():
        content = f"{c.who} would rather {v}" + (f" than {other}" if other else "")
    else:
        content = f"{c.who} prefers {v}" + (f" over {other}" if other else "")
    return [_preference(c, content, v, topic, "prefers")]


# --- decisions and goals -----------------------------------------------------------

_DECISION_VERBS = {
    "chosen": "chose",
    "am going with": "decided to go with",
    "are going with": "decided to go with",
    "will go with": "decided to go with",
    "am going to go with": "decided to go with",
    "are going to go with": "decided to go with",
    "will use": "decided to use",
    "am going to use": "decided to use",
    "are going to use": "decided to use",
}
_COMPANY = re.compile(r"(?:their|a friend|friends|some friends|him|her|them)\b", re.I)
_PICK = re.compile(r"(?:use|go with|switch to|pick|choose|adopt|stick with|stay with) (.+)", re.I)


def decision(m: M, c: Ctx) -> list[Item]:
    verb = re.sub(r"^(?:have|had) ", "", m["verb"].lower())
    text, because, reason = clean(m["c"]), "", None
    parts = re.split(r"\s+(because(?: of)?|since|so that|due to|given that)\s+", text, maxsplit=1)
    if len(parts) == 3:
        text, because, reason = parts[0], f" {parts[1]} {parts[2]}", parts[2]
    plan = verb.startswith(("decided to", "made"))
    # "decided to use Postgres" picks a tool, like "chose Postgres"; "decided to move" is a plan.
    picked = _PICK.match(text) if plan else None
    choice = picked[1] if picked else text
    if points_elsewhere(choice) or _COMPANY.match(choice):
        return []  # "I'm going with my sister" is company, not a choice
    topic = snake(choice)
    # "Postgres for the database": the purpose is the topic, so a later choice for the
    # database supersedes this one. "React over Vue": the pair is the topic.
    if (use := re.match(r"(.+?)\s+for\s+(?:the |their |a |an )?(.+)$", choice)) and (
        picked or not plan
    ):
        choice, topic = use[1], snake(use[2])
    if pair := re.match(r"(.+?)\s+(?:over|instead of|rather than)\s+(.+)", choice):
        choice = pair[1]
        topic = topic if use else "_vs_".join(sorted([snake(pair[1]), snake(pair[2])]))
    when, day = past_date(c)
    content = f"{c.who} {_DECISION_VERBS.get(verb, verb)} {text}{when}{because}"
    return [
        c.item(
            "decision",
            content,
            ["decision", *keyword(topic.replace("_", " "))],
            topic=topic,
            choice=choice,
            reason=reason,
            valid_from=day,
        )
    ]


# A progressive "I'm learning Spanish" is the goal "learn Spanish".
_GOAL_PREFIX = {
    "am learning": "learn ",
    "are learning": "learn ",
    "am saving for": "save for ",
    "am saving up for": "save up for ",
    "are saving for": "save for ",
    "am training for": "train for ",
    "am studying for": "study for ",
    "am preparing for": "prepare for ",
    "am moving to": "move to ",
    "are moving to": "move to ",
    "am relocating to": "relocate to ",
}
_GOAL_CONF = {
    "might": 0.5,
    "may": 0.5,
    "am thinking about": 0.6,
    "am thinking of": 0.6,
    "am considering": 0.6,
    "would love to": 0.8,
    "hope to": 0.8,
    "am hoping to": 0.8,
    "dream of": 0.7,
    "am going to": 0.8,
}
# "I might ..." only counts with a life-sized verb after it: not "I might be late".
_MAYBE_VERBS = words(
    "move start switch learn buy get quit change take try apply visit travel study become join "
    "leave adopt sell build open launch retire"
)
_NOT_AFTER_GOING_TO = words("the a an my bed work school church class sleep")


def goal(m: M, c: Ctx) -> list[Item]:
    verb = " ".join((opt(m, "verb") or "").lower().split())
    g = clean(m["g"])
    first = g.split()[0].lower() if g else ""
    if (
        not first
        or (verb in ("might", "may") and first not in _MAYBE_VERBS)
        or (verb.endswith(("to", "might", "may")) and first in CHAT_VERBS)
        or (verb == "am going to" and first in _NOT_AFTER_GOING_TO)
        or TASK_WORDS & set(g.lower().split())
    ):
        return []
    when = c.when("future")
    if c.date and c.date.prep == "for":  # "live in Spain for a year" is part of the goal
        g, when = f"{g} {c.date.raw}", None
    aim = _GOAL_PREFIX.get(verb, "") + g
    if kind := opt(m, "kind"):
        content = f"{c.poss_start} {kind.lower()} is to {g}{when_suffix(when)}"
    else:
        content = f"{c.who} {_third_verb(verb)} {g}{when_suffix(when)}"
    return [
        c.item(
            "goal",
            content,
            ["goals", *keyword(aim)],
            conf=_GOAL_CONF.get(verb, 0.9),
            goal=aim,
            target_date=when.date if when else None,
            status="active",
        )
    ]
