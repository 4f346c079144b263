"""Two facts that cannot both be true now never go into one context: the newer is kept.

The facts are stored straight into SQL and the vector store, past the writer's supersede,
as a race between two extractions or data from before a slot rule would leave them.
"""

from __future__ import annotations

import datetime as dt
from dataclasses import dataclass
from typing import Any

import pytest
from fastapi.testclient import TestClient
from prometheus_client.parser import text_string_to_metric_families
from sqlmodel import Session

from shared.db.models import User
from shared.extraction.schemas import typed_fact_adapter
from shared.memory import writer
from shared.memory.writer import Provenance
from shared.records.tenancy import get_tenant_by_name
from shared.runtime import Runtime
from shared.vectors import VectorPoint
from tests import factories as f
from tests.factories import ADMIN_KEY

OPERATOR = {"Authorization": f"Bearer {ADMIN_KEY}"}
DAY = dt.datetime(2025, 3, 1, 9, 0, tzinfo=dt.UTC)
METRIC = "tiermem_context_contradictions_dropped_total"


@dataclass(frozen=True)
class Said:
    """A fact as the extractor gives it (tests.factories), said on day `day`."""

    item: dict[str, Any]
    day: int
    slot: str | None = None  # a slot from an older rule, in place of today's

    @property
    def content(self) -> str:
        return str(self.item["content"])


def ended(item: dict[str, Any]) -> dict[str, Any]:
    return {**item, "ended": True}


def store(runtime: Runtime, *said: Said, user: str = "ana") -> None:
    """Active fact rows and their vectors, each as the writer would write it alone."""
    settings = runtime.settings
    with Session(runtime.engine) as session:
        tenant = get_tenant_by_name(session=session, name=settings.auth.dev_tenant)
        assert tenant is not None
        owner = User(tenant_id=tenant.id, external_id=user)
        session.add(owner)
        session.flush()  # no ORM relationships: the owner's row goes in first
        rows = []
        for i, s in enumerate(said):
            provenance = Provenance(
                tenant_id=tenant.id,
                user_id=owner.id,
                chat_id="s-old",
                message_ids=(f"m{i}",),
                seen_at=DAY + dt.timedelta(days=s.day),
                extractor="offline",
                extractor_version="test",
                model=None,
            )
            # the writer's own row (private, but the point is to store what it stores)
            row = writer._new_row(typed_fact_adapter.validate_python(s.item), provenance)
            row.slot = s.slot or row.slot
            rows.append(row)
        session.add_all(rows)
        session.commit()
        vectors = runtime.embedder.embed([r.content for r in rows])
        runtime.facts_of(tenant_id=tenant.id, user_id=owner.id).upsert(
            [
                VectorPoint(id=r.id, vector=v, payload=writer.point_payload(r))
                for r, v in zip(rows, vectors, strict=True)
            ]
        )


def context(client: TestClient, query: str | None) -> dict[str, Any]:
    params = {"user_id": "ana", "budget_tokens": 4000, **({"query": query} if query else {})}
    response = client.get("/v1/sessions/not-started/context", params=params)
    assert response.status_code == 200, response.text
    body: dict[str, Any] = response.json()
    return body


def shown(body: dict[str, Any]) -> set[str]:
    return {m["content"] for group in body["memories"].values() for m in group}


def dropped_so_far(client: TestClient) -> dict[str, float]:
    """The counter's value per fact type, as /metrics shows it."""
    response = client.get("/metrics", headers=OPERATOR)
    assert response.status_code == 200, response.text
    return {
        sample.labels["type"]: sample.value
        for family in text_string_to_metric_families(response.text)
        for sample in family.samples
        if sample.name == METRIC
    }


LIVES_BERLIN = f.identity("Ana", "location", "Berlin", "Ana lives in Berlin.")
LIVES_MUNICH = f.identity("Ana", "location", "Munich", "Ana lives in Munich.")
WORKS_SIEMENS = f.identity("Ana", "employer", "Siemens", "Ana works at Siemens.")
QUIT_SIEMENS = ended(f.identity("Ana", "employer", "Siemens", "Ana quit her job at Siemens."))
BACK_AT_SIEMENS = f.identity("Ana", "employer", "Siemens", "Ana is back at Siemens.")
NO_JAZZ = f.preference("Ana", "music", "jazz", "Ana does not like jazz.", sentiment="dislikes")
JAZZ_AGAIN = f.preference("Ana", "music", "jazz", "Ana loves jazz again.")
OLD_JAZZ_SLOT = "preference/ana/music:jazz"  # the slot "likes jazz" had before about:<thing>

# (what was said, the query, what the context shows, what it never shows)
CASES = {
    "one slot, two values: the move wins": (
        [Said(LIVES_BERLIN, day=1), Said(LIVES_MUNICH, day=9)],
        "Where does Ana live?",
        {"Ana lives in Munich."},
        {"Ana lives in Berlin."},
    ),
    "liked and disliked in two slots: the newer sentiment wins": (
        [Said(NO_JAZZ, day=1), Said(JAZZ_AGAIN, day=9, slot=OLD_JAZZ_SLOT)],
        "Does Ana like jazz?",
        {"Ana loves jazz again."},
        {"Ana does not like jazz."},
    ),
    "an ending newer than the value it ended wins": (
        [Said(WORKS_SIEMENS, day=1), Said(QUIT_SIEMENS, day=9)],
        "Where does Ana work?",
        {"Ana quit her job at Siemens."},
        {"Ana works at Siemens."},
    ),
    "a value said again after its ending wins": (
        [Said(QUIT_SIEMENS, day=1), Said(BACK_AT_SIEMENS, day=9)],
        "Where does Ana work?",
        {"Ana is back at Siemens."},
        {"Ana quit her job at Siemens."},
    ),
}


@pytest.mark.parametrize("query", [None, "question"], ids=["most-mentioned", "by-query"])
@pytest.mark.parametrize("case", list(CASES))
def test_the_context_keeps_only_the_newer_of_two_contradicting_facts(
    client: TestClient, runtime: Runtime, case: str, query: str | None
) -> None:
    said, question, kept, gone = CASES[case]
    store(runtime, *said)
    fact_type = said[0].item["type"]
    before = dropped_so_far(client)

    body = context(client, question if query else None)

    assert kept <= shown(body), body["system_prompt"]
    assert not gone & shown(body), body["system_prompt"]
    assert not any(g in body["system_prompt"] for g in gone)
    assert body["contradictions_dropped"] == 1
    after = dropped_so_far(client)
    assert after[fact_type] == before[fact_type] + 1
    assert {t: v for t, v in after.items() if t != fact_type} == {
        t: v for t, v in before.items() if t != fact_type
    }


SAP = f.identity("Ana", "employer", "SAP", "Ana works at SAP.")
NO_OPERA = f.preference("Ana", "music", "opera", "Ana does not like opera.", sentiment="dislikes")


@pytest.mark.parametrize(
    ("said", "gone"),
    [
        # "I quit Siemens, I'm starting at SAP": one slot, but the ending names Siemens only
        (
            [Said(WORKS_SIEMENS, day=1), Said(QUIT_SIEMENS, day=9), Said(SAP, day=9)],
            {"Ana works at Siemens."},
        ),
        # two things, two sentiments: both true
        ([Said(JAZZ_AGAIN, day=1), Said(NO_OPERA, day=9)], set()),
    ],
    ids=["an ending beside another value", "two tastes"],
)
def test_facts_that_can_both_be_true_are_both_shown(
    client: TestClient, runtime: Runtime, said: list[Said], gone: set[str]
) -> None:
    store(runtime, *said)
    body = context(client, None)
    assert shown(body) == {s.content for s in said} - gone, body["system_prompt"]
    assert body["contradictions_dropped"] == len(gone)
