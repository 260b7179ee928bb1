"""The recall rounds of each exchange: the model's ctxproxy_recall calls and what they got.

Revision ID: 0004
Revises: 0003
Create Date: 2026-12-03
"""

from __future__ import annotations

from collections.abc import Sequence

import sqlalchemy as sa
from alembic import op

revision: str = "0004"
down_revision: str | None = "0003"
branch_labels: str | Sequence[str] | None = None
depends_on: str | Sequence[str] | None = None


def upgrade() -> None:
    with op.batch_alter_table("exchanges") as batch:
        batch.add_column(sa.Column("recalls", sa.JSON(), nullable=True))


def downgrade() -> None:
    with op.batch_alter_table("exchanges") as batch:
        batch.drop_column("recalls")
