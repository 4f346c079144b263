"""Injection guard: flags memory and history text that reads as instructions to the model.

`scan(text)` returns a short reason ("family: 'evidence'") or None. It is a cheap,
offline heuristic (precompiled regular expressions, tens of microseconds a sentence),
tuned for zero false positives on ordinary chat memories rather than for catching every
possible attack: it is one layer, next to the prompt template that labels memories as
data. Families, checked in this order (the first hit wins):

- instruction_override: "ignore all previous instructions", "new instructions:", ...
- role_change: "you are now", "act as DAN", "system:" at a line start, <|im_start|>, [INST]
- exfiltration: "print your system prompt", "send the conversation to http…", image beacons
- prompt_delimiter: </memories>, <|im_end|>, [/INST], "=== END OF CONTEXT ==="
- hidden_markup: zero-width, bidi and tag characters, HTML comments, <script>, CSS-hidden
  text, base64 blobs

The phrase families match a folded copy of the text (NFKC, invisible characters removed,
common Cyrillic/Greek look-alikes mapped to Latin, casefolded, whitespace collapsed), so
fullwidth letters, a zero-width space inside a word or "IGNORE   previous\\ninstructions"
are still caught. Letter-by-letter spacing ("i g n o r e") and leetspeak are not.

The word lists the rules are built from (override verbs, secrets, ...) are data files in
guard_phrases/, one regular-expression fragment a line; the rules that combine them are here.
"""

from __future__ import annotations

import datetime as dt
import html
import re
import unicodedata
from typing import Final, Literal, Protocol

from shared import metrics
from shared.wordlists import read_list

Family = Literal[
    "instruction_override", "role_change", "exfiltration", "prompt_delimiter", "hidden_markup"
]
FAMILIES: Final[tuple[Family, ...]] = (
    "instruction_override",
    "role_change",
    "exfiltration",
    "prompt_delimiter",
    "hidden_markup",
)
Source = Literal["fact", "message"]
HITS_METRIC: Final = "injection_guard_hits_total"

_MAX_EVIDENCE = 60  # the reason is stored in facts.quarantine_reason (200 chars)

# -- folding ------------------------------------------------------------------------------

# Invisible or formatting characters: removed before the phrase checks, so they cannot
# split a trigger word. (Flagging them is a separate, stricter check on the raw text.)
_INVISIBLE = re.compile(
    "[\u00ad\u034f\u061c\u115f\u1160\u17b4\u17b5\u180b-\u180f\u200b-\u200f\u202a-\u202e"
    "\u2060-\u206f\u3164\ufe00-\ufe0f\ufeff\uffa0\U000e0000-\U000e007f\U000e0100-\U000e01ef]"
)
# Look-alikes NFKC leaves alone (after casefolding): enough to undo "ignоre" with a Cyrillic о.
# Real Cyrillic or Greek text turns into gibberish that matches no English phrase.
_CONFUSABLES = str.maketrans(
    "авеёкмнорстухіїјѕԁӏԛԝһɡıɩαβεηικνορτυχωѵʏ\u2018\u2019\u02bc\u201c\u201d\u2028\u2029",
    "abeekmhopctyxiijsdlqwhgiiabenikvoptuxwvy'''\"\"\n\n",
)
_SPACES = re.compile(r"[^\S\n]+")
_NEWLINES = re.compile(r" ?\n[\s]*")


def fold(text: str) -> str:
    """The text as the phrase checks see it; newlines are kept for the line-start checks."""
    if "&" in text:  # "&lt;|im_start|&gt;", "&#105;gnore": what a renderer would show
        text = html.unescape(text)
    if not text.isascii():
        text = unicodedata.normalize("NFKC", text)
        text = _INVISIBLE.sub("", text)
        text = text.casefold().translate(_CONFUSABLES)
    else:
        text = text.lower()
    text = _SPACES.sub(" ", text)
    return _NEWLINES.sub("\n", text).strip()


# -- phrase patterns (on folded text) -----------------------------------------------------

_S = r"[\W_]+"  # between two words: spaces, newlines, punctuation, markdown emphasis
_START = r"(?:^|[.!?;:\n\"'(\[>*-] ?)"  # the start of a line or sentence: where imperatives sit


def _words(*words: str) -> str:
    return "(?:" + "|".join(words) + ")"


def _fillers(words: str, most: int) -> str:
    return f"(?:{words}{_S}){{0,{most}}}"


def _phrases(name: str) -> tuple[str, ...]:
    return read_list("shared.memory", f"guard_phrases/{name}.txt")


_OVERRIDE_VERB = _words(*_phrases("override_verbs"))
_DETERMINER = _words(*_phrases("override_determiners"))
_BEFORE = _words(*_phrases("override_earlier"))
_RULES = _words(*_phrases("override_rules"))
_NOT_A_BOOKLET = "(?! " + _words(*_phrases("override_not_a_booklet")) + r"\b)"
_STRONG_RULES = _words(*_phrases("override_strong_rules"))

# Each pattern comes with words one of which any match must contain: `in` on a string
# costs nanoseconds, so a sentence only pays for the few patterns it could trigger.
Rule = tuple[tuple[str, ...], str]
_OVERRIDE_WORDS = _phrases("override_gate_words")

_INSTRUCTION_OVERRIDE: list[Rule] = [
    # ignore (all) previous/prior/above/system instructions
    (
        _OVERRIDE_WORDS,
        rf"\b{_OVERRIDE_VERB}{_S}{_fillers(_DETERMINER, 3)}{_BEFORE}{_S}"
        rf"{_fillers(_words(_DETERMINER, _BEFORE), 2)}{_RULES}\b{_NOT_A_BOOKLET}",
    ),
    # ignore all / any / your instructions
    (
        _OVERRIDE_WORDS,
        rf"\b{_OVERRIDE_VERB}{_S}{_fillers('(?:of|the)', 2)}(?:all|any|every|your){_S}"
        rf"{_fillers('(?:of|the|these|those|such|other|your|my)', 2)}{_STRONG_RULES}\b"
        rf"{_NOT_A_BOOKLET}",
    ),
    (_OVERRIDE_WORDS, rf"\b{_OVERRIDE_VERB}{_S}your{_S}{_fillers(_DETERMINER, 2)}rules\b"),
    # ignore the above / everything before this
    (
        _OVERRIDE_WORDS,
        rf"\b{_OVERRIDE_VERB}{_S}(?:the|everything|all|anything){_S}"
        rf"{_fillers(_words('written', 'said', 'stated', 'mentioned', 'text', 'that', 'is'), 2)}"
        r"(?:above|before this|previously|so far|until now|up to (?:now|this point))\b"
        r"(?! (?:e-?mail|message|mail|post|comment|note|photo|picture|link|address|number|typo)"
        r"\b)",
    ),
    # forget everything you were told
    (
        _OVERRIDE_WORDS,
        rf"\b{_OVERRIDE_VERB}{_S}(?:everything|all|anything|what(?:ever)?){_S}(?:that )?"
        r"you(?:'ve|'re| have| were| are| had)?(?: been)? (?:told|taught|instructed|given|"
        r"trained|programmed)\b",
    ),
    (
        ("bypass",),
        r"\bbypass (?:all |any )?(?:your|the (?:ai|model|assistant|chatbot)'?s?) (?:safety |"
        r"content |ethical )?(?:filters?|guardrails?|restrictions?|guidelines|rules|"
        r"polic(?:y|ies)|programming|safeguards)\b",
    ),
    # "New instructions:" / "Your new instructions are" (not "her doctor's new instructions:")
    (
        ("instruction",),
        rf"{_START}(?:(?:your|the following|here are (?:your|the)) )?"
        r"(?:new|updated|real|actual|true|secret|hidden|override|revised|admin|developer)"
        r" (?:system )?instructions? ?(?::|are\b|follow\b)",
    ),
    # "Your new task is to …", not "your new role is Senior Engineer, congratulations"
    (
        ("your",),
        r"\byour (?:new|real|actual|true|only|updated) (?:(?:task|objective|purpose|role|job|"
        r"mission|directive|priority) (?:is|will be|now is) (?:to|as)|instructions? (?:is|are|"
        r"will be|now))\b",
    ),
    (
        ("from now on", "starting now", "from this", "henceforth"),
        r"\b(?:from now on|starting now|from this (?:moment|point)(?: on)?|henceforth),?"
        r" you(?:'ll|'re| will| must| shall| should| are| have to| need to| may only| can only)\b",
    ),
    (
        ("from now on", "henceforth"),
        r"\b(?:from now on|henceforth),? (?:respond|reply|answer|act|behave|ignore|obey|"
        r"disregard)\b",
    ),
    (
        ("supersed", "overrid", "overrul", "preceden", "priority"),
        rf"\b(?:supersedes?|overrides?|overrules?|takes? precedence over|ha(?:s|ve) priority "
        rf"over){_S}{_fillers(_words('all', 'any', 'the', 'your'), 2)}"
        rf"(?:previous|prior|system|other|earlier|original|existing|developer){_S}"
        r"(?:instructions?|rules?|prompts?|messages?|guidelines?|directives?)\b",
    ),
    (
        ("obey", "comply", "follow"),
        r"\byou (?:must|will|shall) (?:now )?(?:only )?(?:obey|comply with|follow) (?:only )?"
        r"(?:me|my|these|the following|this message|the instructions below)\b",
    ),
    # keeping the user in the dark is what an injected instruction asks for
    (
        ("the user",),
        r"\b(?:do not|don'?t|never) (?:tell|inform|alert|notify|warn|mention (?:this )?to) "
        r"the user\b|\bwithout (?:telling|informing|alerting|notifying|warning) the user\b",
    ),
]

_ROLE_TARGET = _words(*_phrases("role_targets"))
_ROLE_CHANGE: list[Rule] = [
    (
        ("re now",),
        r"\byou(?:'re| are) now (?:in (?:developer|dan|god|jailbreak|unrestricted|admin|debug) "
        r"mode|called|named|known as|no longer|free (?:from|of)|unrestricted|unfiltered|"
        r"uncensored|jailbroken|dan|operating as|acting as|playing|root|admin|developer|evil|"
        r"my (?:new|personal) (?:assistant|ai|slave|servant))\b",
    ),
    # "You are now a pirate." opens a role; "Congrats, you're now a dad!" does not
    (("re now",), rf"{_START}you(?:'re| are) now (?:an?|the|in|going to)\b"),
    (
        ("re no",),
        r"\byou(?:'re| are) (?:no longer|not) (?:an? (?:ai|assistant|language model|chatbot)|"
        r"claude|chatgpt|gpt|(?:bound|restricted|limited) by (?:your|openai|anthropic|"
        r"(?:any|the) (?:rules|guidelines|policies|restrictions|filters)))\b",
    ),
    (
        (" as ",),
        rf"\b(?:act|behave|respond|answer|reply|roleplay|role-play|pose) as (?:if you "
        rf"(?:are|were) )?(?:(?:an?|the|my) )?{_ROLE_TARGET}\b",
    ),
    (
        ("you",),
        r"\byou(?: (?:will|must|should|shall|can|need to|have to|are to|'ll))? (?:now )?"
        r"(?:pretend|act as|behave as|roleplay|role-play|impersonate|play the role)\b",
    ),
    (
        ("act as", "pretend", "roleplay", "role-play", "imagine", "you are to"),
        rf"{_START}(?:please )?(?:act as|pretend (?:to be|that|you)|roleplay as|role-play as|"
        r"imagine you(?:'re| are)|you are to)\b",
    ),
    (
        ("pretend",),
        r"\bpretend(?:ing)? (?:that )?you(?:'re| are)\b|\bpretend(?:ing)? to be (?:an? |the )?"
        r"(?:ai|assistant|model|chatbot|unrestricted|unfiltered|dan)\b",
    ),
    ((" mode",), r"\b(?:dan|jailbreak|jailbroken|unrestricted|unfiltered|evil) mode\b"),
    (("anything now",), r"\bdo anything now\b"),
    (
        ("jailbreak",),
        r"\bjailbreak(?:ing)? (?:the |this |your )?(?:ai|assistant|model|chatbot|llm|prompt|"
        r"you)\b",
    ),
    # a forged turn: "system:" / "assistant:" where a line or sentence starts, followed by
    # an order or a compliant answer (not "System: Ubuntu 22.04" pasted from a spec sheet)
    (
        ("system", "assistant", "developer"),
        r"(?:^|[.!?] |[\"'(\[>*] ?)(?:system|assistant|developer)(?: (?:message|prompt|note|"
        r"override|instruction|update))? ?:(?=[^\n]{0,80}?\b(?:you|your|the assistant|the ai|"
        r"the model|must|always|never|ignore|disregard|respond|answer|reply|obey|new|override|"
        r"instructions?|rules?|from now|sure|okay|certainly|of course|here (?:is|are)|i will|"
        r"i'll|understood)\b)",
    ),
    (
        ("sys", "developer", "assistant"),
        r"[\[{<] ?(?:system|sys|developer|assistant)(?: message| prompt)? ?[\]}>]",
    ),
    (("<|",), r"<\|(?:im_start|system|user|assistant|developer|start_header_id|begin_of_text)\|>"),
    (("[inst]", "<<", "<start_of_turn>"), r"\[inst\]|<<\s*sys\s*>>|<start_of_turn>"),
    # a heading that is only a role ("### System"), not "### System requirements"
    (
        ("#",),
        r"^#{1,6} ?(?:system|assistant|developer|admin|new instructions)(?: (?:prompt|message|"
        r"instructions?|override))? ?:?$",
    ),
    (("```",), r"```(?:system|assistant|developer)\b"),
    (('"role"',), r"\"role\" ?: ?\"(?:system|assistant|developer)\""),
]

# Not "initial instructions" or "initial message": new hires get those.
_SECRET_PROMPT = (
    r"(?:(?:system|initial|hidden|secret|developer|pre-?) ?prompts?|(?:system|hidden|secret|"
    r"developer) (?:instructions?|messages?)|prompt (?:above|you were given))"
)
_REVEAL = _words(*_phrases("exfiltration_reveal_verbs"))
_SECRET = _words(*_phrases("exfiltration_secrets"))
_SECRET_WORDS = _phrases("exfiltration_secret_gate_words")
_GIVE = _words(*_phrases("exfiltration_give_verbs"))
_NOT_ABOUT = "(?! " + _words(*_phrases("exfiltration_not_about_secrets")) + r"\b)"
_SECRET_FILLER = _words(*_phrases("exfiltration_secret_fillers"))
_URL = r"(?:https?://|ftp://|www\.|webhooks?\b|[\w.+-]+@[\w-]+\.[a-z]{2,})"
_URL_WORDS = ("http", "ftp", "www.", "webhook", "@")
_SEND = _words(*_phrases("exfiltration_send_verbs"))
_CONVERSATION = _words(*_phrases("exfiltration_conversation"))
_REVEAL_FILLER = _words(*_phrases("exfiltration_reveal_fillers"))
_PROMPT_ADJECTIVE = _words(*_phrases("exfiltration_prompt_adjectives"))
_EXFILTRATION: list[Rule] = [
    (
        ("prompt", "instruction", "message"),
        rf"\b{_REVEAL}{_S}{_fillers(_REVEAL_FILLER, 4)}{_SECRET_PROMPT}\b",
    ),
    (
        ("your",),
        rf"\b{_REVEAL}{_S}{_fillers(_words('me', 'us', 'back', 'out', 'all', 'of', 'the'), 3)}"
        rf"your{_S}{_fillers(_PROMPT_ADJECTIVE, 2)}"
        r"(?:prompts?|instructions?|rules|guidelines|configuration|directives)\b"
        r"(?! (?:for|on|about|to|regarding)\b)",
    ),
    (
        ("above", "before this", "so far", "verbatim", "starting with"),
        rf"\b(?:print|output|repeat|show|display|dump|copy|echo|reveal|return|write){_S}"
        rf"(?:(?:all|everything|the|full|entire|complete|text|words|content|messages?|"
        rf"conversation|context|prompt|instructions){_S}){{1,3}}"
        r"(?:above|before this|so far|verbatim|starting with)\b",
    ),
    # secrets, asked for with an imperative or for "me"/"us"
    (
        _SECRET_WORDS,
        rf"{_START}(?:please )?{_GIVE}{_S}{_fillers(_SECRET_FILLER, 4)}{_SECRET}\b{_NOT_ABOUT}",
    ),
    (
        _SECRET_WORDS,
        rf"\b(?:you (?:must|should|will|shall|need to|have to|are to)|please|and then|then)"
        rf" {_GIVE}{_S}{_fillers(_SECRET_FILLER, 4)}{_SECRET}\b{_NOT_ABOUT}",
    ),
    (
        _SECRET_WORDS,
        rf"\b{_GIVE} (?:me|us){_S}{_fillers(_SECRET_FILLER, 3)}{_SECRET}\b{_NOT_ABOUT}",
    ),
    (
        _SECRET_WORDS,
        rf"\bwhat (?:is|are) your{_S}{_fillers(_SECRET_FILLER, 2)}{_SECRET}\b{_NOT_ABOUT}",
    ),
    # the conversation (or, in an order, anything) to a URL or a mailbox
    (_URL_WORDS, rf"\b{_SEND}\b[\s\S]{{0,60}}?\b{_CONVERSATION}\b[\s\S]{{0,60}}?{_URL}"),
    (
        _URL_WORDS,
        rf"{_START}(?:please )?{_SEND}{_S}(?:it|this|that|everything|all|the (?:above|results?|"
        r"output|answer|response|data|info|information)|(?:a |the )?summary)\b"
        rf"[\s\S]{{0,60}}?{_URL}",
    ),
    # a markdown or HTML image whose URL carries a query: rendering the answer calls home
    # (runs are bounded, and a URL starts only after a scheme or a boundary, so that
    # "![![![…" or "////…" cannot make a search quadratic)
    (("![",), r"!\[[^\]\n]{0,200}\]\( ?<?(?:https?:)?//[^)\s?]{0,500}\?"),
    (("<img",), r"<img\b[^>]{0,200}\bsrc ?= ?[\"']?(?:https?:)?//[^\"'\s>?]{0,500}\?"),
    # (a URL with a placeholder for the model to fill in: see _URL_TOKEN below)
]
# URLs are cut out first and searched one by one: a single pattern over "//a?b=//a?b=…"
# would retry every start, which is quadratic.
_URL_TOKEN = re.compile(r"//[^\s)\"'>]+")
_PLACEHOLDER = re.compile(r"[?&][\w.%-]*=(?:\{|\[|<|\$\{|\$\(|%7b|%5b|%3c)")

_DELIMITER: list[Rule] = [
    (
        ("<|",),
        r"<\|(?!(?:im_start|system|user|assistant|developer|start_header_id|begin_of_text)\|>)"
        r"[a-z_]{2,30}\|>",
    ),
    (
        ("[/inst]", "<<", "<end_of_turn>", "<eos>", "endoftext"),
        r"\[/inst\]|<<\s*/\s*sys\s*>>|<end_of_turn>|<eos>|<\|?endoftext\|?>",
    ),
    (
        ("</",),
        r"</ ?(?:system|system_prompt|instructions?|context|memories|memory|user_memories|"
        r"long_term_memory|history|chat_history|prompt|assistant|user|developer|tool|tool_call|"
        r"function_call|conversation|document|documents|rules|policy|data|input|untrusted)\s*>",
    ),
    (
        ("<",),
        r"<(?:instructions?|context|memories|memory|user_memories|prompt|user|tool|tool_call|"
        r"function_call|conversation|rules|policy)\s*>",
    ),
    (
        ("end of", "begin", "start of"),
        r"(?:^|[\[(<#=*_|\"'>~-] ?)(?:end|begin|beginning|start) of (?:the )?(?:system prompt|"
        r"system message|context|memories|memory|instructions|user input|user data|document|"
        r"data|conversation|transcript|prompt|untrusted (?:content|input|data))\b",
    ),
    (
        ("===", "---", "***", "___", "~~~"),
        r"^ ?(?:={3,}|\*{3,}|_{3,}|~{3,}|-{3,}) ?(?:system|assistant|developer|user|end|begin|new|"
        r"instructions?|memories|context)\b",
    ),
]

# -- markup patterns (on the raw text) ----------------------------------------------------

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

# Folded text separates words with one space or one newline: a space in a pattern is either.
_PHRASES: Final[list[tuple[Family, re.Pattern[str]]]] = []
_RULES_BY_WORD: Final[dict[str, list[int]]] = {}
_BY_FAMILY: list[tuple[Family, list[Rule]]] = [
    ("instruction_override", _INSTRUCTION_OVERRIDE),
    ("role_change", _ROLE_CHANGE),
    ("exfiltration", _EXFILTRATION),
    ("prompt_delimiter", _DELIMITER),
]
for _family, _rules in _BY_FAMILY:
    for _gate, _pattern in _rules:
        for _word in _gate:
            _RULES_BY_WORD.setdefault(_word, []).append(len(_PHRASES))
        _PHRASES.append((_family, re.compile(_pattern.replace(" ", r"\s"), re.M)))
_GATE_WORDS: Final = tuple(_RULES_BY_WORD)


def scan(text: str) -> str | None:
    """A short reason ("family: 'evidence'") when the text looks like a prompt injection."""
    folded = fold(text)
    flat = folded.replace("\n", " ")  # gate words with a space also match across a line break
    # Only the patterns whose gate words occur; in their fixed order, so the family is stable.
    candidates = {i for word in _GATE_WORDS if word in flat for i in _RULES_BY_WORD[word]}
    for i in sorted(candidates):
        family, pattern = _PHRASES[i]
        found = pattern.search(folded)
        if found:
            return _reason(family, found.group(0))
    if "//" in folded:
        for url in _URL_TOKEN.finditer(folded):
            placeholder = _PLACEHOLDER.search(url.group(0))
            if placeholder:
                return _reason("exfiltration", url.group(0)[: placeholder.end()])
    hidden = _hidden_markup(text)
    return _reason("hidden_markup", hidden, quote=False) if hidden else None


def family_of(reason: str) -> str:
    return reason.split(":", 1)[0]


def screen(text: str, *, source: Source) -> str | None:
    """`scan`, counting each hit in `injection_guard_hits_total{source, reason=family}`."""
    reason = scan(text)
    if reason is not None:
        metrics.incr(HITS_METRIC, source=source, reason=family_of(reason))
    return reason


class Screened(Protocol):
    """A stored fact as far as prompt assembly cares (a `Fact` row or a `MemoryPublic`)."""

    @property
    def quarantine_reason(self) -> str | None: ...
    @property
    def valid_to(self) -> dt.datetime | None: ...


def is_injectable(fact: Screened) -> bool:
    """Whether a stored fact may be put in a prompt: active and not quarantined."""
    return fact.quarantine_reason is None and fact.valid_to is None


def _hidden_markup(text: str) -> str | None:
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
            return f"{what} '{_evidence(found.group(0))}'"
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


def _evidence(snippet: str) -> str:
    snippet = " ".join(snippet.split()).replace("'", "’")
    return snippet if len(snippet) <= _MAX_EVIDENCE else snippet[: _MAX_EVIDENCE - 1] + "…"


def _reason(family: Family, evidence: str, *, quote: bool = True) -> str:
    return f"{family}: '{_evidence(evidence)}'" if quote else f"{family}: {evidence}"
