"""A query's words: the topical terms keyword search asks for, the words a name is known by."""

from __future__ import annotations

import re

MAX_QUERY_TERMS = 32  # a 4000-character query must not become a 600-term OR

# Words that carry no topic, dropped from keyword queries: ORed, "what did I say about my
# pet" would otherwise match nearly every message and rank them all. PostgreSQL's english
# configuration drops its own list; this one is for FTS5, which has none.
_STOPWORD_TEXT = """
    a about above after again against all am an and any are as at be because been before
    being below between both but by can could did do does doing down during each few for
    from further had has have having he her here hers herself him himself his how i if in
    into is it its itself just me more most my myself no nor not of off on once only or
    other our ours ourselves out over own same she should so some such than that the their
    theirs them themselves then there these they this those through to too under until up
    very was we were what when where which while who whom why will with would you your yours
    yourself yourselves i'm i've i'd i'll it's that's don't didn't doesn't isn't wasn't
"""
_STOPWORDS = frozenset(_STOPWORD_TEXT.split())
# A term: letters/digits, with inner hyphens, dots or apostrophes kept ("INC-40213", "e.g",
# "don't"), so that such a term is searched as a phrase rather than as loose parts.
_TERM = re.compile(r"\w+(?:[-.'\u2019]\w+)*")


def keyword_terms(query: str) -> list[str]:
    """The query's distinct topical words, lowercased; none for a query of only stopwords
    (as PostgreSQL's english configuration does, so both dialects agree)."""
    terms = dict.fromkeys(t.lower() for t in _TERM.findall(query))
    return [t for t in terms if t not in _STOPWORDS][:MAX_QUERY_TERMS]


def name_words(text: str) -> set[str]:
    """The words a name is recognised by in a query: lowercased, a possessive's 's dropped
    ("Caroline's" → "caroline"), stopwords out."""
    words = (t.lower().removesuffix("'s").removesuffix("’s") for t in _TERM.findall(text))
    return {w for w in words if w and w not in _STOPWORDS}
