"""A turn through the store: what the exchange tells it (`Turn`), what it hands back (`OpenTurn`)
and the path it chose, by name. Each database's backend (on_sqlite.py, on_postgres.py) decides
where the turn's work runs; the exchange only opens, records and closes the turn."""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

from proxy import offload, sizes
from proxy.store.digest import hash_messages
from proxy.store.request import Answer, NewRequest
from proxy.store.states import Prior
from proxy.store.views import RequestRef

if TYPE_CHECKING:  # it builds its backend from this module's
    from proxy.store.store import Store

# The compile, given the messages' hashes and the session's stored state: what to record.
Build = Callable[[list[str], Prior | None], NewRequest]


@dataclass(frozen=True)
class Turn:
    """One request as the store needs to know it before its stored state is read."""

    session_id: str
    messages: list[dict[str, Any]]
    size: int | None  # the body's bytes as read; None where it was not read whole
    unseen: int | None = None  # bytes no earlier request held (an agent's next turn), if known
    hashes: list[str] | None = None  # the messages' hashes, where the caller has them
    fresh: bool = False  # compiled afresh: no stored state is read
    record_during_send: bool = False  # recorded while the view goes upstream (record_turn)

    @property
    def small(self) -> bool:
        return self.size is not None and self.size <= sizes.ON_LOOP_BYTES

    @property
    def agent_next(self) -> bool:
        """An agent's next turn: long, but little of it new (sizes.ON_LOOP_AGENT_*)."""
        if self.unseen is None or self.size is None:
            return False
        return (
            self.unseen <= sizes.ON_LOOP_BYTES
            and self.size <= sizes.ON_LOOP_AGENT_BYTES
            and len(self.messages) <= sizes.ON_LOOP_AGENT_MESSAGES
        )


@dataclass(frozen=True)
class Path:
    """Where a turn's work runs. `on_loop`: its open (state read, compile, request record) runs
    on the event loop; `answer_on_loop`: its answer's record and progress do too. On PostgreSQL
    a step on the loop sends its statements in one pipeline and awaits them there (looped.py)."""

    name: str
    on_loop: bool
    answer_on_loop: bool


@dataclass
class OpenTurn:
    """A turn opened: its request recorded (`ref`), or about to be (`unwritten`, record_turn)."""

    path: Path
    hashes: list[str]
    prior: Prior | None
    ref: RequestRef | None = None
    unwritten: NewRequest | None = None


class Turns:
    """A database's backend for turns: where each step runs. This base runs every step the
    plain way, the caller's choice of loop or thread given by the path."""

    def __init__(self, store: Store) -> None:
        self.store = store

    def path(self, turn: Turn) -> Path:
        raise NotImplementedError

    async def open(self, turn: Turn, build: Build) -> OpenTurn:
        path = self.path(turn)
        return await offload.run(path.on_loop, self.open_plain, turn, build, path)

    def open_plain(self, turn: Turn, build: Build, path: Path) -> OpenTurn:
        """Hash, read the stored state, compile and record (unless during the send), in one go:
        each thread hop costs a loop turn. Run twice where the loop's try would wait."""
        hashes = turn.hashes or hash_messages(turn.messages)
        prior = None if turn.fresh else self.store.load_state(turn.session_id, hashes)
        new = build(hashes, prior)
        if turn.record_during_send:
            return OpenTurn(path, hashes, prior, unwritten=new)
        return OpenTurn(path, hashes, prior, ref=self.store.record_request(new))

    async def record(self, opened: OpenTurn) -> RequestRef:
        new, opened.unwritten = opened.unwritten, None
        assert new is not None
        opened.ref = await offload.run(opened.path.on_loop, self.store.record_request, new)
        return opened.ref

    async def close(self, opened: OpenTurn, answer: Answer, expected: bool) -> None:
        assert opened.ref is not None
        close = self.store._close
        await offload.run(opened.path.answer_on_loop, close, opened.ref, answer, expected)

    async def save_progress(self, opened: OpenTurn, message: dict[str, Any]) -> None:
        assert opened.ref is not None
        save = self.store.save_progress
        await offload.run(opened.path.answer_on_loop, save, opened.ref, message)

    def close_all(self) -> None:
        """Release what the backend holds (at the store's close)."""
