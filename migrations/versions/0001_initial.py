"""Initial schema: sessions, messages, the history trie, exchanges and their compiled refs.

Revision ID: 0001
Revises:
Create Date: 2026-12-02
"""

from __future__ import annotations

from collections.abc import Sequence

import sqlalchemy as sa
from alembic import op

revision: str = "0001"
down_revision: str | None = None
branch_labels: str | Sequence[str] | None = None
depends_on: str | Sequence[str] | None = None

# Frozen copies of the model types: a migration must not change when the models do.
RowId = sa.BigInteger().with_variant(sa.Integer(), "sqlite")
Hash = sa.String(length=64)
When = sa.DateTime(timezone=True)


def upgrade() -> None:
    op.create_table(
        "messages",
        sa.Column("hash", Hash, nullable=False),
        sa.Column("role", sa.String(length=32), nullable=True),
        sa.Column("body", sa.Text(), nullable=False),
        sa.Column("size", sa.Integer(), nullable=False),
        sa.Column("created_at", When, nullable=False),
        sa.PrimaryKeyConstraint("hash", name=op.f("pk_messages")),
    )
    op.create_table(
        "sessions",
        sa.Column("id", sa.String(length=255), nullable=False),
        sa.Column("created_at", When, nullable=False),
        sa.Column("updated_at", When, nullable=False),
        sa.Column("source", sa.String(length=16), nullable=False),
        sa.Column("model", sa.String(length=255), nullable=True),
        sa.Column("last_seq", sa.Integer(), nullable=False),
        sa.PrimaryKeyConstraint("id", name=op.f("pk_sessions")),
    )
    op.create_index(op.f("ix_sessions_updated_at"), "sessions", ["updated_at"])
    op.create_table(
        "entries",
        sa.Column("id", RowId, autoincrement=True, nullable=False),
        sa.Column("session_id", sa.String(length=255), nullable=False),
        sa.Column("parent_id", RowId, nullable=True),
        sa.Column("position", sa.Integer(), nullable=False),
        sa.Column("message_hash", Hash, nullable=False),
        sa.Column("prefix_hash", Hash, nullable=False),
        sa.Column("partial", sa.Boolean(), nullable=False),
        sa.Column("created_at", When, nullable=False),
        sa.ForeignKeyConstraint(
            ["message_hash"], ["messages.hash"], name=op.f("fk_entries_message_hash_messages")
        ),
        sa.ForeignKeyConstraint(
            ["parent_id"], ["entries.id"], name=op.f("fk_entries_parent_id_entries")
        ),
        sa.ForeignKeyConstraint(
            ["session_id"], ["sessions.id"], name=op.f("fk_entries_session_id_sessions")
        ),
        sa.PrimaryKeyConstraint("id", name=op.f("pk_entries")),
        sa.UniqueConstraint(
            "session_id", "prefix_hash", name=op.f("uq_entries_session_id_prefix_hash")
        ),
    )
    op.create_index(op.f("ix_entries_message_hash"), "entries", ["message_hash"])
    op.create_index(op.f("ix_entries_parent_id"), "entries", ["parent_id"])
    op.create_table(
        "exchanges",
        sa.Column("id", RowId, autoincrement=True, nullable=False),
        sa.Column("session_id", sa.String(length=255), nullable=False),
        sa.Column("seq", sa.Integer(), nullable=False),
        sa.Column("created_at", When, nullable=False),
        sa.Column("finished_at", When, nullable=True),
        sa.Column("model", sa.String(length=255), nullable=False),
        sa.Column("upstream", sa.String(length=255), nullable=False),
        sa.Column("stream", sa.Boolean(), nullable=False),
        sa.Column("status", sa.Integer(), nullable=True),
        sa.Column("latency_ms", sa.Float(), nullable=True),
        sa.Column("ttft_ms", sa.Float(), nullable=True),
        sa.Column("tokens_original", sa.Integer(), nullable=False),
        sa.Column("tokens_compiled", sa.Integer(), nullable=False),
        sa.Column("budget", sa.Integer(), nullable=True),
        sa.Column("context_window", sa.Integer(), nullable=True),
        sa.Column("pipeline", sa.JSON(), nullable=False),
        sa.Column("events", sa.JSON(), nullable=False),
        sa.Column("params", sa.JSON(), nullable=False),
        sa.Column("leaf_entry_id", RowId, nullable=False),
        sa.Column("new_messages", sa.Integer(), nullable=False),
        sa.Column("compiled", sa.JSON(), nullable=False),
        sa.Column("response_hash", Hash, nullable=True),
        sa.Column("response_entry_id", RowId, nullable=True),
        sa.Column("partial", sa.Boolean(), nullable=False),
        sa.Column("usage", sa.JSON(), nullable=True),
        sa.Column("prompt_tokens", sa.Integer(), nullable=True),
        sa.Column("completion_tokens", sa.Integer(), nullable=True),
        sa.Column("cached_tokens", sa.Integer(), nullable=True),
        sa.Column("error", sa.JSON(), nullable=True),
        sa.Column("attempts", sa.JSON(), nullable=True),
        sa.ForeignKeyConstraint(
            ["leaf_entry_id"], ["entries.id"], name=op.f("fk_exchanges_leaf_entry_id_entries")
        ),
        sa.ForeignKeyConstraint(
            ["response_entry_id"],
            ["entries.id"],
            name=op.f("fk_exchanges_response_entry_id_entries"),
        ),
        sa.ForeignKeyConstraint(
            ["response_hash"], ["messages.hash"], name=op.f("fk_exchanges_response_hash_messages")
        ),
        sa.ForeignKeyConstraint(
            ["session_id"], ["sessions.id"], name=op.f("fk_exchanges_session_id_sessions")
        ),
        sa.PrimaryKeyConstraint("id", name=op.f("pk_exchanges")),
        sa.UniqueConstraint("session_id", "seq", name=op.f("uq_exchanges_session_id_seq")),
    )
    op.create_index(op.f("ix_exchanges_leaf_entry_id"), "exchanges", ["leaf_entry_id"])
    op.create_index(op.f("ix_exchanges_response_entry_id"), "exchanges", ["response_entry_id"])
    op.create_index(op.f("ix_exchanges_response_hash"), "exchanges", ["response_hash"])
    op.create_table(
        "exchange_messages",
        sa.Column("exchange_id", RowId, nullable=False),
        sa.Column("message_hash", Hash, nullable=False),
        sa.ForeignKeyConstraint(
            ["exchange_id"],
            ["exchanges.id"],
            ondelete="CASCADE",
            name=op.f("fk_exchange_messages_exchange_id_exchanges"),
        ),
        sa.ForeignKeyConstraint(
            ["message_hash"],
            ["messages.hash"],
            name=op.f("fk_exchange_messages_message_hash_messages"),
        ),
        sa.PrimaryKeyConstraint("exchange_id", "message_hash", name=op.f("pk_exchange_messages")),
    )
    op.create_index(
        op.f("ix_exchange_messages_message_hash"), "exchange_messages", ["message_hash"]
    )


def downgrade() -> None:
    op.drop_table("exchange_messages")
    op.drop_table("exchanges")
    op.drop_table("entries")
    op.drop_table("sessions")
    op.drop_table("messages")
