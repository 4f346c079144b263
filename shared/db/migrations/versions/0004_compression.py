"""tiered history compression: compression_states, tier_entries, compression_runs

Revision ID: 0004
Revises: 0003
Create Date: 2026-11-24

All three go with their session (ON DELETE CASCADE), so deleting a user (which deletes
its chat_sessions) needs no change. The current tier has no rows: it is the session's
messages after compression_states.covered_through_seq.
"""
from collections.abc import Sequence

import sqlalchemy as sa
import sqlmodel
from alembic import op

revision: str = "0004"
down_revision: str | None = "0003"
branch_labels: str | Sequence[str] | None = None
depends_on: str | Sequence[str] | None = None

_str = sqlmodel.sql.sqltypes.AutoString
_time = sqlmodel.sql.sqltypes.UTCDateTime


def _session_fk() -> sa.ForeignKeyConstraint:
    return sa.ForeignKeyConstraint(["session_id"], ["chat_sessions.id"], ondelete="CASCADE")


def upgrade() -> None:
    op.create_table(
        "compression_states",
        sa.Column("session_id", _str(length=36), nullable=False),
        sa.Column("tenant_id", _str(length=36), nullable=False),
        sa.Column("version", sa.Integer(), nullable=False),
        sa.Column("settings", sa.JSON(), nullable=False),
        sa.Column("head_decided", sa.Boolean(), nullable=False),
        sa.Column("head_through_seq", sa.Integer(), nullable=True),
        sa.Column("covered_through_seq", sa.Integer(), nullable=False),
        sa.Column("seeded_spans", sa.JSON(), nullable=False),
        sa.Column("last_run_id", _str(length=36), nullable=True),
        sa.Column("created_at", _time(), nullable=False),
        sa.Column("updated_at", _time(), nullable=False),
        _session_fk(),
        sa.PrimaryKeyConstraint("session_id"),
    )
    op.create_table(
        "tier_entries",
        sa.Column("id", _str(length=36), nullable=False),
        sa.Column("session_id", _str(length=36), nullable=False),
        sa.Column("tier", _str(length=8), nullable=False),
        sa.Column("position", sa.Integer(), nullable=False),
        sa.Column("kind", _str(length=8), nullable=False),
        sa.Column("level", sa.Integer(), nullable=False),
        sa.Column("role", _str(length=16), nullable=False),
        sa.Column("speaker", _str(length=100), nullable=True),
        sa.Column("text", sa.Text(), nullable=False),
        sa.Column("token_count", sa.Integer(), nullable=False),
        sa.Column("cost_tokens", sa.Integer(), nullable=False),
        sa.Column("first_seq", sa.Integer(), nullable=True),
        sa.Column("last_seq", sa.Integer(), nullable=True),
        sa.Column("first_message_id", _str(length=36), nullable=True),
        sa.Column("last_message_id", _str(length=36), nullable=True),
        sa.Column("spans", sa.JSON(), nullable=False),
        sa.Column("message_count", sa.Integer(), nullable=False),
        sa.Column("span_end_at", _time(), nullable=True),
        sa.Column("summarizer", _str(length=16), nullable=True),
        sa.Column("model", _str(length=100), nullable=True),
        sa.Column("created_by_run", _str(length=36), nullable=True),
        sa.Column("created_at", _time(), nullable=False),
        _session_fk(),
        sa.PrimaryKeyConstraint("id"),
        sa.UniqueConstraint("session_id", "tier", "position", name="uq_tier_entries_position"),
    )
    op.create_index("ix_tier_entries_session_id", "tier_entries", ["session_id"])
    op.create_table(
        "compression_runs",
        sa.Column("id", _str(length=36), nullable=False),
        sa.Column("session_id", _str(length=36), nullable=False),
        sa.Column("tenant_id", _str(length=36), nullable=False),
        sa.Column("trigger", _str(length=16), nullable=False),
        sa.Column("focus", sa.Text(), nullable=True),
        sa.Column("status", _str(length=16), nullable=False),
        sa.Column("error", sa.Text(), nullable=True),
        sa.Column("attempts", sa.Integer(), nullable=False),
        sa.Column("iterations", sa.Integer(), nullable=False),
        sa.Column("tokens_before", sa.Integer(), nullable=False),
        sa.Column("tokens_after", sa.Integer(), nullable=False),
        sa.Column("target_tokens", sa.Integer(), nullable=False),
        sa.Column("llm_calls", sa.Integer(), nullable=False),
        sa.Column("fallbacks", sa.Integer(), nullable=False),
        sa.Column("prompt_tokens", sa.Integer(), nullable=False),
        sa.Column("completion_tokens", sa.Integer(), nullable=False),
        sa.Column("summarizer", _str(length=16), nullable=True),
        sa.Column("version_before", sa.Integer(), nullable=True),
        sa.Column("version_after", sa.Integer(), nullable=True),
        sa.Column("steps", sa.JSON(), nullable=False),
        sa.Column("llm_ms", sa.Float(), nullable=False),
        sa.Column("engine_ms", sa.Float(), nullable=False),
        sa.Column("duration_ms", sa.Float(), nullable=False),
        sa.Column("created_at", _time(), nullable=False),
        sa.Column("started_at", _time(), nullable=True),
        sa.Column("finished_at", _time(), nullable=True),
        sa.Column("updated_at", _time(), nullable=False),
        _session_fk(),
        sa.PrimaryKeyConstraint("id"),
    )
    op.create_index(
        "ix_compression_runs_session_created", "compression_runs", ["session_id", "created_at"]
    )


def downgrade() -> None:
    op.drop_index("ix_compression_runs_session_created", table_name="compression_runs")
    op.drop_table("compression_runs")
    op.drop_index("ix_tier_entries_session_id", table_name="tier_entries")
    op.drop_table("tier_entries")
    op.drop_table("compression_states")
