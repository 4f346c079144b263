"""The offline extractor's rule tables: first-person clause patterns mapped to fact builders."""

from __future__ import annotations

from shared.extraction.offline import events, life, pets, profile
from shared.extraction.offline.lexicon import (
    CONDITIONS,
    DIET,
    NAME,
    PLURAL_REL,
    REL,
    REL_MOD,
    Rule,
    rule,
)

_MOD = f"(?P<mod>{REL_MOD})"
_NAMES = rf"{NAME}(?:(?:,\s*|,?\s+and\s+){NAME})+"
# What a clause says of someone: a present state, not a story ("is a nurse in Hamburg").
_SAID_OF = (
    r"(?P<rest>(?:both |all )?(?:is|are|works?|lives?|runs?|teach(?:es)?|stud(?:ies|y)|owns?"
    r"|has|have|plays?) [^,]+(?:, (?:he|she|they) \w+s? [^,]+)?)$"
)
_WE = r"^(?:i|we) "
_JOB_VERB = r"(?:work|am working|have been working|have worked|am employed)"
_SHIFTS = (
    r"(?: (?P<shifts>(?:night |day |early |late )?shifts|nights|weekends|part[- ]time|full[- ]time"
    r"|evenings|long hours))?"
)
_ORG_AS = r" (?P<org>.+?)(?: as (?P<job>.+))?$"

# Clause rules: tried in order on one clause; the first that builds anything wins. Order
# matters where patterns overlap: relationships before "my X is Y", jobs ("I'm a nurse")
# before preferences ("I'm a fan of"), decisions ("I'm going with") before goals ("I'm
# going to"), and the bare "I'm Ana" last, after nationality and diet had their turn.
RULES: tuple[Rule, ...] = (
    # relationships stated as the whole clause
    rule(
        profile.relation,
        rf"^my {_MOD}(?P<rel>{REL})",
        rf"(?:'s name is| is called| is named| goes by| is) (?P<name>{NAME})$",
        examples=("my sister is called Maria", "my husband's name is Karim"),
    ),
    rule(
        profile.relation,
        rf"^(?P<name>{NAME}) is my {_MOD}(?P<rel>{REL})$",
        examples=("Tom is my manager",),
    ),
    # what is said of a named relation goes with it: "my sister Maria is a nurse in Hamburg"
    rule(
        profile.relation,
        rf"^my {_MOD}(?P<rel>{REL}),? (?P<name>{NAME}),? {_SAID_OF}",
        examples=("my husband Karim is a pilot", "my sister Maria is a nurse in Hamburg"),
    ),
    rule(
        profile.relations,
        rf"^my (?P<rel>{PLURAL_REL}),? (?P<names>{_NAMES}),? {_SAID_OF}",
        examples=("my brothers, Imran and Bilal, both live in Karachi",),
    ),
    rule(
        profile.relation,
        rf"^i have (?:a|an|one) {_MOD}(?P<rel>{REL})",
        rf" (?:named|called) (?P<name>{NAME})\b",
        examples=("I have a younger brother named Omar",),
    ),
    rule(
        profile.relation,
        rf"^i am (?P<rel>married to|engaged to|dating|seeing) (?P<name>{NAME})$",
        examples=("I am married to Priya",),
    ),
    # identity
    rule(
        profile.name,
        r"^(?:my name is|i am called|people call me|call me|everyone calls me",
        r"|i go by) (?P<value>[a-z][\w'-]*(?: [a-z][\w'-]*)?)$",
        examples=("my name is Farah", "everyone calls me Bee"),
    ),
    rule(
        profile.pronouns,
        r"^(?:my pronouns are|i use|i go by) ",
        r"(?P<value>(?:she|he|they|xe|ze)/[a-z]+(?:/[a-z]+)?)(?: pronouns)?$",
        examples=("my pronouns are they/them",),
    ),
    rule(
        profile.age,
        r"^i am (?P<value>\d{1,3})(?: years?(?: old)?| yrs?(?: old)?| y/?o)?$",
        examples=("I am 34", "I am 27 yrs old"),
    ),
    rule(
        profile.age,
        r"^i (?:just )?(?P<turned>turned) (?P<value>\d{1,3})$",
        examples=("I just turned 30",),
    ),
    rule(
        profile.age,
        r"^i am an? (?P<value>\d{1,3})[- ]years?[- ]old\b",
        examples=("I am a 25 year old teacher",),
    ),
    rule(
        profile.birthday,
        r"^(?:my (?:birthday|bday) is|i was born)(?: on)?(?: (?P<value>.+))?$",
        examples=("my birthday is March 3rd", "I was born in Lisbon"),
    ),
    rule(
        profile.nationality,
        r"^i am (?:a |an |a proud )?(?P<value>[a-z-]+)(?: citizen| national)?$",
        examples=("I am Korean", "I am a proud Canadian"),
    ),
    rule(
        profile.nationality,
        r"^my nationality is (?P<value>[a-z-]+)$",
        examples=("my nationality is Brazilian",),
    ),
    rule(
        profile.nationality,
        r"^i (?:have|hold) (?:a |an )?(?P<value>[a-z-]+) (?:citizenship|passport)$",
        examples=("I hold a German passport",),
    ),
    rule(
        profile.native_language,
        r"^my (?:native|first|mother) (?:language|tongue) is (?P<value>[a-z]+)$",
        examples=("my native language is Polish",),
    ),
    rule(
        profile.native_language,
        r"^i am a native (?P<value>[a-z]+) speaker$",
        examples=("I am a native Spanish speaker",),
    ),
    rule(
        profile.native_language,
        r"^i am a native speaker of (?P<value>[a-z]+)$",
        examples=("I am a native speaker of Arabic",),
    ),
    rule(
        profile.languages,
        r"^i (?:speak|can speak|am fluent in|speak fluent) (?P<value>.+)$",
        examples=("I speak Portuguese and Spanish",),
    ),
    rule(
        profile.location,
        _WE,
        r"(?:live|am living|are living|have been living|have lived|reside|am residing",
        r"|am based|are based|am located|am settled)(?: with (?P<with>(?:my|our) [^,]+?))?",
        r" (?:in|out of) (?P<value>.+)$",
        examples=("I live in Oslo", "we are based in Lyon"),
    ),
    rule(
        profile.location,
        rf"^(?P<with>my {_MOD}{REL})(?:, [^,]+,)? (?:lives|has been living|is living) with ",
        r"(?:me|us) in (?P<value>.+)$",
        examples=("my mum lives with me in Dubai",),
    ),
    rule(
        profile.location,
        _WE,
        r"(?P<moved>moved|relocated|have moved|have relocated) (?:back )?(?:to|in) (?P<value>.+)$",
        examples=("we moved to Munich",),
    ),
    rule(
        profile.present_place,
        r"^(?:i am|we are) (?:now )?in (?P<value>(?-i:[A-Z])[^,]*)$",
        examples=("I am in Auckland",),
    ),
    rule(
        profile.present_place,
        r"^(?P<value>(?-i:[A-Z])[\w -]*?) is (?:my |our )?home(?: now)?$",
        examples=("Edinburgh is home",),
    ),
    rule(
        profile.hometown,
        r"^i (?:am|come) (?:originally )?from (?P<value>.+)$",
        examples=("I am originally from Kumasi",),
    ),
    rule(profile.hometown, r"^my home ?town is (?P<value>.+)$", examples=("my hometown is Daegu",)),
    rule(
        profile.hometown,
        r"^i (?P<grew>grew up|was raised|was brought up) in (?P<value>.+)$",
        examples=("I grew up in Auckland",),
    ),
    # work and study
    rule(
        profile.job_trusted,
        rf"^i {_JOB_VERB} as (?P<job>.+?)(?: (?:at|for|with) (?P<org>.+))?$",
        examples=("I work as a midwife",),
    ),
    rule(
        profile.job_trusted,
        r"^my (?:job|job title|role|profession|occupation|position) is ",
        r"(?P<job>.+?)(?: (?:at|for) (?P<org>.+))?$",
        examples=("my job title is data analyst",),
    ),
    # "I am retired" never gets here: the `retired` ending takes it first
    rule(
        profile.job_trusted,
        r"^i am (?P<job>retired|unemployed|self-employed|between jobs)$",
        examples=("I am unemployed", "I am self-employed"),
    ),
    rule(
        profile.job_checked,
        r"^i (?:am|have been) (?P<job>(?:a|an) [a-z][\w' -]*?)(?: (?:at|for|with) (?P<org>.+?))?",
        r"(?: in (?P<workplace>[^,]+))?",
        r"(?:,? (?:mostly|mainly|largely|usually|primarily|still|and still) .*)?$",
        examples=("I am a carpenter", "I am a nurse at a children's hospital"),
    ),
    rule(
        profile.job_trusted,
        rf"^i {_JOB_VERB}{_SHIFTS} (?:at|for|by)",
        _ORG_AS,
        examples=("I work at Yandex", "I work nights at a warehouse in Brno"),
    ),
    rule(
        profile.job_trusted,
        r"^i (?P<joined>joined|started working at|started working for|started at",
        r"|started a new job at|got a job at|got hired at|got hired by|was hired by|was hired at",
        r"|landed a job at)",
        _ORG_AS,
        examples=("I joined MTN as a senior analyst",),
    ),
    rule(
        profile.teach,
        r"^i (?:teach|have taught|have been teaching)(?: (?P<subject>(?!at\b|in\b)[a-z][\w -]*?))?",
        r"(?: (?P<prep>at|in) (?P<org>(?:a|an|the) .+|(?-i:[A-Z]).+))?$",
        examples=("I teach maths at a secondary school",),
    ),
    rule(
        profile.industry, r"^i work in (?P<value>[a-z][\w &-]+)$", examples=("I work in marketing",)
    ),
    rule(profile.remote, r"^i work (?:from home|remotely|remote)$", examples=("I work from home",)),
    rule(
        profile.study,
        r"^i (?:study|am studying|major in|am majoring in|am doing a (?:degree|phd",
        r"|masters?) in) (?P<value>.+?)(?: at (?P<org>.+))?$",
        examples=("I study law at Leiden",),
    ),
    rule(
        profile.marital,
        r"^i am (?:happily )?(?P<value>married|single|divorced|engaged|widowed|separated)$",
        examples=("I am divorced",),
    ),
    # health, diet
    rule(
        life.diet,
        r"^i (?:am|have been|became|went|turned|have gone|have become) ",
        rf"(?:a |an |fully |strictly )?(?P<value>{DIET})\b",
        examples=("I am vegetarian", "I went vegan"),
    ),
    rule(
        life.health,
        r"^i am (?:severely |very |deathly |really )?allergic to (?P<value>.+)$",
        examples=("I am allergic to peanuts",),
    ),
    rule(
        life.health,
        r"^i am (?P<value>lactose|gluten|fructose) intolerant$",
        examples=("I am lactose intolerant",),
    ),
    rule(life.health, rf"^i have (?P<value>{CONDITIONS})$", examples=("I have asthma",)),
    # decisions, then goals
    rule(
        life.decision,
        _WE,
        r"(?:have |had )?(?P<verb>decided to|made the decision to",
        r"|made up (?:my|our) mind to|decided on) (?P<choice>.+)$",
        examples=("I decided to move to Lisbon",),
    ),
    rule(
        life.decision,
        _WE,
        r"(?P<verb>(?:have )?(?:chose|chosen|picked|selected|settled on|opted for",
        r"|went with|switched to|committed to)|am going with|are going with|will go with",
        r"|am going to go with|are going to go with|will use|am going to use|are going to use)",
        r" (?P<choice>.+)$",
        examples=("I went with the Kindle", "we chose Postgres for the database"),
    ),
    rule(
        life.goal,
        _WE,
        r"(?P<verb>want to|would like to|would love to|am planning to|are planning to",
        r"|plan to|am planning on|hope to|am hoping to|aim to|am aiming to|intend to",
        r"|am trying to|will try to|am going to|am determined to|have wanted to|dream of|might",
        r"|may) (?P<goal>.+)$",
        examples=("I want to run the Chicago marathon", "I might quit Farfetch"),
    ),
    rule(
        life.goal,
        _WE,
        r"(?P<verb>am learning|are learning|am saving (?:up )?for|are saving for",
        r"|am training for|am studying for|am preparing for|am moving to|are moving to",
        r"|am relocating to|am thinking (?:about|of)|am considering) (?P<goal>.+)$",
        examples=("I am learning French", "we are saving for a house"),
    ),
    rule(
        life.goal,
        r"^(?:my|our) (?P<kind>goal|plan|dream|aim|resolution|new year's resolution",
        r"|ambition)(?: for [\w ]+?)? is to (?P<goal>.+)$",
        examples=("my goal is to run a marathon",),
    ),
    # preferences
    rule(
        life.favorite,
        r"^my (?:all[- ]time |absolute )?favou?rite (?P<thing>[a-z][a-z -]*?) ",
        r"(?P<be>is|are|has to be) (?P<value>.+)$",
        examples=("my favourite band is Radiohead",),
    ),
    rule(
        life.favorite,
        r"^(?P<value>.+?) (?P<be>is|are) my (?:all[- ]time |absolute )?favou?rite ",
        r"(?P<thing>[a-z][a-z -]*)$",
        examples=("Radiohead is my favourite band",),
    ),
    rule(
        life.is_my,
        r"^(?P<value>.+?) (?:is|are) (?P<what>my (?:biggest |greatest |all[- ]time |absolute )?",
        r"(?:hero|idol|role model|inspiration|favou?rite)|the highlight of my ",
        r"(?:week|day|month|year))$",
        examples=("Miles Davis is my hero", "chess club is the highlight of my week"),
    ),
    rule(
        life.prefer,
        r"^i (?:much )?prefer (?P<value>.+?)",
        r"(?: (?P<sep>over|to|rather than|instead of|more than) (?P<other>.+))?$",
        examples=("I prefer tea over coffee",),
    ),
    rule(
        life.prefer,
        r"^i would (?:much )?(?:rather|prefer) (?P<value>.+?)",
        r"(?: (?P<sep>than|over|to|instead of) (?P<other>.+))?$",
        examples=("I would rather walk than drive",),
    ),
    rule(
        life.positive,
        r"^i (?P<verb>love|like|enjoy|adore|dig|am (?:a )?(?:big |huge |massive )?fan of",
        r"|am into|am obsessed with|am passionate about|am crazy about|am a sucker for)",
        r" (?P<value>.+)$",
        examples=("I love spicy food", "I am a huge fan of jazz"),
    ),
    rule(
        life.negative,
        r"^i (?P<verb>hate|dislike|detest|loathe|despise|cannot stand|avoid",
        r"|am sick of) (?P<value>.+)$",
        examples=("I hate running", "I cannot stand coriander"),
    ),
    # possessions and pastimes
    rule(
        life.have,
        _WE,
        r"(?P<verb>have|have got|own|got|bought|adopted) ",
        r"(?P<value>(?:a|an|one|two|three|four|five|six|\d+|some|twin|another) .+)$",
        examples=("I have two kids", "we adopted a puppy"),
    ),
    rule(life.drive, r"^i drive (?P<value>(?:a|an|my) .+)$", examples=("I drive a Tesla",)),
    rule(
        life.play,
        r"^i (?P<verb>play|do|practice|practise) (?P<value>.+)$",
        examples=("I play the cello", "I do pottery"),
    ),
    rule(profile.name, rf"^i am (?P<bare>{NAME})$", examples=("I am Chloe",)),
    rule(
        profile.name_and_age,
        rf"^i am (?P<bare>{NAME}),? (?P<age>\d{{1,3}})$",
        examples=("I am Ben, 34",),
    ),
    # events and activities: last, so that every rule above has had its turn
    # ("we" includes the speaker; a sentence may drop its "I": "Lost my job yesterday")
    rule(
        events.did,
        r"^(?:(?:i|we) )?(?P<verb>[a-z]+) (?P<value>.+)$",
        examples=("I went to a support group", "we ran a half marathon"),
    ),
    rule(
        events.doing,
        _WE,
        r"(?P<aux>am|are|have been) (?P<verb>[a-z]+ing) (?P<value>.+)$",
        examples=("I am taking pottery classes",),
    ),
    rule(
        events.has_done,
        _WE,
        r"(?:have|has) (?P<verb>[a-z]+) (?P<value>.+)$",
        examples=("I have been to Paris", "I have finished the course"),
    ),
    # Negated clauses reach only these: here the negation is the statement itself.
    rule(
        life.not_like,
        r"^i (?:do not|did not|never|no longer) (?:really |much |particularly )?",
        r"(?P<verb>(?P<base>like|enjoy|love|care for)) (?P<value>.+)$",
        negated=True,
        examples=("I do not like coffee",),
    ),
    rule(
        life.not_like,
        r"^i am not (?:a |really a |really )?(?:big |huge )?",
        r"(?P<verb>(?P<base>fan of|into|keen on)) (?P<value>.+)$",
        negated=True,
        examples=("I am not a fan of horror films",),
    ),
    rule(
        life.not_eat,
        r"^i (?:do not|never|no longer|cannot) (?P<base>eat|drink|touch|smoke)",
        r"(?: (?P<value>.+))?$",
        negated=True,
        examples=("I do not eat pork",),
    ),
)

# Mention rules: searched anywhere in a sentence, since "my sister Maria" can sit in any
# clause ("I went hiking with my sister Maria") and crosses commas ("Tom, my manager,").
MENTIONS: tuple[Rule, ...] = (
    rule(
        profile.relation,
        rf"\bmy {_MOD}(?P<rel>{REL}),? (?P<name>{NAME})",
        examples=("I went hiking with my sister Maria",),
    ),
    rule(
        profile.relation,
        rf"(?P<name>{NAME}),? my {_MOD}(?P<rel>{REL})\b",
        examples=("Tom, my manager, is great",),
    ),
    rule(
        profile.relations,
        rf"\bmy (?P<rel>{PLURAL_REL}),? (?P<names>{_NAMES})",
        examples=("my brothers, Imran and Bilal, both live in Karachi",),
    ),
    rule(
        pets.named_pet,
        rf"\b(?:my|our) (?:(?-i:[a-z]+) )?(?P<kind>{pets.PET_KIND})",
        rf"(?:,? |,? named |,? called | is named | is called |'s name is | is )(?P<name>{NAME})",
        examples=(
            "I live with my girlfriend and our dog Biscuit in Leeds",
            "my cat's name is Mochi",
        ),
    ),
)
