"""Per-install secrets: the key that signs response ids, shared by every replica of a database.

Revision ID: 0005
Revises: 0004
Create Date: 2026-12-04
"""

from __future__ import annotations

import secrets
from collections.abc import Sequence

import sqlalchemy as sa
from alembic import op

revision: str = "0005"
down_revision: str | None = "0004"
branch_labels: str | Sequence[str] | None = None
depends_on: str | Sequence[str] | None = None


def upgrade() -> None:
    table = op.create_table(
        "secrets",
        sa.Column("name", sa.String(64), primary_key=True),
        sa.Column("value", sa.String(128), nullable=False),
    )
    # Made here, once, under the migration lock: every replica then reads the same one.
    op.bulk_insert(table, [{"name": "response_ids", "value": secrets.token_hex(32)}])


def downgrade() -> None:
    op.drop_table("secrets")
