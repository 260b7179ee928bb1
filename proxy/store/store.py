"""Store: the one object the rest of ctxproxy uses to write and read the database."""

from __future__ import annotations

import collections
import logging
import threading
from collections.abc import Callable
from pathlib import Path
from typing import Any, TypeVar

from sqlalchemy import Connection, delete, select, text, update
from sqlalchemy.orm import Session

from proxy import offload
from proxy.store import (
    ahead,
    history,
    install,
    liveness,
    pipelined,
    priors,
    reads,
    states,
    totals,
    turn,
    writes,
)
from proxy.store.digest import hash_messages
from proxy.store.direct import Direct
from proxy.store.engine import Writer, make_engine
from proxy.store.held import Held
from proxy.store.models import (
    CompiledRef,
    EntryRow,
    ExchangeRow,
    SessionRow,
    ViewStateRow,
    utcnow,
)
from proxy.store.on_postgres import PostgresTurns
from proxy.store.on_sqlite import SqliteTurns
from proxy.store.paths import Build, OpenTurn, Turn, Turns
from proxy.store.recording import Finishing, Recording
from proxy.store.request import Answer, NewRequest
from proxy.store.views import (
    ExchangeDetail,
    ExchangePage,
    ExchangeSummary,
    History,
    HistoryMessage,
    RequestRef,
    SessionDetail,
    SessionPage,
    Stats,
    StoredMessage,
)

T = TypeVar("T")
log = logging.getLogger("ctxproxy.store")
SETTLE_S = 2.0  # at most this long an audit read waits for finishes being written
NEAR = history.FIRST_PROBE  # last prefixes of a history looked for among those known stored


class Store:
    def __init__(self, url: str) -> None:
        self.url = url
        self.engine = make_engine(url)
        self._writer = Writer(self.engine)
        # The hot path's state read on PostgreSQL: no BEGIN, no ROLLBACK, one query's trip.
        self._pg = self.engine.dialect.name == "postgresql"
        self._reads = (
            self.engine.execution_options(isolation_level="AUTOCOMMIT") if self._pg else None
        )
        # SQLite: connections kept for the hot path's state reads (store/held.py)
        sqlite = self.engine.dialect.name == "sqlite"
        self._held = Held(self.engine, keep=2) if sqlite else None
        # PostgreSQL: sessions' newest states as recorded here, guessed before read (priors.py)
        self._priors = priors.Priors()
        # Histories stored: a request extending one by a message takes PostgreSQL's one-trip
        # way, and on either database needs no look-up of how much of it is stored ahead.
        self._stored = turn.Stored(turn.STORED_MAX)
        self.instance: str | None = None  # this process's InstanceRow id, once registered
        self._ids_key: bytes | None = None
        # Exchanges answered whose finish is still being written, by session (expect_finish).
        self._unsettled: collections.Counter[str] = collections.Counter()
        self._settling = threading.Condition()
        # Where each step of a turn runs, decided for this database (paths.py).
        self._turns: Turns = PostgresTurns(self) if self._pg else SqliteTurns(self)

    # --- lifecycle -------------------------------------------------------------------------

    def upgrade(self) -> None:
        """Bring the schema to the newest migration (a no-op when it already is)."""
        from migrations import upgrade

        with self._writer.locked():
            upgrade(self._writer.engine)

    def needs_upgrade(self) -> bool:
        from migrations import needs_upgrade

        return needs_upgrade(self.engine)

    def ids_key(self) -> bytes:
        """The install's key signing response ids (read once; the lifespan reads it first)."""
        if self._ids_key is None:
            self._ids_key = install.secret(self.engine, "response_ids")
        return self._ids_key

    def ping(self) -> None:
        with self.engine.connect() as conn:
            conn.execute(text("SELECT 1"))

    def close(self) -> None:
        self._turns.close_all()
        for held in (self._held, self._writer.held):
            if held is not None:
                held.close()
        self.engine.dispose()

    def sqlite_path(self) -> Path | None:
        db = self.engine.url.database
        return Path(db) if self.engine.dialect.name == "sqlite" and db else None

    # --- a turn: opened (its request recorded), its answer recorded ---------------------------

    async def open_turn(self, turn: Turn, build: Build) -> OpenTurn:
        """Read the session's stored state, compile (`build`) and record the request, where
        this database's backend runs them best; the path taken is on the result. With
        `turn.record_during_send` the record may be left to record_turn."""
        return await self._turns.open(turn, build)

    async def record_turn(self, opened: OpenTurn) -> RequestRef:
        """The request's record that open_turn left (while the view goes upstream)."""
        if opened.unwritten is None:
            assert opened.ref is not None
            return opened.ref
        return await self._turns.record(opened)

    async def close_turn(self, opened: OpenTurn, answer: Answer, expected: bool = False) -> None:
        """Record the answer (`expected`: announced by expect_finish)."""
        await self._turns.close(opened, answer, expected)

    async def save_turn_progress(self, opened: OpenTurn, message: dict[str, Any]) -> None:
        """The answer streamed so far, kept on the open exchange in case this process dies."""
        await self._turns.save_progress(opened, message)

    # --- writes ----------------------------------------------------------------------------

    def record_request(self, new: NewRequest) -> RequestRef:
        """Store a request's history and open its exchange, committed before this returns. On
        PostgreSQL the commit does not wait for the disk (the upstream call waits for it): the
        writes of its answer (save_progress, finish_exchange) do, and flush it with them."""
        rec = self._store_ahead(new)
        if self._pg and rec.continuing and not rec.before:  # one round trip (turn.py)
            ref = turn.continue_history(self._writer, rec.row(utcnow()), *rec.turn)
            if ref is not None:
                # a resend, a sibling, a next turn
                self._stored.add(new.session_id, *rec.chain[-2:])
                return self._opened(ref, new)
        return self._record_anew(new, rec)

    def _opened(self, ref: RequestRef, new: NewRequest) -> RequestRef:
        if self._pg and ref.leaf_prefix is not None:
            self._priors.opened(ref.exchange_id, ref.session_id, ref.leaf_prefix, new.decided)
        return ref

    def _store_ahead(self, new: NewRequest) -> Recording:
        """What recording `new` needs; a long new tail is stored ahead first, in transactions
        of its own (ahead.py), committed before this returns."""
        messages = new.messages
        if not messages:
            raise ValueError("a request needs at least one message")
        raw = new.hashes if new.hashes is not None else hash_messages(messages)
        view, rewritten = writes.compiled_view(messages, raw, new.compiled)
        chain = history.prefix_chain(raw)
        head = (new.session_id, new.source, new.key_id, new.model)
        # Hints (else the transaction below stores what is missing, as it finds it): a history
        # one message longer than one stored, or one that ends a few messages past a stored
        # one (a turn that branched from the answer), has nothing to store ahead and is found
        # by its last few prefixes: no look-up of a long history.
        sid = new.session_id
        continuing = len(raw) >= 2 and (sid, chain[-2]) in self._stored
        near = continuing or any((sid, c) in self._stored for c in chain[-NEAR:])
        before = 0 if near else ahead.store_ahead(self._writer, head, messages, raw, chain)
        return Recording(new, self.instance, raw, chain, view, rewritten, before, continuing, near)

    def _record_anew(self, new: NewRequest, rec: Recording) -> RequestRef:
        """A request recorded the general way: any history, stored or not."""
        session_id, source, key_id = new.session_id, new.source, new.key_id
        messages, model, decided = new.messages, new.model, new.decided
        raw, chain, rewritten = rec.raw, rec.chain, rec.rewritten

        def work(conn: Direct) -> RequestRef:
            now = utcnow()
            seq = writes.count_exchange(conn, session_id, source, model, now, key_id)
            leaf = history.extend_by_one(conn, session_id, messages, raw, chain, now)
            added = 1
            if leaf is None:
                leaf, added = history.extend(
                    conn, session_id, messages, raw, now, chain, near=rec.near
                )
            added += rec.before
            row = {**rec.row(now), "leaf_entry_id": leaf, "new_messages": added}
            if seq is None:
                row["counted"] = session_id
                exchange_id, seq = conn.execute(writes.insert_counted_exchange(), row).one()
            else:
                exchange_id = conn.execute(
                    writes.insert_exchange(), {**row, "seq": seq}
                ).scalar_one()
            writes.keep_rewritten(conn, exchange_id, rewritten, now)
            if decided is not None:
                writes.keep_state(conn, exchange_id, session_id, leaf, decided, rewritten, now)
            return RequestRef(session_id, seq, exchange_id, leaf, added, len(raw) - 1, chain[-1])

        ref = self._writer.run_core(work, flush=False)
        self._stored.add(session_id, *chain[-2:])
        return self._opened(ref, new)

    def replace_compiled(
        self,
        ref: RequestRef,
        messages: list[dict[str, Any]],
        compiled: list[dict[str, Any]],
        *,
        tokens_compiled: int,
        budget: int | None,
        window: int | None,
        events: list[dict[str, Any]],
        decided: states.Decisions | None = None,
    ) -> None:
        """A retry sent another view (an upstream overflow healed): record that one instead."""
        view, rewritten = writes.compiled_view(messages, hash_messages(messages), compiled)
        self._priors.forget(ref.exchange_id, ref.session_id)

        def work(s: Session) -> None:
            now = utcnow()
            writes.keep_rewritten(s, ref.exchange_id, rewritten, now)
            s.execute(delete(ViewStateRow).where(ViewStateRow.exchange_id == ref.exchange_id))
            if decided is not None:
                writes.keep_state(
                    s, ref.exchange_id, ref.session_id, ref.leaf_entry_id, decided, rewritten, now
                )
            s.execute(
                update(ExchangeRow)
                .where(ExchangeRow.id == ref.exchange_id)
                .values(
                    compiled=view,
                    tokens_compiled=tokens_compiled,
                    budget=budget,
                    window=window,
                    events=list(events),
                )
            )

        self._writer.run(work)

    def finish_exchange(self, ref: RequestRef, **fields: Any) -> None:
        """Close an exchange with `Answer(**fields)`, on this thread; its answer (complete or
        partial) joins the session's history, the answers of further choices (n > 1) are kept
        beside it. The token columns hold `sent_usage`, the first request's, when recall rounds
        ran: what the compiled view cost."""
        self._close(ref, Answer(**fields), False)

    def _close(self, ref: RequestRef, answer: Answer, expected: bool) -> None:
        # Run twice, this leaves what running it once does: the answer's message and entry
        # are inserted unless stored, the exchange's columns set to the same values again.
        finishing = Finishing(self._pg, ref, answer)
        try:
            self._writer.run_core(finishing.work, idempotent=True)
        except offload.WouldWait:  # to be run again, on a thread: still expected until then
            raise
        except BaseException:
            if expected:
                self._settled(ref.session_id)
            raise
        self._finished(ref, finishing, expected)
        self._writer.tidy()

    def _finished(self, ref: RequestRef, finishing: Finishing, expected: bool) -> None:
        if finishing.closed:
            self._priors.finished(ref.exchange_id, finishing.values["prompt_tokens"])
        if expected:
            self._settled(ref.session_id)
        for prefix in finishing.stored:
            self._stored.add(ref.session_id, prefix)

    def expect_finish(self, session_id: str) -> None:
        """An exchange's finish is written after its answer was sent (`expected=True`): until
        it is, the audit API's reads of that session (and of every session) wait for it, so
        that a client reads what it was answered."""
        with self._settling:
            self._unsettled[session_id] += 1

    def _settled(self, session_id: str) -> None:
        with self._settling:
            self._unsettled[session_id] -= 1
            if self._unsettled[session_id] <= 0:
                del self._unsettled[session_id]
            self._settling.notify_all()

    def _wait_settled(self, session_id: str | None = None) -> None:
        with self._settling:
            self._settling.wait_for(
                lambda: not (self._unsettled[session_id] if session_id else self._unsettled),
                timeout=SETTLE_S,
            )

    def save_progress(self, ref: RequestRef, answer: dict[str, Any]) -> None:
        """The answer streamed so far, kept on the open exchange, on this thread."""
        values = {"xid": ref.exchange_id, "progress": answer}
        self._writer.run_core(lambda c: c.execute(writes.save_open(), values), idempotent=True)

    def save_recalls(self, ref: RequestRef, recalls: list[dict[str, Any]]) -> None:
        """The recall calls answered so far, kept on the open exchange in case this process
        dies mid-round (closed as interrupted, it keeps them)."""
        values = {"xid": ref.exchange_id, "recalls": recalls}
        self._writer.run_core(lambda c: c.execute(writes.save_open(), values), idempotent=True)

    # --- processes and the exchanges they leave open ----------------------------------------

    def register_instance(self, instance: str, host: str, pid: int) -> None:
        self._writer.run(lambda s: liveness.register(s, instance, host, pid, utcnow()))
        self.instance = instance

    def heartbeat(self) -> None:
        if self.instance is not None:
            instance = self.instance
            self._writer.run(lambda s: liveness.beat(s, instance, utcnow()))

    def close_dead(self, host: str, stale: float, *, orphans: bool = False) -> int:
        """Close the open exchanges of dead instances (and, with `orphans`, of no live one) as
        interrupted, keeping the answer streamed so far; forget the dead. Returns how many."""
        dead = self._read(lambda s: liveness.dead(s, host, utcnow(), stale))
        dead = [d for d in dead if d != self.instance]
        closed = self.close_interrupted(dead)
        if orphans:
            closed += self.close_interrupted(None)
        if dead:
            self._writer.run(lambda s: liveness.forget(s, dead))
        return closed

    def close_interrupted(self, owners: list[str] | None) -> int:
        if owners == []:
            return 0
        found = self._read(lambda s: liveness.open_exchanges(s, owners))
        for ref, progress, created in found:
            started = reads.aware(created)
            self.finish_exchange(
                ref,
                status=200 if progress else 500,
                latency_ms=(utcnow() - started).total_seconds() * 1000,
                ttft_ms=None,
                response=progress,
                partial=bool(progress),
                usage=None,
                error=dict(liveness.INTERRUPTED),
            )
        return len(found)

    def retire(self) -> None:
        """At a clean stop: close what this process left open, and leave the instance list."""
        if self.instance is None:
            return
        instance, self.instance = self.instance, None
        self.close_interrupted([instance])
        self._writer.run(lambda s: liveness.forget(s, [instance]))

    def delete_session(self, session_id: str) -> bool:
        """Remove a session, its history and exchanges, and messages nothing else uses."""
        self._priors.forget(0, session_id)

        def work(s: Session) -> bool:
            if s.get(SessionRow, session_id) is None:
                return False
            ids = select(ExchangeRow.id).where(ExchangeRow.session_id == session_id)
            hashes = set(
                s.scalars(select(EntryRow.message_hash).where(EntryRow.session_id == session_id))
            )
            hashes.update(
                s.scalars(select(CompiledRef.message_hash).where(CompiledRef.exchange_id.in_(ids)))
            )
            s.execute(delete(CompiledRef).where(CompiledRef.exchange_id.in_(ids)))
            s.execute(delete(ViewStateRow).where(ViewStateRow.session_id == session_id))
            s.execute(delete(ExchangeRow).where(ExchangeRow.session_id == session_id))
            s.execute(delete(EntryRow).where(EntryRow.session_id == session_id))
            s.execute(delete(SessionRow).where(SessionRow.id == session_id))
            writes.collect_garbage(s, sorted(hashes))
            return True

        return self._writer.run(work)

    # --- reads -----------------------------------------------------------------------------

    def load_state(self, session_id: str, hashes: list[str]) -> states.Prior | None:
        """The compaction state of the longest prefix of this history that has one."""
        return self._load_chain(session_id, history.prefix_chain(hashes))

    def _load_chain(self, session_id: str, chain: list[str]) -> states.Prior | None:
        if self._held is not None:
            with self._held.connect() as conn:
                return states.load(Direct(conn), session_id, chain)
        engine = self._reads or self.engine
        return pipelined.read(engine, lambda c: states.load(Direct(c), session_id, chain))

    def _read(self, query: Callable[[Session], T], session_id: str | None = None) -> T:
        """An audit read, once the finishes of exchanges already answered are written."""
        if self._unsettled:
            self._wait_settled(session_id)

        def run(conn: Connection) -> T:
            with Session(bind=conn) as s:
                return query(s)

        return pipelined.read(self.engine, run)

    def list_sessions(
        self, limit: int = 50, offset: int = 0, key_id: str | None = None
    ) -> SessionPage:
        return self._read(lambda s: reads.list_sessions(s, limit, offset, key_id))

    def session_owner(self, session_id: str) -> tuple[bool, str | None]:
        return self._read(lambda s: reads.session_owner(s, session_id), session_id)

    def get_session(self, session_id: str) -> SessionDetail | None:
        return self._read(lambda s: reads.get_session(s, session_id), session_id)

    def get_history(self, session_id: str, leaf_entry_id: int | None = None) -> History | None:
        """The latest branch of a session's raw history, or the one ending at leaf_entry_id."""
        return self._read(lambda s: reads.get_history(s, session_id, leaf_entry_id), session_id)

    def history_span(
        self, session_id: str, first: int, last: int
    ) -> tuple[int, list[HistoryMessage]] | None:
        """The latest branch's length and its messages at positions first..last."""
        return self._read(lambda s: reads.history_span(s, session_id, first, last), session_id)

    def list_exchanges(
        self, session_id: str, limit: int = 1000, offset: int = 0
    ) -> list[ExchangeSummary] | None:
        return self._read(lambda s: reads.list_exchanges(s, session_id, limit, offset), session_id)

    def page_exchanges(
        self, session_id: str, limit: int = 1000, offset: int = 0
    ) -> ExchangePage | None:
        return self._read(lambda s: reads.page_exchanges(s, session_id, limit, offset), session_id)

    def last_seq(self, session_id: str) -> int:
        """The number of the session's newest request (0 without a session)."""
        return self._read(lambda s: getattr(s.get(SessionRow, session_id), "last_seq", 0) or 0)

    def get_exchange(self, session_id: str, seq: int) -> ExchangeDetail | None:
        return self._read(lambda s: reads.get_exchange(s, session_id, seq), session_id)

    def get_message(self, hash_or_prefix: str, key_id: str | None = None) -> StoredMessage | None:
        """By full hash or unique prefix; raises AmbiguousPrefix if several match. With
        `key_id`, only a message that key's own sessions hold."""

        return self._read(lambda s: reads.get_message(s, hash_or_prefix, key_id))

    def stats(self) -> Stats:
        return self._read(totals.stats)
