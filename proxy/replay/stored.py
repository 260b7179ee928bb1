"""Sessions ctxproxy stored: their requests, the views that went upstream and the calibration
each was compiled with, to replay; their raw histories or views as OpenAI-chat JSONL."""

from __future__ import annotations

from collections.abc import Iterator
from typing import Any

from sqlalchemy import select
from sqlalchemy.orm import Session as Db

from proxy.replay.session import Session, Turn
from proxy.store import Store
from proxy.store.models import ExchangeRow, ViewStateRow

KIND = "stored"


def read(store: Store, session_id: str) -> list[Session]:
    """The session's requests in order, each with the view the upstream received."""
    summaries = store.list_exchanges(session_id, limit=1_000_000)
    if summaries is None:
        return []
    factors = _factors(store, session_id)
    session = Session(session_id, KIND)
    for x in summaries:
        detail = store.get_exchange(session_id, x.seq)
        if detail is None or detail.exchange.pending:
            continue
        body = dict(detail.request)
        live = detail.compiled_request.get("messages") if x.status == 200 else None
        session.turns.append(Turn(body, live, factors.get(x.seq), x.window, f"#{x.seq}"))
    return [session]


def _factors(store: Store, session_id: str) -> dict[int, float]:
    """Each exchange's calibration, as its stored decisions hold it (the upstream's counts of
    earlier prompts moved it; a replay cannot ask them again)."""
    query = (
        select(ExchangeRow.seq, ViewStateRow.factor)
        .join(ViewStateRow, ViewStateRow.exchange_id == ExchangeRow.id)
        .where(ExchangeRow.session_id == session_id)
    )
    with Db(store.engine) as db:
        return {seq: factor for seq, factor in db.execute(query).all()}


def export_lines(store: Store, session_id: str, views: bool) -> Iterator[dict[str, Any]] | None:
    """One request body per exchange: the raw history sent, or (`views`) the view that went
    upstream; None where there is no such session."""
    summaries = store.list_exchanges(session_id, limit=1_000_000)
    if summaries is None:
        return None

    def bodies() -> Iterator[dict[str, Any]]:
        for x in summaries:
            detail = store.get_exchange(session_id, x.seq)
            if detail is None:
                continue
            yield detail.compiled_request if views else detail.request

    return bodies()
