"""Checks on the LLM's facts that need the turn: an item a schema accepts can still not be
the person's own statement.

Small models (Qwen2.5-1.5B on casual chat, issue 25) write the message back in the first
person ("I'm Dan's brother."), write down the assistant's words ("Two years of you stealing
my hoodies…"), and copy the prompt's examples into facts about someone else
("Grace drives a 2019 Honda Civic."), and restate the earlier conversation shown as
context. A statement of the person's in the first person is put in the third person ("Tom
is Dan's brother.") and counted as repaired; the assistant's words, questions and copied
examples are dropped with their reason, counted like any invalid item, so a reply of
nothing else ends `dropped`, never a quiet `done`. A reply that only restates the earlier
conversation said nothing new (`Rejection.nothing_new`): it ends `done` with 0 facts. An
ending written as the very sentence of a known fact is said as an ending ("It is no longer
true that …").
"""

from __future__ import annotations

import re
from collections.abc import Callable

from shared.extraction.base import Rejection, TurnInput, is_generic_speaker
from shared.extraction.prompts import example_values
from shared.extraction.schemas import TypedFact, core_words

# "I", "I'm", "my", "me", … as words ("My" only first: "My Chemical Romance" is a band): a
# fact is one sentence in the third person.
_FIRST_PERSON = re.compile(
    r"(?<![\w'’])(?:I|I['’](?:m|ve|d|ll)|my|me|mine|myself)(?![\w'’])|^(?:My|Myself)\b"
)
# The assistant speaking: "you"/"your" in a fact is its words, not the person's statement.
_SECOND_PERSON = re.compile(r"(?<![\w'’])(?:you|your|yours|yourself)(?![\w'’])", re.I)
# The person as subject, and the word after it when it is the verb (adverbs skipped).
_SUBJECT_I = re.compile(
    r"(?<![\w'’])I(?:['’](m|ve|d|ll))?((?:\s+(?:just|really|also|still|never|always|now|"
    r"finally|actually|usually|only|even|already|recently|\w+ly))*)(?:\s+([a-z]+(?:n['’]t)?))?"
    r"(?![\w'’])"
)
_CONTRACTED = {"m": "is", "ve": "has", "d": "would", "ll": "will"}
# Verbs whose form after "I" is already right after a name ("Tom can", "Tom went").
_UNCHANGED = re.compile(
    r"^(?:can|could|will|would|shall|should|may|might|must|had|did|went|got|met|left|"
    r"bought|began|took|made|saw|came|became|found|grew|knew|ran|sold|thought|told|won|"
    r"wrote|broke|drove|fell|felt|gave|kept|lost|paid|quit|said|sent|spent|split|taught|"
    r"can['’]t|couldn['’]t|won['’]t|wouldn['’]t|shouldn['’]t|didn['’]t|hadn['’]t|[a-z]+ed)$"
)
_AGREEMENT = {
    "am": "is",
    "was": "was",
    "were": "was",
    "have": "has",
    "do": "does",
    "go": "goes",
    "don't": "doesn't",
    "don’t": "doesn’t",
    "haven't": "hasn't",
    "haven’t": "hasn’t",
    "aren't": "isn't",
    "aren’t": "isn’t",
    "weren't": "wasn't",
    "weren’t": "wasn’t",
}
# Lowercase, or first in the sentence, as in _FIRST_PERSON ("My Chemical Romance" stays).
_OBJECT = re.compile(r"(?<![\w'’])(?:me|myself)(?![\w'’])|^(?:Me|Myself)\b")
_POSSESSIVE = re.compile(r"(?<![\w'’])(?:my|mine)(?![\w'’])|^(?:My|Mine)\b")
# A name fact's content that only says the name, as the model wrote it with no name known:
# "User is Tom.", "User's name is Tom.", "Tom is the user.".
_NAME_STATEMENT = re.compile(
    r"^(?:the )?user(?:['’]s name)? is ([^\W\d_]+)\W*$|^([^\W\d_]+) is (?:the )?user\W*$", re.I
)
_NOT_NAMES = frozenset({"user", "the", "is", "name", "called", "a", "an"})
# Words two texts share without being about one thing: function words, the verbs a fact's
# sentence is built on, and the words of an ending itself.
_PLAIN_TEXT = """\
a an the and or but of in on at to for from with by as into about over after before
is are was were be been being am has have had do does did not no never now still just
also very really more most some any all every this that these those it its it's they
them their there here he she his her him you your yours our ours who which what when where why how
works work working worked lives live living lived likes like liked loves love loved
enjoys enjoy prefers prefer wants want goes go went gets got getting make makes made
since until anymore longer quit quits left leave leaves ended ends stopped stop stops
gave give given moved move moves sold lost split broke up started starts new old
job person one two years year months month week weeks day days time true named called"""
_PLAIN_WORDS = frozenset(_PLAIN_TEXT.split())
# Typed chat shortens and misspells ("startin", "bakeing"): a word of a fact is the
# person's when one of theirs begins with the same letters.
_SAME_START = 4
# Detail fields that hold what a fact is about (not its kind: attribute names, sentiments).
_VALUE_FIELDS = ("value", "person", "choice")
# A sentence of the person's that supposes or asks rather than states, as chat types it
# (question marks left out): "if i got a dog …", "what if …", "how much do electricians
# make", "can i still drink beer w type 1 or nah", "would a cat be easier". Not a bare
# verb ("did a 5k today", "can finally drive"): chat drops the "I" of a statement.
_LEAD = r"(?:(?:hmm+|ok|okay|so|but|and|also|like|idk|honestly|tbh|wait|lol)\W+)*"
_SUPPOSING = re.compile(_LEAD + r"(?:what )?if\b")
_ASKING = re.compile(
    _LEAD + r"(?:(?:how|what|which|where|who|when|why) (?:much|many|long|often|is|are|was|"
    r"were|do|does|did|can|could|should|would|will|to)|(?:what|how|where|who) ?s|(?:is|are|"
    r"was|were|could|should|would|will|shall) (?:i|it|there|we|you|they|he|she|that|this|a|"
    r"an|the|my)|(?:do|does|did|can|have|has) (?:i|it|there|we|you|they|he|she))\b"
)
_OR_ASKING = re.compile(r"\bor (?:is|are|am|was|do|does|did|can|should|would|will|nah|no)\b")


def first_person(content: str) -> bool:
    return _FIRST_PERSON.search(content) is not None


def third_person(content: str, name: str) -> str | None:
    """The person's first-person statement about themselves with their name in its place
    ("I've had Biscuit since 2019." -> "Tom has had Biscuit since 2019."), or None when it
    speaks to someone ("you") and so is not their statement about themselves."""
    if _SECOND_PERSON.search(content):
        return None

    def subject(match: re.Match[str]) -> str:
        contraction, adverbs, verb = match.group(1), match.group(2) or "", match.group(3)
        if contraction:
            head = f"{name} {_CONTRACTED[contraction]}"
            return f"{head}{adverbs} {verb}" if verb else head + adverbs
        return f"{name}{adverbs} {_agree(verb)}" if verb else name + adverbs

    text = _SUBJECT_I.sub(subject, content)
    text = _POSSESSIVE.sub(f"{name}'s", text)
    return _OBJECT.sub(name, text)


def _agree(verb: str) -> str:
    """A verb after "I" in the form it takes after a name."""
    if verb in _AGREEMENT:
        return _AGREEMENT[verb]
    if _UNCHANGED.match(verb):
        return verb
    if verb.endswith(("s", "sh", "ch", "x", "z", "o")):
        return verb + "es"
    if len(verb) > 2 and verb.endswith("y") and verb[-2] not in "aeiou":
        return verb[:-1] + "ies"
    return verb + "s"


def review(turn: TurnInput) -> Callable[[TypedFact], TypedFact | Rejection]:
    """The check for this turn's items: the item to keep (in the third person when the
    model wrote the person's words back; a name fact naming the name the person said), or
    why it is not the person's own statement in this turn. The conversation's words are
    read once per turn, not once per item."""
    said = padded_words(_conversation_text(turn))
    # What this turn says, and the question it may answer (the assistant's last message).
    now = padded_words(" ".join([turn.user_message, turn.assistant_message or "", _question(turn)]))
    before = padded_words(" ".join(text for _, text in turn.earlier_messages))
    their_words = set(core_words(turn.user_message).split())
    assistant_words = set(core_words(turn.assistant_message or "").split())
    known_beliefs = {core_words(known.content) for known in turn.known_facts if not known.ended}
    reply_words = substance_words(turn.assistant_message or "")
    persons_words = _persons_words(turn)
    name_words = substance_words(turn.user_speaker)
    asked, stated = asked_and_stated(turn.user_message)

    def check(fact: TypedFact) -> TypedFact | Rejection:
        if fact.content.rstrip().endswith("?"):
            return Rejection("a question, not a fact")
        if (example := _copied_example(fact, said)) is not None:
            return Rejection(
                f"copied from the prompt's examples ({example!r} is not in the conversation)"
            )
        if (earlier := _from_earlier_messages(fact, now, before, name_words)) is not None:
            reason = f"from the earlier conversation ({earlier!r} is not in this turn)"
            return Rejection(reason, nothing_new=True)
        if (wondered := _only_asked(fact, asked, stated, name_words)) is not None:
            # A question or an "if" of theirs states nothing: a reply of nothing else is a
            # "done" with 0 facts, not a failed reading to retry.
            reason = f"from the person's question or 'if' ({wondered!r} is not stated)"
            return Rejection(reason, nothing_new=True)
        if first_person(fact.content):
            words = core_words(fact.content).split()
            if sum(w in assistant_words for w in words) > sum(w in their_words for w in words):
                return Rejection("the assistant's words, not a fact about them")
            content = third_person(fact.content, turn.user_speaker)
            if content is None:
                return Rejection(
                    "the assistant's words (content speaks to 'you'), not a fact about them"
                )
            fact = fact.model_copy(update={"content": content})
        substance = substance_words(fact.content) - name_words
        if substance & reply_words and not any(_said(w, persons_words) for w in substance):
            return Rejection("the assistant's reply to the turn, not the person's words")
        if fact.ended and core_words(fact.content) in known_beliefs:
            # The known fact's own sentence marked ended: stored as it is, it would read as
            # the belief it ends (and, one sentence, be merged into it instead of ending it).
            fact = fact.model_copy(update={"content": no_longer(fact.content)})
        return _named(fact, turn.user_message) or fact

    return check


def no_longer(content: str) -> str:
    """An ending written as the sentence it ends, said as an ending: "Jade works at
    Tesco." -> "It is no longer true that Jade works at Tesco." """
    return f"It is no longer true that {content.strip().rstrip('.!')}."


def _question(turn: TurnInput) -> str:
    """The assistant's message just before this turn: what "the first one!!" answers."""
    for who, text in reversed(turn.earlier_messages):
        if who != turn.user_speaker:
            return text
    return ""


def _persons_words(turn: TurnInput) -> set[str]:
    """What the person has said or been asked: their messages, the question this turn may
    answer, and the facts already known about them (all but the assistant's reply)."""
    question = _question(turn)
    texts = [turn.user_message, question]
    texts += [text for who, text in turn.earlier_messages if who == turn.user_speaker]
    texts += [known.content for known in turn.known_facts]
    return substance_words(*texts)


def _said(word: str, persons_words: set[str]) -> bool:
    if word in persons_words:
        return True
    start = word[:_SAME_START]
    return len(start) == _SAME_START and any(w.startswith(start) for w in persons_words)


def _from_earlier_messages(
    fact: TypedFact, now: str, before: str, name_words: set[str]
) -> str | None:
    """The value of a fact the model took from the earlier conversation (shown as context)
    rather than from this turn: said before, and not in this turn or the question it answers;
    or, for a fact without a value, its sentence's words of substance, half or more of them
    said before and none now (a small model restates the earlier turns, and so brings back
    a belief a later turn ended). An ending may name what it ends from there ("I quit" →
    the job said before)."""
    if fact.ended:
        return None
    for key in _VALUE_FIELDS:
        value = core_words(str(fact.details.get(key) or ""))
        if value and f" {value} " in before and f" {value} " not in now:
            return value
    words = substance_words(fact.content) - name_words
    said_before = sum(f" {w} " in before for w in words)
    if said_before * 2 >= len(words) > 0 and not any(f" {w} " in now for w in words):
        return " ".join(dict.fromkeys(w for w in core_words(fact.content).split() if w in words))
    return None


def asked_and_stated(message: str) -> tuple[str, str]:
    """The person's message as two texts (`padded_words`): its sentences that ask or
    suppose, and the rest. A sentence ending in "?" asks in its last clause ("just moved
    to leeds, any tips?" states Leeds) unless it opens as a question or an "if"."""
    asked, stated = [], []
    for match in re.finditer(r"[^.!?\n]+[.!?\n]*", message.casefold()):
        sentence = match.group().strip()
        head = core_words(sentence)
        if _SUPPOSING.match(head) or _ASKING.match(head) or _OR_ASKING.search(head):
            asked.append(sentence)
        elif "?" in sentence:
            *before, last = re.split(r"[,;:]", sentence)
            asked.append(last)
            stated.extend(before)
        else:
            stated.append(sentence)
    return padded_words(" ".join(asked)), padded_words(" ".join(stated))


def _only_asked(fact: TypedFact, asked: str, stated: str, name_words: set[str]) -> str | None:
    """What a fact is about (its value, else its sentence's words of substance) when the
    person's message says it only in a question or an "if" (`asked_and_stated`): "if i
    got a dog would a cockapoo be ok" states no cockapoo. None otherwise."""
    for key in _VALUE_FIELDS:
        value = core_words(str(fact.details.get(key) or ""))
        if value:
            return value if f" {value} " in asked and f" {value} " not in stated else None
    words = substance_words(fact.content) - name_words
    said = [w for w in words if f" {w} " in asked or f" {w} " in stated]
    if said and not any(f" {w} " in stated for w in said):
        return " ".join(dict.fromkeys(w for w in core_words(fact.content).split() if w in said))
    return None


def _named(fact: TypedFact, message: str) -> TypedFact | None:
    """A name fact written as "{person}'s name is {name}." with the name the person said:
    the 1.5B model wrote "User is Tom." or "Tom is the user.", and with no name known yet
    set the value to "User" — the name is then the one its content states, when the
    message says it ("im tom btw" → "Tom"). None when there is nothing to fix."""
    if fact.type != "identity" or fact.attribute != "name":
        return None
    said = padded_words(message)
    name = fact.value
    if f" {core_words(name)} " not in said:
        # Only while no name is known, and only from a content that is a name statement.
        stated = _NAME_STATEMENT.match(fact.content) if is_generic_speaker(fact.subject) else None
        name = next((word for word in stated.groups() if word), "") if stated else ""
        if f" {name.casefold()} " not in said or name.casefold() in _NOT_NAMES:
            return None
        name = name[:1].upper() + name[1:]
    elif re.search(r"\b(?:name|called)\b", fact.content, re.I):
        return None
    return fact.model_copy(update={"value": name, "content": f"{fact.subject}'s name is {name}."})


def _copied_example(fact: TypedFact, said: str) -> str | None:
    """The example value this fact repeats when the conversation (`said`) never says it."""
    words = padded_words(fact.content)
    values = {core_words(str(fact.details.get(k) or "")) for k in _VALUE_FIELDS}
    for example in example_values():
        if (example in values or f" {example} " in words) and f" {example} " not in said:
            return example
    return None


def substance_words(*texts: str) -> set[str]:
    """The words of substance in the texts: not function words, not the verbs a fact's
    sentence is built on, not one or two letters."""
    words = {w for text in texts for w in core_words(text).split()}
    return {w for w in words if len(w) > 2 and w not in _PLAIN_WORDS}


def padded_words(text: str) -> str:
    """`core_words` with a space each side: " x " in it is x as whole words."""
    return f" {core_words(text)} "


def _conversation_text(turn: TurnInput) -> str:
    parts = [turn.user_speaker, turn.user_message, turn.assistant_message or ""]
    parts += [text for _, text in turn.earlier_messages]
    parts += [fact.content for fact in turn.known_facts]
    return " ".join(parts)
