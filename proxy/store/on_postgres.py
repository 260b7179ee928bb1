"""PostgreSQL's turns: a small request continuing a history this process stored is read,
compiled and recorded from the event loop, its statements pipelined (looped.py), as are its
answer's record and progress; any other request opens on a thread, its record written while the
view goes upstream. Where the loop's way cannot run (no connection kept for it yet, a statement
that must be read before COMMIT, a failure), its step runs again on a thread."""

from __future__ import annotations

import dataclasses
from typing import TYPE_CHECKING, Any

from proxy import offload, sizes
from proxy.store import history, looped, states, turn, writes
from proxy.store.digest import hash_messages
from proxy.store.models import utcnow
from proxy.store.paths import Build, OpenTurn, Path, Turn, Turns
from proxy.store.priors import Cached
from proxy.store.recording import Finishing
from proxy.store.request import Answer, NewRequest
from proxy.store.views import RequestRef

if TYPE_CHECKING:  # it builds this backend
    from proxy.store.store import Store

# A small continuing turn compiled from the state this process recorded last: the check that it
# is still the newest and the record go in one round trip (priors.py).
RECORDED_STATE = Path("pg-pipelined-recorded", on_loop=True, answer_on_loop=True)
# A small continuing turn whose state is read first: two round trips, both from the loop.
READ_STATE = Path("pg-pipelined", on_loop=True, answer_on_loop=True)
# A small request that continues no history stored here (a new session, a branch): several round
# trips, on a thread; its answer's record from the loop.
THREAD_OPEN = Path("pg-thread-open", on_loop=False, answer_on_loop=True)
# A large request: every step on a thread.
THREAD = Path("pg-thread", on_loop=False, answer_on_loop=False)


class PostgresTurns(Turns):
    def __init__(self, store: Store) -> None:
        super().__init__(store)
        self.loop = looped.Loop(store.engine)

    def path(self, turn: Turn) -> Path:
        return THREAD_OPEN if turn.small else THREAD

    async def open(self, turn: Turn, build: Build) -> OpenTurn:
        if turn.small and len(turn.messages) <= sizes.AHEAD_FROM:
            hashes = turn.hashes or hash_messages(turn.messages)
            if self._continues(turn.session_id, hashes):
                return await self._open_pipelined(turn, build, hashes)
            turn = dataclasses.replace(turn, hashes=hashes)
        return await offload.hop(self.open_plain, turn, build, self.path(turn))

    def _continues(self, session_id: str, hashes: list[str]) -> bool:
        """Whether the history extends one this process stored by a message: the one-trip way
        records it."""
        chain = history.prefix_chain(hashes) if len(hashes) >= 2 else []
        return bool(chain) and (session_id, chain[-2]) in self.store._stored

    async def _open_pipelined(self, turn: Turn, build: Build, hashes: list[str]) -> OpenTurn:
        store, sid = self.store, turn.session_id
        chain = history.prefix_chain(hashes)
        cached = None if turn.fresh else store._priors.get(sid, chain)
        if cached is not None:
            ref = await self._record_checked(build(hashes, cached.prior), cached)
            if ref is not None:
                return OpenTurn(RECORDED_STATE, hashes, cached.prior, ref)
        prior = None if turn.fresh else await self._load_state(sid, chain)
        ref = await self._record(build(hashes, prior))
        return OpenTurn(READ_STATE, hashes, prior, ref)

    async def _load_state(self, session_id: str, chain: list[str]) -> states.Prior | None:
        """A continuing session's one query waited for on the loop; a load needing more, on a
        thread."""
        first = states.first_probe(session_id, chain)
        if first is not None:
            try:
                rows = await self.loop.read(*first)
                answered = looped.Answered(self.store.engine.dialect, *first, rows)
                return states.load(answered, session_id, chain)
            except offload.WouldWait:
                pass
        return await offload.hop(self.store._load_chain, session_id, chain)

    async def _record(self, new: NewRequest) -> RequestRef:
        """A continuing turn's round trip waited for on the loop; any other on a thread."""
        store = self.store
        rec = store._store_ahead(new)  # stores nothing ahead under AHEAD_FROM messages
        if rec.continuing:
            row = rec.row(utcnow())
            ref = await turn.continue_looped(self.loop, store._writer, row, *rec.turn)
            if ref is not None:
                store._stored.add(new.session_id, *rec.chain[-2:])
                return store._opened(ref, new)
        return await offload.hop(store._record_anew, new, rec)

    async def _record_checked(self, new: NewRequest, cached: Cached) -> RequestRef | None:
        """_record for a turn compiled from `cached`, in the same round trip as the check that
        it is the state a read would have found; None, with nothing recorded, where it is not
        (or where the turn does not continue a history stored by this process)."""
        store = self.store
        rec = store._store_ahead(new)
        if not rec.continuing:
            return None
        prior = cached.prior
        guard = states.guard(new.session_id, rec.chain, cached.exchange_id, prior.prompt_tokens)
        row = rec.row(utcnow())
        ref = await turn.continue_looped(
            self.loop, store._writer, row, new, rec.raw, rec.chain, rec.rewritten, guard
        )
        if ref is None:  # a newer state stored since (or the history's parent gone)
            store._priors.forget(cached.exchange_id, new.session_id)
            return None
        store._stored.add(new.session_id, *rec.chain[-2:])
        return store._opened(ref, new)

    async def close(self, opened: OpenTurn, answer: Answer, expected: bool) -> None:
        ref = opened.ref
        assert ref is not None
        if opened.path.answer_on_loop:
            finishing = Finishing(True, ref, answer)
            try:
                await self.loop.transaction(finishing.work)
            except offload.WouldWait:
                pass
            else:
                self.store._finished(ref, finishing, expected)
                return
        await offload.hop(self.store._close, ref, answer, expected)

    async def save_progress(self, opened: OpenTurn, message: dict[str, Any]) -> None:
        ref = opened.ref
        assert ref is not None
        if opened.path.answer_on_loop:
            values = {"xid": ref.exchange_id, "progress": message}
            try:
                await self.loop.transaction(lambda c: c.execute(writes.save_open(), values))
                return
            except offload.WouldWait:
                pass
        await offload.hop(self.store.save_progress, ref, message)

    def close_all(self) -> None:
        self.loop.close()
