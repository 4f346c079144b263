"""Migration 0008: stored facts get the slots the current schemas give them, and where two
active facts then share a slot the older is superseded by the newer."""

from __future__ import annotations

import datetime as dt
from pathlib import Path
from typing import Any

from sqlmodel import Session, select

from shared.db.engine import make_engine
from shared.db.migrate import upgrade_to_head
from shared.db.models import Fact, User
from shared.memory.slot_upgrade import recompute_slots
from shared.records.tenancy import create_tenant
from tests.factories import make_settings

DAY = dt.datetime(2024, 5, 1, tzinfo=dt.UTC)


def v1_fact(user: User, n: int, type_: str, content: str, slot: str, **details: Any) -> Fact:
    """A fact as the v1 writer stored it (its slot in the old form)."""
    return Fact(
        id=f"00000000-0000-0000-0000-{n:012d}",
        tenant_id=user.tenant_id,
        user_id=user.id,
        type=type_,
        content=content,
        content_hash=f"h{n}",
        subject="Ana",
        slot=slot,
        details=details,
        confidence=0.9,
        extractor="offline",
        extractor_version="offline-2",
        first_seen_at=DAY + dt.timedelta(days=n),
        last_seen_at=DAY + dt.timedelta(days=n),
    )


def test_old_slots_are_recomputed_and_a_shared_slot_keeps_the_newer(tmp_path: Path) -> None:
    settings = make_settings(tmp_path)
    upgrade_to_head(settings)
    engine = make_engine(settings)
    with Session(engine) as session:
        user = User(tenant_id=create_tenant(session=session, name="t").id, external_id="ana")
        session.add(user)
        session.flush()
        session.add_all(
            [
                v1_fact(user, 1, "preference", "Ana loves jazz.", "preference/ana/music_jazz",
                        topic="music", sentiment="likes", value="jazz"),
                v1_fact(user, 2, "preference", "Ana dislikes jazz.", "preference/ana/jazz_jazz",
                        topic="jazz", sentiment="dislikes", value="jazz"),
                v1_fact(user, 3, "identity", "Ana speaks French.", "identity/ana/language_french",
                        attribute="language", value="French"),
                v1_fact(user, 4, "relationship", "Ana's sister is Maria.",
                        "relationship/ana/sister_maria", person="Maria", relation="sister"),
                v1_fact(user, 5, "identity", "Ana lives in Rome.", "identity/ana/location",
                        attribute="location", value="Rome"),
            ]
        )  # fmt: skip
        session.commit()

    with engine.begin() as connection:
        assert recompute_slots(connection) == {"reslotted": 5, "superseded": 1, "unreadable": 0}

    with Session(engine) as session:
        rows = {r.content: r for r in session.exec(select(Fact)).all()}
    assert (
        rows["Ana loves jazz."].slot == rows["Ana dislikes jazz."].slot == ("preference/about:jazz")
    )
    assert rows["Ana loves jazz."].superseded_by == rows["Ana dislikes jazz."].id
    assert rows["Ana dislikes jazz."].valid_to is None
    assert rows["Ana speaks French."].slot == "identity/language:french"
    assert rows["Ana's sister is Maria."].slot == "relationship/sister:maria"
    assert rows["Ana lives in Rome."].slot == "identity/location"
