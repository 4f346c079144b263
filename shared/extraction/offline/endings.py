"""Offline extractor rules for what stopped being true: quit, left, moved away, broke up,
passed away, graduated, gave up, used to, no longer, "not ... anymore" — the tables, each
rule with the examples it exists for; the builders they call are in `ended`.

Each builds facts with `ended=True` in the type and fields of the fact they end ("Lena quit
Siemens" is an identity `employer` = Siemens that ended); the memory writer retires the
matching active fact by its own deterministic rules (shared.memory.beliefs), and only when
the value named is the one held. These rules run before the others on every clause.
"""

from __future__ import annotations

import re

from shared.extraction.offline import profile
from shared.extraction.offline.ended import (
    back_into,
    broke_up,
    corrected,
    done_with_school,
    eats_again,
    graduated,
    left_job,
    moved_away,
    no_pets,
    not_with,
    pet_gone,
    promoted,
    quit_habit,
    relative_died,
    renamed_pet,
    retired,
)
from shared.extraction.offline.lexicon import (
    NAME,
    PETS,
    REL,
    Rule,
    rule,
)

_PET_KINDS = rf"(?:{PETS[3:-1]}|goldfish|fish|pets?|dogs|cats|animals?)"


# The positive clause an ended one states the end of ("I no longer work at X" → "I work at
# X"); applied only when the clause is negated with an ending cue, or says "used to".
UNSAID = [
    re.compile(p, re.I)
    for p in (
        r"^(?P<s>i|we) (?:do not|did not|no longer|do no longer) (?P<rest>.+)$",
        r"^(?P<s>i|we) (?P<be>am|are) (?:not|no longer) (?P<rest>.+)$",
        r"^(?P<s>i|we) used to (?P<rest>.+)$",
    )
]


_WE = r"^(?:i|we) (?:have |had )?"
_BREAK = (
    r"(?:broke up|split up|split|separated|are separating|are splitting up|got divorced"
    r"|are getting divorced|are divorcing|divorced|are divorced|called it quits|ended things)"
)
_PARTNER_REF = rf"(?:(?:my |our )(?P<rel>{REL})(?: (?P<name>{NAME}))?|(?P<name2>{NAME}))"

# Clause rules: the first that builds anything wins, before the ordinary rules.
ENDINGS: tuple[Rule, ...] = (
    rule(
        left_job,
        _WE + r"(?P<verb>quit|left|resigned from|walked out of|stopped working (?:at|for)"
        r"|handed in (?:my|our) notice at|lost (?:my|our) job at|(?:got|was|were) (?:laid off"
        r"|fired|let go|made redundant) (?:from|by|at)) (?P<org>.+)$",
        examples=("I quit Siemens", "I handed in my notice at Deloitte"),
    ),
    rule(
        left_job,
        _WE + r"(?P<verb>got|was|were) (?:laid off|fired|let go|made redundant)(?P<org>)\b",
        examples=("I got laid off",),
    ),
    rule(
        graduated,
        _WE + r"(?:graduated|finished (?:my )?(?:degree|studies|master'?s|phd|bachelor'?s))"
        r"(?: (?:from|at) (?P<school>.+))?$",
        examples=("I graduated from King's College London",),
    ),
    rule(
        done_with_school,
        r"^(?:i am |we are )?(?:finally )?done with (?P<school>.+)$",
        examples=("I am finally done with TU Delft",),
    ),
    rule(
        moved_away,
        _WE + r"(?:moved|relocated) (?:away )?(?:from|out of) (?P<old>.+?)(?: (?:back )?to .+)?$",
        examples=("I moved away from Adelaide",),
    ),
    rule(
        broke_up,
        rf"{_WE}{_BREAK} (?:with|from) {_PARTNER_REF}",
        examples=("I broke up with my boyfriend", "I split up with Tom"),
    ),
    rule(
        broke_up,
        rf"{_WE}(?:divorced|left|dumped) (?:my |our )(?P<rel>{REL})(?: (?P<name>{NAME}))?",
        examples=("I divorced my husband",),
    ),
    rule(broke_up, rf"^(?:we (?:have )?)(?P<verb>{_BREAK})$", examples=("we split up",)),
    rule(
        relative_died,
        rf"^(?:my|our) (?P<rel>{REL})(?: (?P<name>{NAME}))? (?:has |had |just )?"
        r"(?:passed away|passed|died)\b",
        examples=("my grandmother passed away",),
    ),
    rule(
        pet_gone,
        rf"^(?:(?P<name>{NAME})|(?:my|our) (?P<kind>{_PET_KINDS})(?: (?P<name2>{NAME}))?)"
        r" (?:has |had |just )?(?P<verb>passed away|passed|died|ran away|was put down"
        r"|was put to sleep)\b",
        examples=("Rex passed away", "our dog died"),
    ),
    rule(
        pet_gone,
        rf"{_WE}(?:had to |have to )?(?P<verb>rehome|gave away|give away) "
        rf"(?:(?P<name>{NAME})|(?:my|our|the) (?P<kind>{_PET_KINDS}))\b",
        examples=("we had to rehome Pistachio",),
    ),
    rule(
        quit_habit,
        _WE + r"(?:quit|gave up|given up|stopped|stopped doing|lost interest in|got bored of"
        r"|am done with|am over) (?P<value>[a-z].+)$",
        examples=("I stopped watching F1", "I gave up smoking"),
    ),
    rule(
        eats_again,
        r"^i (?:have )?(?:started|am starting|began|have begun) eating (?P<food>meat|chicken|"
        r"fish|beef|pork|dairy|eggs|seafood)\b",
        examples=("I started eating fish",),
    ),
    rule(
        retired,
        r"^i (?:have |am |am officially |officially )?(?:retired|retiring)"
        r"(?: from (?P<org>[^,]+?))?(?= after| at| in| on| next| this|,|$)",
        examples=("I am retiring", "I retired from the bank"),
    ),
    rule(
        promoted,
        r"^i (?:got|was|have been|am being) promoted to (?P<job>.+)$",
        examples=("I got promoted to team lead",),
    ),
    # "I'm back into F1" says again what "I stopped watching F1" ended
    rule(back_into, r"^i am back (?:into|to) (?P<value>.+)$", examples=("I am back into F1",)),
    # a new job said with its start: "I'm starting at SAP next month as a product manager"
    rule(
        profile.job_trusted,
        r"^i (?P<joined>am starting|start|will start|took a job|accepted a job|accepted an offer"
        r"|am joining|will be joining) (?:at|with|from)?\s*(?P<org>(?-i:[A-Z]).+?)"
        r"(?: as (?P<job>.+))?$",
        examples=("I am starting at SAP as a product manager",),
    ),
)

# Reached only when the clause is negated with an ending cue ("not ... anymore").
NEGATED_ENDINGS: tuple[Rule, ...] = (
    rule(
        not_with,
        rf"^i am (?:not|no longer) (?:with|seeing|dating|together with) {_PARTNER_REF}",
        examples=("I am not with Carmen",),
    ),
    rule(
        no_pets,
        rf"^(?:i|we) (?:do not|no longer) have (?P<det>any|a|an|the|our|my) "
        rf"(?P<kind>{_PET_KINDS})$",
        examples=("I do not have any pets",),
    ),
)


# Sentence-level: "Tom and I broke up" would lose its subject to the clause splitter.
ENDING_MENTIONS: tuple[Rule, ...] = (
    rule(
        corrected,
        r"^(?:(?:sorry|oops|oh|my bad|correction|typo|i mean)\b[ ,!:.-]*)*"
        r"(?:i meant|i mean|it is|it's|that should be|should be) (?:a |an |the )?"
        r"(?P<new>[\w' -]+?),? not (?:a |an |the )?(?P<old>[\w' -]+?)[.!]*$",
        examples=("Sorry, I meant Hamburg, not Bremen",),
    ),
    rule(
        renamed_pet,
        rf"\b(?:her|his|its) name is (?P<new>{NAME}),? not (?P<old>{NAME})\b",
        examples=("her name is Lumi, not Luna",),
    ),
    rule(
        broke_up,
        rf"(?:^|,\s*)(?:(?:my |our )(?P<rel>{REL})(?:,? (?P<name>{NAME}))?|(?P<name2>{NAME}))"
        r" and I"
        rf"(?: have| are| just)* (?P<verb>{_BREAK})\b",
        examples=("Tom and I broke up",),
    ),
)
