"""Who made each exchange and which process serves it: the client key's id on sessions and
exchanges, the serving process and its streamed-so-far answer on exchanges, live processes;
the answers of choices beyond the first.

Revision ID: 0003
Revises: 0001
Create Date: 2026-12-03
"""

from __future__ import annotations

from collections.abc import Sequence

import sqlalchemy as sa
from alembic import op

revision: str = "0003"
down_revision: str | None = "0002"
branch_labels: str | Sequence[str] | None = None
depends_on: str | Sequence[str] | None = None

KeyId = sa.String(length=32)
Owner = sa.String(length=128)
When = sa.DateTime(timezone=True)


def upgrade() -> None:
    with op.batch_alter_table("sessions") as batch:
        batch.add_column(sa.Column("key_id", KeyId, nullable=True))
        batch.create_index(op.f("ix_sessions_key_id"), ["key_id"])
    with op.batch_alter_table("exchanges") as batch:
        batch.add_column(sa.Column("key_id", KeyId, nullable=True))
        batch.add_column(sa.Column("owner", Owner, nullable=True))
        batch.add_column(sa.Column("progress", sa.JSON(), nullable=True))
        batch.add_column(sa.Column("choices", sa.JSON(), nullable=True))
        batch.create_index(op.f("ix_exchanges_owner"), ["owner"])
    op.create_table(
        "instances",
        sa.Column("id", Owner, nullable=False),
        sa.Column("host", sa.String(length=255), nullable=False),
        sa.Column("pid", sa.Integer(), nullable=False),
        sa.Column("started_at", When, nullable=False),
        sa.Column("heartbeat_at", When, nullable=False),
        sa.PrimaryKeyConstraint("id", name=op.f("pk_instances")),
    )


def downgrade() -> None:
    op.drop_table("instances")
    with op.batch_alter_table("exchanges") as batch:
        batch.drop_index(op.f("ix_exchanges_owner"))
        batch.drop_column("choices")
        batch.drop_column("progress")
        batch.drop_column("owner")
        batch.drop_column("key_id")
    with op.batch_alter_table("sessions") as batch:
        batch.drop_index(op.f("ix_sessions_key_id"))
        batch.drop_column("key_id")
