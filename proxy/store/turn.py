"""A continuing turn's record on PostgreSQL in one round trip: none of its statements is read
before COMMIT, so the pipeline (pipelined.py) sends them all with it and waits once.

A continuing turn's history is a stored one plus the client's new message. Two statements
record it, each doing nothing unless that stored history (the new message's parent entry) is
there: `advance` counts the session's exchange and inserts the new entry; `open_exchange`,
whose snapshot is taken after `advance` ran (READ COMMITTED), inserts the exchange, its view
state and its rewritten messages' references. Their rows are read after COMMIT: without an
exchange, the parent was not stored and nothing was written but message bodies, so
Store.record_request records the request the general way, in another transaction."""

from __future__ import annotations

import threading
from collections import OrderedDict
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from functools import cache
from typing import Any, cast

from sqlalchemy import (
    ARRAY,
    Boolean,
    Integer,
    Table,
    bindparam,
    exists,
    func,
    insert,
    literal_column,
    select,
)
from sqlalchemy import update as update_
from sqlalchemy.dialects import postgresql

from proxy import offload
from proxy.store import direct, history, looped, states, writes
from proxy.store.direct import Direct, Pending
from proxy.store.engine import Writer
from proxy.store.models import CompiledRef, EntryRow, ExchangeRow, SessionRow, ViewStateRow
from proxy.store.request import NewRequest
from proxy.store.views import RequestRef

STORED_MAX = 2048  # histories remembered as stored (~250 bytes each)


class Stored:
    """Histories this process stored, as (session, prefix hash of their last entry), the newest
    STORED_MAX kept: a request extending one by a message takes the one-trip way; any other (a new
    session, a branch, a session last written by another process) goes the general way at
    once rather than after a try. Only a hint: a history deleted since fails the try."""

    def __init__(self, size: int = STORED_MAX) -> None:
        self._size = size
        self._seen: OrderedDict[tuple[str, str], None] = OrderedDict()
        self._lock = threading.Lock()

    def add(self, session_id: str, *prefixes: str) -> None:
        if not self._size:
            return
        with self._lock:
            for prefix in prefixes:
                self._seen[(session_id, prefix)] = None
                self._seen.move_to_end((session_id, prefix))
            while len(self._seen) > self._size:
                self._seen.popitem(last=False)

    def __contains__(self, key: tuple[str, str]) -> bool:
        return key in self._seen


def _table(model: type[Any]) -> Table:
    return cast(Table, model.__table__)


@dataclass(frozen=True)
class Statements:
    """The rows of a continuing turn's statements, read once its transaction committed."""

    advanced: Pending | looped.Sent
    opened: Pending | looped.Sent
    session_id: str
    position: int
    prefix: str

    def ref(self) -> RequestRef | None:
        """The request's reference, or None when its history's parent was not stored."""
        row = self.opened.rows().first()
        if row is None:
            return None
        added = len(self.advanced.rows().all())
        exchange_id, seq, leaf = row
        return RequestRef(
            self.session_id, seq, exchange_id, leaf, added, self.position, self.prefix
        )


@dataclass(frozen=True)
class Done:
    """A continuing turn found committed by an earlier try."""

    found: RequestRef

    def ref(self) -> RequestRef:
        return self.found


def continue_history(
    writer: Writer,
    row: dict[str, Any],
    new: NewRequest,
    hashes: Sequence[str],
    chain: Sequence[str],
    rewritten: dict[str, dict[str, Any]],
) -> RequestRef | None:
    """Record a continuing turn in one round trip, or return None when its history's parent
    is not stored (nothing was recorded)."""
    work = _tries(row, new, hashes, chain, rewritten, None)
    return writer.run_core(work, idempotent=True, flush=False).ref()


async def continue_looped(
    loop: looped.Loop,
    writer: Writer,
    row: dict[str, Any],
    new: NewRequest,
    hashes: Sequence[str],
    chain: Sequence[str],
    rewritten: dict[str, dict[str, Any]],
    guard: states.Guard | None = None,
) -> RequestRef | None:
    """continue_history, its round trip waited for on the event loop (looped.py); where it
    cannot be, on a thread. With a `guard` (states.guard), None too where the state it names
    is no longer the session's newest (nothing was recorded)."""
    work = _tries(row, new, hashes, chain, rewritten, guard)
    try:
        opened = await loop.transaction(work, flush=False)
    except offload.WouldWait:
        opened = await offload.hop(writer.run_core, work, True, False)
    return opened.ref()


def _tries(
    row: dict[str, Any],
    new: NewRequest,
    hashes: Sequence[str],
    chain: Sequence[str],
    rewritten: dict[str, dict[str, Any]],
    guard: states.Guard | None,
) -> Callable[[Direct | looped.Batch], Statements | Done]:
    """The turn's work, run until one try commits. A try whose connection was lost once
    COMMIT was sent may have committed: the next looks for its exchange first (by its
    session, its leaf and its created_at, this call's own), so that nothing is recorded
    twice."""
    tries: list[bool] = []

    def work(conn: Direct | looped.Batch) -> Statements | Done:
        if tries:
            params = {"sid": row["session_id"], "now": row["created_at"], "leaf": chain[-1]}
            found = conn.execute(committed(), params).first()
            if found is not None:
                exchange_id, seq, leaf, added = found
                position, prefix = len(hashes) - 1, chain[-1]
                return Done(
                    RequestRef(row["session_id"], seq, exchange_id, leaf, added, position, prefix)
                )
        tries.append(True)
        return record(conn, row, new, hashes, chain, rewritten, guard)

    return work


@cache
def committed() -> Any:
    """The exchange a continuing turn's earlier try committed, if it did."""
    x, e = _table(ExchangeRow), _table(EntryRow)
    return direct.reusable(
        select(x.c.id, x.c.seq, x.c.leaf_entry_id, x.c.new_messages)
        .join(e, e.c.id == x.c.leaf_entry_id)
        .where(
            x.c.session_id == bindparam("sid"),
            x.c.created_at == bindparam("now"),
            e.c.prefix_hash == bindparam("leaf"),
        )
    )


def record(
    conn: Direct | looped.Batch,
    row: dict[str, Any],
    new: NewRequest,
    hashes: Sequence[str],
    chain: Sequence[str],
    rewritten: dict[str, dict[str, Any]],
    guard: states.Guard | None = None,
) -> Statements:
    """Send a continuing turn's statements: `row` the exchange's columns (record_request's),
    `rewritten` the view's rewritten messages by hash; with a `guard`, only where its state is
    still the session's newest."""
    now, session_id = row["created_at"], row["session_id"]
    history.store_messages(conn, {hashes[-1]: new.messages[-1], **rewritten}, now)
    where = {"sid": session_id, "parent": chain[-2], "leaf": chain[-1], "now": now}
    entry = {
        "entry_position": len(hashes) - 1,
        "entry_message_hash": hashes[-1],
        "entry_prefix_hash": chain[-1],
        "entry_partial": False,
        "entry_created_at": now,
    }
    checked = guard[1] if guard is not None else {}
    advanced = conn.send(
        advance(guard[0] if guard is not None else None),
        {**checked, **where, "model": row["model"], **entry},
    )
    refs = sorted(rewritten)
    params = {**row, **where}
    if new.decided is not None:  # the row's ids (0 here) are the statement's
        state = writes.state_row(0, session_id, 0, new.decided, rewritten, now)
        params.update({f"state_{k}": v for k, v in state.items() if k in STATE_GIVEN})
    if refs:
        params["refs"] = refs
    names = tuple(row)
    opened = conn.send(open_exchange(names, new.decided is not None, bool(refs)), params)
    return Statements(advanced, opened, session_id, len(hashes) - 1, chain[-1])


@cache
def advance(guarded: int | None = None) -> Any:
    """Where the parent entry is stored (and, `guarded`, the state states.guard names is the
    newest, for a window of that many prefixes): the session's next exchange number counted
    (the update row-locks the session until COMMIT, so concurrent requests take turns) and the
    new entry inserted under it unless stored; RETURNING its id when inserted."""
    s, e = _table(SessionRow), _table(EntryRow)
    parent = (
        select(e.c.id)
        .where(e.c.session_id == bindparam("sid"), e.c.prefix_hash == bindparam("parent"))
        .cte("parent")
    )
    counted = (
        update_(s)
        .where(
            s.c.id == bindparam("sid"),
            exists(select(parent.c.id)),
            *([states.still_newest(guarded)] if guarded is not None else []),
        )
        .values(last_seq=s.c.last_seq + 1, updated_at=bindparam("now"), model=bindparam("model"))
        .returning(s.c.id)
        .cte("counted")
    )
    # Named apart from the session's columns, which would join the update's SET clause.
    given = [bindparam(f"entry_{c}", type_=e.c[c].type) for c in history.ROW_COLUMNS]
    columns = [e.c.session_id, e.c.parent_id, *(e.c[c] for c in history.ROW_COLUMNS)]
    rows = select(counted.c.id, parent.c.id, *given)
    ins = postgresql.insert(e).from_select(columns, rows, include_defaults=False)
    return direct.reusable(ins.on_conflict_do_nothing().returning(e.c.id))


STATE_GIVEN = tuple(
    c.key for c in _table(ViewStateRow).c if c.key not in ("exchange_id", "session_id", "entry_id")
)


@cache
def open_exchange(names: tuple[str, ...], stated: bool, referenced: bool) -> Any:
    """Where the new entry and its parent are stored (after `advance`): the exchange inserted
    with columns `names` as given and the session's counted number, with its view state
    (`stated`) and the references to its rewritten messages (`referenced`, parameter refs);
    RETURNING its id, seq and leaf. A statement of its own, so that it sees an entry a
    concurrent request committed while `advance` waited for it. Should another request with
    this history store it between the two statements, this one takes that request's number:
    the unique (session, seq) refuses it, and the write is run again."""
    x, s, e = _table(ExchangeRow), _table(SessionRow), _table(EntryRow)
    leaf, parent = e.alias("leaf"), e.alias("parent")
    by_name = {c.name: c for c in x.c}
    given = [by_name[n] for n in names]
    # A leaf this transaction wrote (`advance` did) is the one history position it added.
    added = literal_column("(leaf.xmin = pg_current_xact_id()::xid)::int", Integer)
    # `advance` counted the exchange in this transaction: where it did not (its parent or its
    # guard's state missing), no exchange is opened, even on a leaf another request stored.
    counted = literal_column("sessions.xmin = pg_current_xact_id()::xid", Boolean)
    rows = (
        select(*(bindparam(c.name, type_=c.type) for c in given), s.c.last_seq, leaf.c.id, added)
        .join_from(
            s, leaf, (leaf.c.session_id == s.c.id) & (leaf.c.prefix_hash == bindparam("leaf"))
        )
        .where(
            s.c.id == bindparam("sid"),
            counted,
            exists().where(
                parent.c.session_id == s.c.id, parent.c.prefix_hash == bindparam("parent")
            ),
        )
    )
    columns = [*given, x.c.seq, x.c.leaf_entry_id, x.c.new_messages]
    opened = (
        insert(x)
        .from_select(columns, rows, include_defaults=False)
        .returning(x.c.id, x.c.seq, x.c.leaf_entry_id, x.c.session_id)
        .cte("opened")
    )
    out = select(opened.c.id, opened.c.seq, opened.c.leaf_entry_id)
    if stated:
        v = _table(ViewStateRow)
        state = [bindparam(f"state_{k}", type_=v.c[k].type) for k in STATE_GIVEN]
        keep = select(opened.c.id, opened.c.session_id, opened.c.leaf_entry_id, *state)
        targets = [v.c.exchange_id, v.c.session_id, v.c.entry_id, *(v.c[k] for k in STATE_GIVEN)]
        out = out.add_cte(insert(v).from_select(targets, keep, include_defaults=False).cte("kept"))
    if referenced:
        r = _table(CompiledRef)
        hashes = func.unnest(bindparam("refs", type_=ARRAY(r.c.message_hash.type)))
        refs = select(opened.c.id, hashes)
        ins = postgresql.insert(r).from_select([r.c.exchange_id, r.c.message_hash], refs)
        out = out.add_cte(ins.on_conflict_do_nothing().cte("referenced"))
    return direct.reusable(out)
