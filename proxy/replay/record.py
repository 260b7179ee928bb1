"""`ctxproxy replay --record`: a replayed session written into the store, so the viewer shows
it like any other, marked as a replay (source "replay") and left out of the live totals."""

from __future__ import annotations

import re

from proxy.replay.runner import Replayed
from proxy.store import Store
from proxy.store.request import NewRequest
from proxy.store.totals import REPLAY

ID_LENGTH = 128  # what a session id may hold (sessions/identify.py)


def session_id(r: Replayed, named: bool) -> str:
    """`replay:<session>`, with the configuration's name where several were replayed."""
    name = f"{r.session.name}:{r.config.name}" if named else r.session.name
    return re.sub(r"[^A-Za-z0-9._:@-]+", "_", f"{REPLAY}:{name}")[:ID_LENGTH]


def record(store: Store, r: Replayed, named: bool) -> str:
    """Each turn as an exchange of its view; a refused turn with its error. No answer."""
    sid = session_id(r, named)
    store.delete_session(sid)  # a replay recorded again replaces the last one
    pipeline = list(r.config.settings.compaction.pipeline)
    for turn, result in zip(r.session.turns, r.turns, strict=True):
        body = turn.body
        ref = store.record_request(
            NewRequest(
                session_id=sid,
                source=REPLAY,
                messages=body["messages"],
                request={k: v for k, v in body.items() if k != "messages"},
                model=str(body.get("model") or "replay"),
                upstream=REPLAY,
                stream=False,
                compiled=result.view if result.error is None else [],
                tokens_original=result.original,
                tokens_compiled=result.sent,
                budget=result.budget,
                window=result.window,
                pipeline=pipeline,
                events=result.events,
            )
        )
        error = None if result.error is None else {"message": result.error}
        store.finish_exchange(
            ref,
            status=200 if result.error is None else 400,
            latency_ms=0.0,
            ttft_ms=None,
            response=None,
            partial=False,
            usage=None,
            error=error,
        )
    return sid
