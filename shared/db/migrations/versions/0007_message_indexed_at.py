"""message indexed_at: when the vector engine holds a message with its words (ADR 0013)

Revision ID: 0007
Revises: 0006
Create Date: 2026-12-08

History search asks the engine (dense + BM25 sparse vectors) for the messages it holds and
SQL full-text for those it does not hold yet (`indexed_at IS NULL`: the worker has not
indexed them, or they predate this column; `tiermem reindex` sets it for every message it
rebuilds). A partial index keeps that question cheap. Plain ALTER TABLE, not a batch
migration: a batch would recreate `messages` and drop its full-text triggers (0003).
"""
from collections.abc import Sequence

import sqlalchemy as sa
import sqlmodel
from alembic import op

revision: str = "0007"
down_revision: str | None = "0006"
branch_labels: str | Sequence[str] | None = None
depends_on: str | Sequence[str] | None = None


def upgrade() -> None:
    indexed_at = sa.Column("indexed_at", sqlmodel.sql.sqltypes.UTCDateTime(), nullable=True)
    op.add_column("messages", indexed_at)
    op.create_index(
        "ix_messages_unindexed",
        "messages",
        ["user_id"],
        sqlite_where=sa.text("indexed_at IS NULL"),
        postgresql_where=sa.text("indexed_at IS NULL"),
    )


def downgrade() -> None:
    op.drop_index("ix_messages_unindexed", table_name="messages")
    # SQLite drops a column in place since 3.35 (no table rebuild, the triggers stay).
    op.execute("ALTER TABLE messages DROP COLUMN indexed_at")
