"""Sessions ctxproxy stored: their requests, the views that went upstream and the calibration
each was compiled with, to replay; their raw histories or views as OpenAI-chat JSONL.

A session is read whole in a few queries (its entries, exchanges, states and message bodies,
each body decoded once): an exchange's history is its leaf entry's path in the session's trie,
and a message resent every turn is one object in every turn, as it is one row."""

from __future__ import annotations

import json
from collections.abc import Iterator
from typing import Any

from sqlalchemy import select
from sqlalchemy.orm import Session as Db

from proxy.replay.session import Session, Turn
from proxy.store import Store, history
from proxy.store.models import EntryRow, ExchangeRow, ViewStateRow

KIND = "stored"


def read(store: Store, session_id: str) -> list[Session]:
    """The session's finished requests in order, each with the view the upstream received
    (for those answered) and the calibration it was compiled with."""
    with Db(store.engine) as db:
        rows = db.execute(
            select(ExchangeRow, ViewStateRow.factor)
            .outerjoin(ViewStateRow, ViewStateRow.exchange_id == ExchangeRow.id)
            .where(ExchangeRow.session_id == session_id, ExchangeRow.status.is_not(None))
            .order_by(ExchangeRow.seq)
        ).all()
        paths = _Paths(db, session_id)
        session = Session(session_id, KIND)
        for x, factor in rows:
            hashes = paths.hashes(x.leaf_entry_id)
            body = {**x.params, "messages": paths.messages(hashes)}
            live = None
            if x.status == 200:
                live = paths.messages(history.decode_view(hashes, x.compiled))
            # The calibration is the stored state's: the upstream's counts of earlier prompts
            # moved it, and a replay cannot ask them again.
            session.turns.append(Turn(body, live, factor, x.window, f"#{x.seq}"))
    return [session]


class _Paths:
    """A session's history trie, read once; each message body decoded once."""

    def __init__(self, db: Db, session_id: str) -> None:
        entries = db.execute(
            select(EntryRow.id, EntryRow.parent_id, EntryRow.message_hash).where(
                EntryRow.session_id == session_id
            )
        ).all()
        self._parent = {e: p for e, p, _ in entries}
        self._hash = {e: h for e, _, h in entries}
        self._db = db
        self._bodies: dict[str, dict[str, Any]] = {}
        self._paths: dict[int, list[str]] = {}

    def hashes(self, leaf: int) -> list[str]:
        """The message hashes from the root to `leaf`, a known ancestor's path reused."""
        walk: list[int] = []
        entry: int | None = leaf
        while entry is not None and entry not in self._paths:
            walk.append(entry)
            entry = self._parent.get(entry)
        path = list(self._paths[entry]) if entry is not None else []
        for e in reversed(walk):
            path.append(self._hash[e])
        self._paths[leaf] = path
        return path

    def messages(self, hashes: list[str]) -> list[dict[str, Any]]:
        missing = {h for h in hashes if h not in self._bodies}
        if missing:
            found = history.bodies(self._db, missing)
            self._bodies.update((h, json.loads(body)) for h, body in found.items())
        return [self._bodies[h] for h in hashes]


def export_lines(store: Store, session_id: str, views: bool) -> Iterator[dict[str, Any]] | None:
    """One request body per finished exchange: the raw history sent, or (`views`) the view
    that went upstream; None where there is no such session."""
    if store.get_session(session_id) is None:
        return None
    [session] = read(store, session_id)
    return (
        {**t.body, "messages": t.live_view} if views else t.body
        for t in session.turns
        if not views or t.live_view is not None
    )
