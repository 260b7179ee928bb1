"""Per-branch compaction state: the stored view decisions each turn starts from.

Revision ID: 0002
Revises: 0001
Create Date: 2026-12-03
"""

from __future__ import annotations

from collections.abc import Sequence

import sqlalchemy as sa
from alembic import op

revision: str = "0002"
down_revision: str | None = "0001"
branch_labels: str | Sequence[str] | None = None
depends_on: str | Sequence[str] | None = None

RowId = sa.BigInteger().with_variant(sa.Integer(), "sqlite")
When = sa.DateTime(timezone=True)


def upgrade() -> None:
    op.create_table(
        "view_states",
        sa.Column("exchange_id", RowId, nullable=False),
        sa.Column("session_id", sa.String(length=255), nullable=False),
        sa.Column("entry_id", RowId, nullable=False),
        sa.Column("covered", sa.Integer(), nullable=False),
        sa.Column("items", sa.JSON(), nullable=False),
        sa.Column("forgotten", sa.JSON(), nullable=False),
        sa.Column("carried", sa.JSON(), nullable=False),
        sa.Column("view_tokens", sa.Integer(), nullable=False),
        sa.Column("original_tokens", sa.Integer(), nullable=False),
        sa.Column("factor", sa.Float(), nullable=False),
        sa.Column("raw_prompt", sa.Integer(), nullable=False),
        sa.Column("tokens_original", sa.Integer(), nullable=False),
        sa.Column("created_at", When, nullable=False),
        sa.ForeignKeyConstraint(
            ["exchange_id"],
            ["exchanges.id"],
            ondelete="CASCADE",
            name=op.f("fk_view_states_exchange_id_exchanges"),
        ),
        sa.ForeignKeyConstraint(
            ["session_id"], ["sessions.id"], name=op.f("fk_view_states_session_id_sessions")
        ),
        sa.ForeignKeyConstraint(
            ["entry_id"], ["entries.id"], name=op.f("fk_view_states_entry_id_entries")
        ),
        sa.PrimaryKeyConstraint("exchange_id", name=op.f("pk_view_states")),
    )
    op.create_index(op.f("ix_view_states_session_id"), "view_states", ["session_id"])
    op.create_index(op.f("ix_view_states_entry_id"), "view_states", ["entry_id"])


def downgrade() -> None:
    op.drop_table("view_states")
