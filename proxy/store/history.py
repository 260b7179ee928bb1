"""A session's history as a trie of entries: shared prefixes, branches where histories diverge.

Entry i of a history is keyed by prefix_hash_i = sha256(prefix_hash_{i-1} + message_hash_i),
so one indexed `IN` query finds how much of an incoming history is already stored, and only
the tail is inserted. An edited or rewound history shares the common prefix and branches at
the first differing message; nothing stored is ever rewritten.
"""

from __future__ import annotations

import hashlib
import json
from collections.abc import Iterable, Sequence
from datetime import datetime
from functools import cache, lru_cache
from typing import Any, cast

import orjson
from sqlalchemy import Table, bindparam, select, update
from sqlalchemy.dialects import postgresql, sqlite
from sqlalchemy.orm import Session

from proxy.store import direct
from proxy.store.engine import (
    Executor,
    dialect_of,
    insert_ignore,
    insert_ignore_returning,
    listed,
    one_of,
    statement,
)
from proxy.store.models import EntryRow, MessageRow
from strategies.messages import message_hash, orjson_exact

CHUNK = 500  # bound parameters per IN (…) query
KNOWN_CHECK = 8  # new messages from which the stored ones are looked up rather than re-sent
FIRST_PROBE = 8  # positions looked up first, from a history's end (a turn adds a few)
BULK = 3  # a new tail this long is inserted in one statement, then linked in one more


def link(prefix_hash: str, msg_hash: str) -> str:
    return hashlib.sha256((prefix_hash + msg_hash).encode()).hexdigest()


class Hashes(list[str]):
    """A history's message hashes, keeping its prefix chain once it has been computed: a
    request looks its history up and stores it, and both need the chain."""

    chain: list[str] | None = None


def prefix_chain(hashes: Sequence[str]) -> list[str]:
    known = getattr(hashes, "chain", None)
    if known is not None and len(known) == len(hashes):
        return known
    chain, prefix = [], ""
    sha256 = hashlib.sha256
    for h in hashes:
        prefix = sha256((prefix + h).encode()).hexdigest()
        chain.append(prefix)
    if isinstance(hashes, Hashes):
        hashes.chain = chain
    return chain


def chunks(items: Sequence[Any], size: int = CHUNK) -> Iterable[Sequence[Any]]:
    for start in range(0, len(items), size):
        yield items[start : start + size]


def compact_json(msg: dict[str, Any]) -> tuple[str, int]:
    """A message's stored body, compact JSON in its own key order, and its size in bytes."""
    if orjson_exact(msg):
        try:
            data = orjson.dumps(msg)
            return data.decode(), len(data)
        except orjson.JSONEncodeError:  # a lone surrogate
            pass
    body = json.dumps(msg, ensure_ascii=False, separators=(",", ":"))
    return body, len(body.encode("utf-8", "surrogatepass"))


def message_row(msg: dict[str, Any], now: datetime, msg_hash: str | None = None) -> dict[str, Any]:
    body, size = compact_json(msg)
    role = msg.get("role")
    return {
        "hash": msg_hash or message_hash(msg),
        "role": role[:32] if isinstance(role, str) else None,
        "body": body,
        "size": size,
        "created_at": now,
    }


def store_messages(s: Executor, bodies: dict[str, dict[str, Any]], now: datetime) -> None:
    if len(bodies) >= KNOWN_CHECK:  # a new session often repeats bodies stored already
        known: set[str] = set()
        for chunk in chunks(list(bodies)):
            known.update(s.execute(_known_messages(), {"hashes": chunk}).scalars())
        bodies = {h: m for h, m in bodies.items() if h not in known}
    insert_ignore(s, MessageRow, [message_row(m, now, h) for h, m in bodies.items()])


@cache
def _known_messages() -> Any:
    return select(MessageRow.hash).where(MessageRow.hash.in_(bindparam("hashes", expanding=True)))


def longest_stored_prefix(
    s: Executor, session_id: str, chain: Sequence[str], near: bool = False
) -> tuple[int, int | None]:
    """(position, entry id) of the longest stored prefix of `chain`, or (-1, None) if none.

    Stored prefixes are closed under truncation, so the chunks are probed from the end and
    the first chunk with a hit holds the answer: one query for a history that grew a little,
    and one for a long history whose first message is not stored (a new session). `near`:
    one of its last prefixes is known stored, so the first probe finds it (no check first).
    """
    if len(chain) > CHUNK and not near and not any_stored(s, session_id, chain):
        return -1, None
    for start, end in probes(len(chain)):
        window = chain[start:end]
        params = {"sid": session_id, **listed("c", window)}
        rows = s.execute(stored_prefixes(len(window)), params).all()
        if rows:
            found = dict(rows)
            pos = max(i for i in range(start, end) if chain[i] in found)
            return pos, found[chain[pos]]
    return -1, None


def probes(n: int, first: int = FIRST_PROBE) -> Iterable[tuple[int, int]]:
    """Windows of a history's positions, from its end: a few positions first (a history that
    grew by a turn is found there), then CHUNK at a time."""
    end = n
    start = max(0, end - first)
    while end > 0:
        yield start, end
        end, start = start, max(0, start - CHUNK)


def any_stored(s: Executor, session_id: str, chain: Sequence[str]) -> bool:
    """Whether any prefix of the history is stored: its first message is, if any is."""
    first = {"sid": session_id, **listed("c", chain[:1])}
    return s.execute(stored_prefixes(1), first).first() is not None


@lru_cache(maxsize=64)
def stored_prefixes(n: int) -> Any:
    """For `n` prefix hashes, parameters c0… (engine.listed)."""
    return direct.reusable(
        select(EntryRow.prefix_hash, EntryRow.id).where(
            EntryRow.session_id == bindparam("sid"), one_of(EntryRow.prefix_hash, "c", n)
        )
    )


def extend(
    s: Executor,
    session_id: str,
    messages: Sequence[dict[str, Any]],
    hashes: Sequence[str],
    now: datetime,
    chain: Sequence[str] | None = None,
    stored: tuple[int, int | None] | None = None,
    near: bool = False,
) -> tuple[int, int]:
    """Store a history; return (id of its last entry, number of entries added). `stored`:
    its longest stored prefix (position, entry id), when the caller looked it up already;
    `near`: one of its last prefixes is known stored (longest_stored_prefix)."""
    chain = prefix_chain(hashes) if chain is None else chain
    if stored is None:
        stored = longest_stored_prefix(s, session_id, chain, near)
    pos, parent = stored
    tail = range(pos + 1, len(hashes))
    store_messages(s, {hashes[i]: messages[i] for i in tail}, now)
    if len(tail) >= BULK:
        return _extend_in_bulk(s, session_id, hashes, chain, pos, parent, now), len(tail)
    added = 0
    for i in tail:
        parent, new = append(s, session_id, parent, i, hashes[i], chain[i], now)
        added += new
    assert parent is not None, "a history has at least one message"
    return parent, added


def extend_by_one(
    s: Executor,
    session_id: str,
    messages: Sequence[dict[str, Any]],
    hashes: Sequence[str],
    chain: Sequence[str],
    now: datetime,
) -> int | None:
    """A history one message longer than a stored one (a continuing turn: the answer was
    stored when its exchange closed, the client adds its message): that message's entry
    inserted under its stored parent in one statement, without looking the history up first.
    Returns the new entry's id, or None when the parent is not stored or the entry already
    is (nothing was inserted): then extend() it."""
    dialect = dialect_of(s)
    if len(hashes) < 2 or dialect not in ("sqlite", "postgresql"):
        return None
    store_messages(s, {hashes[-1]: messages[-1]}, now)
    params = {
        "sid": session_id,
        "parent": chain[-2],
        "position": len(hashes) - 1,
        "message_hash": hashes[-1],
        "prefix_hash": chain[-1],
        "partial": False,
        "created_at": now,
    }
    found: int | None = s.execute(_append_under(dialect), params).scalar_one_or_none()
    return found


def _append_under(dialect: str) -> Any:
    """INSERT an entry under the one whose prefix hash is `parent`, if that one is stored and
    this one is not; RETURNING its id."""
    t = cast(Table, EntryRow.__table__)

    def build() -> Any:
        parent = t.alias("parent")
        row = select(
            parent.c.session_id,
            parent.c.id,
            *(bindparam(c, type_=t.c[c].type) for c in ROW_COLUMNS),
        ).where(
            parent.c.session_id == bindparam("sid"), parent.c.prefix_hash == bindparam("parent")
        )
        columns = [t.c.session_id, t.c.parent_id, *(t.c[c] for c in ROW_COLUMNS)]
        ins = (sqlite if dialect == "sqlite" else postgresql).insert(t).from_select(columns, row)
        return ins.on_conflict_do_nothing().returning(t.c.id)

    return statement("append-under", t, dialect, build)


ROW_COLUMNS = ("position", "message_hash", "prefix_hash", "partial", "created_at")


def _extend_in_bulk(
    s: Executor,
    session_id: str,
    hashes: Sequence[str],
    chain: Sequence[str],
    pos: int,
    parent: int | None,
    now: datetime,
) -> int:
    """A long new tail (a first request with a long history): one INSERT for all its entries,
    then their parents linked in one UPDATE, instead of a round trip per message."""
    tail = range(pos + 1, len(hashes))
    rows = [
        {
            "session_id": session_id,
            "parent_id": None,
            "position": i,
            "message_hash": hashes[i],
            "prefix_hash": chain[i],
            "partial": False,
            "created_at": now,
        }
        for i in tail
    ]
    insert_ignore(s, EntryRow, rows)
    ids: dict[str, tuple[int, int | None]] = {}
    for chunk in chunks(chain[pos + 1 :]):
        found = s.execute(
            select(EntryRow.prefix_hash, EntryRow.id, EntryRow.parent_id).where(
                EntryRow.session_id == session_id, EntryRow.prefix_hash.in_(chunk)
            )
        )
        ids.update((h, (i, p)) for h, i, p in found)
    links = []
    for i in tail:
        entry, linked = ids[chain[i]]
        up = parent if i == pos + 1 else ids[chain[i - 1]][0]
        if linked is None and up is not None:  # rows a concurrent writer made are linked already
            links.append({"entry": entry, "up": up})
    if links:
        table = cast(Table, EntryRow.__table__)  # declarative tables are Tables
        s.execute(
            update(table).where(table.c.id == bindparam("entry")).values(parent_id=bindparam("up")),
            links,
        )
    return ids[chain[-1]][0]


def append(
    s: Executor,
    session_id: str,
    parent_id: int | None,
    position: int,
    msg_hash: str,
    prefix_hash: str,
    now: datetime,
    partial: bool = False,
) -> tuple[int, bool]:
    """The entry for this prefix, inserted unless a concurrent writer got there first."""
    row = {
        "session_id": session_id,
        "parent_id": parent_id,
        "position": position,
        "message_hash": msg_hash,
        "prefix_hash": prefix_hash,
        "partial": partial,
        "created_at": now,
    }
    new_id = insert_ignore_returning(s, EntryRow, row)
    if new_id is not None:
        return new_id, True
    existing = s.execute(
        select(EntryRow.id).where(
            EntryRow.session_id == session_id, EntryRow.prefix_hash == prefix_hash
        )
    ).scalar_one()
    return existing, False


def path(s: Session, leaf_id: int) -> list[tuple[int, str, bool, str]]:
    """The history ending at an entry, root first: (entry id, message hash, partial, body)."""
    anchor = (
        select(EntryRow.id, EntryRow.parent_id, EntryRow.position)
        .where(EntryRow.id == leaf_id)
        .cte("path", recursive=True)
    )
    step = select(EntryRow.id, EntryRow.parent_id, EntryRow.position).join(
        anchor, EntryRow.id == anchor.c.parent_id
    )
    walk = anchor.union_all(step)
    rows = s.execute(
        select(EntryRow.id, EntryRow.message_hash, EntryRow.partial, MessageRow.body)
        .join(walk, walk.c.id == EntryRow.id)
        .join(MessageRow, MessageRow.hash == EntryRow.message_hash)
        .order_by(walk.c.position)
    ).all()
    return [(r[0], r[1], r[2], r[3]) for r in rows]


def span(s: Session, leaf_id: int, first: int, last: int) -> list[tuple[int, str, bool, str]]:
    """Positions first..last of the history ending at an entry, as path() gives them; the walk
    from the leaf stops at `first` and only the span's bodies are read."""
    anchor = (
        select(EntryRow.id, EntryRow.parent_id, EntryRow.position)
        .where(EntryRow.id == leaf_id)
        .cte("span", recursive=True)
    )
    step = (
        select(EntryRow.id, EntryRow.parent_id, EntryRow.position)
        .join(anchor, EntryRow.id == anchor.c.parent_id)
        .where(EntryRow.position >= first)
    )
    walk = anchor.union_all(step)
    rows = s.execute(
        select(EntryRow.id, EntryRow.message_hash, EntryRow.partial, MessageRow.body)
        .join(walk, walk.c.id == EntryRow.id)
        .join(MessageRow, MessageRow.hash == EntryRow.message_hash)
        .where(walk.c.position.between(first, last))
        .order_by(walk.c.position)
    ).all()
    return [(r[0], r[1], r[2], r[3]) for r in rows]


# --- compiled views, stored as runs of the raw history plus rewritten messages ------------


def encode_view(raw: Sequence[str], compiled: Sequence[str]) -> list[Any]:
    """[start, stop] for each run of unchanged raw positions, a hash for anything else."""
    positions: dict[str, list[int]] = {}
    for i, h in enumerate(raw):
        positions.setdefault(h, []).append(i)
    out: list[Any] = []
    nxt = 0  # the raw position that would continue the current run
    for h in compiled:
        if nxt < len(raw) and raw[nxt] == h:
            pos = nxt
        elif h in positions:
            pos = next((p for p in positions[h] if p >= nxt), positions[h][0])
        else:
            out.append(h)
            nxt = len(raw)
            continue
        if out and isinstance(out[-1], list) and out[-1][1] == pos:
            out[-1][1] = pos + 1
        else:
            out.append([pos, pos + 1])
        nxt = pos + 1
    return out


def decode_view(raw: Sequence[str], view: Sequence[Any]) -> list[str]:
    out: list[str] = []
    for part in view:
        if isinstance(part, str):
            out.append(part)
        else:
            out.extend(raw[part[0] : part[1]])
    return out


def bodies(s: Executor, hashes: Iterable[str]) -> dict[str, str]:
    wanted = sorted(set(hashes))
    found: dict[str, str] = {}
    for chunk in chunks(wanted):
        rows = s.execute(select(MessageRow.hash, MessageRow.body).where(MessageRow.hash.in_(chunk)))
        found.update((h, body) for h, body in rows)
    return found
