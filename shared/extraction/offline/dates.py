"""Finds a clause's date phrase and resolves it against the session date (offline extractor)."""

from __future__ import annotations

import datetime as dt
import logging
import re
from dataclasses import dataclass
from typing import Literal

from dateparser.date import DateDataParser

logger = logging.getLogger(__name__)

Prefer = Literal["past", "future"]

_MONTH = (
    r"(?:jan(?:uary)?|feb(?:ruary)?|mar(?:ch)?|apr(?:il)?|may|june?|july?|aug(?:ust)?"
    r"|sep(?:t(?:ember)?)?|oct(?:ober)?|nov(?:ember)?|dec(?:ember)?)\b"
)
_WEEKDAY = r"(?:mon|tues|wednes|thurs|fri|satur|sun)day\b"
_YEAR = r"(?:19|20)\d\d\b"
_NUM = (
    r"(?:\d{1,2}|a|an|one|two|three|four|five|six|seven|eight|nine|ten|eleven|twelve"
    r"|a\s+few|a\s+couple(?:\s+of)?|several)"
)
_UNIT = r"(?:day|week|month|year|decade)s?\b"
_SPAN = rf"{_NUM}\s+{_UNIT}"
# Temporal on their own: "last month", "two weeks ago". Everything else needs a preposition
# ("in June", "since 2019"), so "I have two kids" or "I love May" never look like dates.
_SEASON = r"(?:spring|summer|autumn|fall|winter)\b"
_RELATIVE = (
    rf"(?:(?:next|last|this|coming|past)\s+(?:week|month|year|weekend|{_SEASON}|{_MONTH}|{_WEEKDAY})"
    rf"|{_SPAN}\s+ago|yesterday|today|tomorrow|tonight)"
)
_ABSOLUTE = (
    rf"(?:(?:the\s+)?(?:end|start|beginning|middle)\s+of\s+(?:the\s+|this\s+|next\s+)?"
    rf"(?:year|month|{_MONTH}|{_YEAR})(?:\s+{_YEAR})?"
    rf"|(?:early|mid|late)[\s-]+(?:{_YEAR}|{_MONTH})"
    rf"|{_MONTH}\.?(?:\s+\d{{1,2}}(?:st|nd|rd|th)?\b)?(?:,?\s+{_YEAR})?"
    rf"|(?:the\s+)?\d{{1,2}}(?:st|nd|rd|th)?\s+(?:of\s+)?{_MONTH}(?:,?\s+{_YEAR})?"
    rf"|\d{{4}}-\d\d-\d\d|\d{{1,2}}/\d{{1,2}}/\d{{2,4}}|{_YEAR}|{_SPAN}|{_WEEKDAY}"
    rf"|(?:the\s+)?{_SEASON}(?:\s+(?:of\s+)?{_YEAR})?)"
)
_PREP = r"(?:since|in|by|before|until|till|on|from|as\s+of|starting(?:\s+in)?|around|for|within)"
# A date phrase ends the clause or comes right before a connector ("in 2019 with my wife").
_FOLLOW = r"(?=[\s,.!;]*$|\s+(?:with|because|since|for|so|and|but|when|after|to|as)\b)"
_DATE = re.compile(
    rf"(?:^|[\s,]+)(?:(?P<prep>{_PREP})\s+)?(?P<core>{_ABSOLUTE}|{_RELATIVE}){_FOLLOW}", re.I
)
_LEAD = re.compile(
    rf"^(?:(?P<prep>{_PREP})\s+)?(?P<core>{_ABSOLUTE}|{_RELATIVE}),?\s+(?=(?:i|we|my)\b)", re.I
)
_RELATIVE_RE = re.compile(rf"^{_RELATIVE}$", re.I)
_SPAN_RE = re.compile(rf"^{_SPAN}$", re.I)
_WORD_NUMBERS = {"a few": "3", "a couple of": "2", "a couple": "2", "several": "3"}
_EDGES = {"start": "first", "beginning": "first", "early": "first", "end": "last", "late": "last"}
_EDGE = re.compile(r"^(?:the\s+)?(end|start|beginning|middle|early|mid|late)(?:\s+of)?[\s-]+", re.I)


@dataclass(frozen=True)
class DatePhrase:
    raw: str  # as written, with its preposition: "by next June"
    prep: str | None  # lowercased: "by", "since", ...; None for "last month"
    core: str  # without the preposition: "next June"


@dataclass(frozen=True)
class When:
    date: dt.date | None  # None when unparseable, or on the wrong side of the session date
    text: str  # "in April 2024", "by 30 June 2024"; the raw phrase when unresolved


def find_date(clause: str) -> tuple[str, DatePhrase | None]:
    """The clause without its date phrase, and the phrase (the last one, or a leading one)."""
    lead = _LEAD.match(clause)
    if lead and _usable(lead["prep"], lead["core"]):
        return clause[lead.end() :], _phrase(lead["prep"], lead["core"])
    for match in reversed(list(_DATE.finditer(clause))):
        if _usable(match["prep"], match["core"]):
            rest = f"{clause[: match.start()]}{clause[match.end() :]}"
            return rest.strip(" ,"), _phrase(match["prep"], match["core"])
    return clause, None


def _usable(prep: str | None, core: str) -> bool:
    if prep is None:
        return bool(_RELATIVE_RE.match(core))
    if prep.lower() in ("for", "within"):  # "for 5 years" is a duration, "for June" is not
        return bool(_SPAN_RE.match(core))
    return True


def _phrase(prep: str | None, core: str) -> DatePhrase:
    raw = f"{prep} {core}" if prep else core
    return DatePhrase(raw=raw, prep=prep.lower() if prep else None, core=core)


def resolve(phrase: DatePhrase, base: dt.datetime, prefer: Prefer, *, since: bool = False) -> When:
    """Resolve against the session date. Facts prefer the past, goals the future; a month or
    year resolves to its first day in the past and its last day in the future (a deadline
    "by June" means the end of June). `since` renders a state's start ("since April 2024")."""
    text, edge = _normalize(phrase)
    first = edge or ("first" if prefer == "past" else "last")
    parser = DateDataParser(
        languages=["en"],
        settings={
            "RELATIVE_BASE": base.replace(tzinfo=None),
            "PREFER_DATES_FROM": prefer,
            "PREFER_DAY_OF_MONTH": first,
            "PREFER_MONTH_OF_YEAR": first,
        },
    )
    try:
        data = parser.get_date_data(text)
    except Exception:  # dateparser raises assorted errors on odd input; that means "no date"
        logger.debug("date phrase not parsed", extra={"chars": len(text)})
        return When(None, phrase.raw)
    if data.date_obj is None:
        return When(None, phrase.raw)
    day = data.date_obj.date()
    wrong_side = day > base.date() if prefer == "past" else day < base.date()
    shown = _render(day, data.period, edge == "last")
    return When(
        None if wrong_side else day, f"{_preposition(data.period, phrase, prefer, since)} {shown}"
    )


def _normalize(phrase: DatePhrase) -> tuple[str, str | None]:
    """Rewrite the phrase into something dateparser knows, plus a first/last-day hint."""
    core = " ".join(phrase.core.lower().split())
    edge: str | None = None
    if said_edge := _EDGE.match(core):  # "the end of June" → June, resolved to its last day
        edge = _EDGES.get(said_edge[1])
        core = core[said_edge.end() :]
        core = {"the year": "this year", "year": "this year", "the month": "this month"}.get(
            core, core.removeprefix("the ")
        )
    for words, digits in _WORD_NUMBERS.items():
        core = core.replace(words, digits)
    core = re.sub(r"^an?\s+", "1 ", core)
    # dateparser misses "next June"; the preferred direction already picks the right June.
    core = re.sub(rf"^(?:next|coming|last|past)\s+(?={_MONTH})", "", core)
    core = core.replace("tonight", "today")
    if phrase.prep == "for":  # lived there "for 5 years" → since 5 years ago
        core = f"{core} ago"
    elif phrase.prep in ("in", "within") and _SPAN_RE.match(core):
        core = f"in {core}"
    return core, edge


def _render(day: dt.date, period: str | None, end: bool) -> str:
    if period == "year":
        shown = str(day.year)
    elif period == "month":
        shown = f"{day:%B} {day.year}"
    else:
        return f"{day.day} {day:%B} {day.year}"
    return f"the end of {shown}" if end else shown


def _preposition(period: str | None, phrase: DatePhrase, prefer: Prefer, since: bool) -> str:
    prep = phrase.prep
    if since or prep in ("since", "for"):
        return "since"
    if prep in ("by", "before", "until", "till"):
        return prep
    if prep == "within" or (prefer == "future" and _SPAN_RE.match(phrase.core)):
        return "by"  # a goal "in two weeks" has a deadline
    return "in" if period in ("month", "year") else "on"


def warm_up() -> None:
    """dateparser loads its language data on first use (~80 ms); pay that once, up front."""
    resolve(_phrase(None, "last month"), dt.datetime(2024, 1, 1), "past")
