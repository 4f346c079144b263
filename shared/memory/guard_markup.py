"""The injection guard's hidden_markup family, on the raw text: invisible, bidi and control
characters, HTML comments, tags and attributes, CSS-hidden text, script URLs, base64 blobs."""

from __future__ import annotations

import re
import unicodedata

_MAX_EVIDENCE = 60  # the reason is stored in facts.quarantine_reason (200 chars)

_MARKUP: list[tuple[tuple[str, ...], re.Pattern[str], str]] = [
    (("<!--", "-->"), re.compile(r"<!--|-->"), "html comment"),
    (
        ("<",),
        re.compile(
            r"<(?:script|iframe|object|embed|style|svg|img|link|meta|form|input|template|"
            r"noscript)\b",
            re.I,
        ),
        "html tag",
    ),
    (
        (":",),
        re.compile(r"\b(?:javascript|vbscript)\s*:|\bdata:[\w/+.-]+;base64,", re.I),
        "script url",
    ),
    (
        ("<",),
        re.compile(
            r"<[a-z][\w-]*\s[^<>]*?(?:\bon(?:error|load|click|mouseover|focus)\s*=|"
            r"\bhidden\b|\baria-hidden)[^<>]*>",
            re.I,
        ),
        "html attribute",
    ),
    # inline styles only: a stylesheet needs <style>, and "{ display: none }" is everyday CSS
    (
        ("=",),
        re.compile(
            r"style\s*=[^{}<>]{0,200}?(?:display\s*:\s*none|visibility\s*:\s*hidden|"
            r"font-size\s*:\s*0(?![.\d])|opacity\s*:\s*0(?![.\d])|"
            r"color\s*:\s*(?:transparent|white|#fff(?:fff)?\b)|"
            r"(?:width|height)\s*:\s*0(?![.\d])|(?:left|top|text-indent)\s*:\s*-\d{3,})",
            re.I,
        ),
        "css-hidden text",
    ),
]
_CONTROL = re.compile(r"[\x00-\x08\x0b\x0c\x0e-\x1f\x7f-\x9f]")
_ALWAYS_HIDDEN = re.compile(
    "[\u200b\u202d\u202e\u2060-\u2064\ufeff\U000e0000-\U000e007f]|[\ufe00-\ufe0f\U000e0100-"
    "\U000e01ef]{2,}"
)
_JOINERS = re.compile("[\u200c\u200d]")
_BIDI_MARKS = re.compile("[\u200e\u200f\u061c\u202a-\u202c\u2066-\u2069]")
_RTL_LETTER = re.compile("[\u0590-\u08ff\ufb1d-\ufdff\ufe70-\ufefc]")
# A subdivision flag (England, Scotland, Wales) is a black flag, tag letters and a cancel tag.
_FLAG_TAGS = re.compile("\U0001f3f4[\U000e0020-\U000e007e]+\U000e007f")
_URLS = re.compile(r"(?:https?|ftp)://\S+", re.I)
_LONG_RUN = re.compile(r"[A-Za-z0-9+/_-]{40}")
_BASE64 = re.compile(r"(?<![\w+/=-])[A-Za-z0-9+/_-]{40,}={0,2}(?![\w+/=-])")


def hidden_markup(text: str) -> str | None:
    if text.isascii():
        control = _CONTROL.search(text)
        if control:
            return _char_name(control)
    else:
        body = _FLAG_TAGS.sub("", text)
        body = body[1:] if body.startswith("\ufeff") else body  # a file's byte-order mark
        found = _ALWAYS_HIDDEN.search(body) or _CONTROL.search(body)
        if found:
            return _char_name(found)
        for joiner in _JOINERS.finditer(body):
            # Joiners belong in emoji sequences and in Persian or Indic words; next to a
            # Latin letter or digit they only serve to split a word the filters look for.
            around = body[max(0, joiner.start() - 1) : joiner.end() + 1]
            latin = any(c.isascii() and c.isalnum() for c in around)
            if latin or len(_JOINERS.findall(around)) > 1:
                return _char_name(joiner)
        marks = _BIDI_MARKS.search(body)
        if marks and not _RTL_LETTER.search(body):  # direction marks in text with no RTL script
            return _char_name(marks)
    for words, pattern, what in _MARKUP:
        found = pattern.search(text) if any(word in text for word in words) else None
        if found:
            return f"{what} '{evidence(found.group(0))}'"
    if len(text) >= 40 and _LONG_RUN.search(text):
        for blob in _BASE64.finditer(_URLS.sub(" ", text)):
            if _looks_encoded(blob.group(0)):
                return f"base64 blob ({len(blob.group(0))} chars)"
    return None


def _looks_encoded(run: str) -> bool:
    # Encoded bytes mix cases and digits; hex digests (one case) and slugs do not.
    if not (
        any(c.isupper() for c in run)
        and any(c.islower() for c in run)
        and any(c.isdigit() for c in run)
    ):
        return False
    # A file path ("/home/ana/Documents/Thesis2024/...") is short segments between slashes;
    # base64 has a slash every 64 characters on average.
    parts = run.split("/")
    return len(parts) < 3 or max(len(p) for p in parts) >= 32


def _char_name(found: re.Match[str]) -> str:
    char = found.group(0)[0]
    name = unicodedata.name(char, "control character").lower()
    return f"U+{ord(char):04X} {name}"


def evidence(snippet: str) -> str:
    """A matched snippet as a reason quotes it: on one line, at most _MAX_EVIDENCE long."""
    snippet = " ".join(snippet.split()).replace("'", "’")
    return snippet if len(snippet) <= _MAX_EVIDENCE else snippet[: _MAX_EVIDENCE - 1] + "…"
