"""GET requests read in transactions that never wait for a writer (docs/decisions/0005)."""

from __future__ import annotations

import threading

from fastapi.testclient import TestClient
from sqlalchemy import text
from sqlmodel import Session

from shared.runtime import Runtime


def test_a_get_is_answered_while_a_worker_holds_the_write_lock(
    client: TestClient, runtime: Runtime
) -> None:
    assert (
        client.post(
            "/v1/sessions/s1/turns", json={"user_id": "ana", "user_message": "I live in Porto."}
        ).status_code
        == 202
    )
    writing, done = threading.Event(), threading.Event()

    def hold_the_write_lock() -> None:
        with Session(runtime.engine) as session:
            session.execute(text("UPDATE users SET external_id = external_id"))
            writing.set()
            done.wait(15)  # past the 10 s busy timeout a writer-side GET would wait
            session.rollback()

    writer = threading.Thread(target=hold_the_write_lock)
    writer.start()
    try:
        assert writing.wait(5)
        assert client.get("/v1/users/ana/memories").status_code == 200
        assert client.get("/v1/users/nobody/memories").status_code == 404
        assert writer.is_alive()  # both answered while the write lock was held
    finally:
        done.set()
        writer.join()
