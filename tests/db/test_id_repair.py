"""`tiermem repair-ids`: ids stored before the id rule was a full match ("abc\\n") are found
and renamed, so the user behind them can be read, exported and erased through the API."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

from fastapi.testclient import TestClient
from sqlmodel import Session, select

from shared.config import Settings
from shared.db.id_repair import find_unreachable_ids, reachable_form
from shared.db.migrate import upgrade_to_head
from shared.db.models import ChatSession, Message, User
from shared.records.ingest import NewMessage, ingest_messages
from shared.records.tenancy import ensure_dev_tenant, get_tenant_by_name
from shared.runtime import Runtime
from tests import processes
from tests.factories import APP_KEY, make_settings, tiermem_env


def store_raw(runtime: Runtime, user: str, chat: str, external_id: str | None = None) -> None:
    """What the API stored before ids were checked in full: the ingest path, unvalidated."""
    with Session(runtime.engine) as session:
        ensure_dev_tenant(session=session, settings=runtime.settings)
        tenant = get_tenant_by_name(session=session, name=runtime.settings.auth.dev_tenant)
        assert tenant is not None
        ingest_messages(
            session=session,
            settings=runtime.settings,
            tenant_id=tenant.id,
            user_external_id=user,
            session_external_id=chat,
            messages=[NewMessage(role="user", content="I live in Lima.", external_id=external_id)],
            extractor="offline",
        )
        session.commit()


def repair_ids(settings: Settings, *args: str) -> subprocess.CompletedProcess[str]:
    env = tiermem_env({"TIERMEM_DATA_DIR": str(settings.data_dir)})
    return processes.run(
        [sys.executable, "-m", "services.cli.main", "repair-ids", *args],
        env=env,
        capture_output=True,
        text=True,
        timeout=120,
        cwd=Path(__file__).resolve().parents[2],
    )


def test_reachable_form_follows_the_rule() -> None:
    assert reachable_form("abc\n") == "abc"
    assert reachable_form(" ../x y ") == "x_y"
    assert reachable_form("\n") == "id"
    assert len(reachable_form("a" * 300)) == 128


def test_repair_renames_unreachable_ids_and_the_user_can_then_be_erased(tmp_path: Path) -> None:
    settings = make_settings(tmp_path, qdrant={"in_memory": True})
    upgrade_to_head(settings)
    runtime = Runtime(settings)
    store_raw(runtime, "abc\n", "s1\n", external_id="m1\n")
    store_raw(runtime, "abc", "s2")  # the repaired name is taken: the repair must not merge
    store_raw(runtime, "zed", "z1")  # a valid user is left alone
    with Session(runtime.engine) as session:
        found = {(r.kind, r.old): r.new for r in find_unreachable_ids(session)}
    assert found == {
        ("user", "abc\n"): "abc-1",
        ("session", "s1\n"): "s1",
        ("message", "m1\n"): "m1",
    }
    runtime.close()

    listed = repair_ids(settings)  # without --apply: a list, nothing changed
    assert listed.returncode == 0, listed.stderr
    assert "'abc\\n' -> 'abc-1'" in listed.stdout and "--apply" in listed.stderr
    applied = repair_ids(settings, "--apply")
    assert applied.returncode == 0, applied.stderr
    assert "renamed 3 ids" in applied.stderr
    again = repair_ids(settings)
    assert "nothing to repair" in again.stderr

    from services.api.main import create_app

    runtime = Runtime(settings)
    with TestClient(create_app(settings, runtime=runtime)) as client:
        client.headers["Authorization"] = f"Bearer {APP_KEY}"
        exported = client.get("/v1/users/abc-1/export")
        assert exported.status_code == 200, exported.text
        assert "I live in Lima." in exported.text
        assert client.delete("/v1/users/abc-1").status_code == 200
        assert client.get("/v1/users/abc-1/export").status_code == 404
        assert client.get("/v1/users/abc/export").status_code == 200  # the other user stays
    with Session(runtime.engine) as session:
        assert set(session.exec(select(User.external_id)).all()) == {"abc", "zed"}
        assert "s1" not in set(session.exec(select(ChatSession.external_id)).all())
        assert session.exec(select(Message).where(Message.external_id == "m1\n")).first() is None
    runtime.close()
