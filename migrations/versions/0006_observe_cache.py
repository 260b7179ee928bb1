"""Observe mode and the prompt cache as the model server saw it, per exchange.

Revision ID: 0006
Revises: 0005
Create Date: 2026-12-04
"""

from __future__ import annotations

from collections.abc import Sequence

import sqlalchemy as sa
from alembic import op

revision: str = "0006"
down_revision: str | None = "0005"
branch_labels: str | Sequence[str] | None = None
depends_on: str | Sequence[str] | None = None

COLUMNS = ("observed", "cache_expected", "cache_previous", "cache_cause", "cache_lost")


def upgrade() -> None:
    with op.batch_alter_table("exchanges") as batch:
        batch.add_column(
            sa.Column("observed", sa.Boolean(), nullable=False, server_default=sa.false())
        )
        batch.add_column(sa.Column("cache_expected", sa.Integer(), nullable=True))
        batch.add_column(sa.Column("cache_previous", sa.Integer(), nullable=True))
        batch.add_column(sa.Column("cache_cause", sa.String(16), nullable=True))
        batch.add_column(sa.Column("cache_lost", sa.Integer(), nullable=True))


def downgrade() -> None:
    with op.batch_alter_table("exchanges") as batch:
        for name in reversed(COLUMNS):
            batch.drop_column(name)
