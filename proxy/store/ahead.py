"""A long new history stored ahead of its request's own transaction, a slice at a time, so that
no other request waits long behind one write: a prefix is a valid history whatever happens next."""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any, TypeVar, overload

from proxy import sizes
from proxy.store import history, writes
from proxy.store.direct import Direct
from proxy.store.engine import Writer, insert_ignore
from proxy.store.models import SessionRow, utcnow

AHEAD = 100  # messages stored at a time ahead of a long history's request (sizes.AHEAD_FROM)


def store_ahead(
    writer: Writer,
    session: tuple[str, str, str | None, str],
    messages: list[dict[str, Any]],
    raw: list[str],
    chain: list[str],
) -> int:
    """A new tail longer than sizes.AHEAD_FROM is stored AHEAD messages at a time, committing
    whenever another write waits for the lock. `session`: (id, source, key id, model).
    Returns how many entries were added."""
    session_id, source, key_id, model = session
    added, last = 0, len(messages) - AHEAD // 2
    if len(messages) <= sizes.AHEAD_FROM:
        return 0
    with writer.engine.connect() as conn:  # a long history that only grew: nothing to do
        stored = history.longest_stored_prefix(conn, session_id, chain)
    if len(messages) - (stored[0] + 1) <= sizes.AHEAD_FROM:
        return 0
    while stored[0] + 1 + AHEAD < last:

        def work(conn: Direct, stored: tuple[int, int | None] = stored) -> tuple[int, Stored]:
            now = utcnow()
            row = writes.session_row(session_id, source, model, now, key_id)
            insert_ignore(conn, SessionRow, [row])
            new = 0
            while (done := stored[0] + 1) + AHEAD < last:
                # Each slice is a view, and the prefix stored so far is known: a step costs
                # what it adds, not the history before it.
                end = done + AHEAD
                entry, added = history.extend(
                    conn, session_id, Head(messages, end), Head(raw, end), now,
                    Head(chain, end), stored,
                )  # fmt: skip
                new, stored = new + added, (end - 1, entry)
                if writer.contended():
                    break
            return new, stored

        new, stored = writer.run_core(work)
        added += new
    return added


Stored = tuple[int, int | None]  # a stored prefix: its last position and entry id
T = TypeVar("T")


class Head(Sequence[T]):
    """The first `n` items of a list, without copying them."""

    def __init__(self, items: Sequence[T], n: int) -> None:
        self.items, self.n = items, n

    def __len__(self) -> int:
        return self.n

    @overload
    def __getitem__(self, i: int) -> T: ...
    @overload
    def __getitem__(self, i: slice) -> Sequence[T]: ...
    def __getitem__(self, i: int | slice) -> T | Sequence[T]:
        if isinstance(i, slice):
            return self.items[slice(*i.indices(self.n))]
        if not -self.n <= i < self.n:
            raise IndexError(i)
        return self.items[i % self.n]
