"""The facts the ending rules build: what stopped being true, in the type and fields of the
fact it ends ("Lena quit Siemens" is an identity `employer` = Siemens that ended), and one
message's endings settled without repeats. The rule tables that call these are `endings`."""

from __future__ import annotations

import datetime as dt
import re
from dataclasses import replace

from shared.extraction.offline import life
from shared.extraction.offline.dates import find_date
from shared.extraction.offline.items import Item, PreferenceItem
from shared.extraction.offline.lexicon import (
    NOT_NAMES,
    RELATIONS,
    Ctx,
    Match,
    clean,
    optional_group,
    past_date,
    third,
)

# Words that say a negated statement is an ending, not a plain negation ("I don't live in
# Berlin" is odd; "I don't live in Berlin anymore" ends the Berlin fact).
ENDING_CUE = re.compile(r"\b(?:anymore|any more|any longer|no longer)\b", re.I)


_UNNAMED = {"*", "any", "all"}


def _ending(item: Item, day: dt.date | None = None, *, content: str | None = None) -> Item:
    """A built fact, stating that its value ended (dated when the clause said when)."""
    ended = item.copy()
    ended["ended"] = True
    ended["valid_from"] = day or item["valid_from"]
    if content:
        ended["content"] = content
    return ended


def _identity_end(ctx: Ctx, attribute: str, value: str, content: str, *tags: str) -> list[Item]:
    when, day = past_date(ctx)
    (item,) = ctx.identity(attribute, value, f"{content}{when}", *tags)
    return [_ending(item, day)]


def _head(raw: str | None) -> str:
    """A captured value up to its first comma, cut before a trailing clause, cleaned."""
    return clean((raw or "").split(",")[0], cut=True)


def _dated(raw: str | None, ctx: Ctx) -> tuple[str, Ctx]:
    """`_head` of a value, with a date said inside it ("Lyon in March, way too expensive")
    taken out into the context, where the clause's own date finder did not look."""
    value, phrase = find_date((raw or "").split(",")[0])
    if phrase is not None and ctx.date is None:
        ctx = replace(ctx, date=phrase)
    return clean(value, cut=True), ctx


def _date_after(match: Match, ctx: Ctx) -> Ctx:
    """A sentence-level match's context with the date said after it: "... split up last
    month"."""
    if ctx.date is not None:
        return ctx
    _, phrase = find_date(match.string[match.end() :].split(",")[0])
    return replace(ctx, date=phrase) if phrase is not None else ctx


_JOB_WORDS = re.compile(r"^(?:their|the|a) (?:job|position|role)(?: (?:at|with|in) )?\s*")


def _org(raw: str | None) -> str | None:
    org = _head(raw)
    named_job = _JOB_WORDS.match(org)
    org = _JOB_WORDS.sub("", org)
    if not org:
        return "*" if named_job else None  # "I quit my job": whatever the job was
    if len(org.split()) > 5 or not (named_job or org[:1].isupper()):
        return None  # "I left the party", "quit smoking": not an employer
    return org


# --- work and study ----------------------------------------------------------------


def left_job(match: Match, ctx: Ctx) -> list[Item]:
    said, ctx = _dated(match["org"], ctx)
    org = _org(said) if said else "*"  # "got laid off": whatever the job was
    if org is None:
        return []
    verb = match["verb"].lower()
    if verb == "left" and org != "*" and not _JOB_WORDS.match(_head(match["org"])):
        # "I left Manchester", "I left Tesco": a city or an employer, whichever was held
        return _identity_end(ctx, "*", org, f"{ctx.who} left {org}", "life")
    said = {"left": "left", "quit": "quit"}.get(verb, "left")
    if dismissed := re.search(r"laid off|fired|let go|made redundant", match[0], re.I):
        said = f"was {dismissed[0].lower()}{' from' if org != '*' else ''}"
    shown = "their job" if org == "*" else org if org[:1].isupper() else f"their job at {org}"
    if dismissed and org == "*":
        shown = ""
    return _identity_end(ctx, "employer", org, f"{ctx.who} {said} {shown}", "work")


def quit_habit(match: Match, ctx: Ctx) -> list[Item]:
    """ "I quit coffee", "I've given up running", "I stopped watching F1": a liked thing or
    a habit that ended; "stopped learning French" ends the goal to learn it."""
    value, ctx = _dated(match["value"], ctx)
    if not value or value[:1].isupper() or len(value.split()) > 5 or _JOB_WORDS.match(value):
        return []
    if value.split()[0] in ("it", "that", "this", "their", "the"):
        return []  # "I stopped it", "gave up their seat": no habit of the person's
    when, day = past_date(ctx)
    if learning := re.match(r"(?:learning|studying|training for|saving for) (.+)$", value):
        aim = f"{_GOAL_VERB[value.split()[0]]} {learning[1]}"
        content = f"{ctx.who} stopped {value}{when}"
        stopped = ctx.goal(content, ["goals"], goal=aim, target_date=None, status="abandoned")
        return [_ending(stopped, day)]
    if diet := re.match(r"being (vegan|vegetarian|pescatarian|keto)$", value):
        return _diet_end(ctx, diet[1])
    content = f"{ctx.who} gave up {value}{when}"
    item = ctx.preference(
        content, ["preferences"], topic=value, sentiment="likes", value=_thing(value)
    )
    return [_ending(item, day)]


_GOAL_VERB = {"learning": "learn", "studying": "study", "training": "train", "saving": "save"}


def _thing(value: str) -> str:
    """ "watching F1" → "F1", "playing tennis" → "tennis": the liked thing, not the doing."""
    words = value.split()
    if len(words) > 1 and words[0].endswith("ing") and words[0] not in ("running", "swimming"):
        return " ".join(words[1:])
    return value


def graduated(match: Match, ctx: Ctx) -> list[Item]:
    school = _head(optional_group(match, "school")) or "*"
    if school != "*" and not school[:1].isupper():
        return []
    shown = f" from {school}" if school != "*" else ""
    return _identity_end(ctx, "school", school, f"{ctx.who} graduated{shown}", "education")


def done_with_school(match: Match, ctx: Ctx) -> list[Item]:
    school = _head(match["school"])
    if not school[:1].isupper():
        return []
    return _identity_end(ctx, "school", school, f"{ctx.who} finished at {school}", "education")


# --- home --------------------------------------------------------------------------


def moved_away(match: Match, ctx: Ctx) -> list[Item]:
    old, ctx = _dated(match["old"], ctx)
    if not old[:1].isupper():
        return []
    return _identity_end(ctx, "location", old, f"{ctx.who} moved away from {old}", "location")


# --- people and pets ---------------------------------------------------------------


def _partner(match: Match) -> tuple[str, str] | None:
    """(person, relation) named by a break-up; "*" for a person the relation names."""
    name, rel = (
        optional_group(match, "name") or optional_group(match, "name2"),
        (optional_group(match, "rel") or "").lower(),
    )
    if name and name.split()[0].lower() in NOT_NAMES:
        return None
    relation = RELATIONS.get(rel, rel) if rel else "partner"
    return (name or "*", relation)


def broke_up(match: Match, ctx: Ctx) -> list[Item]:
    ctx = _date_after(match, ctx)
    found = _partner(match)
    if found is None:
        return []
    person, relation = found
    when, day = past_date(ctx)
    verb = "divorced" if "divorc" in match[0].lower() else "broke up with"
    shown = person if person != "*" else f"their {relation}"
    content = f"{ctx.who} {verb} {shown}{when}"
    item = ctx.relationship(content, ["family", "people"], person=person, relation=relation)
    return [_ending(item, day)]


def not_with(match: Match, ctx: Ctx) -> list[Item]:
    """ "I'm not with Carmen anymore" (reached only negated and with an ending cue)."""
    return broke_up(match, ctx)


def pet_gone(match: Match, ctx: Ctx) -> list[Item]:
    """ "Rex passed away", "our dog died", "we had to rehome Pistachio"."""
    ctx = _date_after(match, ctx)
    name, kind = (
        optional_group(match, "name") or optional_group(match, "name2"),
        (optional_group(match, "kind") or "").lower(),
    )
    if name and name.split()[0].lower() in NOT_NAMES | {"he", "she", "it", "they"}:
        return []
    value = name or kind
    if not value:
        return []
    when, day = past_date(ctx)
    verb = (optional_group(match, "verb") or "died").lower()
    shown = name or f"their {kind}"
    if verb in ("rehome", "gave away"):
        said = "rehomed" if verb == "rehome" else "gave away"
        content = f"{ctx.who} {said} {shown}"
    elif name and not kind:
        # "Lakshmi passed away": a pet or a person by that name, whichever is held
        content = f"{name} {_PAST.get(verb, verb)}{when}"
        item = ctx.fact(content, ["life"], attribute="*", value=name)
        return [_ending(item, day)]
    else:
        content = f"{shown[:1].upper()}{shown[1:]}, {ctx.possessive} pet, {_PAST.get(verb, verb)}"
    item = ctx.fact(f"{content}{when}", ["pets"], attribute="pet", value=value)
    return [_ending(item, day)]


def relative_died(match: Match, ctx: Ctx) -> list[Item]:
    """ "My wife Lakshmi passed away in January": the relationship ends with its person."""
    ctx = _date_after(match, ctx)
    rel = match["rel"].lower()
    relation, name = RELATIONS.get(rel, rel), optional_group(match, "name")
    if name and name.split()[0].lower() in NOT_NAMES:
        return []
    when, day = past_date(ctx)
    shown = f"{ctx.possessive} {rel} {name}" if name else f"{ctx.possessive} {rel}"
    content = f"{shown[:1].upper()}{shown[1:]} passed away{when}"
    item = ctx.relationship(content, ["family", "people"], person=name or "*", relation=relation)
    return [_ending(item, day)]


def renamed_pet(match: Match, ctx: Ctx) -> list[Item]:
    """ "her name is Lumi, not Luna": a correction of a pet's name (the writer ends Luna only
    where a pet of that name is held)."""
    new, old = match["new"], match["old"]
    if {new.split()[0].lower(), old.split()[0].lower()} & NOT_NAMES:
        return []
    gone = ctx.fact(f"{ctx.possessive_start} pet is not called {old}", ["pets"],
                    attribute="pet", value=old)  # fmt: skip
    kept = ctx.fact(f"{ctx.possessive_start} pet is called {new}", ["pets"],
                    attribute="pet", value=new)  # fmt: skip
    return [_ending(gone), kept]


_PAST = {"passed away": "passed away", "passed": "passed away", "ran away": "ran away"}


def no_pets(match: Match, ctx: Ctx) -> list[Item]:
    """ "I don't have any pets anymore", "we don't have the goldfish anymore"."""
    kind = re.sub(r"s$", "", match["kind"].lower())
    value = "*" if kind in ("pet", "animal") or match["det"].lower() == "any" else kind
    shown = "any pets" if value == "*" else f"{article_of(match['det'])}{kind}"
    item = ctx.fact(f"{ctx.who} no longer has {shown}", ["pets"], attribute="pet", value=value)
    return [_ending(item)]


def article_of(det: str) -> str:
    det = det.lower()
    return "" if det in ("any",) else "the " if det in ("the", "our", "my") else f"{det} "


def retired(match: Match, ctx: Ctx) -> list[Item]:
    """ "I retired last Friday": the occupation is "retired" now (it replaces the old one)."""
    when, day = past_date(ctx)
    org = _org(optional_group(match, "org"))
    shown = f" from {org}" if org and org != "*" else ""
    content = f"{ctx.who} retired{shown}{when}"
    return ctx.identity("occupation", "retired", content, "work", valid_from=day)


def promoted(match: Match, ctx: Ctx) -> list[Item]:
    """ "I got promoted to team lead": the new title replaces the old one in its slot."""
    job = re.sub(r"^(?:a|an|the)\s+", "", _head(match["job"]), flags=re.I)
    if not job or len(job.split()) > 5:
        return []
    when, day = past_date(ctx)
    content = f"{ctx.who} was promoted to {job}{when}"
    return ctx.identity("occupation", job, content, "work", valid_from=day)


def back_into(match: Match, ctx: Ctx) -> list[PreferenceItem]:
    return life.likes(match, ctx, "likes", verb="is back into")


# --- diet --------------------------------------------------------------------------


def _diet_end(ctx: Ctx, diet: str) -> list[Item]:
    item = ctx.fact(
        f"{ctx.who} is no longer {diet}", ["food", "diet"], attribute="diet", value=diet
    )
    return [_ending(item)]


def eats_again(match: Match, ctx: Ctx) -> list[Item]:
    """ "I've started eating chicken again": whatever the meat-free diet was, it ended."""
    food = match["food"].lower()
    item = ctx.fact(f"{ctx.who} eats {food} again", ["food", "diet"], attribute="diet", value="*")
    return [_ending(item)]


# --- "used to", "no longer", "not ... anymore" -----------------------------------------


def no_longer(items: list[Item], ctx: Ctx, clause: str, *, used_to: bool = False) -> list[Item]:
    """Facts a rule built from the positive form of an ended clause ("I live in Berlin" for
    "I don't live in Berlin anymore"), marked ended, their content saying so."""
    rest = re.sub(r"^(?:i|we) ", "", clause, flags=re.I)
    first, _, tail = rest.partition(" ")
    if used_to:
        said = f"{ctx.who} used to {third(rest)}"
    elif first.lower() in ("am", "are"):
        said = f"{ctx.who} is no longer {third(tail)}"
    else:
        verb = {"have": "has", "do": "does", "go": "goes"}.get(first.lower())
        verb = verb or (first + ("es" if first.endswith(("sh", "ch", "s")) else "s"))
        said = f"{ctx.who} no longer {verb} {third(tail)}".rstrip()
    return [_ending(item, content=" ".join(said.split()).rstrip(" .") + ".") for item in items]


def corrected(match: Match, ctx: Ctx) -> list[Item]:
    """ "Sorry, I meant Hamburg, not Bremen": Bremen, whatever it was said of, is retired by
    its value; the stateless rules cannot tell what Hamburg replaces, so it is left to
    the message's other clauses ("I live in Hamburg")."""
    old, new = _head(match["old"]), _head(match["new"])
    if not old or not new or len(old.split()) > 3 or old.lower() in NOT_NAMES:
        return []
    content = f"{ctx.who} corrected {old} to {new}"
    item = ctx.fact(content, ["correction"], attribute="*", value=old)
    return [_ending(item)]


def settle(items: list[Item]) -> list[Item]:
    """One message's endings without repeats: "I'm not with Carmen anymore, we split up"
    ends Carmen once, not Carmen and then "their partner" again."""
    named = any(
        i.get("ended") and i["type"] == "relationship" and i.get("person") != "*" for i in items
    )
    out: list[Item] = []
    for item in items:
        if named and item.get("ended") and item.get("person") == "*":
            continue
        if (
            item.get("ended")
            and item.get("attribute") == "relationship_status"
            and any(o.get("attribute") == "relationship_status" and o.get("ended") for o in out)
        ):
            continue
        out.append(item)
    return out
