"""Offline extractor builders for how the person lives: health, possessions, likes, plans."""

from __future__ import annotations

import re

from shared.extraction.offline.items import Item, PreferenceItem, Sentiment
from shared.extraction.offline.lexicon import (
    CHAT_VERBS,
    HAVE_NOUNS,
    PETS,
    TASK_WORDS,
    Ctx,
    Match,
    clean,
    items_of,
    keyword,
    optional_group,
    past_date,
    points_elsewhere,
    snake,
    when_suffix,
    words,
)
from shared.extraction.offline.pets import pets_in

# --- health, diet, possessions ------------------------------------------------------


def diet(match: Match, ctx: Ctx) -> list[Item]:
    value = match["value"].lower()
    when, day = past_date(ctx, since=True)
    content = f"{ctx.who} has been {value}{when}" if when else f"{ctx.who} is {value}"
    return [ctx.fact(content, ["food", "diet"], attribute="diet", value=value, valid_from=day)]


def health(match: Match, ctx: Ctx) -> list[Item]:
    value = clean(match["value"])
    if not value or len(value.split()) > 6:
        return []
    said = match[0].lower()
    # multi-valued attributes (shared.extraction.schemas): one slot per allergy, so "not
    # allergic to cats anymore" ends that one
    if "allergic" in said:
        content, attribute = f"{ctx.who} is allergic to {value}", "allergy"
    elif "intolerant" in said:
        content, value, attribute = (
            f"{ctx.who} is {value} intolerant",
            f"{value} intolerant",
            "intolerance",
        )
    else:
        content, attribute = f"{ctx.who} has {value}", "condition"
    return [ctx.fact(content, ["health"], attribute=attribute, value=value)]


_HAVE_VERBS = {
    "have": "has",
    "have got": "has",
    "own": "owns",
    "got": "got",
    "bought": "bought",
    "adopted": "adopted",
}


_CHILDREN = words("kid kids child children son sons daughter daughters baby twins")


def have(match: Match, ctx: Ctx) -> list[Item]:
    verb = match["verb"].lower()
    # the pets first, each its own fact; what is left ("two kids and") may be had too
    pets, rest = pets_in(clean(match["value"]), verb, ctx)
    value = (
        clean(re.sub(r"^(?:\W|and\b|or\b)+|(?:\W|\band|\bor)+$", "", rest))
        if pets
        else clean(match["value"])
    )
    # the thing had, before its names or details: "two cats, Mochi and Bean" → "two cats"
    head_part = re.split(r",|\s+(?:named|called|who|that|which|with|from|in|at|of)\b", value)[0]
    head = head_part.split()[-1].lower() if head_part else ""
    known = head in HAVE_NOUNS or head.rstrip("s") in HAVE_NOUNS or head == "children"
    if not value or len(value.split()) > 10 or (verb not in ("own", "bought") and not known):
        return pets
    if pets and (head in ("pet", "pets", "animal", "animals") or re.fullmatch(PETS + "s?", head)):
        return pets  # "3 pets: a husky called Bruno, ...": each pet says it, not the count
    when, day = past_date(ctx) if verb in ("got", "bought", "adopted") else ("", None)
    tag = "pets" if re.search(PETS, head) else "family" if head in _CHILDREN else "life"
    content = f"{ctx.who} {_HAVE_VERBS[verb]} {value}{when}"
    count = re.match(r"(\d+|one|two|three|four|five|six|seven|eight) (?:kids|children|sons|"
                       r"daughters|kid|child|son|daughter)$", value, re.I)  # fmt: skip
    if count and verb in ("have", "have got"):
        # how many: one value, so "two kids, not three" replaces "three kids"
        number = count[1].lower()
        return [
            ctx.fact(content, [tag], attribute="number_of_children", value=number),
            *pets,
        ]
    return [ctx.fact(content, [tag], value=value, valid_from=day), *pets]


def drive(match: Match, ctx: Ctx) -> list[Item]:
    car = clean(match["value"])
    return [ctx.fact(f"{ctx.who} drives {car}", ["car"], attribute="car", value=car)]


def play(match: Match, ctx: Ctx) -> list[Item]:
    value = clean(match["value"])
    if (
        points_elsewhere(value)
        or value.split()[0].lower() in ("with", "around")
        or len(value.split()) > 6
    ):
        return []  # "I play with my kids", "I play around with Rust"
    verb = (optional_group(match, "verb") or "play").lower()
    if verb != "play" and (len(value.split()) > 3 or value.split()[0].lower() in _NOT_PASTIMES):
        return []  # "I do the dishes", "I do my best": no pastime
    shown = {"play": "plays", "do": "does"}.get(verb, "practises")
    return [ctx.fact(f"{ctx.who} {shown} {value}", ["hobby"], value=value)]


_NOT_PASTIMES = words("the my their a an it that this what some any nothing everything")


# --- preferences --------------------------------------------------------------------


def favorite(match: Match, ctx: Ctx) -> list[Item]:
    thing, value = clean(match["thing"]), clean(match["value"])
    if not thing or points_elsewhere(value):
        return []
    return [
        ctx.preference(
            f"{ctx.possessive_start} favorite {thing} {match['be'].lower()} {value}",
            ["preferences", *keyword(thing)],
            topic=f"favorite_{snake(thing)}",
            sentiment="prefers",
            value=value,
        )
    ]


def _preference(
    ctx: Ctx, content: str, value: str, topic: str, sentiment: Sentiment
) -> PreferenceItem:
    tags = ["preferences", *keyword(value)]
    return ctx.preference(content, tags, topic=topic, sentiment=sentiment, value=value)


def is_my(match: Match, ctx: Ctx) -> list[Item]:
    """ "Miles Davis is my hero", "Salmon is my favourite", "Chess club is the highlight of
    my week": what the speaker holds dear, said with the thing first."""
    value, said = clean(match["value"]), " ".join(match["what"].lower().split()).removeprefix("my ")
    if points_elsewhere(value) or len(value.split()) > 8 or FIRST_WORDS.search(value):
        return []
    possessive = ctx.possessive
    if said.startswith("the highlight"):
        content, topic = (
            f"{value} is the highlight of {possessive} {said.split()[-1]}",
            snake(value),
        )
    elif said.endswith(("favorite", "favourite")):
        content, topic = f"{value} is {possessive} favourite", f"favorite_{snake(value)}"
    else:
        content, topic = f"{ctx.possessive_start} {said} is {value}", snake(said)
    return [_preference(ctx, content, value, topic, "likes")]


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


def likes(
    match: Match, ctx: Ctx, sentiment: Sentiment, *, verb: str | None = None
) -> list[PreferenceItem]:
    """One preference per liked thing in the match's `value`; `verb` as said in the content
    (default: the match's own verb in the third person)."""
    out: list[PreferenceItem] = []
    # "Paris in summer" is not a date fact: the date phrase goes back into the value
    said = match["value"] + (f" {ctx.date.raw}" if ctx.date else "")
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
            ctx.preference(
                f"{ctx.who} {verb or _third_verb(match['verb'])} {value}",
                ["preferences", *keyword(value)],
                topic=snake(value),
                sentiment=sentiment,
                value=value,
            )
        )
    return out


def positive(match: Match, ctx: Ctx) -> list[PreferenceItem]:
    return likes(match, ctx, "likes")


def negative(match: Match, ctx: Ctx) -> list[PreferenceItem]:
    return likes(match, ctx, "avoids" if match["verb"].lower() == "avoid" else "dislikes")


_NOT_LIKE = {"fan of": "is not a fan of", "into": "is not into", "keen on": "is not keen on"}


def not_like(match: Match, ctx: Ctx) -> list[PreferenceItem]:
    out = likes(match, ctx, "dislikes")
    base = match["base"].lower()
    for item in out:  # "Ana does not like X", however the negation was put
        item["content"] = f"{ctx.who} {_NOT_LIKE.get(base, 'does not ' + base)} {item['value']}."
    return out


def not_eat(match: Match, ctx: Ctx) -> list[Item]:
    verb = match["base"].lower()
    value = clean(optional_group(match, "value")) or ("alcohol" if verb == "drink" else "")
    if points_elsewhere(value):
        return []
    return [
        ctx.preference(
            f"{ctx.who} does not {verb} {value}",
            ["food", "diet"],
            topic=snake(value),
            sentiment="avoids",
            value=value,
        )
    ]


def prefer(match: Match, ctx: Ctx) -> list[Item]:
    value, sep, other = (
        clean(match["value"]),
        (optional_group(match, "sep") or "").lower(),
        clean(optional_group(match, "other")),
    )
    if sep == "to" and value.lower().startswith("to "):  # "prefer to travel to Italy"
        value, other = f"{value} to {other}", ""
    if points_elsewhere(value):
        return []
    topic = "_vs_".join(sorted([snake(value), snake(other)])) if other else snake(value)
    if "rather" in match[0].lower():
        content = f"{ctx.who} would rather {value}" + (f" than {other}" if other else "")
    else:
        content = f"{ctx.who} prefers {value}" + (f" over {other}" if other else "")
    return [_preference(ctx, content, value, topic, "prefers")]


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


def decision(match: Match, ctx: Ctx) -> list[Item]:
    verb = re.sub(r"^(?:have|had) ", "", match["verb"].lower())
    text, because, reason = clean(match["choice"]), "", None
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
    when, day = past_date(ctx)
    content = f"{ctx.who} {_DECISION_VERBS.get(verb, verb)} {text}{when}{because}"
    return [
        ctx.decision(
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


def goal(match: Match, ctx: Ctx) -> list[Item]:
    verb = " ".join((optional_group(match, "verb") or "").lower().split())
    wanted = clean(match["goal"])
    first = wanted.split()[0].lower() if wanted else ""
    if (
        not first
        or (verb in ("might", "may") and first not in _MAYBE_VERBS)
        or (verb.endswith(("to", "might", "may")) and first in CHAT_VERBS)
        or (verb == "am going to" and first in _NOT_AFTER_GOING_TO)
        or TASK_WORDS & set(wanted.lower().split())
    ):
        return []
    when = ctx.when("future")
    if ctx.date and ctx.date.prep == "for":  # "live in Spain for a year" is part of the goal
        wanted, when = f"{wanted} {ctx.date.raw}", None
    aim = _GOAL_PREFIX.get(verb, "") + wanted
    if kind := optional_group(match, "kind"):
        content = f"{ctx.possessive_start} {kind.lower()} is to {wanted}{when_suffix(when)}"
    else:
        content = f"{ctx.who} {_third_verb(verb)} {wanted}{when_suffix(when)}"
    return [
        ctx.goal(
            content,
            ["goals", *keyword(aim)],
            conf=_GOAL_CONF.get(verb, 0.9),
            goal=aim,
            target_date=when.date if when else None,
            status="active",
        )
    ]
