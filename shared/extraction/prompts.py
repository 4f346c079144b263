"""The extraction prompt, and the hash that identifies it on every extraction run."""

from __future__ import annotations

import functools
import hashlib
import json
import re
from string import Template

from shared.extraction.base import KnownFact, TurnInput
from shared.extraction.schemas import core_words, strict_json_schema

# Bump when the prompt or the output contract changes meaningfully: stored facts carry it,
# and replay jobs use it to find turns extracted by an older prompt.
# llm-6: the sentence first, then its type and fields. llm-8: no "an empty list is a normal
# answer" (the 1.5B model answered [] to 20 of 87 dev turns with it, to 2 without). llm-9: a
# reply whose every item was dropped is answered with why, and the model asked again.
# llm-10: the known facts a reply touched are asked for their value now (ADR 0032). llm-11:
# a known liking, habit or hobby the turn touched is asked how the person feels about it now.
# llm-12: a known active goal the turn touched is asked what the person's goal is now; a
# changed value's sentence says the value it replaced. llm-13: a known fact the person's
# message names that no other question covers, or whose value question changed nothing, is
# asked whether it is still true; the person's named facts are asked about first. llm-14:
# the known fact nearest the turn by meaning counts as named; four questions a turn, not two.
# llm-15: a fact whose value the person's message says only in a question or an "if" is
# dropped, and such a message changes no known fact (ADR 0033).
EXTRACTOR_VERSION = "llm-15"

# Static on purpose: the per-turn details (date, names, text) go in the user message, so
# providers that cache prompt prefixes can reuse this whole block across turns.
# `$max_facts` is a string.Template field; the JSON examples keep their braces as they are.
EXTRACTION_SYSTEM_PROMPT = """\
You extract long-term memories about one person from the latest turn of a chat.

The request names the person, gives the session date with its weekday, and may show, as \
context, the conversation before the turn and what is already known about the person. Then \
it shows the turn: what the person said and what the assistant replied. Extract at most \
$max_facts facts about that person, stated in the turn, that would still be worth knowing in \
a conversation weeks from now.

Fact types (the "type" field), each with its own fields:
- identity: a stable attribute of who the person is (attribute, value).
  Example: {"content": "Ana lives in Berlin.", "type": "identity", "attribute": "location", \
"value": "Berlin"}
- preference: something the person likes, dislikes, prefers or avoids \
(topic, sentiment, value).
  Example: {"content": "Ana dislikes coffee.", "type": "preference", "topic": "coffee", \
"sentiment": "dislikes", "value": "coffee"}
- fact: any other lasting fact about the person's life, work or circumstances; set \
attribute and value only when it has one current value a later fact could replace, \
otherwise null.
  Example: {"content": "Ana drives a 2019 Honda Civic.", "type": "fact", "attribute": "car", \
"value": "2019 Honda Civic"}
- decision: a choice the person has made, with the reason when stated \
(topic, choice, reason).
  Example: {"content": "Ana chose PostgreSQL for her project because \
her team knows it.", "type": "decision", "topic": "database", "choice": "PostgreSQL", \
"reason": "her team knows it"}
- goal: something the person wants to achieve (goal, target_date, status: active, \
achieved or abandoned).
  Example: {"content": "Ana wants to run a marathon by 13 October 2024.", "type": "goal", \
"goal": "run a marathon", "target_date": "2024-10-13", "status": "active"}
- relationship: a person in their life and how they are related (person, relation).
  Example: {"content": "Ana's brother is Marco.", "type": "relationship", "person": "Marco", \
"relation": "brother"}

Rules:
1. content is one atomic sentence in the third person that names the person: \
"Ana lives in Berlin." Never write "I", "the user", or a bare "he"/"she". One fact per \
sentence: "I live in Berlin and work at Zalando" is two facts.
2. Facts come only from the turn. The earlier conversation and the known facts are there \
to understand it: when the person answers a question ("the first one!!", "yes", "nah the \
other way round"), write the fact in full with what the question offered ("Priya took the \
job at Arup."); when they say something ended ("I quit", "we broke up"), name what ended \
from the known facts. Never repeat a known fact the turn does not change. The other person \
in a relationship goes in "person".
3. Dates: resolve every relative date ("yesterday", "next Friday", "last month", "in two \
weeks") against the session date to an absolute date, and write the absolute date in \
content ("on 3 May 2024", "in April 2024"), never the relative words. Set valid_from \
(YYYY-MM-DD) to the date the fact became true when the turn states or implies it (for a \
month, its first day); otherwise null. target_date is YYYY-MM-DD or null.
4. Only the person's own words are a source. The assistant's reply is context for \
understanding them; never take a fact from it unless the person confirms it \
("yes, exactly").
5. Skip small talk, greetings, questions the person asks, hypotheticals ("if I lived in \
Paris..."), plans they are only weighing, jokes, and passing states that will not matter \
later ("I'm tired today"). Never turn a question into a fact, and never guess what was not \
said (an age from a running distance, a city from a trip). Facts about other people belong \
only in a relationship to the person.
6. confidence (0 to 1) is how sure you are that the person stated this as true of \
themselves: 0.9 or more when said outright, about 0.7 when clearly implied, below 0.5 \
when guessing (better left out).
7. attribute and topic are short snake_case nouns, named the same way every time, so a \
later fact about the same thing replaces the earlier one: reuse the attribute a known fact \
has for the same thing. For identity use one of these when it fits: name, age, birthday, \
location (where they live), hometown, occupation (what they do), employer (where they \
work), nationality, language, pronouns, relationship_status.
   For fact use these when they fit: pet (one fact per pet, value: its name), diet, \
allergy, condition, car. Attributes a person holds several values of at once (language, \
pet, hobby, child, sport, instrument, allergy, condition) never replace each other.
8. tags: up to 3 short lowercase words for the area of life (e.g. "work", "health", \
"travel").
9. Endings: when the person says something stopped being true (quit or left a job, moved \
away, broke up or divorced, a pet died or was given away, graduated, no longer likes or \
does something, "I don't have X anymore", "I used to ..."), write it as a fact with \
"ended": true, of the type and with the attribute (or topic) and value the fact it ends \
would have, its content saying what ended, dated when stated:
  {"content": "Lena quit Siemens in March 2024.", "type": "identity", "attribute": "employer", \
"value": "Siemens", "ended": true}
  For a relationship the value is the person's name, or "*" with the relation when they \
are not named ("my husband and I split up"); "*" as the value when every value ended \
("I don't have any pets anymore"). Every other fact has "ended": false. A new value needs \
no ending for the old one: "I moved to Munich" replaces Berlin by itself.

Answer with JSON only: {"facts": [...]}, every field of the fact's type present, null \
where unknown.
"""

EXTRACTION_USER_TEMPLATE = """\
Session date: $date ($weekday)
Person: $user
$context_blocks
Extract facts about $user from this turn only.

<user name="$user">
$user_message
</user>

$assistant_block"""

# Context only: marked so the model takes no fact from it (rule 2).
_EARLIER_BLOCK = """\
<earlier_conversation note="context only, not a source of facts">
$lines
</earlier_conversation>
"""
_KNOWN_BLOCK = """\
<known_facts about="$user" note="already remembered; reuse their attribute names">
$lines
</known_facts>
"""

_ASSISTANT_BLOCK = """\
<assistant name="$assistant">
$assistant_message
</assistant>
"""
_NO_ASSISTANT = "(no assistant reply in this turn)\n"

# Sent in the same conversation when every item of the model's reply was dropped (ADR 0031):
# each item with why, then the question again. Saying that no fact is an answer here is
# deliberate: these items were not the person's statements, and [] is then the honest reply.
ASK_AGAIN_TEMPLATE = """\
None of the facts you wrote can be kept:
$lines
Read what $user said in $where again. Write only what $user states there about their \
own life, each as one sentence in the third person that names $user, in the same JSON. If \
$user states nothing about themself there, answer {"facts": []}."""
ASK_AGAIN_SHOWN = 5  # dropped items named in the question: the pattern, not all of them

# Sent in the same conversation for each known fact the reply touched (ADR 0032): the known
# value and the person's words side by side, and what the value is now. The 1.5B model
# judged "is it still true?" the same way for every turn; asked for the value, it named it.
VALUE_NOW_TEMPLATE = """\
Known before this turn: $user's $what was "$value".
In this turn $user said: "$message"
What is $user's $what now? Answer with JSON only: {"now": "..."}"""

# The same follow-up for a known fact with no one value to ask for: a liking, a habit, a
# hobby (ADR 0032, llm-11). Asked how the person feels about it now, the 1.5B model wrote
# the ending itself ("Maya no longer likes flat whites.", "dislikes") where "is it still
# true?" and "what stopped?" got the same answer for every turn.
FEELING_NOW_TEMPLATE = """\
Known before this turn: $known
In this turn $user said: "$message"
How does $user feel about $thing now? Answer with JSON only: {"now": "..."}"""

# The same follow-up for a known active goal (llm-12). Asked what the goal is now, the 1.5B
# model wrote "Grace is not running the Edinburgh marathon in May anymore."; asked its
# status or how the person feels, it answered "achieved" or "disappointed" whatever was said.
GOAL_NOW_TEMPLATE = """\
Known before this turn: $user's goal was "$goal".
In this turn $user said: "$message"
What is $user's goal now? Answer with JSON only: {"now": "..."}"""

# The same follow-up for a known fact the person's own message names that no question above
# covers (a goal, an allergy, a decision, a fact of several values), or whose value question
# changed nothing (llm-13). Asked this way after its own extraction, the 1.5B model answered
# "no" for 6 of 11 turns that end or correct the fact and "yes" for all 10 that leave it;
# the answer is decoded as one of the two words.
STILL_TRUE_TEMPLATE = """\
Known before this turn: "$known"
In this turn $user said: "$message"
Is the known fact still true? Answer with JSON only: {"now": "yes"} or {"now": "no"}"""


def build_extraction_messages(turn: TurnInput, *, max_facts: int = 10) -> tuple[str, str]:
    """The (system, user) messages for one extraction call: the static system prompt first,
    so providers (and llama.cpp's prefix reuse) cache it, then this turn's details."""
    user = Template(EXTRACTION_USER_TEMPLATE).substitute(
        date=turn.session_date.date().isoformat(),
        weekday=turn.session_date.strftime("%A"),
        user=turn.user_speaker,
        context_blocks=context_blocks(turn),
        user_message=turn.user_message.strip(),
        assistant_block=assistant_block(turn),
    )
    return system_prompt(max_facts), user


def ask_again_message(rejected: dict[int, list[tuple[str, str]]], user: str) -> str:
    """The follow-up to a reply whose every item was dropped: what was wrong with each.
    `rejected` is by turn number; 0 for the turn of a one-turn prompt."""
    lines = "\n".join(
        f"- {f'turn {n}, ' if n else ''}{repr(content) if content else 'an item'}: {reason}"
        for n, items in rejected.items()
        for content, reason in items[:ASK_AGAIN_SHOWN]
    )
    where = " and ".join(f"turn {n}" for n in rejected) if 0 not in rejected else "this turn"
    return Template(ASK_AGAIN_TEMPLATE).substitute(lines=lines, user=user, where=where)


def system_prompt(max_facts: int) -> str:
    return Template(EXTRACTION_SYSTEM_PROMPT).substitute(max_facts=max_facts)


def context_blocks(turn: TurnInput) -> str:
    """The conversation before the turn and the known facts, each marked as context."""
    blocks = ""
    if turn.earlier_messages:
        lines = "\n".join(f"{who}: {text.strip()}" for who, text in turn.earlier_messages)
        blocks += Template(_EARLIER_BLOCK).substitute(lines=lines)
    if turn.known_facts:
        lines = "\n".join(_known_line(fact) for fact in turn.known_facts)
        blocks += Template(_KNOWN_BLOCK).substitute(user=turn.user_speaker, lines=lines)
    return blocks


def assistant_block(turn: TurnInput) -> str:
    if turn.assistant_message and turn.assistant_message.strip():
        return Template(_ASSISTANT_BLOCK).substitute(
            assistant=turn.assistant_speaker, assistant_message=turn.assistant_message.strip()
        )
    return _NO_ASSISTANT


def _known_line(fact: KnownFact) -> str:
    named = f" ({fact.attribute}: {fact.value})" if fact.attribute and fact.value else ""
    return f"- {fact.type}{named}: {fact.content}"


def prompt_hash() -> str:
    """Identifies the extraction prompt: changes whenever its templates or schema change."""
    digest = hashlib.sha256()
    templates = (EXTRACTION_SYSTEM_PROMPT, EXTRACTION_USER_TEMPLATE, _ASSISTANT_BLOCK)
    follow_ups = (
        ASK_AGAIN_TEMPLATE,
        VALUE_NOW_TEMPLATE,
        FEELING_NOW_TEMPLATE,
        GOAL_NOW_TEMPLATE,
        STILL_TRUE_TEMPLATE,
    )
    for part in (*templates, _EARLIER_BLOCK, _KNOWN_BLOCK, *follow_ups):
        digest.update(part.encode())
        digest.update(b"\0")
    digest.update(json.dumps(strict_json_schema(), sort_keys=True).encode())
    return digest.hexdigest()[:16]


@functools.cache
def example_values() -> frozenset[str]:
    """The names in the prompt's examples (values written with a capital or a digit:
    "Berlin", "2019 Honda Civic"), in `core_words` form: a fact that repeats one the
    conversation never says was copied from the prompt, not said by the person
    (shared.extraction.checks). Not common words ("coffee": a flat white is coffee too),
    and not the examples' people ("Ana" is also a user's name)."""
    system = system_prompt(1)
    values: set[str] = set()
    # Every example object has a "type", wherever the schema's key order puts it.
    for example in re.findall(r'\{[^{}]*"type": [^{}]*\}', system):
        item = json.loads(example)
        values.update(str(item.get(k) or "") for k in ("value", "person", "choice"))
    return frozenset(core_words(v) for v in values if v[:1].isupper() or v[:1].isdigit())
