"""Seeded synthetic users for the context benchmark: typed facts, chat sessions and queries.

No external data. Facts are valid `shared.extraction.schemas` models of all six types, each
with the first-person sentence a user would have said; within one user every fact has its
own normalized content and its own slot, so none supersedes another (the benchmark wants
N *active* facts). Near-paraphrases the product would merge are handled by the loader,
which decides merges the way `shared.memory.writer` does.
"""

from __future__ import annotations

import datetime as dt
import random
from collections.abc import Callable, Iterator
from dataclasses import dataclass, field

from shared.extraction.schemas import (
    DecisionFact,
    GeneralFact,
    GoalFact,
    IdentityFact,
    PreferenceFact,
    RelationshipFact,
    TypedFact,
)
from shared.memory.normalize import content_hash

# -- vocabularies ----------------------------------------------------------------------------

FIRST_NAMES = (
    "Ana",
    "Ben",
    "Chloe",
    "Dmitri",
    "Elif",
    "Farah",
    "Gabriel",
    "Hana",
    "Ivan",
    "Jana",
    "Kofi",
    "Lena",
    "Marco",
    "Nadia",
    "Omar",
    "Priya",
    "Quentin",
    "Rosa",
    "Sven",
    "Tomás",
    "Uma",
    "Victor",
    "Wen",
    "Ximena",
    "Yusuf",
    "Zara",
    "Aiko",
    "Bruno",
    "Carmen",
    "Diego",
    "Emma",
    "Felix",
    "Greta",
    "Hugo",
    "Ines",
    "Jonas",
    "Kira",
    "Luca",
    "Maya",
    "Noah",
    "Olga",
    "Pablo",
    "Rahul",
    "Sofia",
    "Theo",
    "Vera",
    "Wiktor",
    "Yara",
    "Amir",
    "Bianca",
)
LAST_NAMES = (
    "Keller",
    "Okafor",
    "Nakamura",
    "Silva",
    "Novak",
    "Haddad",
    "Lindqvist",
    "Moreau",
    "Kowalski",
    "Rossi",
    "Petrov",
    "Mensah",
    "Costa",
    "Yilmaz",
    "Schmidt",
    "Tanaka",
    "Dubois",
    "Fischer",
    "Ortega",
    "Bauer",
    "Ivanova",
    "Jensen",
    "Kaur",
    "Laine",
    "Meyer",
    "Nguyen",
    "Popescu",
    "Quinn",
    "Romero",
    "Sato",
)
CITIES = (
    "Berlin",
    "Lisbon",
    "Osaka",
    "Toronto",
    "Nairobi",
    "Madrid",
    "Prague",
    "Seoul",
    "Lima",
    "Oslo",
    "Porto",
    "Kyoto",
    "Vienna",
    "Dublin",
    "Bogotá",
    "Hanoi",
    "Tbilisi",
    "Accra",
    "Montreal",
    "Valencia",
    "Krakow",
    "Helsinki",
    "Marseille",
    "Istanbul",
    "Cape Town",
    "Melbourne",
    "Chicago",
    "Edinburgh",
    "Munich",
    "Copenhagen",
    "Athens",
    "Budapest",
    "Zurich",
    "Bangkok",
    "Mexico City",
    "Rotterdam",
    "Seville",
    "Gdansk",
    "Ljubljana",
    "Tallinn",
)
JOBS = (
    "nurse",
    "software engineer",
    "teacher",
    "architect",
    "pharmacist",
    "data analyst",
    "chef",
    "translator",
    "electrician",
    "product manager",
    "dentist",
    "journalist",
    "physiotherapist",
    "accountant",
    "graphic designer",
    "civil engineer",
    "lawyer",
    "baker",
)
COMPANIES = (
    "a hospital",
    "a logistics startup",
    "a public school",
    "a bank",
    "an airline",
    "a game studio",
    "a bakery chain",
    "a city council",
    "a biotech firm",
    "a newspaper",
)
FIELDS = (
    "biology",
    "history",
    "computer science",
    "economics",
    "music",
    "nursing",
    "mechanical engineering",
    "philosophy",
    "chemistry",
    "linguistics",
)
LANGUAGES = (
    "Spanish",
    "German",
    "Japanese",
    "Portuguese",
    "French",
    "Italian",
    "Korean",
    "Arabic",
    "Swahili",
    "Polish",
    "Dutch",
    "Turkish",
    "Hindi",
    "Mandarin",
    "Greek",
)
PETS = ("dog", "cat", "parrot", "rabbit", "hamster", "tortoise", "goldfish")
PET_NAMES = (
    "Rex",
    "Luna",
    "Milo",
    "Pepper",
    "Biscuit",
    "Nala",
    "Oscar",
    "Tofu",
    "Ziggy",
    "Coco",
    "Mochi",
    "Bruno",
    "Olive",
    "Pixel",
    "Waffles",
    "Juniper",
    "Kiwi",
    "Loki",
)
HOBBIES = (
    "woodworking",
    "bouldering",
    "birdwatching",
    "pottery",
    "chess",
    "baking sourdough",
    "trail running",
    "knitting",
    "photography",
    "gardening",
    "salsa dancing",
    "playing the cello",
    "sailing",
    "calligraphy",
    "board games",
    "rock climbing",
    "beekeeping",
    "origami",
    "fencing",
    "astronomy",
)
PREF_TOPICS: dict[str, tuple[str, ...]] = {
    "food": (
        "ramen",
        "sushi",
        "spicy curry",
        "cilantro",
        "blue cheese",
        "oysters",
        "olives",
        "dark chocolate",
        "mushroom risotto",
        "falafel",
        "pickled herring",
        "tiramisu",
        "kimchi",
        "peanut butter",
        "lentil soup",
        "pho",
        "tacos al pastor",
        "liquorice",
        "durian",
        "goat cheese",
        "brussels sprouts",
        "pineapple on pizza",
        "miso soup",
        "shakshuka",
        "pierogi",
        "paella",
        "black pudding",
        "churros",
        "dumplings",
        "okra",
    ),
    "music": (
        "jazz",
        "techno",
        "opera",
        "bluegrass",
        "k-pop",
        "heavy metal",
        "bossa nova",
        "reggae",
        "baroque music",
        "drum and bass",
        "country music",
        "afrobeat",
        "synthwave",
        "flamenco",
        "grunge",
        "lo-fi beats",
        "gospel",
        "punk rock",
    ),
    "movies": (
        "horror films",
        "romantic comedies",
        "documentaries",
        "anime",
        "westerns",
        "superhero movies",
        "film noir",
        "musicals",
        "silent films",
        "space operas",
    ),
    "books": (
        "science fiction",
        "crime novels",
        "poetry",
        "biographies",
        "fantasy sagas",
        "self-help books",
        "graphic novels",
        "historical fiction",
        "travel writing",
    ),
    "sports": (
        "football",
        "tennis",
        "cricket",
        "basketball",
        "cycling races",
        "formula one",
        "rugby",
        "volleyball",
        "ice hockey",
        "golf",
        "handball",
        "sumo wrestling",
    ),
    "drinks": (
        "oat milk lattes",
        "green tea",
        "craft beer",
        "red wine",
        "kombucha",
        "espresso",
        "bubble tea",
        "whisky",
        "sparkling water",
        "hot chocolate",
        "mezcal",
    ),
    "tech": (
        "Python",
        "Rust",
        "Go",
        "Java",
        "TypeScript",
        "Kubernetes",
        "Postgres",
        "vim",
        "dark mode",
        "mechanical keyboards",
        "Linux",
        "Kafka",
        "Terraform",
        "GraphQL",
    ),
    "places": CITIES,
    "activities": (
        "early morning runs",
        "crowded gyms",
        "long hikes",
        "museum visits",
        "karaoke nights",
        "camping",
        "cold showers",
        "meditation",
        "road trips",
        "group fitness classes",
        "open-water swimming",
        "escape rooms",
    ),
    "weather": ("rainy days", "snow", "hot summers", "foggy mornings", "thunderstorms", "wind"),
}
LIKE_VERBS = (
    ("likes", "likes"),
    ("loves", "likes"),
    ("enjoys", "likes"),
    ("dislikes", "dislikes"),
    ("hates", "dislikes"),
    ("can't stand", "dislikes"),
)
PREFER_CATEGORIES = (
    "coffee",
    "tea",
    "seat",
    "note-taking app",
    "running shoes",
    "airline",
    "bank",
    "pizza topping",
    "text editor",
    "travel style",
    "meeting time",
    "workout",
    "breakfast",
    "podcast app",
    "music streaming service",
    "laptop brand",
    "browser",
    "supermarket",
    "hotel type",
    "sleeping schedule",
)
PREFER_CONTEXTS = (
    "at work",
    "on weekends",
    "when travelling",
    "in the morning",
    "in winter",
    "for long trips",
    "at home",
    "with the kids",
    "on busy days",
    "in summer",
    "after the gym",
    "for date nights",
)
PREFER_VALUES = (
    "the window option",
    "the cheapest option",
    "anything organic",
    "the quiet one",
    "the local one",
    "something simple",
    "the one with good reviews",
    "the fastest one",
    "the most comfortable one",
    "whatever is nearby",
    "the old reliable one",
    "the eco-friendly one",
)
RELATIONS = (
    "sister",
    "brother",
    "friend",
    "colleague",
    "manager",
    "neighbor",
    "cousin",
    "mentor",
    "landlord",
    "teammate",
    "best friend",
    "aunt",
    "uncle",
    "doctor",
    "former classmate",
    "business partner",
    "climbing partner",
    "flatmate",
)
THINGS = (
    "database",
    "hosting provider",
    "framework",
    "laptop",
    "budget app",
    "gym",
    "daycare",
    "car",
    "bank account",
    "moving company",
    "photographer",
    "venue",
    "insurance",
    "phone plan",
    "CI system",
    "monitoring tool",
    "caterer",
    "tutor",
)
PROJECTS = (
    "the billing service",
    "the wedding",
    "the kitchen renovation",
    "the side project",
    "the new apartment",
    "the team offsite",
    "the thesis",
    "the startup",
    "the garden",
    "the family reunion",
    "the podcast",
    "the hiking club",
    "the bakery plan",
    "the mobile app",
    "the conference talk",
    "the photo book",
    "the trip to Japan",
    "the charity run",
    "the home office",
    "the book club",
    "the data migration",
    "the school fundraiser",
    "the band",
    "the website redesign",
    "the camper van",
)
CHOICES = (
    "Postgres",
    "SQLite",
    "a local company",
    "the second offer",
    "the cheaper plan",
    "the premium plan",
    "a used one",
    "a brand-new one",
    "the one near the station",
    "the recommended one",
    "an open-source tool",
    "the family-run option",
    "Hetzner",
    "a freelancer",
    "the monthly plan",
    "the yearly plan",
    "option B",
    "the quiet one",
)
REASONS = (
    "it is cheaper",
    "a friend recommended it",
    "it was closer to home",
    "the reviews were better",
    "it fits the budget",
    "it is faster",
    None,
    None,
    None,
)
GOAL_VERBS = (
    "run",
    "learn",
    "save",
    "read",
    "visit",
    "finish",
    "build",
    "write",
    "cook",
    "swim",
    "climb",
    "publish",
    "plant",
    "paint",
    "cycle",
)
GOAL_OBJECTS: dict[str, tuple[str, ...]] = {
    "run": (
        "a half marathon",
        "a full marathon",
        "10 km under 50 minutes",
        "a trail ultra",
        "every morning for a month",
        "a 5 km race with {person}",
    ),
    "learn": tuple(f"{lang} to B2 level" for lang in LANGUAGES)
    + ("the guitar", "to sail", "machine learning", "to code in Rust", "sign language", "to drive"),
    "save": tuple(
        f"{n} euros for {p}"
        for n in (2000, 5000, 10000, 15000)
        for p in ("a new car", "a deposit", "travel", "emergencies")
    ),
    "read": tuple(f"{n} books this year" for n in (12, 20, 30, 52)) + ("all of Tolstoy",),
    "visit": tuple(f"{c}" for c in CITIES),
    "finish": (
        "the thesis",
        "the online course",
        "the novel draft",
        "the quilt",
        "the renovation",
        "the certification",
    ),
    "build": (
        "a treehouse",
        "a mechanical keyboard",
        "a side business",
        "a home server",
        "a bookshelf",
        "a portfolio website",
    ),
    "write": (
        "a novel",
        "a cookbook",
        "a blog post every week",
        "letters to grandma",
        "a conference talk",
    ),
    "cook": tuple(
        f"a new {c} dish every week"
        for c in ("Thai", "Italian", "Ethiopian", "Peruvian", "Korean", "Lebanese")
    ),
    "swim": ("across the lake", "1 km without stopping", "in the sea every weekend"),
    "climb": ("Kilimanjaro", "Mont Blanc", "a 6b route", "Mount Fuji", "Ben Nevis"),
    "publish": ("a paper", "a podcast season", "an app", "a photo book"),
    "plant": ("a vegetable garden", "an olive tree", "a herb balcony"),
    "paint": ("the living room", "a portrait of {person}", "a mural"),
    "cycle": ("from Berlin to Copenhagen", "200 km in a day", "to work every day"),
}
GOAL_WHEN = (
    "next June",
    "by the end of the year",
    "before turning 40",
    "this summer",
    "within two years",
    "next spring",
    "by Christmas",
    "before the wedding",
)
MONTHS = (
    "January",
    "February",
    "March",
    "April",
    "May",
    "June",
    "July",
    "August",
    "September",
    "October",
    "November",
    "December",
)
ACTIVITIES = (
    "hiking",
    "skiing",
    "kayaking",
    "surfing",
    "camping",
    "cycling",
    "diving",
    "to a cooking class",
    "to a wine tasting",
    "to a jazz concert",
    "to a football match",
    "to a pottery workshop",
    "to a food market",
    "to a climbing gym",
    "on a photo walk",
)
ITEMS = (
    "bike",
    "camera",
    "sofa",
    "laptop",
    "tent",
    "coffee grinder",
    "kayak",
    "guitar",
    "standing desk",
    "sewing machine",
    "telescope",
    "espresso machine",
    "e-reader",
)
SHOPS = (
    "a flea market",
    "an online shop",
    "a neighbor",
    "a second-hand store",
    "the mall",
    "a small local shop",
    "an auction",
)
EVENTS = (
    "birthday party",
    "job interview",
    "dentist appointment",
    "first date",
    "wedding anniversary dinner",
    "farewell party",
    "hackathon",
    "book launch",
    "performance review",
    "school play",
    "housewarming",
    "team retreat",
)
BOOKS = (
    "The Left Hand of Darkness",
    "Middlemarch",
    "Piranesi",
    "The Overstory",
    "Beloved",
    "Dune",
    "Circe",
    "Stoner",
    "The Remains of the Day",
    "Kindred",
    "Pachinko",
    "The Dispossessed",
    "Hyperion",
    "Normal People",
    "The Name of the Rose",
)
INJURIES = (
    "sprained an ankle",
    "broke a wrist",
    "pulled a hamstring",
    "twisted a knee",
    "hurt a shoulder",
    "had a bad back",
)
WEEKDAYS = ("Monday", "Tuesday", "Wednesday", "Thursday", "Friday", "Saturday", "Sunday")


# -- facts ------------------------------------------------------------------------------------


@dataclass(frozen=True)
class GenFact:
    fact: TypedFact
    said: str  # the first-person sentence the fact was extracted from


def _person(rng: random.Random) -> str:
    return f"{rng.choice(FIRST_NAMES)} {rng.choice(LAST_NAMES)}"


def _year(rng: random.Random) -> int:
    return rng.randint(2015, 2025)


def _identity(rng: random.Random, n: str) -> GenFact:
    kind = rng.random()
    if kind < 0.4:
        lang = rng.choice(LANGUAGES)
        level = rng.choice(("fluently", "a little", "at work", "with family", "since school"))
        return GenFact(
            IdentityFact(
                type="identity",
                subject=n,
                attribute="language",
                value=lang,
                content=f"{n} speaks {lang} {level}.",
                confidence=0.9,
                tags=["language"],
            ),
            f"I speak {lang} {level}.",
        )
    if kind < 0.7:
        pet, pet_name = rng.choice(PETS), rng.choice(PET_NAMES)
        return GenFact(
            IdentityFact(
                type="identity",
                subject=n,
                attribute="pet",
                value=f"{pet} {pet_name}",
                content=f"{n} has a {pet} named {pet_name}.",
                confidence=0.9,
                tags=["pet"],
            ),
            f"I have a {pet} named {pet_name}.",
        )
    hobby = rng.choice(HOBBIES)
    since = _year(rng)
    return GenFact(
        IdentityFact(
            type="identity",
            subject=n,
            attribute="hobby",
            value=hobby,
            content=f"{n} has been into {hobby} since {since}.",
            confidence=0.85,
            tags=["hobby"],
        ),
        f"I've been into {hobby} since {since}.",
    )


def _single_identities(rng: random.Random, n: str) -> list[GenFact]:
    """One fact per single-valued attribute: a second value would supersede the first."""
    city, home = rng.sample(CITIES, 2)
    job, company, field_ = rng.choice(JOBS), rng.choice(COMPANIES), rng.choice(FIELDS)
    age = rng.randint(21, 70)
    month, day = rng.choice(MONTHS), rng.randint(1, 28)
    rows = [
        ("city", city, f"{n} lives in {city}.", f"I live in {city}."),
        ("hometown", home, f"{n} grew up in {home}.", f"I grew up in {home}."),
        ("job", job, f"{n} works as a {job}.", f"I work as a {job}."),
        ("employer", company, f"{n} works at {company}.", f"I work at {company}."),
        ("age", str(age), f"{n} is {age} years old.", f"I'm {age} years old."),
        (
            "birthday",
            f"{month} {day}",
            f"{n}'s birthday is on {month} {day}.",
            f"My birthday is on {month} {day}.",
        ),
        (
            "education",
            field_,
            f"{n} studied {field_} at university.",
            f"I studied {field_} at university.",
        ),
    ]
    return [
        GenFact(
            IdentityFact(
                type="identity",
                subject=n,
                attribute=a,
                value=v,
                content=c,
                confidence=0.95,
                tags=[a],
            ),
            s,
        )
        for a, v, c, s in rows
    ]


def _preference(rng: random.Random, n: str) -> GenFact:
    if rng.random() < 0.25:
        category, context = rng.choice(PREFER_CATEGORIES), rng.choice(PREFER_CONTEXTS)
        value = rng.choice(PREFER_VALUES)
        topic = f"{category} {context}"
        return GenFact(
            PreferenceFact(
                type="preference",
                subject=n,
                topic=topic,
                sentiment="prefers",
                value=value,
                confidence=0.8,
                tags=[category],
                content=f"For the {category} {context}, {n} prefers {value}.",
            ),
            f"For the {category} {context} I prefer {value}.",
        )
    topic = rng.choice(tuple(PREF_TOPICS))
    value = rng.choice(PREF_TOPICS[topic])
    verb, sentiment = rng.choice(LIKE_VERBS)
    first = {
        "likes": "like",
        "loves": "love",
        "enjoys": "enjoy",
        "dislikes": "dislike",
        "hates": "hate",
        "can't stand": "can't stand",
    }[verb]
    return GenFact(
        PreferenceFact(
            type="preference",
            subject=n,
            topic=topic,
            sentiment=sentiment,  # type: ignore[arg-type]
            value=value,
            confidence=0.85,
            tags=[topic],
            content=f"{n} {verb} {value}.",
        ),
        f"Honestly, I {first} {value}.",
    )


def _relationship(rng: random.Random, n: str) -> GenFact:
    person, relation = _person(rng), rng.choice(RELATIONS)
    detail = rng.choice(
        (
            f"who lives in {rng.choice(CITIES)}",
            f"who works as a {rng.choice(JOBS)}",
            f"whom {n} met in {_year(rng)}",
            f"who loves {rng.choice(PREF_TOPICS['music'])}",
            f"who has a {rng.choice(PETS)}",
        )
    )
    return GenFact(
        RelationshipFact(
            type="relationship",
            subject=n,
            person=person,
            relation=relation,
            confidence=0.9,
            tags=[relation],
            content=f"{person} is {n}'s {relation}, {detail}.",
        ),
        f"{person} is my {relation}, {detail.replace(n, 'I')}.",
    )


def _decision(rng: random.Random, n: str) -> GenFact:
    thing, project, choice = rng.choice(THINGS), rng.choice(PROJECTS), rng.choice(CHOICES)
    reason = rng.choice(REASONS)
    topic = f"{thing} for {project}"
    because = f" because {reason}" if reason else ""
    return GenFact(
        DecisionFact(
            type="decision",
            subject=n,
            topic=topic,
            choice=choice,
            reason=reason,
            confidence=0.9,
            tags=[thing],
            content=f"{n} decided on {choice} as the {thing} for {project}{because}.",
        ),
        f"We decided on {choice} as the {thing} for {project}{because}.",
    )


def _goal(rng: random.Random, n: str) -> GenFact:
    verb = rng.choice(GOAL_VERBS)
    obj = rng.choice(GOAL_OBJECTS[verb]).format(person=_person(rng))
    when = rng.choice(GOAL_WHEN)
    goal = f"{verb} {obj}"
    return GenFact(
        GoalFact(
            type="goal",
            subject=n,
            goal=goal,
            confidence=0.8,
            tags=[verb],
            content=f"{n} wants to {goal} {when}.",
        ),
        f"My goal is to {goal} {when}.",
    )


_GENERAL: tuple[Callable[[random.Random, str], tuple[str, str]], ...] = (
    lambda r, n: (
        lambda a, c, p, m, y: (
            f"{n} went {a} in {c} with {p} in {m} {y}.",
            f"I went {a} in {c} with {p} in {m} {y}.",
        )
    )(r.choice(ACTIVITIES), r.choice(CITIES), _person(r), r.choice(MONTHS), _year(r)),
    lambda r, n: (
        lambda i, s, y, p: (
            f"{n} bought a {i} from {s} in {y} for {p} euros.",
            f"I bought a {i} from {s} in {y} for {p} euros.",
        )
    )(r.choice(ITEMS), r.choice(SHOPS), _year(r), r.randint(20, 2000)),
    lambda r, n: (
        lambda e, c, d, m: (
            f"{n} had a {e} in {c} on a {d} in {m}.",
            f"I had a {e} in {c} on a {d} in {m}.",
        )
    )(r.choice(EVENTS), r.choice(CITIES), r.choice(WEEKDAYS), r.choice(MONTHS)),
    lambda r, n: (
        lambda b, p, y: (
            f"{n} read '{b}' on the recommendation of {p} in {y}.",
            f"I read '{b}' because {p} recommended it in {y}.",
        )
    )(r.choice(BOOKS), _person(r), _year(r)),
    lambda r, n: (lambda i, a, y: (f"{n} {i} while {a} in {y}.", f"I {i} while {a} in {y}."))(
        r.choice(INJURIES), _doing(r.choice(ACTIVITIES)), _year(r)
    ),
    lambda r, n: (
        lambda c, y, j: (
            f"{n} spent {y} in {c} working as a {j}.",
            f"I spent {y} in {c} working as a {j}.",
        )
    )(r.choice(CITIES), _year(r), r.choice(JOBS)),
    lambda r, n: (
        lambda p, e, c, k: (
            f"{n} helped {p} organise a {e} in {c} for {k} guests.",
            f"I helped {p} organise a {e} in {c} for {k} guests.",
        )
    )(_person(r), r.choice(EVENTS), r.choice(CITIES), r.randint(5, 200)),
    lambda r, n: (
        lambda f, c, y: (
            f"{n} got food poisoning from {f} in {c} in {y}.",
            f"I got food poisoning from {f} in {c} in {y}.",
        )
    )(r.choice(PREF_TOPICS["food"]), r.choice(CITIES), _year(r)),
)


def _doing(activity: str) -> str:
    """ "to a jazz concert" → "at a jazz concert"; "hiking" stays."""
    return "at " + activity[3:] if activity.startswith("to ") else activity


def _bare(activity: str) -> str:
    """ "to a jazz concert" → "a jazz concert"."""
    return activity.split(" ", 1)[1] if activity.startswith(("to ", "on ")) else activity


def _general(rng: random.Random, n: str) -> GenFact:
    content, said = rng.choice(_GENERAL)(rng, n)
    return GenFact(
        GeneralFact(type="fact", subject=n, content=content, confidence=0.8, tags=[]), said
    )


# Mix for users with many facts: mostly events and preferences, as in long chat histories.
_TYPE_MIX: tuple[tuple[Callable[[random.Random, str], GenFact], float], ...] = (
    (_general, 0.42),
    (_preference, 0.22),
    (_relationship, 0.10),
    (_decision, 0.12),
    (_goal, 0.08),
    (_identity, 0.06),
)


def fact_stream(rng: random.Random, name: str) -> Iterator[GenFact]:
    """Endless distinct facts about `name`: distinct normalized content, distinct slots."""
    seen_content: set[str] = set()
    seen_slots: set[str] = set()

    def fresh(item: GenFact) -> bool:
        digest, slot = content_hash(item.fact.content), item.fact.slot
        if digest in seen_content or (slot is not None and slot in seen_slots):
            return False
        seen_content.add(digest)
        if slot is not None:
            seen_slots.add(slot)
        return True

    for item in _single_identities(rng, name):
        if fresh(item):
            yield item
    makers, weights = zip(*_TYPE_MIX, strict=True)
    misses = 0
    while True:
        item = rng.choices(makers, weights)[0](rng, name)
        if fresh(item):
            misses = 0
            yield item
        else:
            misses += 1
            if misses > 10_000:
                raise RuntimeError(f"the fact space for {name} is exhausted")


# -- chat messages and queries ---------------------------------------------------------------

_QUERY_TEMPLATES: tuple[Callable[[random.Random], str], ...] = (
    lambda r: f"Can you suggest something to cook tonight with {r.choice(PREF_TOPICS['food'])}?",
    lambda r: f"What should I pack for my trip to {r.choice(CITIES)} in {r.choice(MONTHS)}?",
    lambda r: f"Remind me what we decided about the {r.choice(THINGS)} for {r.choice(PROJECTS)}.",
    lambda r: f"Help me write a birthday message for my {r.choice(RELATIONS)}.",
    lambda r: (
        f"Any tips to {r.choice(GOAL_VERBS)} "
        f"{r.choice(GOAL_OBJECTS['run'] + GOAL_OBJECTS['swim']).format(person='a friend')} "
        f"{r.choice(GOAL_WHEN)}?"
    ),
    lambda r: (
        f"I'm thinking about getting a {r.choice(PETS)}, is that a good idea given my schedule?"
    ),
    lambda r: (
        f"Recommend me some {r.choice(PREF_TOPICS['music'])} for a {r.choice(WEEKDAYS)} evening."
    ),
    lambda r: f"Who was the person I went {r.choice(ACTIVITIES)} with?",
    lambda r: (
        f"Should I switch from {r.choice(PREF_TOPICS['tech'])} to "
        f"{r.choice(PREF_TOPICS['tech'])} for {r.choice(PROJECTS)}?"
    ),
    lambda r: f"Plan a weekend in {r.choice(CITIES)} for me and my {r.choice(RELATIONS)}.",
    lambda r: f"How do I stay motivated with {r.choice(HOBBIES)} when work gets busy?",
    lambda r: (
        f"Which {r.choice(PREF_TOPICS['books'])} would you recommend after {r.choice(BOOKS)}?"
    ),
    lambda r: f"My {r.choice(RELATIONS)} {r.choice(FIRST_NAMES)} is visiting, where should we eat?",
    lambda r: f"what did I say about {r.choice(PREF_TOPICS['drinks'])}?",
    lambda r: f"{r.choice(HOBBIES)} ideas?",
    lambda r: (
        f"Draft an email to the {r.choice(THINGS)} people about {r.choice(PROJECTS)}, "
        f"keep it short and mention the budget."
    ),
    lambda r: (
        f"I {r.choice(INJURIES)} {r.choice(('yesterday', 'last week', 'this morning'))}, "
        f"can I still go {r.choice(ACTIVITIES)} on {r.choice(WEEKDAYS)}?"
    ),
    lambda r: (
        f"Is {r.choice(CITIES)} or {r.choice(CITIES)} better for "
        f"{_bare(r.choice(ACTIVITIES))} "
        f"in {r.choice(MONTHS)}? I have about {r.randint(2, 14)} days and a tight budget."
    ),
    lambda r: f"Translate 'good morning, {r.choice(FIRST_NAMES)}' into {r.choice(LANGUAGES)}.",
    lambda r: (
        f"What do you know about my goals for {r.choice(('this year', 'next year', 'summer'))}?"
    ),
)


def query_stream(rng: random.Random) -> Iterator[str]:
    """Endless distinct, realistic chat questions (so no query embedding is a cache hit)."""
    seen: set[str] = set()
    misses = 0
    while True:
        query = rng.choice(_QUERY_TEMPLATES)(rng)
        if query in seen:
            misses += 1
            if misses > 10_000:
                raise RuntimeError("the query space is exhausted")
            continue
        misses = 0
        seen.add(query)
        yield query


_SMALL_TALK = ("ok thanks", "sounds good!", "haha", "got it", "thanks!", "nice")
_REPLY_OPENERS = (
    "Good question.",
    "Sure, here is what I would do.",
    "That makes sense.",
    "Thanks for the context.",
    "Here's a short plan.",
    "Happy to help with that.",
    "Great idea.",
    "Let me think about that.",
)
_FIRST_STEPS = ("a short warm-up", "a simple list", "a clear budget", "one small step")
_REPLY_SENTENCES: tuple[Callable[[random.Random], str], ...] = (
    lambda r: f"Start with {r.choice(_FIRST_STEPS)} and build from there.",
    lambda r: f"In {r.choice(CITIES)} the best time for that is usually {r.choice(MONTHS)}.",
    lambda r: (
        f"You could try {r.choice(PREF_TOPICS['food'])} with a side of "
        f"{r.choice(PREF_TOPICS['food'])}."
    ),
    lambda r: (
        f"Many people find that {r.choice(HOBBIES)} helps them unwind after a long "
        f"{r.choice(WEEKDAYS)}."
    ),
    lambda r: (
        f"If {r.choice(CHOICES)} is too expensive, {r.choice(CHOICES)} is a reasonable fallback."
    ),
    lambda r: f"I would set a reminder for {r.choice(WEEKDAYS)} so it does not slip.",
    lambda r: (
        f"For {r.choice(PROJECTS)}, write down the three things that matter most "
        "before comparing options."
    ),
    lambda r: "Keep the first version small; you can always add more later.",
    lambda r: f"It might be worth asking your {r.choice(RELATIONS)} what they think.",
    lambda r: (
        f"A good {r.choice(PREF_TOPICS['music'])} playlist makes "
        f"{_doing(r.choice(ACTIVITIES))} feel shorter."
    ),
    lambda r: f"Budget roughly {r.randint(20, 400)} euros and leave some room for surprises.",
    lambda r: "Let me know how it goes and we can adjust the plan.",
)


@dataclass
class GenMessage:
    role: str
    speaker: str
    content: str
    created_at: dt.datetime


@dataclass
class GenSession:
    external_id: str
    messages: list[GenMessage] = field(default_factory=list)


def _reply(rng: random.Random) -> str:
    count = min(6, 1 + int(rng.expovariate(1 / 2.2)))
    return " ".join(
        [rng.choice(_REPLY_OPENERS), *(rng.choice(_REPLY_SENTENCES)(rng) for _ in range(count))]
    )


def chat_session(
    rng: random.Random,
    *,
    external_id: str,
    name: str,
    turns: int,
    start: dt.datetime,
    statements: list[str],
    queries: Iterator[str],
) -> GenSession:
    """`turns` user/assistant pairs a minute or two apart; user turns mix things the user
    tells about themselves (`statements`, consumed), questions, and small talk."""
    out = GenSession(external_id)
    when = start
    for _ in range(turns):
        roll = rng.random()
        if roll < 0.45 and statements:
            user_text = statements.pop()
            if rng.random() < 0.3 and statements:
                user_text += " " + statements.pop()
        elif roll < 0.9:
            user_text = next(queries)
        else:
            user_text = rng.choice(_SMALL_TALK)
        out.messages.append(GenMessage("user", name, user_text, when))
        when += dt.timedelta(seconds=rng.randint(5, 40))
        out.messages.append(GenMessage("assistant", "Assistant", _reply(rng), when))
        when += dt.timedelta(seconds=rng.randint(30, 300))
    return out


@dataclass
class GenUser:
    external_id: str
    name: str
    facts: list[GenFact]
    earlier: list[GenSession]  # older sessions, oldest first
    current: GenSession  # the session build_context is asked about
    more_facts: Iterator[GenFact]  # further distinct facts, for top-ups after merges


def make_user(
    seed: int,
    *,
    external_id: str,
    facts: int,
    earlier_messages: int,
    session_messages: int,
    now: dt.datetime,
    statement_pool: int = 1000,
) -> GenUser:
    """One user: `facts` distinct facts (more in `more_facts`), earlier sessions of ~50
    messages spread over two years before `now`, and a current session of
    `session_messages` messages ending about now."""
    rng = random.Random(seed)
    name = rng.choice(FIRST_NAMES)
    stream = fact_stream(random.Random(seed + 1), name)
    gen_facts = [next(stream) for _ in range(facts)]
    # What the user says comes from their first `statement_pool` facts, so two users made
    # with the same seed and different fact counts have the very same messages.
    statements = [f.said for f in gen_facts[:statement_pool]]
    rng.shuffle(statements)
    queries = query_stream(random.Random(seed + 2))
    earlier: list[GenSession] = []
    per_session = 50
    n_sessions = (earlier_messages + per_session - 1) // per_session
    span = dt.timedelta(days=730)
    for i in range(n_sessions):
        size = min(per_session, earlier_messages - i * per_session)
        start = (
            now - span + span * i / max(n_sessions, 1) + dt.timedelta(minutes=rng.randint(0, 600))
        )
        earlier.append(
            chat_session(
                rng,
                external_id=f"{external_id}-s{i:04d}",
                name=name,
                turns=max(1, size // 2),
                start=start,
                statements=statements,
                queries=queries,
            )
        )
    turns = max(1, session_messages // 2)
    current = chat_session(
        rng,
        external_id=f"{external_id}-now",
        name=name,
        turns=turns,
        start=now - dt.timedelta(minutes=3 * turns),
        statements=statements,
        queries=queries,
    )
    return GenUser(external_id, name, gen_facts, earlier, current, stream)
