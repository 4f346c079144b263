"""LoCoMo's one-file layout read as tiermem's users, sessions and messages, and its retrieval
scoring (the dataset's README: ../shared/data/locomo-dev/README.md).

The dataset (CC BY-NC) is read where it lies and never copied into this repository. Each
conversation is one user, each LoCoMo session one session, each turn a message (speaker_a as
user, speaker_b as assistant, dia_id as external_id, the session date as created_at).
"""

from __future__ import annotations

import datetime as dt
import json
from collections.abc import Sequence
from dataclasses import dataclass, field
from pathlib import Path

DATA = Path("/work/shared/data/locomo-dev/locomo-dev.json")
CATEGORIES = {1: "multi-hop", 2: "temporal", 3: "open-domain", 4: "single-hop"}


@dataclass(frozen=True)
class Turn:
    role: str
    speaker: str
    text: str
    dia_id: str
    said_at: dt.datetime


@dataclass(frozen=True)
class Question:
    user: str  # the conversation's sample_id
    text: str
    evidence: frozenset[str]
    category: int


@dataclass
class Dataset:
    sessions: dict[tuple[str, int], list[Turn]] = field(default_factory=dict)
    questions: list[Question] = field(default_factory=list)


def session_date(value: str) -> dt.datetime:
    """LoCoMo's "1:56 pm on 8 May, 2023", as UTC."""
    return dt.datetime.strptime(value, "%I:%M %p on %d %B, %Y").replace(tzinfo=dt.UTC)


def dataset_file(path: Path) -> Path:
    """`path` or the locomo-dev.json inside it; exits with a message when it is missing."""
    file = path / "locomo-dev.json" if path.is_dir() else path
    if not file.is_file():
        raise SystemExit(f"LoCoMo data not found at {path} (pass --data; it is never in the repo)")
    return file


def load_dataset(path: Path) -> Dataset:
    data = Dataset()
    for sample in json.loads(dataset_file(path).read_text(encoding="utf-8")):
        user, conv = sample["sample_id"], sample["conversation"]
        number = 1
        while f"session_{number}" in conv:
            start = session_date(conv[f"session_{number}_date_time"])
            data.sessions[(user, number)] = [
                Turn(
                    role="user" if t["speaker"] == conv["speaker_a"] else "assistant",
                    speaker=t["speaker"],
                    text=t["text"],
                    dia_id=t["dia_id"],
                    said_at=start + dt.timedelta(seconds=i),  # same day, in order
                )
                for i, t in enumerate(conv[f"session_{number}"])
            ]
            number += 1
        for qa in sample["qa"]:
            # One evidence entry reads "D8:6; D9:17"; categories 5 (adversarial) name none.
            evidence = frozenset(e.strip() for x in qa["evidence"] for e in x.split(";"))
            if qa["category"] in CATEGORIES and evidence:
                data.questions.append(Question(user, qa["question"], evidence, qa["category"]))
    return data


def found_any(question: Question, hits: Sequence[str | None], k: int | None = None) -> bool:
    """One of the question's evidence turns among the first k hits (all of them: None)."""
    return bool(question.evidence & set(hits[:k]))


def found_all(question: Question, hits: Sequence[str | None], k: int | None = None) -> bool:
    """Every evidence turn among the first k hits."""
    return question.evidence <= set(hits[:k])
