"""events (the outbox behind webhooks and GET /v1/events), webhooks, webhook_deliveries
(issue 27 part 3, ADR 0027)

Revision ID: 0012
Revises: 0011
Create Date: 2026-11-27

New tables only. events.seq is AUTOINCREMENT on SQLite so a seq is never reused after a
user's events are deleted with the user: it is the feed's cursor.
"""
from collections.abc import Sequence

import sqlalchemy as sa
import sqlmodel
from alembic import op

revision: str = "0012"
down_revision: str | None = "0011"
branch_labels: str | Sequence[str] | None = None
depends_on: str | Sequence[str] | None = None


def upgrade() -> None:
    string = sqlmodel.sql.sqltypes.AutoString
    time = sqlmodel.sql.sqltypes.UTCDateTime
    op.create_table(
        "events",
        sa.Column("seq", sa.Integer(), nullable=False),
        sa.Column("id", string(length=40), nullable=False),
        sa.Column("tenant_id", string(length=36), nullable=False),
        sa.Column("user_id", string(length=36), nullable=True),
        sa.Column("type", string(length=32), nullable=False),
        sa.Column("body", sa.Text(), nullable=False),
        sa.Column("created_at", time(), nullable=False),
        sa.PrimaryKeyConstraint("seq"),
        sa.UniqueConstraint("id"),
        sqlite_autoincrement=True,
    )
    op.create_index("ix_events_tenant_seq", "events", ["tenant_id", "seq"])
    op.create_index("ix_events_user", "events", ["user_id"])
    op.create_table(
        "webhooks",
        sa.Column("id", string(length=36), nullable=False),
        sa.Column("tenant_id", string(), nullable=False),
        sa.Column("url", string(length=2000), nullable=False),
        sa.Column("events", sa.JSON(), nullable=False),
        sa.Column("secret", string(length=100), nullable=False),
        sa.Column("description", string(length=200), nullable=False),
        sa.Column("enabled", sa.Boolean(), nullable=False),
        sa.Column("disabled_reason", string(length=500), nullable=True),
        sa.Column("disabled_at", time(), nullable=True),
        sa.Column("cursor", sa.Integer(), nullable=False),
        sa.Column("consecutive_failures", sa.Integer(), nullable=False),
        sa.Column("failing_since", time(), nullable=True),
        sa.Column("last_error", string(length=1000), nullable=True),
        sa.Column("last_error_at", time(), nullable=True),
        sa.Column("last_success_at", time(), nullable=True),
        sa.Column("delivered_total", sa.Integer(), nullable=False),
        sa.Column("failed_attempts_total", sa.Integer(), nullable=False),
        sa.Column("created_at", time(), nullable=False),
        sa.Column("updated_at", time(), nullable=False),
        sa.ForeignKeyConstraint(["tenant_id"], ["tenants.id"]),
        sa.PrimaryKeyConstraint("id"),
    )
    op.create_index("ix_webhooks_tenant_id", "webhooks", ["tenant_id"])
    op.create_table(
        "webhook_deliveries",
        sa.Column("id", string(length=36), nullable=False),
        sa.Column("webhook_id", string(), nullable=False),
        sa.Column("event_seq", sa.Integer(), nullable=False),
        sa.Column("status", string(length=16), nullable=False),
        sa.Column("attempts", sa.Integer(), nullable=False),
        sa.Column("next_attempt_at", time(), nullable=False),
        sa.Column("claimed_until", time(), nullable=True),
        sa.Column("last_status_code", sa.Integer(), nullable=True),
        sa.Column("last_error", string(length=1000), nullable=True),
        sa.Column("created_at", time(), nullable=False),
        sa.Column("delivered_at", time(), nullable=True),
        sa.ForeignKeyConstraint(["event_seq"], ["events.seq"]),
        sa.ForeignKeyConstraint(["webhook_id"], ["webhooks.id"]),
        sa.PrimaryKeyConstraint("id"),
        sa.UniqueConstraint("webhook_id", "event_seq", name="uq_deliveries_webhook_event"),
    )
    op.create_index("ix_deliveries_status_due", "webhook_deliveries", ["status", "next_attempt_at"])
    op.create_index("ix_webhook_deliveries_webhook_id", "webhook_deliveries", ["webhook_id"])
    op.create_index("ix_webhook_deliveries_event_seq", "webhook_deliveries", ["event_seq"])


def downgrade() -> None:
    op.drop_table("webhook_deliveries")
    op.drop_table("webhooks")
    op.drop_table("events")
