"""The injection guard's phrase rules: text folded as they read it, the patterns of the
instruction_override, role_change, exfiltration and prompt_delimiter families, and the first
one a text matches.

The word lists the rules are built from (override verbs, secrets, ...) are data files in
guard_phrases/, one regular-expression fragment a line; the rules that combine them are here.
"""

from __future__ import annotations

import html
import re
import unicodedata
from typing import Final, Literal

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


def phrase_hit(text: str) -> tuple[Family, str] | None:
    """The family of the first phrase rule the folded text matches, and what it matched."""
    folded = fold(text)
    flat = folded.replace("\n", " ")  # gate words with a space also match across a line break
    # Only the patterns whose gate words occur; in their fixed order, so the family is stable.
    candidates = {i for word in _GATE_WORDS if word in flat for i in _RULES_BY_WORD[word]}
    for i in sorted(candidates):
        family, pattern = _PHRASES[i]
        found = pattern.search(folded)
        if found:
            return family, found.group(0)
    if "//" in folded:
        for url in _URL_TOKEN.finditer(folded):
            placeholder = _PLACEHOLDER.search(url.group(0))
            if placeholder:
                return "exfiltration", url.group(0)[: placeholder.end()]
    return None
