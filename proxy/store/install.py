"""Per-install secrets, kept in the store so that every replica of one database shares them."""

from __future__ import annotations

import secrets

from sqlalchemy import Engine, insert, select
from sqlalchemy.exc import IntegrityError

from proxy.store.models import SecretRow


def secret(engine: Engine, name: str) -> bytes:
    """The secret called `name`; made now if the migration did not (a schema built otherwise)."""
    with engine.connect() as conn:
        value = conn.execute(select(SecretRow.value).where(SecretRow.name == name)).scalar()
    if value is None:
        try:
            with engine.begin() as conn:
                conn.execute(insert(SecretRow).values(name=name, value=secrets.token_hex(32)))
        except IntegrityError:  # another process made it first: theirs holds
            pass
        with engine.connect() as conn:
            value = conn.execute(select(SecretRow.value).where(SecretRow.name == name)).scalar_one()
    return bytes.fromhex(value)
