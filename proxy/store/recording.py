"""A request's record and an answer's, worked out before their transactions, which run on a
thread (store.py) or from the event loop (looped.py)."""

from __future__ import annotations

import logging
from dataclasses import dataclass
from typing import Any

from proxy.store import history, looped, writes
from proxy.store.direct import Direct
from proxy.store.models import utcnow
from proxy.store.request import Answer, NewRequest
from proxy.store.views import RequestRef
from strategies.messages import message_hash

log = logging.getLogger("ctxproxy.store")


@dataclass(frozen=True)
class Recording:
    """What recording a request needs, worked out before its transaction."""

    new: NewRequest
    owner: str | None  # this process's instance id
    raw: list[str]  # the messages' hashes
    chain: list[str]  # their prefix hashes
    view: list[Any]  # the compiled view, encoded against the history
    rewritten: dict[str, dict[str, Any]]  # the view's rewritten messages, by hash
    before: int  # entries stored ahead of the request's transaction
    continuing: bool  # extends a history this process stored by one message
    near: bool  # ends within a few messages of a history this process stored

    @property
    def turn(self) -> tuple[Any, ...]:
        """turn.continue_history's arguments after the exchange's row."""
        return (self.new, self.raw, self.chain, self.rewritten)

    def row(self, now: Any) -> dict[str, Any]:
        """The exchange's columns."""
        new = self.new
        return {
            "session_id": new.session_id,
            "created_at": now,
            "model": new.model,
            "upstream": new.upstream,
            "stream": new.stream,
            "tokens_original": new.tokens_original,
            "tokens_compiled": new.tokens_compiled,
            "budget": new.budget,
            "context_window": new.window,
            "pipeline": list(new.pipeline),
            "events": list(new.events),
            "params": {k: v for k, v in new.request.items() if k != "messages"},
            "compiled": self.view,
            "partial": False,
            "key_id": new.key_id,
            "owner": self.owner,
            "observed": new.observed,
            "cache_expected": new.cache_expected,
            "cache_previous": new.cache_previous,
        }


class Finishing:
    """An exchange's finish: its transaction's work, run on a thread or from the loop."""

    def __init__(self, pg: bool, ref: RequestRef, answer: Answer) -> None:
        response, partial = answer.response, answer.partial
        self.pg, self.ref, self.response, self.partial = pg, ref, response, partial
        self.answer = message_hash(response) if response is not None else None
        self.values = {
            "xid": ref.exchange_id,
            "status": answer.status,
            "latency_ms": answer.latency_ms,
            "ttft_ms": answer.ttft_ms,
            "response_hash": self.answer,
            "partial": partial,
            "usage": answer.usage,
            "error": answer.error,
            "attempts": answer.attempts,
            "choices": answer.choices,
            **({"recalls": answer.recalls} if answer.recalls is not None else {}),  # else: as saved
            "progress": None,
            **writes.usage_columns(answer.sent_usage or answer.usage),
            **(answer.cache or {}),  # cached_tokens, cache_cause, cache_lost (exchange/cache.py)
        }
        # On PostgreSQL the first try waits for nothing until COMMIT (see writes.link_answer);
        # a retry, after the session was deleted meanwhile say, goes the way that looks first.
        self.tried = False
        self.stored: list[str] = []  # the answer's prefix hash, once its entry is written
        self.closed = False  # the exchange was there to close

    def work(self, conn: Direct | looped.Batch) -> None:
        ref, response, answer, partial = self.ref, self.response, self.answer, self.partial
        now = utcnow()
        self.stored.clear()
        self.closed = False
        quick, self.tried = self.pg and not self.tried, True
        found: writes.Linked | int | None | bool
        if quick:
            found = writes.link_answer(conn, ref, response, answer, partial, now)
        else:
            found = writes.answer_entry(conn, ref, response, answer, partial, now)
        if found is False:
            log.info(
                "store: session %s was deleted before exchange %d finished", ref.session_id, ref.seq
            )
            return
        values = {**self.values, "finished_at": now}
        if answer is not None and ref.leaf_prefix is not None:
            self.stored.append(history.link(ref.leaf_prefix, answer))
        if isinstance(found, writes.Linked):
            values.update(found.params)
            conn.execute(writes.finish_linked_exchange(), values)
        else:
            conn.execute(writes.finish_exchange(), {**values, "response_entry_id": found})
        conn.execute(writes.touch_session(), {"sid": ref.session_id, "updated_at": now})
        self.closed = True
