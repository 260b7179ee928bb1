"""The statements and row helpers behind Store's writes: built once, run inside its
transactions."""

from __future__ import annotations

import operator
from dataclasses import dataclass
from datetime import datetime
from typing import Any, cast

from sqlalchemy import Table, bindparam, delete, exists, insert, select, update
from sqlalchemy.dialects import postgresql, sqlite
from sqlalchemy.orm import Session

from proxy.store import history, states
from proxy.store.engine import Executor, dialect_of, insert_ignore, statement
from proxy.store.models import (
    CompiledRef,
    EntryRow,
    ExchangeRow,
    MessageRow,
    SessionRow,
    ViewStateRow,
)
from proxy.store.views import (
    RequestRef,
)
from strategies.messages import message_hash


def session_row(
    session_id: str, source: str, model: str, now: Any, key_id: str | None, last_seq: int = 0
) -> dict[str, Any]:
    """A new session's row, as every insert of one writes it."""
    return {
        "id": session_id,
        "key_id": key_id,
        "created_at": now,
        "updated_at": now,
        "source": source,
        "model": model,
        "last_seq": last_seq,
    }


def next_seq(
    s: Executor,
    session_id: str,
    source: str,
    model: str,
    now: Any,
    key_id: str | None,
) -> int:
    name = dialect_of(s)
    if name in ("sqlite", "postgresql"):
        # One statement: insert the session or, when it exists, take its next number. The
        # update row-locks the session until commit, so concurrent requests take turns.
        row = session_row(session_id, source, model, now, key_id, last_seq=1)
        return s.execute(upsert_session(name), row).scalar_one()
    row = session_row(session_id, source, model, now, key_id)
    insert_ignore(s, SessionRow, [row])
    # The UPDATE row-locks the session until commit, so concurrent requests (any process)
    # take turns here and each gets the next number.
    s.execute(
        update(SessionRow)
        .where(SessionRow.id == session_id)
        .values(last_seq=SessionRow.last_seq + 1, updated_at=now, model=model)
    )
    return s.execute(select(SessionRow.last_seq).where(SessionRow.id == session_id)).scalar_one()


def count_exchange(
    s: Executor, session_id: str, source: str, model: str, now: Any, key_id: str | None
) -> int | None:
    """Insert the session or take its next exchange number, as next_seq does; where the
    exchange's own insert can read that number (SQLite, PostgreSQL), nothing waits for this
    statement and None is returned: insert the exchange with insert_counted_exchange()."""
    name = dialect_of(s)
    if name not in ("sqlite", "postgresql"):
        return next_seq(s, session_id, source, model, now, key_id)
    row = session_row(session_id, source, model, now, key_id, last_seq=1)
    s.execute(upsert_session(name, returning=False), row)
    return None


def usage_columns(usage: dict[str, Any] | None) -> dict[str, int | None]:
    usage = usage if isinstance(usage, dict) else {}
    details = usage.get("prompt_tokens_details")
    cached = details.get("cached_tokens") if isinstance(details, dict) else None

    def num(v: Any) -> int | None:
        return v if isinstance(v, int) and not isinstance(v, bool) else None

    return {
        "prompt_tokens": num(usage.get("prompt_tokens")),
        "completion_tokens": num(usage.get("completion_tokens")),
        "cached_tokens": num(cached),
    }


def collect_garbage(s: Session, candidates: list[str]) -> None:
    for chunk in history.chunks(candidates):
        s.execute(
            delete(MessageRow).where(
                MessageRow.hash.in_(chunk),
                ~exists().where(EntryRow.message_hash == MessageRow.hash),
                ~exists().where(CompiledRef.message_hash == MessageRow.hash),
                ~exists().where(ExchangeRow.response_hash == MessageRow.hash),
            )
        )


def leaf_of(conn: Executor, ref: RequestRef) -> tuple[int, str]:
    """The position and prefix hash of the request's last entry (known since it was stored)."""
    if ref.leaf_position is not None and ref.leaf_prefix is not None:
        return ref.leaf_position, ref.leaf_prefix
    e = EntryRow.__table__.c
    found = conn.execute(select(e.position, e.prefix_hash).where(e.id == ref.leaf_entry_id)).one()
    return found[0], found[1]


def table(model: type[Any]) -> Table:
    return cast(Table, model.__table__)


def insert_exchange() -> Any:
    t = table(ExchangeRow)
    return statement("insert", t, "any", lambda: insert(t).returning(t.c.id))


def insert_counted_exchange() -> Any:
    """The exchange's insert taking its seq from the session count_exchange() just counted
    (the session stays row-locked until commit): parameter `counted`, the session's id."""
    t, sessions = table(ExchangeRow), table(SessionRow)

    def build() -> Any:
        seq = select(sessions.c.last_seq).where(sessions.c.id == bindparam("counted"))
        return insert(t).values(seq=seq.scalar_subquery()).returning(t.c.id, t.c.seq)

    return statement("insert-counted", t, "any", build)


def exchange_exists() -> Any:
    t = table(ExchangeRow)
    return statement("exists", t, "any", lambda: select(t.c.id).where(t.c.id == bindparam("xid")))


def finish_exchange() -> Any:
    # No values(): the SET clause is whatever columns the parameters name.
    t = table(ExchangeRow)
    return statement("finish", t, "any", lambda: update(t).where(t.c.id == bindparam("xid")))


def save_open() -> Any:
    """An exchange still open (no status): the SET clause is whatever columns the
    parameters name besides xid (progress, recalls)."""
    t = table(ExchangeRow)
    where = (t.c.id == bindparam("xid"), t.c.status.is_(None))
    return statement("save-open", t, "any", lambda: update(t).where(*where))


def touch_session() -> Any:
    t = table(SessionRow)
    return statement("touch", t, "any", lambda: update(t).where(t.c.id == bindparam("sid")))


def upsert_session(dialect: str, *, returning: bool = True) -> Any:
    t = table(SessionRow)

    def build() -> Any:
        ins = (sqlite if dialect == "sqlite" else postgresql).insert(t)
        upsert = ins.on_conflict_do_update(
            index_elements=[t.c.id],
            set_={
                "last_seq": t.c.last_seq + 1,
                "updated_at": ins.excluded.updated_at,
                "model": ins.excluded.model,
            },
        )
        return upsert.returning(t.c.last_seq) if returning else upsert

    kind = "upsert" if returning else "upsert-quiet"
    return statement(kind, t, dialect, build)


def keep_state(
    s: Executor,
    exchange_id: int,
    session_id: str,
    entry_id: int,
    decided: states.Decisions,
    rewritten: dict[str, dict[str, Any]],
    now: Any,
) -> None:
    t = table(ViewStateRow)
    s.execute(
        statement("insert", t, "any", lambda: insert(t)),
        state_row(exchange_id, session_id, entry_id, decided, rewritten, now),
    )


def state_row(
    exchange_id: int,
    session_id: str,
    entry_id: int,
    decided: states.Decisions,
    rewritten: dict[str, dict[str, Any]],
    now: Any,
) -> dict[str, Any]:
    """The view state's row; its forms are stored by hash, a rewritten message's known."""
    by_id = {id(m): h for h, m in rewritten.items()}

    def hash_of(msg: dict[str, Any]) -> str:
        return by_id.get(id(msg)) or message_hash(msg)

    return states.row(exchange_id, session_id, entry_id, decided, hash_of, now)


def compiled_view(
    messages: list[dict[str, Any]], raw: list[str], compiled: list[dict[str, Any]]
) -> tuple[list[Any], dict[str, dict[str, Any]]]:
    """The view encoded against the raw history, and the messages a strategy rewrote."""
    if len(compiled) == len(messages) and all(map(operator.is_, compiled, messages)):
        return ([[0, len(messages)]] if messages else []), {}  # nothing was compacted
    # The compiler passes untouched messages through as the same objects: hash only the rest.
    hashed = {id(m): h for m, h in zip(messages, raw, strict=True)}
    view_hashes = [hashed.get(id(m)) or message_hash(m) for m in compiled]
    known = set(raw)
    rewritten = {h: m for h, m in zip(view_hashes, compiled, strict=True) if h not in known}
    return history.encode_view(raw, view_hashes), rewritten


def keep_rewritten(
    s: Executor, exchange_id: int, rewritten: dict[str, dict[str, Any]], now: Any
) -> None:
    """Store the rewritten messages and mark them used by the exchange (deletes check this)."""
    history.store_messages(s, rewritten, now)
    rows = [{"exchange_id": exchange_id, "message_hash": h} for h in sorted(rewritten)]
    insert_ignore(s, CompiledRef, rows)


@dataclass(frozen=True)
class Linked:
    """An answer's entry inserted without waiting for its id: finish_linked_exchange() finds
    it by these parameters (the session and the entry's prefix hash)."""

    params: dict[str, str]


def link_answer(
    conn: Executor,
    ref: RequestRef,
    response: dict[str, Any] | None,
    answer: str | None,
    partial: bool,
    now: datetime,
) -> Linked | int | None | bool:
    """As answer_entry(), in statements none of which waits for an answer (pipelined on
    PostgreSQL, they leave with COMMIT): the answer's entry is inserted under the request's,
    unless already stored, and the exchange is not looked up. An exchange deleted meanwhile
    took that entry with it, so the insert fails (foreign key) and the transaction is run
    again, with answer_entry(). Without an answer, or with a request's entry not known in
    full, answer_entry() it is."""
    if response is None or answer is None:
        return answer_entry(conn, ref, response, answer, partial, now)
    if ref.leaf_position is None or ref.leaf_prefix is None:
        return answer_entry(conn, ref, response, answer, partial, now)
    linked = history.link(ref.leaf_prefix, answer)
    history.store_messages(conn, {answer: response}, now)
    row = {
        "session_id": ref.session_id,
        "parent_id": ref.leaf_entry_id,
        "position": ref.leaf_position + 1,
        "message_hash": answer,
        "prefix_hash": linked,
        "partial": partial,
        "created_at": now,
    }
    insert_ignore(conn, EntryRow, [row])
    return Linked({"answer_session": ref.session_id, "answer_prefix": linked})


def finish_linked_exchange() -> Any:
    """finish_exchange() with response_entry_id the entry link_answer() inserted."""
    t, e = table(ExchangeRow), table(EntryRow)

    def build() -> Any:
        entry = select(e.c.id).where(
            e.c.session_id == bindparam("answer_session"),
            e.c.prefix_hash == bindparam("answer_prefix"),
        )
        update_ = update(t).where(t.c.id == bindparam("xid"))
        return update_.values(response_entry_id=entry.scalar_subquery())

    return statement("finish-linked", t, "any", build)


def answer_entry(
    conn: Executor,
    ref: RequestRef,
    response: dict[str, Any] | None,
    answer: str | None,
    partial: bool,
    now: datetime,
) -> int | None | bool:
    """The answer's entry in the history (None without an answer), or False when the
    exchange is gone."""
    if response is None or answer is None:
        found = conn.execute(exchange_exists(), {"xid": ref.exchange_id}).first()
        return None if found is not None else False
    position, prefix = leaf_of(conn, ref)
    linked = history.link(prefix, answer)
    if conn.execute(exchange_exists(), {"xid": ref.exchange_id}).first() is None:
        return False
    history.store_messages(conn, {answer: response}, now)
    entry_id, _ = history.append(
        conn,
        ref.session_id,
        ref.leaf_entry_id,
        position + 1,
        answer,
        linked,
        now,
        partial=partial,
    )
    return entry_id
