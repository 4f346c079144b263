"""Client against a real `tiermem serve`: a turn stored, extracted, found, exported and
erased; chat; sessions; admin; and the API's errors as typed exceptions."""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path

import pytest

from tests.factories import ADMIN_KEY, APP_KEY, free_port, new_id, tiermem_serve, wait_for
from tests.scripted_llm import ScriptedLLM
from tests.webhook_receiver import Receiver, received
from tiermem import Client, Forbidden, NotFound, Unauthorized, ValidationFailed
from tiermem.models import MessageIn


@pytest.fixture(name="client")
def client_fixture(server: str) -> Iterator[Client]:
    with Client(server, APP_KEY, timeout=30) as client:
        yield client


def test_a_turn_is_stored_extracted_found_exported_and_erased(client: Client) -> None:
    user, session = new_id("ana"), new_id("s")
    said = MessageIn(content="I live in Berlin and I love jazz.", speaker="Ana", external_id="m1")
    reply = MessageIn(content="Nice!", external_id="m2")
    turn = client.store_turn(session, user_id=user, user_message=said, assistant_message=reply)
    assert turn.user_id == user and len(turn.message_ids) == 2 and turn.job_id
    assert turn.extractor == "offline" and not turn.duplicate

    job = client.wait_for_job(turn.job_id, timeout=60)
    assert job.status == "done", job
    assert job.facts_added >= 2

    found = client.search_memories(user, "Where does Ana live?", k=5)
    berlin = next(m for m in found.data if "Berlin" in m.content)
    assert berlin.score is not None and berlin.sources[0].external_id == "m1"

    listed = client.list_memories(user)
    assert listed.count == len(listed.data) >= 2
    assert berlin.id in {m.id for m in listed.data}
    assert client.get_memory(user, berlin.id).content == berlin.content
    walked = list(client.iter_memories(user, page_size=1))
    assert [m.id for m in walked] == [m.id for m in listed.data]
    assert [m.id for m in client.iter_memories(user, types=["preference"])] == [
        m.id for m in listed.data if m.type == "preference"
    ]

    context = client.get_context(session, query="what music do I like?")
    assert context.user_id == user and context.token_count <= context.budget_tokens
    assert any("jazz" in m.content for ms in context.memories.values() for m in ms)

    hits = client.search_history(user, "jazz", k=3)
    assert hits.count >= 1 and "jazz" in hits.data[0].content

    again = client.store_turn(session, user_id=user, user_message=said, assistant_message=reply)
    assert again.duplicate and again.job_id == turn.job_id

    exported = client.export_user(user)
    assert [m.content for m in exported.messages] == [said.content, "Nice!"]
    assert {m.id for m in exported.memories} == {m.id for m in listed.data}

    client.delete_memory(user, berlin.id)
    with pytest.raises(NotFound) as gone:
        client.get_memory(user, berlin.id)
    assert gone.value.status == 404 and gone.value.code == "not_found"

    deleted = client.delete_user(user)
    assert deleted.deleted["messages"] == 2
    with pytest.raises(NotFound):
        client.list_memories(user)


def test_the_memory_browsers_reads_users_sessions_runs_and_beliefs(client: Client) -> None:
    user, session = new_id("lena"), new_id("s")
    turn = client.store_turn(session, user_id=user, user_message="I live in Oslo.")
    assert client.wait_for_job(turn.job_id, timeout=60).status == "done"
    [listed] = client.list_users(q=user.upper()).data
    assert (listed.user_id, listed.sessions, listed.messages) == (user, 1, 1)
    assert [s.session_id for s in client.list_sessions(user).data] == [session]
    [run] = client.list_runs(user, status=["done"]).data
    assert run.id == turn.job_id and run.message == "I live in Oslo."
    assert client.list_runs(user, status=["failed", "dropped"]).count == 0
    location = next(s for s in client.get_beliefs(user).data if s.slot == "identity/location")
    assert location.current == "Oslo" and location.values[0].said_in is not None


def test_import_then_wait_for_each_job(client: Client) -> None:
    user, session = new_id("ben"), new_id("s")
    lines = [
        {
            "user_id": user,
            "session_id": session,
            "role": "user",
            "content": "I'm a nurse.",
            "external_id": "l1",
        },
        {
            "user_id": user,
            "session_id": session,
            "role": "assistant",
            "content": "Great.",
            "external_id": "l2",
        },
    ]
    accepted = client.import_messages(lines)
    assert accepted.stored == 2 and len(accepted.job_ids) == 1
    assert client.wait_for_job(accepted.job_ids[0], timeout=60).status in ("done", "skipped")
    assert client.import_messages(lines).duplicates == 2


def test_a_sessions_messages_are_read_back_in_order_page_by_page(client: Client) -> None:
    user, session = new_id("cy"), new_id("s")
    with pytest.raises(NotFound):
        client.list_messages(session)
    roles = ["user", "assistant", "tool", "user", "system"]
    lines = [
        {"user_id": user, "session_id": session, "role": role, "content": f"line {n}"}
        for n, role in enumerate(roles)
    ]
    client.import_messages(lines)
    page = client.list_messages(session)
    assert page.count == 5 and [m.content for m in page.data] == [f"line {n}" for n in range(5)]
    assert [m.role for m in page.data] == roles and {m.session_id for m in page.data} == {session}
    assert [m.seq for m in page.data] == sorted(m.seq for m in page.data)
    last_two = client.list_messages(session, limit=2, newest_first=True)
    assert last_two.count == 5 and [m.content for m in last_two.data] == ["line 4", "line 3"]
    middle = client.list_messages(session, limit=2, offset=2)
    assert [m.content for m in middle.data] == ["line 2", "line 3"]
    with pytest.raises(ValidationFailed):
        client.list_messages(session, limit=1001)


def test_chat_and_its_stream_store_the_turn(client: Client, scripted_llm: ScriptedLLM) -> None:
    user, session = new_id("cy"), new_id("s")
    scripted_llm.script("jazz bars", "Try the Blue Note tonight.")
    answer = client.chat(user_id=user, session_id=session, message="Any jazz bars near me?")
    assert answer.reply == "Try the Blue Note tonight." and len(answer.message_ids) == 2

    scripted_llm.script("a second bar", "Then the Village Vanguard, after that.")
    stream = client.chat_stream(user_id=user, session_id=session, message="And a second bar?")
    deltas = list(stream)
    assert len(deltas) > 1 and "".join(deltas) == "Then the Village Vanguard, after that."
    assert stream.result is not None and stream.result.reply == "".join(deltas)
    assert stream.result.job_id and len(stream.result.message_ids) == 2
    exported = client.export_user(user)
    assert [m.content for m in exported.messages][-1] == "Then the Village Vanguard, after that."


def test_session_tiers_compaction_settings_and_continuation(client: Client) -> None:
    user, session = new_id("dee"), new_id("s")
    for n in range(3):
        said, answer = f"Tell me about topic {n}.", f"Topic {n} matters for reason {n}."
        client.store_turn(session, user_id=user, user_message=said, assistant_message=answer)
    tiers = client.get_tiers(session)
    assert tiers.partition_ok and [t.name for t in tiers.tiers][-1] == "current"

    run = client.compact(session, focus="topics")
    assert run.trigger == "compact"
    finished = client.wait_for_compression_run(session, run.id, timeout=60)
    assert finished.status not in ("pending", "running", "retrying")
    assert run.id in {r.id for r in client.list_compression_runs(session).data}
    assert client.get_compression_run(session, run.id).id == run.id

    settings = client.set_compression_settings(session, pin_head=False, trigger_ratio=0.8)
    assert settings.overrides == {"pin_head": False, "trigger_ratio": 0.8}
    assert client.get_compression_settings(session).effective.pin_head is False

    child = client.continue_session(session, new_session_id=f"{session}-2")
    assert child.session_id == f"{session}-2" and child.parent_session_id == session


def test_admin_creates_a_tenant_and_keys_that_reach_only_it(server: str) -> None:
    with Client(server, ADMIN_KEY) as operator:
        created = operator.create_tenant(new_id("acme"))
        tenant = created.tenant
        assert created.app_key.scope == "app" and created.app_key.key
        assert tenant.id in {t.id for t in operator.list_tenants()}
        admin_key = operator.create_key(tenant.id, name="ops", scope="admin")
        assert admin_key.tenant_id == tenant.id and admin_key.scope == "admin"
        assert operator.ops_workers() is not None
        assert operator.ops_vectors().engine == "edge"

    with Client(server, created.app_key.key) as app:
        turn = app.store_turn("s1", user_id="zoe", user_message="I work at Siemens.")
        assert turn.job_id and app.wait_for_job(turn.job_id, timeout=60).status == "done"
        assert app.list_messages("s1").count == 1
    with Client(server, APP_KEY) as other_tenant:
        with pytest.raises(NotFound):
            other_tenant.get_job(turn.job_id)
        with pytest.raises(NotFound):  # session ids are per tenant
            other_tenant.list_messages("s1")

    with Client(server, admin_key.key) as admin:
        assert [t.id for t in admin.list_tenants()] == [tenant.id]
        assert {q.name for q in admin.ops_queues().queues} >= {"extract"}
        assert admin.ops_timeseries(minutes=5).points is not None
        assert admin.retry_runs().retried == []
        replay = admin.start_replay(mode="dry_run")
        assert replay.total == 1
        assert admin.wait_for_replay(replay.id, timeout=120).status == "done"
        assert replay.id in {r.id for r in admin.list_replays()}
        with pytest.raises(Forbidden) as refused:
            admin.create_tenant(new_id("evil"))
        assert refused.value.code == "forbidden"


def test_webhooks_deliver_from_tiermem_serve_and_the_feed_reads_the_same(
    server: str, tmp_path: Path
) -> None:
    with Client(server, ADMIN_KEY) as operator:
        created = operator.create_tenant(new_id("hooks"))
        admin_key = operator.create_key(created.tenant.id, scope="admin").key
    port, log, secrets = free_port(), tmp_path / "received.jsonl", {}
    receiver = Receiver(port, log, secrets).start()
    try:
        with Client(server, admin_key) as admin:
            hook = admin.create_webhook(f"http://127.0.0.1:{port}/in", ["memory.added"])
            secrets["/in"] = hook.secret
            assert admin.test_webhook(hook.id).delivered
            assert [h.id for h in admin.list_webhooks().data] == [hook.id]
            with Client(server, created.app_key.key) as app:
                turn = app.store_turn("s1", user_id="zoe", user_message="I live in Lisbon.")
                assert turn.job_id and app.wait_for_job(turn.job_id, timeout=60).status == "done"
                page = app.events()
            assert [e.type for e in page.data] == ["memory.added"] and not page.has_more
            # `tiermem serve` delivers it itself (its dispatch thread stands in for beat)
            wait_for(
                lambda: any(r["type"] == "memory.added" for r in received(log)),
                timeout=30, what="memory.added from tiermem serve",
            )  # fmt: skip
            got = [r for r in received(log) if r["type"] == "memory.added"]
            assert [r["id"] for r in got] == [page.data[0].id] and got[0]["valid"]
            # The receiver has the request before the worker records the delivery as sent.
            wait_for(
                lambda: admin.ops_webhooks().pending == 0,
                timeout=30, what="the delivery recorded as sent",
            )  # fmt: skip
            assert admin.update_webhook(hook.id, enabled=False).enabled is False
            admin.delete_webhook(hook.id)
            with pytest.raises(NotFound):
                admin.get_webhook(hook.id)
    finally:
        receiver.stop()


def test_errors_are_typed_with_the_api_code_message_and_details(
    server: str, client: Client
) -> None:
    with pytest.raises(NotFound) as missing:
        client.get_job("no-such-job")
    assert (missing.value.status, missing.value.code) == (404, "not_found")
    assert "no-such-job" in missing.value.message

    with Client(server, "not-a-key") as stranger, pytest.raises(Unauthorized) as refused:
        stranger.list_memories("ana")
    assert (refused.value.status, refused.value.code) == (401, "unauthorized")

    user = new_id("eve")
    client.store_turn(new_id("s"), user_id=user, user_message="Hello there.")
    with pytest.raises(ValidationFailed) as invalid:
        client.list_memories(user, limit=5000)
    assert (invalid.value.status, invalid.value.code) == (422, "invalid_input")
    assert invalid.value.details["errors"][0]["loc"] == ["query", "limit"]

    # What the server's own request model refuses is refused before sending, the same way.
    with pytest.raises(ValidationFailed) as early:
        client.store_turn("s1", user_id="not an id!", user_message="hi")
    assert early.value.status is None and early.value.code == "invalid_input"
    assert early.value.details["errors"][0]["loc"] == ["user_id"]


def test_wait_for_job_returns_a_job_whose_items_were_all_dropped(
    tmp_path: Path, scripted_llm_server: ScriptedLLM
) -> None:
    """`dropped` is a finished state: the caller reads it at once, not after its timeout."""
    scripted_llm_server.script(
        "Trondheim", {"facts": [{"type": "identity", "content": "Ana is in Trondheim."}]}
    )
    model = {"TIERMEM_LLM__BASE_URL": scripted_llm_server.base_url, "TIERMEM_LLM__MODEL": "m"}
    with tiermem_serve(tmp_path, model) as url, Client(url, APP_KEY, timeout=30) as client:
        said = MessageIn(content="I live in Trondheim", speaker="Ana")
        turn = client.store_turn(new_id("s"), user_id=new_id("ana"), user_message=said)
        assert turn.job_id
        job = client.wait_for_job(turn.job_id, timeout=30)
    assert job.status == "dropped" and job.error and "none could be kept" in job.error
