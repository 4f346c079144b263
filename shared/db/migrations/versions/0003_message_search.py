"""keyword index over messages for history search (SQLite FTS5, PostgreSQL GIN)

Revision ID: 0003
Revises: 0002
Create Date: 2026-11-23

SQLite: `messages_fts` is an FTS5 table with external content (the text lives only in
`messages`), keyed by the messages' implicit rowid and kept in sync by triggers. It
indexes `user_id` too, so a query names its user inside MATCH and FTS5 intersects
doclists instead of ranking every user's matches before a join drops them (5-7x faster
at 200k messages of 100 users, and it stays flat as other users' messages grow).
Two things can break that link, and both are repaired by `tiermem reindex` (which runs
FTS5's 'rebuild'): a VACUUM may renumber the rowids of a table without an INTEGER PRIMARY
KEY, and an alembic batch migration of `messages` recreates the table (new rowids, and
the triggers are dropped with the old table) — such a migration must re-run
`_create_sqlite_triggers` and the rebuild below.

PostgreSQL: a stored generated column `content_tsv` = to_tsvector('english', content)
with a GIN index. Stored rather than an expression index: ranking (ts_rank) needs the
tsvector of every matching row, and recomputing it per query cost ~50 ms for 500 matches
of a 2,000-message user against ~5 ms read from the column. The models do not declare
the column (SQLAlchemy never writes it; PostgreSQL fills it).
"""
from collections.abc import Sequence

from alembic import op

revision: str = "0003"
down_revision: str | None = "0002"
branch_labels: str | Sequence[str] | None = None
depends_on: str | Sequence[str] | None = None

_SQLITE_TRIGGERS = (
    """CREATE TRIGGER messages_fts_ai AFTER INSERT ON messages BEGIN
        INSERT INTO messages_fts(rowid, content, user_id)
            VALUES (new.rowid, new.content, new.user_id);
    END""",
    # External content: FTS5 removes a row's tokens only when given the exact old text.
    """CREATE TRIGGER messages_fts_ad AFTER DELETE ON messages BEGIN
        INSERT INTO messages_fts(messages_fts, rowid, content, user_id)
            VALUES ('delete', old.rowid, old.content, old.user_id);
    END""",
    # OF ...: the status columns of a message change on every extraction; only a new text
    # (or owner) needs re-indexing.
    """CREATE TRIGGER messages_fts_au AFTER UPDATE OF content, user_id ON messages BEGIN
        INSERT INTO messages_fts(messages_fts, rowid, content, user_id)
            VALUES ('delete', old.rowid, old.content, old.user_id);
        INSERT INTO messages_fts(rowid, content, user_id)
            VALUES (new.rowid, new.content, new.user_id);
    END""",
)


def _create_sqlite_triggers() -> None:
    for statement in _SQLITE_TRIGGERS:
        op.execute(statement)


def upgrade() -> None:
    dialect = op.get_bind().dialect.name
    if dialect == "sqlite":
        op.execute(
            "CREATE VIRTUAL TABLE messages_fts USING fts5("
            "content, user_id, content='messages', content_rowid='rowid', "
            "tokenize='porter unicode61')"
        )
        _create_sqlite_triggers()
        op.execute("INSERT INTO messages_fts(messages_fts) VALUES ('rebuild')")
    elif dialect == "postgresql":
        op.execute(
            "ALTER TABLE messages ADD COLUMN content_tsv tsvector "
            "GENERATED ALWAYS AS (to_tsvector('english', content)) STORED"
        )
        op.execute("CREATE INDEX ix_messages_content_tsv ON messages USING gin (content_tsv)")


def downgrade() -> None:
    dialect = op.get_bind().dialect.name
    if dialect == "sqlite":
        for name in ("messages_fts_au", "messages_fts_ad", "messages_fts_ai"):
            op.execute(f"DROP TRIGGER IF EXISTS {name}")
        op.execute("DROP TABLE IF EXISTS messages_fts")
    elif dialect == "postgresql":
        op.execute("DROP INDEX IF EXISTS ix_messages_content_tsv")
        op.execute("ALTER TABLE messages DROP COLUMN IF EXISTS content_tsv")
