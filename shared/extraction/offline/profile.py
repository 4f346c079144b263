"""Offline extractor builders for who the person is: identity, work, the people they know."""

from __future__ import annotations

import re
from dataclasses import replace

from shared.extraction.offline.items import Item
from shared.extraction.offline.lexicon import (
    DEMONYMS,
    JOB_SUFFIXES,
    JOBS,
    LANGUAGES,
    NOT_NAMES,
    RELATIONS,
    Ctx,
    Match,
    article,
    clean,
    items_of,
    optional_group,
    past_date,
    place,
    titled,
    words,
)

# --- identity ------------------------------------------------------------------------


def name(match: Match, ctx: Ctx) -> list[Item]:
    bare = optional_group(match, "bare")  # "I'm Ana" is a weaker signal than "my name is Ana"
    said = titled(clean(bare or match["value"]))
    if not said or said.split()[0].lower() in NOT_NAMES | DEMONYMS:
        return []
    if said.lower() == ctx.subject.lower():
        return []  # "Chloe's name is Chloe." says nothing the speaker's name did not
    content = f"{ctx.possessive_start} name is {said}"
    return ctx.identity("name", said, content, "identity", conf=0.8 if bare else 0.9)


def name_and_age(match: Match, ctx: Ctx) -> list[Item]:
    """ "I'm Ben, 34": a name in apposition with an age."""
    named = name(match, ctx)
    if not named and ctx.subject.lower() != match["bare"].lower():
        return []  # "I'm Sorry, 34" is no introduction
    years = int(match["age"])
    if not 1 <= years <= 120:
        return named
    content = f"{ctx.who} is {years} years old"
    return named + ctx.identity("age", str(years), content, "identity")


def pronouns(match: Match, ctx: Ctx) -> list[Item]:
    value = match["value"].lower()
    return ctx.identity("pronouns", value, f"{ctx.who} uses {value} pronouns", "identity")


def age(match: Match, ctx: Ctx) -> list[Item]:
    years = int(match["value"])
    if not 1 <= years <= 120:
        return []
    when, day = past_date(ctx)
    turned = optional_group(match, "turned")
    content = f"{ctx.who} turned {years}{when}" if turned else f"{ctx.who} is {years} years old"
    return ctx.identity("age", str(years), content, "identity", valid_from=day)


def birthday(match: Match, ctx: Ctx) -> list[Item]:
    born = match[0].lower().startswith("i was born")
    value = clean(optional_group(match, "value"))
    if born and value.lower().startswith("in "):  # a date would already be out: "born in Lisbon"
        where = place(value[3:])
        content = f"{ctx.who} was born in {where}"
        return ctx.identity("birthplace", where, content, "identity", "origin") if where else []
    # Kept as said: "March 3rd" has no year, so resolving it would invent one.
    day = value or (ctx.date.core if ctx.date else "")
    if not day:
        return []
    prep = "in" if re.fullmatch(r"\d{4}|[a-z]+,? \d{4}", day, re.I) else "on"
    content = (
        f"{ctx.who} was born {prep} {day}" if born else f"{ctx.possessive_start} birthday is {day}"
    )
    return ctx.identity("birthday", day, content, "identity", "birthday")


def nationality(match: Match, ctx: Ctx) -> list[Item]:
    value = match["value"].lower()
    if value not in DEMONYMS:
        return []
    return ctx.identity(
        "nationality", value.title(), f"{ctx.who} is {value.title()}", "identity", "origin"
    )


def languages(match: Match, ctx: Ctx) -> list[Item]:
    # "language" is multi-valued in the schema: speaking a new one adds, never replaces.
    out = []
    for part in items_of(clean(match["value"])):
        said = re.sub(r"\s+(?:fluently|well|natively|badly|a bit|a little)$", "", part).split()
        if said and said[-1].lower() in LANGUAGES:
            lang = said[-1].title()
            content = f"{ctx.who} speaks {' '.join([*said[:-1], lang])}"
            out += ctx.identity("language", lang, content, "language")
    return out


def native_language(match: Match, ctx: Ctx) -> list[Item]:
    if match["value"].lower() not in LANGUAGES:
        return []
    lang = match["value"].title()
    content = f"{ctx.possessive_start} native language is {lang}"
    return ctx.identity("native_language", lang, content, "language")


def location(match: Match, ctx: Ctx) -> list[Item]:
    where = place(match["value"])
    if not where:
        return []
    if optional_group(match, "moved"):
        when, day = past_date(ctx)
        content = f"{ctx.who} moved to {where}{when}"
    else:
        when, day = past_date(ctx, since=True)
        content = f"{ctx.who} has lived in {where}{when}" if when else f"{ctx.who} lives in {where}"
    # "lives with me in Dubai", "live with my girlfriend"
    if company := clean(optional_group(match, "with")):
        content += f" with {company}"
    return ctx.identity("location", where, content, "location", "home", valid_from=day)


def present_place(match: Match, ctx: Ctx) -> list[Item]:
    """ "I'm in Melbourne now", "Lyon is home now": where the speaker lives, said loosely, so
    not when a date or a purpose makes it a stay ("I'm in Rome this week", "for work")."""
    stay = re.search(r"\b(?:for|on|with|until|till|visiting)\b|\d", match["value"], re.I)
    if ctx.date is not None or stay:  # "Year 10" is no place either
        return []
    return location(match, replace(ctx, confidence=min(ctx.confidence, 0.7)))


def hometown(match: Match, ctx: Ctx) -> list[Item]:
    where = place(match["value"])
    if not where:
        return []
    verb = "grew up in" if optional_group(match, "grew") else "is from"
    return ctx.identity("hometown", where, f"{ctx.who} {verb} {where}", "origin", "home")


# --- work and study ------------------------------------------------------------------

_STATUS_JOBS = ("retired", "unemployed", "self-employed", "between jobs")


_DURATION = re.compile(
    r"(?:\d+|a|an|one|two|three|four|five|six|seven|eight|nine|ten|twenty|a few|several|"
    r"many|most|the (?:last|past))\b.*\b(?:years?|months?|weeks?|days?|decades?|life|while|ages)\b",
    re.I,
)
_ORG_IN = re.compile(r"(.+?) in ((?-i:[A-Z])[^,]*)$", re.I)


_CALLED = re.compile(r"^(?:a|an|the) [\w' -]+? (?:called|named) ((?-i:[A-Z]).*)$", re.I)


def _employer(text: str | None) -> str | None:
    org = clean(re.split(r"\s+(?:studying|doing|working on)\b", text or "")[0], cut=True)
    if named := _CALLED.match(org):
        org = named[1]  # "a fintech called Paystream": the name is the employer
    if org.lower() in ("myself", "themselves"):
        return "self-employed"
    if not org or len(org.split()) > 6 or org.split()[0].lower() in ("home", "night", "it"):
        return None
    return org if _unnamed(org) else titled(org)


def _unnamed(org: str) -> bool:
    """ "a children's hospital", "the local school": a kind of workplace, not its name."""
    said = org.split()
    return said[0].lower() in ("a", "an") or (
        said[0].lower() == "the" and len(said) > 1 and said[1][:1].islower()
    )


def _is_job(job: str) -> bool:
    head = job.split()[-1].lower() if job.split() else ""
    return (
        head in JOBS
        or head.endswith(JOB_SUFFIXES)
        or (
            head.endswith("ist") and head not in _NOT_JOBS  # hygienist, florist
        )
    )


# "-ist" nouns that name no job.
_NOT_JOBS = words(
    "optimist pessimist perfectionist realist idealist minimalist purist loyalist "
    "tourist nationalist racist sexist extremist activist"
)


def _work(match: Match, ctx: Ctx, *, trusted: bool) -> list[Item]:
    job = re.sub(r"^(?:a|an)\s+", "", clean(optional_group(match, "job")), flags=re.I)
    if job and not trusted and not _is_job(job):
        return []  # "I'm a big fan of jazz" is not a job
    said_org, said_where = optional_group(match, "org"), optional_group(match, "workplace")
    if said_org and _DURATION.match(said_org):
        said_org = None  # "a cardiologist for ten years": how long, not for whom
    if said_org and not said_where and (split := _ORG_IN.match(said_org)):
        said_org, said_where = split[1], split[2]  # "at a warehouse in Brno"
    org = _employer(said_org)
    joined = optional_group(match, "joined")
    if len(job.split()) > 5 or (joined and not (org and org[0].isupper())):
        return []  # "I joined a gym": only a named organisation is an employer
    where = place(said_where) if said_where and said_where[:1].isupper() else None
    if said_where and not where:
        return []  # "I'm a nurse in training" names no place
    when, day = past_date(ctx, since=not joined)
    shifts = f" {clean(optional_group(match, 'shifts'))}" if optional_group(match, "shifts") else ""
    at = f" in {where}" if where else ""  # where they work: not where they live
    out = []
    if job:
        verb = "is" if job.lower() in _STATUS_JOBS else f"works as {article(job)}"
        if org and _unnamed(org):  # "a nurse at a children's hospital": one fact says it
            at, org = f" at {org}{at}", None
        out += ctx.identity(
            "occupation", job, f"{ctx.who} {verb} {job}{at}", "work", valid_from=day
        )
    if org and job.lower().endswith("student"):  # "a master's student at TU Delft"
        out += ctx.identity("school", org, f"{ctx.who} studies at {org}", "education")
    elif org == "self-employed":
        out += ctx.identity("employer", org, f"{ctx.who} is self-employed", "work")
    elif org:
        if joined:
            content = f"{ctx.who} joined {org}{at}{when}"
        else:
            content = (
                f"{ctx.who} has worked{shifts} at {org}{at}{when}"
                if when
                else f"{ctx.who} works{shifts} at {org}{at}"
            )
        out += ctx.identity("employer", org, content, "work", valid_from=day)
    return out


def job_trusted(match: Match, ctx: Ctx) -> list[Item]:
    """For "I work as X": whatever X is, it is the job."""
    return _work(match, ctx, trusted=True)


def job_checked(match: Match, ctx: Ctx) -> list[Item]:
    """For "I'm a X": a job only when X ends in a known job noun."""
    return _work(match, ctx, trusted=False)


_NOT_TAUGHT = words("my their them him her you it this that how what people someone kids")


def teach(match: Match, ctx: Ctx) -> list[Item]:
    """ "I teach maths at a secondary school", "I teach at a primary school in Hull"."""
    subject = clean(optional_group(match, "subject"))
    where = clean(optional_group(match, "org"))
    said = subject.lower().split()
    if (said and (said[0] in _NOT_TAUGHT or len(said) > 3)) or (not said and not where):
        return []
    job = f"{subject} teacher" if subject else "teacher"
    at = f" {match['prep'].lower()} {where}" if where else ""
    return ctx.identity(
        "occupation", job, f"{ctx.who} teaches{f' {subject}' if subject else ''}{at}", "work"
    )


def industry(match: Match, ctx: Ctx) -> list[Item]:
    value = clean(match["value"])
    if not value or value[0].isupper():  # "I work in Berlin" names a place, not a field
        return []
    return ctx.identity("industry", value, f"{ctx.who} works in {value}", "work")


def remote(match: Match, ctx: Ctx) -> list[Item]:
    content = f"{ctx.who} works remotely"
    return [ctx.fact(content, ["work"], attribute="work_arrangement", value="remote")]


def study(match: Match, ctx: Ctx) -> list[Item]:
    field = clean(match["value"])
    if not field or field.split()[0].lower() in ("for", "with", "at", "hard", "a", "it"):
        return []
    content = f"{ctx.who} studies {field}"
    out: list[Item] = [ctx.fact(content, ["education"], attribute="field_of_study", value=field)]
    if school := _employer(optional_group(match, "org")):
        out += ctx.identity("school", school, f"{ctx.who} studies at {school}", "education")
    return out


def marital(match: Match, ctx: Ctx) -> list[Item]:
    value = match["value"].lower()
    return ctx.identity("relationship_status", value, f"{ctx.who} is {value}", "family")


# --- relationships -----------------------------------------------------------------

_PARTNER = {
    "married to": ("spouse", "married"),
    "engaged to": ("fiance", "engaged"),
    "dating": ("partner", None),
    "seeing": ("partner", None),
}
_WORK_RELATIONS = words("boss manager supervisor coworker colleague teammate mentor")
_FAMILY = words(
    "mother father sister brother son daughter wife husband spouse partner fiance cousin aunt "
    "uncle niece nephew grandmother grandfather stepmother stepfather mother-in-law father-in-law"
)


_PLURAL_REL = {"children": "child", "kids": "child", "parents": "parent"}
_SINGULAR_VERB = {"are": "is", "have": "has", "were": "was", "do": "does"}


def _one_said(rest: str) -> str:
    """What is said of several ("both live in Karachi"), said of one ("lives in Karachi")."""
    verb, _, tail = re.sub(r"^(?:both|all|each) ", "", rest).partition(" ")
    if not (verb := _SINGULAR_VERB.get(verb.lower(), verb)).endswith("s"):
        verb = f"{verb[:-1]}ies" if re.search(r"[^aeiou]y$", verb) else f"{verb}s"
    return f"{verb} {tail}".strip()


def relations(match: Match, ctx: Ctx) -> list[Item]:
    """ "my brothers, Imran and Bilal, both live in Karachi": one relationship per name."""
    said = match["rel"].lower()
    rel = _PLURAL_REL.get(said) or said.removesuffix("s")
    rest = clean(optional_group(match, "rest"))
    out = []
    for person in re.split(r",\s*(?:and\s+)?|\s+and\s+", match["names"]):
        if person:
            out += _relation(ctx, rel, person, "", _one_said(rest) if rest else "")
    return out


def relation(match: Match, ctx: Ctx) -> list[Item]:
    # what is said of them ("is a nurse in Hamburg") goes with the relationship
    return _relation(
        ctx,
        match["rel"],
        match["name"],
        optional_group(match, "mod") or "",
        clean(optional_group(match, "rest")),
    )


def _relation(ctx: Ctx, said: str, name: str, mod: str, rest: str) -> list[Item]:
    person = re.sub(r"'s$", "", name)  # "my friend Sam's dog"
    if person.split()[0].lower() in NOT_NAMES | DEMONYMS | LANGUAGES:
        return []  # "my wife is Italian"
    said = said.lower()
    kind, status = _PARTNER.get(said, (RELATIONS.get(said, said), None))
    mod = mod.lower()  # "older sister" is said; "sister" is the relation
    shown = kind if kind in ("spouse", "partner") else f"{mod}{kind}"
    area = "work" if kind in _WORK_RELATIONS else "family" if kind in _FAMILY else "friends"
    content = f"{ctx.possessive_start} {shown} " + (f"{person} {rest}" if rest else f"is {person}")
    out: list[Item] = [ctx.relationship(content, [area, "people"], person=person, relation=kind)]
    if status:
        out += ctx.identity("relationship_status", status, f"{ctx.who} is {status}", "family")
    return out


def pet(match: Match, ctx: Ctx) -> list[Item]:
    if match["name"].split()[0].lower() in NOT_NAMES:
        return []
    value = f"a {match['pet'].lower()} named {match['name']}"
    return [ctx.fact(f"{ctx.who} has {value}", ["pets"], value=value)]
