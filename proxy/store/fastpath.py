"""A continuing turn on PostgreSQL in two round trips per write: one statement takes the
sequence number, the ids and what is already stored; everything else is sent in one pipelined
batch (see pipelined.py), since nothing after the first statement needs an answer back."""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from datetime import datetime
from functools import cache
from typing import Any, cast

from sqlalchemy import Connection, Table, insert, text

from proxy.store import history
from proxy.store.models import EntryRow, ExchangeRow

IDS = 2  # entry ids taken ahead: a turn adds the client's message (and at times one more)

_CLAIM = text(
    """
WITH s AS (
    INSERT INTO sessions (id, key_id, created_at, updated_at, source, model, last_seq)
    VALUES (:sid, :key_id, :now, :now, :source, :model, 1)
    ON CONFLICT (id) DO UPDATE SET last_seq = sessions.last_seq + 1,
        updated_at = excluded.updated_at, model = excluded.model
    RETURNING last_seq
)
SELECT (SELECT last_seq FROM s),
    nextval(pg_get_serial_sequence('exchanges', 'id')),
    ARRAY(SELECT nextval(pg_get_serial_sequence('entries', 'id')) FROM generate_series(1, :ids)),
    (SELECT json_object_agg(prefix_hash, id) FROM entries
        WHERE session_id = :sid AND prefix_hash = ANY(:chain))
"""
)

_ANSWER = text(
    """
SELECT (SELECT id FROM exchanges WHERE id = :xid),
    (SELECT id FROM entries WHERE session_id = :sid AND prefix_hash = :prefix),
    nextval(pg_get_serial_sequence('entries', 'id'))
"""
)


@dataclass(frozen=True)
class Claim:
    """What a request's first statement took: its number, its ids, its stored prefix."""

    seq: int
    exchange_id: int
    entry_ids: list[int]
    stored: tuple[int, int | None] | None  # None: not among the last positions; look further


def claim(
    conn: Connection,
    session_id: str,
    source: str,
    model: str,
    now: datetime,
    key_id: str | None,
    chain: Sequence[str],
) -> Claim:
    start = max(0, len(chain) - history.FIRST_PROBE)
    params = {
        "sid": session_id,
        "key_id": key_id,
        "now": now,
        "source": source,
        "model": model,
        "ids": IDS,
        "chain": list(chain[start:]),
    }
    seq, exchange_id, entry_ids, found = conn.execute(_CLAIM, params).one()
    found = found or {}
    hits = [i for i in range(start, len(chain)) if chain[i] in found]
    if hits:
        stored: tuple[int, int | None] | None = (hits[-1], found[chain[hits[-1]]])
    else:
        stored = (-1, None) if start == 0 else None
    return Claim(seq, exchange_id, list(entry_ids), stored)


def open_turn(
    conn: Connection,
    session_id: str,
    source: str,
    model: str,
    now: datetime,
    key_id: str | None,
    messages: Sequence[dict[str, Any]],
    hashes: Sequence[str],
    chain: Sequence[str],
) -> tuple[int, int, int, int]:
    """A request's session number, history and exchange id: (seq, leaf, added, exchange id).
    A tail longer than the ids taken ahead goes the general way, waiting for its ids."""
    got = claim(conn, session_id, source, model, now, key_id, chain)
    stored = got.stored
    if stored is None:
        stored = history.longest_stored_prefix(conn, session_id, chain)
    if fits(stored, len(hashes), got.entry_ids):
        leaf = extend(conn, session_id, messages, hashes, chain, stored, got.entry_ids, now)
        return got.seq, leaf, len(hashes) - 1 - stored[0], got.exchange_id
    leaf, added = history.extend(conn, session_id, messages, hashes, now, chain, stored)
    return got.seq, leaf, added, got.exchange_id


def extend(
    conn: Connection,
    session_id: str,
    messages: Sequence[dict[str, Any]],
    hashes: Sequence[str],
    chain: Sequence[str],
    stored: tuple[int, int | None],
    ids: list[int],
    now: datetime,
) -> int:
    """Insert a short new tail under ids taken ahead; returns the last entry's id. A
    concurrent writer that stored the same entry first makes this a unique violation, and
    the transaction runs again (it then finds that entry stored)."""
    pos, parent = stored
    tail = range(pos + 1, len(hashes))
    history.store_messages(conn, {hashes[i]: messages[i] for i in tail}, now)
    rows = []
    for i, entry_id in zip(tail, ids, strict=False):
        rows.append(_entry(entry_id, session_id, parent, i, hashes[i], chain[i], now, False))
        parent = entry_id
    conn.execute(_insert_entry(), rows)
    assert parent is not None, "fits() made sure of a stored parent"
    return parent


def fits(stored: tuple[int, int | None], length: int, ids: list[int]) -> bool:
    """Whether extend() can store this tail: a stored parent, new messages, ids enough."""
    new = length - 1 - stored[0]
    return stored[1] is not None and 0 < new <= len(ids) and new < history.KNOWN_CHECK


def insert_exchange(conn: Connection, exchange_id: int, row: dict[str, Any]) -> None:
    conn.execute(_insert_exchange(), {**row, "id": exchange_id})


def answer_slot(
    conn: Connection, exchange_id: int, session_id: str, prefix: str
) -> tuple[bool, int | None, int]:
    """(the exchange still exists, the answer's entry if already stored, an id for it)."""
    params = {"xid": exchange_id, "sid": session_id, "prefix": prefix}
    exists, entry_id, new_id = conn.execute(_ANSWER, params).one()
    return exists is not None, entry_id, new_id


def append_answer(
    conn: Connection,
    entry_id: int,
    session_id: str,
    parent: int,
    position: int,
    msg_hash: str,
    prefix: str,
    now: datetime,
    partial: bool,
) -> None:
    row = _entry(entry_id, session_id, parent, position, msg_hash, prefix, now, partial)
    conn.execute(_insert_entry(), [row])


def _entry(
    entry_id: int,
    session_id: str,
    parent: int | None,
    position: int,
    msg_hash: str,
    prefix: str,
    now: datetime,
    partial: bool,
) -> dict[str, Any]:
    return {
        "id": entry_id,
        "session_id": session_id,
        "parent_id": parent,
        "position": position,
        "message_hash": msg_hash,
        "prefix_hash": prefix,
        "partial": partial,
        "created_at": now,
    }


@cache
def _insert_entry() -> Any:
    return insert(cast(Table, EntryRow.__table__))  # no RETURNING: the id is known, nothing waits


@cache
def _insert_exchange() -> Any:
    return insert(cast(Table, ExchangeRow.__table__))
