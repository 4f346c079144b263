"""The events outbox (shared.records.events): a tenant's events commit in seq order, so a
reader past seq N never later finds a smaller one of that tenant (the feed's cursor and the
webhooks' fan-out rely on it), on SQLite and on PostgreSQL (its advisory lock)."""

from __future__ import annotations

import threading

import pytest
from sqlmodel import Session

from shared.records.events import MEMORY_ADDED, record_event
from shared.records.tenancy import create_tenant
from shared.runtime import Runtime
from shared.webhooks.feed import events_after


def _tenant(runtime: Runtime, name: str) -> str:
    with Session(runtime.engine) as session:
        return create_tenant(session=session, name=name).id


def _record(runtime: Runtime, tenant_id: str, n: int, done: threading.Event) -> None:
    with Session(runtime.engine) as session:
        record_event(session, tenant_id=tenant_id, user_id=None, type_=MEMORY_ADDED, data={"n": n})
        session.commit()
    done.set()


def test_a_second_writer_of_a_tenant_commits_after_the_first(runtime: Runtime) -> None:
    tenant = _tenant(runtime, "acme")
    first = Session(runtime.engine)
    record_event(first, tenant_id=tenant, user_id=None, type_=MEMORY_ADDED, data={"n": 1})
    second_done = threading.Event()
    second = threading.Thread(target=_record, args=(runtime, tenant, 2, second_done))
    second.start()
    # The second took its seq after the first's, and must not commit before it: a reader
    # then past the second's seq would never see the first's.
    assert not second_done.wait(1.0)
    first.commit()
    first.close()
    second.join(timeout=30)
    assert second_done.is_set()
    with Session(runtime.read_engine) as session:
        page = events_after(session=session, tenant_id=tenant, after=0, limit=10)
    assert [e.data["n"] for e in page.data] == [1, 2]
    assert page.data[0].cursor < page.data[1].cursor == page.next_cursor


@pytest.mark.postgres
@pytest.mark.parametrize("runtime", ["postgres"], indirect=True)
def test_on_postgresql_another_tenants_writer_does_not_wait(runtime: Runtime) -> None:
    acme, globex = _tenant(runtime, "acme"), _tenant(runtime, "globex")
    first = Session(runtime.engine)
    record_event(first, tenant_id=acme, user_id=None, type_=MEMORY_ADDED, data={"n": 1})
    other_done = threading.Event()
    other = threading.Thread(target=_record, args=(runtime, globex, 1, other_done))
    other.start()
    assert other_done.wait(10), "a writer of another tenant waited for acme's transaction"
    first.rollback()
    first.close()
    other.join()
