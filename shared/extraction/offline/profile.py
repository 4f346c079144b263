"""Offline extractor builders for who the person is: identity, work, the people they know."""

from __future__ import annotations

import re
from dataclasses import replace

from shared.extraction.offline.lexicon import (
    DEMONYMS,
    JOB_SUFFIXES,
    JOBS,
    LANGUAGES,
    NOT_NAMES,
    RELATIONS,
    Ctx,
    Item,
    article,
    clean,
    items_of,
    past_date,
    place,
    titled,
    words,
)

M = re.Match[str]


def opt(m: M, group: str) -> str | None:
    """A named group that only some of a builder's patterns have."""
    return m.groupdict().get(group)


# --- identity ------------------------------------------------------------------------


def name(m: M, c: Ctx) -> list[Item]:
    bare = opt(m, "bare")  # "I'm Ana" is a weaker signal than "my name is Ana"
    said = titled(clean(bare or m["v"]))
    if not said or said.split()[0].lower() in NOT_NAMES | DEMONYMS:
        return []
    if said.lower() == c.subject.lower():
        return []  # "Chloe's name is Chloe." says nothing the speaker's name did not
    content = f"{c.poss_start} name is {said}"
    return c.identity("name", said, content, "identity", conf=0.8 if bare else 0.9)


def name_and_age(m: M, c: Ctx) -> list[Item]:
    """ "I'm Ben, 34": a name in apposition with an age."""
    named = name(m, c)
    if not named and c.subject.lower() != m["bare"].lower():
        return []  # "I'm Sorry, 34" is no introduction
    years = int(m["age"])
    if not 1 <= years <= 120:
        return named
    content = f"{c.who} is {years} years old"
    return named + c.identity("age", str(years), content, "identity")


def pronouns(m: M, c: Ctx) -> list[Item]:
    v = m["v"].lower()
    return c.identity("pronouns", v, f"{c.who} uses {v} pronouns", "identity")


def age(m: M, c: Ctx) -> list[Item]:
    years = int(m["v"])
    if not 1 <= years <= 120:
        return []
    when, day = past_date(c)
    turned = opt(m, "turned")
    content = f"{c.who} turned {years}{when}" if turned else f"{c.who} is {years} years old"
    return c.identity("age", str(years), content, "identity", valid_from=day)


def birthday(m: M, c: Ctx) -> list[Item]:
    born = m[0].lower().startswith("i was born")
    v = clean(opt(m, "v"))
    if born and v.lower().startswith("in "):  # a date would already be out: "born in Lisbon"
        where = place(v[3:])
        content = f"{c.who} was born in {where}"
        return c.identity("birthplace", where, content, "identity", "origin") if where else []
    # Kept as said: "March 3rd" has no year, so resolving it would invent one.
    day = v or (c.date.core if c.date else "")
    if not day:
        return []
    prep = "in" if re.fullmatch(r"\d{4}|[a-z]+,? \d{4}", day, re.I) else "on"
    content = f"{c.who} was born {prep} {day}" if born else f"{c.poss_start} birthday is {day}"
    return c.identity("birthday", day, content, "identity", "birthday")


def nationality(m: M, c: Ctx) -> list[Item]:
    v = m["v"].lower()
    if v not in DEMONYMS:
        return []
    return c.identity("nationality", v.title(), f"{c.who} is {v.title()}", "identity", "origin")


def languages(m: M, c: Ctx) -> list[Item]:
    # "language" is multi-valued in the schema: speaking a new one adds, never replaces.
    out = []
    for part in items_of(clean(m["v"])):
        said = re.sub(r"\s+(?:fluently|well|natively|badly|a bit|a little)$", "", part).split()
        if said and said[-1].lower() in LANGUAGES:
            lang = said[-1].title()
            content = f"{c.who} speaks {' '.join([*said[:-1], lang])}"
            out += c.identity("language", lang, content, "language")
    return out


def native_language(m: M, c: Ctx) -> list[Item]:
    if m["v"].lower() not in LANGUAGES:
        return []
    lang = m["v"].title()
    content = f"{c.poss_start} native language is {lang}"
    return c.identity("native_language", lang, content, "language")


def location(m: M, c: Ctx) -> list[Item]:
    where = place(m["v"])
    if not where:
        return []
    if opt(m, "moved"):
        when, day = past_date(c)
        content = f"{c.who} moved to {where}{when}"
    else:
        when, day = past_date(c, since=True)
        content = f"{c.who} has lived in {where}{when}" if when else f"{c.who} lives in {where}"
    if company := clean(opt(m, "with")):  # "lives with me in Dubai", "live with my girlfriend"
        content += f" with {company}"
    return c.identity("location", where, content, "location", "home", valid_from=day)


def present_place(m: M, c: Ctx) -> list[Item]:
    """ "I'm in Melbourne now", "Lyon is home now": where the speaker lives, said loosely, so
    not when a date or a purpose makes it a stay ("I'm in Rome this week", "for work")."""
    stay = re.search(r"\b(?:for|on|with|until|till|visiting)\b|\d", m["v"], re.I)
    if c.date is not None or stay:  # "Year 10" is no place either
        return []
    return location(m, replace(c, confidence=min(c.confidence, 0.7)))


def hometown(m: M, c: Ctx) -> list[Item]:
    where = place(m["v"])
    if not where:
        return []
    verb = "grew up in" if opt(m, "grew") else "is from"
    return c.identity("hometown", where, f"{c.who} {verb} {where}", "origin", "home")


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


def _work(m: M, c: Ctx, *, trusted: bool) -> list[Item]:
    job = re.sub(r"^(?:a|an)\s+", "", clean(opt(m, "job")), flags=re.I)
    if job and not trusted and not _is_job(job):
        return []  # "I'm a big fan of jazz" is not a job
    said_org, said_where = opt(m, "org"), opt(m, "workplace")
    if said_org and _DURATION.match(said_org):
        said_org = None  # "a cardiologist for ten years": how long, not for whom
    if said_org and not said_where and (split := _ORG_IN.match(said_org)):
        said_org, said_where = split[1], split[2]  # "at a warehouse in Brno"
    org = _employer(said_org)
    joined = opt(m, "joined")
    if len(job.split()) > 5 or (joined and not (org and org[0].isupper())):
        return []  # "I joined a gym": only a named organisation is an employer
    where = place(said_where) if said_where and said_where[:1].isupper() else None
    if said_where and not where:
        return []  # "I'm a nurse in training" names no place
    when, day = past_date(c, since=not joined)
    shifts = f" {clean(opt(m, 'shifts'))}" if opt(m, "shifts") else ""
    at = f" in {where}" if where else ""  # where they work: not where they live
    out = []
    if job:
        verb = "is" if job.lower() in _STATUS_JOBS else f"works as {article(job)}"
        if org and _unnamed(org):  # "a nurse at a children's hospital": one fact says it
            at, org = f" at {org}{at}", None
        out += c.identity("occupation", job, f"{c.who} {verb} {job}{at}", "work", valid_from=day)
    if org and job.lower().endswith("student"):  # "a master's student at TU Delft"
        out += c.identity("school", org, f"{c.who} studies at {org}", "education")
    elif org == "self-employed":
        out += c.identity("employer", org, f"{c.who} is self-employed", "work")
    elif org:
        if joined:
            content = f"{c.who} joined {org}{at}{when}"
        else:
            content = (
                f"{c.who} has worked{shifts} at {org}{at}{when}"
                if when
                else f"{c.who} works{shifts} at {org}{at}"
            )
        out += c.identity("employer", org, content, "work", valid_from=day)
    return out


def job_trusted(m: M, c: Ctx) -> list[Item]:
    """For "I work as X": whatever X is, it is the job."""
    return _work(m, c, trusted=True)


def job_checked(m: M, c: Ctx) -> list[Item]:
    """For "I'm a X": a job only when X ends in a known job noun."""
    return _work(m, c, trusted=False)


_NOT_TAUGHT = words("my their them him her you it this that how what people someone kids")


def teach(m: M, c: Ctx) -> list[Item]:
    """ "I teach maths at a secondary school", "I teach at a primary school in Hull"."""
    subject = clean(opt(m, "subject"))
    where = clean(opt(m, "org"))
    said = subject.lower().split()
    if (said and (said[0] in _NOT_TAUGHT or len(said) > 3)) or (not said and not where):
        return []
    job = f"{subject} teacher" if subject else "teacher"
    at = f" {m['prep'].lower()} {where}" if where else ""
    return c.identity(
        "occupation", job, f"{c.who} teaches{f' {subject}' if subject else ''}{at}", "work"
    )


def industry(m: M, c: Ctx) -> list[Item]:
    v = clean(m["v"])
    if not v or v[0].isupper():  # "I work in Berlin" names a place, not a field
        return []
    return c.identity("industry", v, f"{c.who} works in {v}", "work")


def remote(m: M, c: Ctx) -> list[Item]:
    content = f"{c.who} works remotely"
    return [c.item("fact", content, ["work"], attribute="work_arrangement", value="remote")]


def study(m: M, c: Ctx) -> list[Item]:
    field = clean(m["v"])
    if not field or field.split()[0].lower() in ("for", "with", "at", "hard", "a", "it"):
        return []
    content = f"{c.who} studies {field}"
    out = [c.item("fact", content, ["education"], attribute="field_of_study", value=field)]
    if school := _employer(opt(m, "org")):
        out += c.identity("school", school, f"{c.who} studies at {school}", "education")
    return out


def marital(m: M, c: Ctx) -> list[Item]:
    v = m["v"].lower()
    return c.identity("relationship_status", v, f"{c.who} is {v}", "family")


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


def relations(m: M, c: Ctx) -> list[Item]:
    """ "my brothers, Imran and Bilal, both live in Karachi": one relationship per name."""
    said = m["rel"].lower()
    rel = _PLURAL_REL.get(said) or said.removesuffix("s")
    rest = clean(opt(m, "rest"))
    out = []
    for person in re.split(r",\s*(?:and\s+)?|\s+and\s+", m["names"]):
        if person:
            out += _relation(c, rel, person, "", _one_said(rest) if rest else "")
    return out


def relation(m: M, c: Ctx) -> list[Item]:
    # what is said of them ("is a nurse in Hamburg") goes with the relationship
    return _relation(c, m["rel"], m["name"], opt(m, "mod") or "", clean(opt(m, "rest")))


def _relation(c: Ctx, said: str, name: str, mod: str, rest: str) -> list[Item]:
    person = re.sub(r"'s$", "", name)  # "my friend Sam's dog"
    if person.split()[0].lower() in NOT_NAMES | DEMONYMS | LANGUAGES:
        return []  # "my wife is Italian"
    said = said.lower()
    kind, status = _PARTNER.get(said, (RELATIONS.get(said, said), None))
    mod = mod.lower()  # "older sister" is said; "sister" is the relation
    shown = kind if kind in ("spouse", "partner") else f"{mod}{kind}"
    area = "work" if kind in _WORK_RELATIONS else "family" if kind in _FAMILY else "friends"
    content = f"{c.poss_start} {shown} " + (f"{person} {rest}" if rest else f"is {person}")
    out = [c.item("relationship", content, [area, "people"], person=person, relation=kind)]
    if status:
        out += c.identity("relationship_status", status, f"{c.who} is {status}", "family")
    return out


def pet(m: M, c: Ctx) -> list[Item]:
    if m["name"].split()[0].lower() in NOT_NAMES:
        return []
    value = f"a {m['pet'].lower()} named {m['name']}"
    return [c.item("fact", f"{c.who} has {value}", ["pets"], value=value)]
