"""A long new history stored ahead of its request's own transaction, a slice at a time, so that
no other request waits long behind one write: a prefix is a valid history whatever happens next."""

from __future__ import annotations

from typing import Any

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
        done = history.longest_stored_prefix(conn, session_id, chain)[0] + 1
    if len(messages) - done <= sizes.AHEAD_FROM:
        return 0
    while done + AHEAD < last:

        def work(conn: Direct, done: int = done) -> tuple[int, int]:
            now = utcnow()
            row = writes.session_row(session_id, source, model, now, key_id)
            insert_ignore(conn, SessionRow, [row])
            new = 0
            while done + AHEAD < last:
                done += AHEAD
                new += history.extend(
                    conn, session_id, messages[:done], raw[:done], now, chain[:done]
                )[1]
                if writer.contended():
                    break
            return new, done

        new, done = writer.run_core(work)
        added += new
    return added
