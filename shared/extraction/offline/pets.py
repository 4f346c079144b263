"""Offline extractor builders for pets: one slotted fact per pet, named when its name is said.

"pet" is a multi-valued attribute in the schema, so each pet holds its own slot
(`fact/<subject>/pet:<name>`, or `pet:<kind>` while it has no name): "I have two rabbits,
Bonnie and Clyde, and a parrot named Pistachio" is three facts, and an ending said of one
pet ("Pistachio had to be rehomed") can end that pet alone.
"""

from __future__ import annotations

import datetime as dt
import re
from dataclasses import replace

from shared.extraction.offline.dates import find_date
from shared.extraction.offline.items import Item
from shared.extraction.offline.lexicon import (
    NAME,
    NOT_NAMES,
    Ctx,
    Match,
    article,
    past_date,
    words,
)

# Kinds of pets and the breeds people name instead ("a golden retriever called Biscuit").
_KINDS = (
    "dog cat puppy kitten parrot rabbit bunny hamster guinea pig horse pony turtle tortoise "
    "snake lizard gecko iguana bird budgie canary cockatiel goldfish fish ferret chinchilla rat "
    "mouse hedgehog chicken hen duck goat axolotl retriever labrador lab poodle terrier beagle "
    "greyhound whippet lurcher spaniel collie dachshund husky pug bulldog shepherd corgi "
    "chihuahua schnauzer doodle labradoodle cockapoo rottweiler dalmatian boxer mutt tabby"
)
_KIND_WORDS = sorted(_KINDS.replace("guinea pig", "guinea_pig").split(), key=len, reverse=True)
PET_KIND = "(?:" + "|".join(k.replace("_", " ") for k in _KIND_WORDS) + ")"
_PLURAL = {"puppies": "puppy", "bunnies": "bunny", "mice": "mouse", "ponies": "pony"}
_COUNT = r"(?:a|an|one|two|three|four|five|six|\d+|another|some|our|my)"
# Words before the kind that say which one of the speaker's pets, not what it is.
_ORDINAL = words("second third new another other little old baby rescue")
_NAMES = rf"{NAME}(?:(?:,\s*|,?\s+and\s+|\s*&\s*){NAME})*"
# Where a pet's names start: "named Pepper", ", Bonnie and Clyde", ", she's called Pixel".
_NAMED = (
    r"(?:\s*,?\s+(?:named|called)\s+|\s*,\s+(?=(?-i:[A-Z]))"
    r"|\s*,?\s+(?:and\s+)?(?:she|he|it|they)(?:'s|\s+is|\s+are)\s+(?:called|named)\s+"
    r"|\s*,?\s+(?:and\s+)?(?:his|her|its|their)\s+names?\s+(?:is|are)\s+)"
)
_GROUP = re.compile(
    rf"\b(?P<count>{_COUNT})\s+(?P<desc>(?:[a-z-]+\s+){{0,2}}?)"
    rf"(?P<kind>{PET_KIND})(?:s|es)?\b(?:{_NAMED}(?P<names>{_NAMES}))?",
    re.I,
)
_NUMBERS = words("two three four five six")
_VERBS = {"have": "has", "have got": "has", "own": "owns"}


def _singular(kind: str) -> str:
    kind = kind.lower()
    if kind in _PLURAL:
        return _PLURAL[kind]
    if kind.rstrip("s").removesuffix("e") in _KIND_WORDS:
        return kind.rstrip("s").removesuffix("e")
    return kind.rstrip("s") if kind.rstrip("s") in _KIND_WORDS else kind


def _names(text: str | None) -> list[str]:
    said = re.split(r",\s*(?:and\s+)?|\s+and\s+|\s*&\s*", text or "")
    return [n for n in said if n and n.split()[0].lower() not in NOT_NAMES]


def pets_in(text: str, verb: str, ctx: Ctx) -> tuple[list[Item], str]:
    """The pet facts in an object of "have" ("two rabbits, Bonnie and Clyde, and a parrot
    named Pistachio"), and the text left once the pets are taken out."""
    head, comma, tail = text.partition(",")  # "a cat last month, she's called Pixel"
    head, phrase = find_date(head)
    if phrase is not None and ctx.date is None:
        ctx, text = replace(ctx, date=phrase), f"{head.rstrip()}{comma}{tail}"
    groups = list(_GROUP.finditer(text))
    out: list[Item] = []
    shown = _VERBS.get(verb.lower(), verb.lower())
    when, day = past_date(ctx) if shown not in ("has", "owns") else ("", None)
    for i, group in enumerate(groups):
        names = _names(group["names"])
        after = groups[i + 1] if i + 1 < len(groups) else None
        if not names and after and after["names"] and group["count"].lower() not in _NUMBERS:
            continue  # "a second dog, a greyhound named Pepper": one dog, said twice
        desc = [w for w in group["desc"].lower().split() if w not in _ORDINAL]
        kind = " ".join([*desc, _singular(group["kind"])])
        if names:
            for name in names:
                content = f"{ctx.who} {shown} {article(kind)} {kind} named {name}{when}"
                out.append(pet_item(ctx, content, name, day))
        elif group["count"].lower() in _NUMBERS or group["count"].isdigit():
            plural = group[0][len(group["count"]) :].strip()
            out.append(
                pet_item(ctx, f"{ctx.who} {shown} {group['count']} {plural}{when}", kind, day)
            )
        else:
            out.append(pet_item(ctx, f"{ctx.who} {shown} {article(kind)} {kind}{when}", kind, day))
    rest = _GROUP.sub("", text)
    return out, rest


def pet_item(ctx: Ctx, content: str, value: str, day: dt.date | None = None) -> Item:
    return ctx.fact(content, ["pets"], attribute="pet", value=value, valid_from=day)


def named_pet(match: Match, ctx: Ctx) -> list[Item]:
    """ "my cat Luna", "our dog is called Rex", "my cat's name is Mochi"."""
    name = match["name"]
    if name.split()[0].lower() in NOT_NAMES:
        return []
    kind = _singular(match["kind"])
    return [pet_item(ctx, f"{ctx.who} has {article(kind)} {kind} named {name}", name)]
