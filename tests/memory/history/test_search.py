"""History search's parts: query sanitizing, the keyword index and its triggers, the
message collection (dense and sparse vectors: indexing, reindex, a vector store out of reach),
messages not indexed yet found by SQL full-text, and a collection of an earlier tiermem, on
SQLite and PostgreSQL."""

from __future__ import annotations

import datetime as dt
from collections.abc import Iterator, Sequence
from pathlib import Path
from typing import Any

import pytest
from alembic import command
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st
from sqlalchemy import text, update
from sqlmodel import Session, col, select

from shared.db.migrate import alembic_config, upgrade_to_head
from shared.db.models import ExtractionRun, Message, Tenant, User
from shared.embeddings import CachedEmbedder, Embedder, Vectors
from shared.errors import Unavailable
from shared.flows.extract_turn import index_user_messages, run_extraction
from shared.flows.forget import delete_user
from shared.flows.import_transcripts import import_lines
from shared.flows.reindex import reindex_all
from shared.memory.history import collection, indexing
from shared.memory.history.fulltext import fts5_match, keyword_search, websearch_text
from shared.memory.history.indexing import index_text, is_indexable
from shared.memory.history.search import search_history
from shared.memory.history.words import keyword_terms
from shared.memory.models import MessageHit
from shared.records.models import TranscriptLine
from shared.records.tenancy import ensure_dev_tenant
from shared.runtime import Runtime
from tests.factories import make_settings
from tests.memory.history_corpus import OTHER_SESSIONS, OTHER_USER, SESSIONS, USER, transcript

PET_MESSAGE = "My dog Rex chewed the sofa while we were out."


def _search(*, runtime: Runtime, user: User, **options: Any) -> list[MessageHit]:
    """search_history with the runtime's parts for the user, as the context builder passes them."""
    return search_history(
        messages=runtime.messages_if_reachable(tenant_id=user.tenant_id, user_id=user.id),
        embedder=runtime.embedder,
        context=runtime.settings.context,
        user=user,
        **options,
    )


# -- the query ------------------------------------------------------------------------------


def test_keyword_terms_drop_stopwords_and_keep_compound_tokens() -> None:
    assert keyword_terms("What did I say about my PET?") == ["say", "pet"]
    assert keyword_terms("ticket INC-40213, e.g. don't") == ["ticket", "inc-40213", "e.g"]
    # Nothing topical: no keyword search at all (PostgreSQL would drop these words too).
    assert keyword_terms("who am I") == []
    assert keyword_terms('"*" OR AND (') == []
    assert keyword_terms("?!* ()") == []
    assert len(keyword_terms(" ".join(f"w{i}" for i in range(500)))) == 32


def test_match_expressions_quote_every_term() -> None:
    assert fts5_match(["or", 'a"b'], user_id="u-1") == (
        'user_id : "u-1" AND content : ("or" OR "a""b")'
    )
    assert websearch_text(["or", "inc-40213"]) == '"or" or "inc-40213"'


def test_index_text_carries_the_date_and_speaker() -> None:
    when = dt.datetime(2023, 5, 8, 18, 0, tzinfo=dt.UTC)
    said = Message(
        tenant_id="t",
        user_id="u",
        session_id="s",
        seq=0,
        role="user",
        speaker="Ana",
        content="Hello there, Rex.",
        created_at=when,
    )
    assert index_text(said) == "(8 May 2023) Ana: Hello there, Rex."
    reply = Message(
        tenant_id="t",
        user_id="u",
        session_id="s",
        seq=1,
        role="assistant",
        content="Hi!",
        created_at=when,
    )
    assert index_text(reply) == "(8 May 2023) Assistant: Hi!"
    assert not is_indexable(reply)  # small talk
    assert not is_indexable(
        Message(
            tenant_id="t",
            user_id="u",
            session_id="s",
            seq=2,
            role="tool",
            content="{'rows': 3}",
            created_at=when,
        )
    )


# -- a stored world ---------------------------------------------------------------------------


def build_world(tmp_path: Path, **overrides: Any) -> tuple[Runtime, User, User]:
    """Both corpus users stored and extracted in-process (offline extractor)."""
    settings = make_settings(tmp_path, qdrant={"in_memory": True}, **overrides)
    upgrade_to_head(settings)
    runtime = Runtime(settings)
    with Session(runtime.engine) as session:
        ensure_dev_tenant(session=session, settings=settings)
        tenant_id = session.exec(select(Tenant.id)).one()
        lines = transcript(USER, SESSIONS) + transcript(OTHER_USER, OTHER_SESSIONS)
        import_lines(
            session=session,
            settings=settings,
            tenant_id=tenant_id,
            lines=[TranscriptLine.model_validate(line) for line in lines],
        )
        run_ids = session.exec(select(ExtractionRun.id)).all()
    for run_id in run_ids:
        run_extraction(runtime, run_id)
    with Session(runtime.engine) as session:
        users = {u.external_id: u for u in session.exec(select(User)).all()}
    return runtime, users[USER], users[OTHER_USER]


@pytest.fixture(name="world", scope="module")
def world_fixture(tmp_path_factory: pytest.TempPathFactory) -> Iterator[tuple[Runtime, User, User]]:
    world = build_world(tmp_path_factory.mktemp("history"))
    yield world
    world[0].close()


@pytest.fixture(
    name="world_on_each_database",
    params=["sqlite", pytest.param("postgres", marks=pytest.mark.postgres)],
)
def world_on_each_database_fixture(
    tmp_path: Path, request: pytest.FixtureRequest
) -> Iterator[tuple[Runtime, User, User]]:
    on_postgres = request.param == "postgres"
    overrides = {"database_url": request.getfixturevalue("pg_url")} if on_postgres else {}
    world = build_world(tmp_path, **overrides)
    yield world
    world[0].close()


def contents(session: Session, ids: list[str]) -> list[str]:
    # The caller's session: on SQLite every transaction takes the write lock (BEGIN
    # IMMEDIATE), so a second session opened inside the first would wait for it.
    rows = {m.id: m.content for m in session.exec(select(Message).where(col(Message.id).in_(ids)))}
    return [rows[i] for i in ids]


def test_query_vector_given_or_computed_gives_the_same_hits(
    world: tuple[Runtime, User, User],
) -> None:
    runtime, ana, _ = world
    query = "what did I say about my pet"
    with Session(runtime.engine) as session:
        computed = _search(runtime=runtime, session=session, user=ana, query=query)
        vector = runtime.embedder.embed([query])[0]
        given_ = _search(
            runtime=runtime, session=session, user=ana, query=query, query_vector=vector
        )
    assert computed == given_
    assert PET_MESSAGE in [h.content for h in computed[:3]]


def test_excluding_a_session_by_internal_id(world: tuple[Runtime, User, User]) -> None:
    runtime, ana, _ = world
    with Session(runtime.engine) as session:
        home = session.exec(select(Message.session_id).where(Message.content == PET_MESSAGE)).one()
        hits = _search(
            runtime=runtime,
            session=session,
            user=ana,
            k=100,
            query="my dog Rex chewed the sofa",
            exclude_session_id=home,
        )
    assert hits and all(h.session_id != "home-2023-07" for h in hits)


def test_vector_store_out_of_reach_leaves_keyword_hits(
    world: tuple[Runtime, User, User], monkeypatch: pytest.MonkeyPatch
) -> None:
    runtime, ana, _ = world

    def unreachable(_: Runtime) -> None:
        raise Unavailable("the worker owns the embedded Qdrant folder")

    monkeypatch.setattr(Runtime, "vectors", property(unreachable))
    with Session(runtime.engine) as session:
        hits = _search(runtime=runtime, session=session, user=ana, query="Zanzibar")
    assert hits and all(h.vector_rank is None for h in hits)
    assert "Zanzibar" in hits[0].content


def test_indexing_is_idempotent_and_gives_small_talk_words_only(
    world: tuple[Runtime, User, User],
) -> None:
    runtime, ana, _ = world
    messages = runtime.messages_of(tenant_id=ana.tenant_id, user_id=ana.id)
    with Session(runtime.engine) as session:
        rows = session.exec(select(Message).where(Message.user_id == ana.id)).all()
    small_talk = [m for m in rows if not is_indexable(m)]
    assert sorted(m.content for m in small_talk) == ["hi", "ok thanks"]
    # Every message has a point; small talk's has no dense vector (found by words only).
    assert messages.count() == len(rows)
    assert all(m.indexed_at is not None for m in rows)
    assert [h.vector for h in messages.retrieve([m.id for m in small_talk], with_vectors=True)] == [
        None,
        None,
    ]
    cache = runtime.embedder
    assert isinstance(cache, CachedEmbedder)
    cached = len(cache)
    again = index_user_messages(
        runtime=runtime, tenant_id=ana.tenant_id, user_id=ana.id, message_ids=[m.id for m in rows]
    )
    assert again == len(rows)
    assert messages.count() == len(rows)
    assert len(cache) == cached  # message texts bypass the query cache
    assert {h.id for h in messages.retrieve([rows[0].id])} == {rows[0].id}
    with Session(runtime.engine) as session:
        hits = _search(runtime=runtime, session=session, user=ana, query="thanks", k=5)
    # Found by its words alone; the reply after it carries them too (a message's words are
    # indexed after the one before it), and its meaning ranks it first.
    thanks = next(h for h in hits if h.content == "ok thanks")
    assert thanks.keyword_rank is not None and thanks.vector_rank is None


def store_lines(
    runtime: Runtime,
    user: User,
    said: Sequence[tuple[str, str]],
    session_id: str = "later",
    *,
    second: int = 0,
) -> list[str]:
    """Messages (role, content), said a second apart from `second`, committed and not
    indexed: their runs not yet run (the pending runs' ids)."""
    with Session(runtime.engine) as session:
        import_lines(
            session=session,
            settings=runtime.settings,
            tenant_id=user.tenant_id,
            lines=[
                TranscriptLine.model_validate(
                    {"user_id": user.external_id, "session_id": session_id, "role": role,
                     "content": content, "created_at": f"2023-08-01T10:00:{i:02d}Z"}
                )
                for i, (role, content) in enumerate(said, start=second)
            ],
        )  # fmt: skip
        pending = select(ExtractionRun.id).where(ExtractionRun.status == "pending")
        return list(session.exec(pending).all())


def test_a_message_is_found_by_its_words_before_the_worker_indexes_it(
    world_on_each_database: tuple[Runtime, User, User],
) -> None:
    runtime, ana, _ = world_on_each_database
    [run_id] = store_lines(
        runtime, ana, [("user", "The plumber said the boiler in Zanzibar Street leaks.")]
    )
    with Session(runtime.engine) as session:
        hits = _search(runtime=runtime, session=session, user=ana, query="boiler")
        # Only SQL full-text has it: its rank there, no rank by meaning yet.
        assert (hits[0].content[:11], hits[0].keyword_rank, hits[0].vector_rank) == (
            "The plumber",
            1,
            None,
        )
        assert all(h.keyword_rank is None for h in hits[1:])  # no other boiler
        # Fused with the engine's lists: the indexed Zanzibar messages rank beside it.
        both = _search(runtime=runtime, session=session, user=ana, query="Zanzibar")
        assert {h.content[:11] for h in both} >= {"The plumber", "I'm finally"}
        assert any(h.vector_rank is not None for h in both)
        # Left out with its session, as the engine's hits are.
        later = session.exec(
            select(Message.session_id).where(
                col(Message.content).contains("boiler"), Message.user_id == ana.id
            )
        ).one()
        assert "The plumber" not in [
            h.content[:11]
            for h in _search(runtime=runtime, session=session, user=ana,
                                    query="boiler", exclude_session_id=later)
        ]  # fmt: skip
    run_extraction(runtime, run_id)
    with Session(runtime.engine) as session:
        [hit] = _search(runtime=runtime, session=session, user=ana, query="boiler", k=1)
        row = session.exec(select(Message).where(Message.id == hit.message_id)).one()
    # Now the engine holds it, by words and by meaning.
    assert row.indexed_at is not None
    assert hit.keyword_rank == 1 and hit.vector_rank is not None


def test_a_turn_indexes_the_messages_before_it_that_no_run_covers(
    world_on_each_database: tuple[Runtime, User, User],
) -> None:
    runtime, ana, _ = world_on_each_database
    said = [
        ("system", "Parcel tracker: parcel ZX-991 left the depot."),
        ("assistant", "Welcome back! Your parcel is on its way."),
        ("user", "Great, I was worried about the parcel."),
        ("assistant", "It should arrive tomorrow."),
        ("tool", "Parcel tracker: parcel ZX-991 delivered."),  # after the turn: the next one's
    ]
    [run_id] = store_lines(runtime, ana, said, session_id="parcel")
    run_extraction(runtime, run_id)
    with Session(runtime.engine) as session:
        contents = [c for _, c in said]
        rows = session.exec(
            select(Message).where(col(Message.content).in_(contents)).order_by(col(Message.seq))
        ).all()
        assert [m.indexed_at is not None for m in rows] == [True, True, True, True, False]
        hits = _search(runtime=runtime, session=session, user=ana, query="ZX-991 depot")
    # The system message is found by the engine, the tool message not indexed yet by SQL
    # full-text (its rank there among all of Ana's messages; none by meaning).
    by_content = {h.content: h for h in hits}
    assert by_content[said[0][1]].keyword_rank == 1
    assert by_content[said[4][1]].keyword_rank and by_content[said[4][1]].vector_rank is None


def test_a_reply_is_found_by_the_words_said_after_it_once_they_are_said(
    world_on_each_database: tuple[Runtime, User, User],
) -> None:
    """A reply is indexed with its turn, before anyone answered it; the next turn writes it
    again with the words said after it (at AFTER_WEIGHT), so "the bakery with the saffron
    buns" finds the suggestion those words answered, below the message that said them."""
    runtime, ana, _ = world_on_each_database
    first = [("user", "Where should we get breakfast?"), ("assistant", "Try Lindqvist's.")]
    [run_id] = store_lines(runtime, ana, first, session_id="breakfast")
    run_extraction(runtime, run_id)
    query = "bakery saffron buns"
    with Session(runtime.engine) as session:
        before = {h.content: h for h in _search(runtime=runtime, session=session,
                                                       user=ana, query=query, k=100)}  # fmt: skip
    assert before["Try Lindqvist's."].keyword_rank is None  # none of its words, yet
    then = [("user", "Oh the bakery with the saffron buns, perfect!"), ("assistant", "Enjoy!")]
    [second] = store_lines(runtime, ana, then, session_id="breakfast", second=2)
    run_extraction(runtime, second)
    with Session(runtime.engine) as session:
        hits = _search(runtime=runtime, session=session, user=ana, query=query, k=100)
    by_content = {h.content: h for h in hits}
    reply = by_content["Try Lindqvist's."]
    said = by_content[then[0][1]]
    assert reply.keyword_rank is not None and reply.vector_score is not None  # kept its vector
    assert said.keyword_rank == 1 and said.score > reply.score


def test_a_message_collection_of_an_earlier_tiermem_answers_from_sql_until_reindexed(
    tmp_path: Path, caplog: pytest.LogCaptureFixture
) -> None:
    runtime, ana, _ = build_world(tmp_path)
    try:
        messages = runtime.messages_of(tenant_id=ana.tenant_id, user_id=ana.id)
        with Session(runtime.engine) as session:
            # As an earlier tiermem left it: one dense vector a point, nothing marked indexed.
            runtime.vectors.drop_collection(messages.collection)
            runtime.vectors.ensure_collection(
                messages.collection, runtime.embedder.dim, tenant_field="tm_user"
            )
            session.execute(update(Message).values(indexed_at=None))
            session.commit()
            rows = session.exec(select(Message).where(Message.user_id == ana.id)).all()
        collection._REINDEX_TOLD.clear()
        with caplog.at_level("WARNING", logger="shared.memory.history.collection"):
            index_user_messages(runtime=runtime, tenant_id=ana.tenant_id, user_id=ana.id,
                           message_ids=[m.id for m in rows])  # fmt: skip
        assert "tiermem reindex" in caplog.text
        assert messages.has_sparse() is False
        assert messages.count() == sum(is_indexable(m) for m in rows)  # the dense ones
        with Session(runtime.engine) as session:
            marked = select(Message).where(col(Message.indexed_at).is_not(None))
            assert session.exec(marked).all() == []
            [first, *_] = _search(runtime=runtime, session=session, user=ana, query="Zanzibar")
            assert first.keyword_rank == 1 and "Zanzibar" in first.content
            pet = _search(
                runtime=runtime, session=session, user=ana, query="what did I say about my pet", k=3
            )
            assert any(h.content == PET_MESSAGE and h.vector_rank for h in pet)
            reindex_all(runtime=runtime, session=session)
            rows = session.exec(select(Message).where(Message.user_id == ana.id)).all()
        assert messages.has_sparse() is True and messages.count() == len(rows)
        assert all(m.indexed_at is not None for m in rows)
    finally:
        runtime.close()


# -- the keyword index ---------------------------------------------------------------------


def test_triggers_follow_updates_and_deletes(tmp_path: Path) -> None:
    runtime, ana, bo = build_world(tmp_path)
    try:
        with Session(runtime.engine) as session:

            def find(q: str, user: User = ana) -> list[str]:
                return contents(
                    session, keyword_search(session=session, user_id=user.id, query=q, limit=10)
                )

            assert find("grandmother") == ["The sofa was a green velvet one from my grandmother."]
            # Status columns change on every extraction: no re-index (trigger is OF content).
            session.execute(
                update(Message)
                .where(col(Message.user_id) == ana.id)
                .values(extraction_status="done")
            )
            session.execute(
                update(Message)
                .where(col(Message.content).contains("grandmother"))
                .values(content="The sofa came from my aunt Odile.")
            )
            session.commit()
            assert find("grandmother") == []
            assert find("Odile") == ["The sofa came from my aunt Odile."]
            assert find("office", bo) == ["My ticket INC-40213 is about the office printer."]
        with Session(runtime.engine) as session:
            delete_user(runtime=runtime, session=session, user=bo)
        with Session(runtime.engine) as session:
            assert keyword_search(session=session, user_id=bo.id, query="printer", limit=10) == []
            (fts_rows,) = session.execute(text("SELECT count(*) FROM messages_fts")).one()
            (messages,) = session.execute(text("SELECT count(*) FROM messages")).one()
            # The index holds exactly the stored messages: the integrity check agrees.
            assert fts_rows == messages
            session.execute(
                text("INSERT INTO messages_fts(messages_fts, rank) VALUES ('integrity-check', 1)")
            )
    finally:
        runtime.close()


def test_migration_backfills_messages_stored_before_it(tmp_path: Path) -> None:
    settings = make_settings(tmp_path, qdrant={"in_memory": True})
    settings.data_dir.mkdir(parents=True)
    config = alembic_config(settings.sqlalchemy_url)
    command.upgrade(config, "0002")
    runtime = Runtime(settings)
    try:
        with Session(runtime.engine) as session:
            ensure_dev_tenant(session=session, settings=settings)
            tenant_id = session.exec(select(Tenant.id)).one()
            import_lines(
                session=session,
                settings=settings,
                tenant_id=tenant_id,
                lines=[TranscriptLine.model_validate(x) for x in transcript(USER, SESSIONS)],
            )
            ana = session.exec(select(User)).one()
        command.upgrade(config, "head")
        with Session(runtime.engine) as session:
            found = keyword_search(session=session, user_id=ana.id, query="INC-40213", limit=5)
            assert contents(session, found) == [
                "Yes, I opened ticket INC-40213 with the helpdesk about the VPN."
            ]
        command.downgrade(config, "0002")
        command.upgrade(config, "head")
    finally:
        runtime.close()


def test_any_text_is_a_safe_query(
    world_on_each_database: tuple[Runtime, User, User],
) -> None:
    runtime, ana, _ = world_on_each_database

    @settings(
        max_examples=150, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture]
    )
    @given(
        st.text(alphabet=st.characters(blacklist_categories=["Cs"]), max_size=60)
        | st.lists(
            st.sampled_from(
                [
                    '"',
                    "*",
                    "(",
                    ")",
                    "-",
                    "+",
                    ":",
                    "^",
                    "AND",
                    "OR",
                    "NOT",
                    "NEAR",
                    "'",
                    "!",
                    "&",
                    "|",
                    "<->",
                    "\\",
                    "zanzibar",
                ]
            ),
            max_size=8,
        ).map(" ".join)
    )
    def search_anything(q: str) -> None:
        with Session(runtime.engine) as session:
            ids = keyword_search(session=session, user_id=ana.id, query=q, limit=10)
        assert len(ids) <= 10

    search_anything()


# -- rebuilding from SQL -------------------------------------------------------------------


def test_reindex_rebuilds_message_vectors_and_keyword_index(
    world_on_each_database: tuple[Runtime, User, User],
) -> None:
    runtime, ana, _ = world_on_each_database
    messages = runtime.messages_of(tenant_id=ana.tenant_id, user_id=ana.id)
    before = messages.count()
    messages.drop()
    with Session(runtime.engine) as session:
        assert all(
            h.vector_rank is None
            for h in _search(runtime=runtime, session=session, user=ana, query="my pet")
        )
        if session.get_bind().dialect.name == "sqlite":  # as if VACUUM renumbered rowids
            session.execute(text("INSERT INTO messages_fts(messages_fts) VALUES ('delete-all')"))
            session.commit()
            assert keyword_search(session=session, user_id=ana.id, query="Zanzibar", limit=5) == []
        users, _ = reindex_all(runtime=runtime, session=session)
    assert users == 2 and messages.count() == before
    with Session(runtime.engine) as session:
        hits = _search(
            runtime=runtime, session=session, user=ana, query="what did I say about my pet", k=3
        )
        assert PET_MESSAGE in [h.content for h in hits]
        [first, *_] = _search(runtime=runtime, session=session, user=ana, query="Zanzibar")
        assert first.keyword_rank == 1 and "Zanzibar" in first.content


@pytest.mark.parametrize("deleted", ["before indexing", "while its messages embed"])
def test_a_late_index_write_never_recreates_a_deleted_users_collection(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, deleted: str
) -> None:
    runtime, _, bo = build_world(tmp_path)

    def delete() -> None:
        with Session(runtime.engine) as session:
            user = session.get(User, bo.id)
            assert user is not None
            delete_user(runtime=runtime, session=session, user=user)

    embed = indexing._embed_uncached

    def delete_meanwhile(embedder: Embedder, texts: Sequence[str]) -> Vectors:
        vectors = embed(embedder, texts)  # the rows were read before: the user existed then
        delete()
        return vectors

    try:
        with Session(runtime.engine) as session:
            ids = list(session.exec(select(Message.id).where(Message.user_id == bo.id)))
        if deleted == "before indexing":
            delete()
        else:
            monkeypatch.setattr(indexing, "_embed_uncached", delete_meanwhile)
        written = index_user_messages(
            runtime=runtime, tenant_id=bo.tenant_id, user_id=bo.id, message_ids=ids
        )
        assert written == 0
        assert runtime.messages_of(tenant_id=bo.tenant_id, user_id=bo.id).count() == 0
    finally:
        runtime.close()
