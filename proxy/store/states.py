"""A session branch's compaction state in the database: encoded per exchange, found by the
history prefix it covers, decoded for the branch's next turn."""

from __future__ import annotations

import json
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from datetime import datetime
from functools import cache, lru_cache
from types import SimpleNamespace
from typing import Any

from sqlalchemy import bindparam, exists, select

from proxy.store import direct, history
from proxy.store.engine import Executor, listed, one_of
from proxy.store.models import EntryRow, ExchangeRow, ViewStateRow
from strategies.events import CompactionEvent
from strategies.messages import Message
from strategies.state import Form, Item, ViewState


@dataclass(frozen=True)
class Prior:
    """The newest stored state on a prefix of a request's history, with what the upstream
    later said of that exchange's prompt (for the session's calibration)."""

    state: ViewState
    factor: float
    raw_prompt: int
    prompt_tokens: int | None
    tokens_original: int


@dataclass(frozen=True)
class Decisions:
    """What a compile decided, to be stored with its exchange."""

    state: ViewState
    factor: float
    raw_prompt: int
    tokens_original: int


def row(
    exchange_id: int,
    session_id: str,
    entry_id: int,
    decided: Decisions,
    hash_of: Callable[[Message], str],
    now: datetime,
) -> dict[str, Any]:
    state = decided.state
    return {
        "exchange_id": exchange_id,
        "session_id": session_id,
        "entry_id": entry_id,
        "covered": state.covered,
        "items": encode_items(state.items, hash_of),
        "forgotten": [list(r) for r in state.forgotten],
        "carried": [e.to_dict() for e in state.carried],
        "view_tokens": state.view_tokens,
        "original_tokens": state.original_tokens,
        "factor": decided.factor,
        "raw_prompt": decided.raw_prompt,
        "tokens_original": decided.tokens_original,
        "created_at": now,
    }


def encode_items(items: Sequence[Item], hash_of: Callable[[Message], str]) -> list[Any]:
    if items and items[-1] == len(items) - 1 and items == tuple(range(len(items))):
        return [[0, len(items)]]  # nothing compacted: the whole history as one run
    out: list[Any] = []
    for item in items:
        if isinstance(item, int):
            if out and isinstance(out[-1], list) and out[-1][1] == item:
                out[-1][1] = item + 1
            else:
                out.append([item, item + 1])
            continue
        form: dict[str, Any] = {"i": item.index, "l": item.label, "h": hash_of(item.message)}
        if item.synthetic:
            form["s"] = 1
        out.append(form)
    return out


def load(s: Executor, session_id: str, chain: Sequence[str]) -> Prior | None:
    """The state of the longest prefix of `chain` (prefix hashes) that has one, newest first."""
    probes = iter(history.probes(len(chain)))
    first = next(probes, None)
    if first is None:
        return None
    found = _probe(s, session_id, chain[first[0] : first[1]])
    if found is None and len(chain) > first[1] - first[0]:
        # Not where a continuing session's last state is: none at all (nothing compacted yet)
        # takes one query, not one per chunk.
        if s.execute(_any_state(), {"sid": session_id}).first() is None:
            return None
        for start, end in probes:
            if (found := _probe(s, session_id, chain[start:end])) is not None:
                break
    if found is None:
        return None
    stored = SimpleNamespace(**found._mapping)
    return Prior(
        _decode(s, stored),
        stored.factor,
        stored.raw_prompt,
        stored.prompt_tokens,
        stored.tokens_original,
    )


def _probe(s: Executor, session_id: str, window: Sequence[str]) -> Any:
    return s.execute(*probe(session_id, window)).first()


def probe(session_id: str, window: Sequence[str]) -> tuple[Any, dict[str, Any]]:
    """The query for the newest state on one of `window`'s prefixes, and its parameters."""
    return _latest_state(len(window)), {"sid": session_id, **listed("c", window)}


Guard = tuple[int, dict[str, Any]]  # the condition's prefix count and its parameters


def guard(
    session_id: str, chain: Sequence[str], exchange_id: int, prompt_tokens: int | None
) -> Guard:
    """The parameters of `still_newest`: that load's first probe finds exchange
    `exchange_id`'s state, with `prompt_tokens`. A write that assumed that state makes its
    statements conditional on it, and writes nothing where another one is stored since."""
    start, end = next(iter(history.probes(len(chain))))
    window = chain[start:end]
    expected = {"guard_x": exchange_id, "guard_pt": prompt_tokens}
    return len(window), {"sid": session_id, **listed("c", window), **expected}


@lru_cache(maxsize=64)
def still_newest(n: int) -> Any:
    """The condition `guard` gives the parameters of, for a window of `n` prefixes."""
    newest = _latest_state(n).subquery()
    return exists(
        select(newest.c.exchange_id).where(
            newest.c.exchange_id == bindparam("guard_x", type_=newest.c.exchange_id.type),
            newest.c.prompt_tokens.is_not_distinct_from(
                bindparam("guard_pt", type_=newest.c.prompt_tokens.type)
            ),
        )
    )


def first_probe(session_id: str, chain: Sequence[str]) -> tuple[Any, dict[str, Any]] | None:
    """load's first query, which finds a continuing session's state (None: load asks none)."""
    first = next(iter(history.probes(len(chain))), None)
    return None if first is None else probe(session_id, chain[first[0] : first[1]])


@lru_cache(maxsize=64)
def _latest_state(n: int) -> Any:
    """Built once per list length (building costs more than running it): rows, not ORM
    objects."""
    return direct.reusable(
        select(*ViewStateRow.__table__.c, ExchangeRow.prompt_tokens)
        .join(EntryRow, EntryRow.id == ViewStateRow.entry_id)
        .join(ExchangeRow, ExchangeRow.id == ViewStateRow.exchange_id)
        .where(EntryRow.session_id == bindparam("sid"), one_of(EntryRow.prefix_hash, "c", n))
        .order_by(EntryRow.position.desc(), ViewStateRow.exchange_id.desc())
        .limit(1)
    )


@cache
def _any_state() -> Any:
    where = ViewStateRow.session_id == bindparam("sid")
    return direct.reusable(select(ViewStateRow.exchange_id).where(where).limit(1))


def _decode(s: Executor, stored: Any) -> ViewState:
    forms = [part for part in stored.items if isinstance(part, dict)]
    bodies = history.bodies(s, [f["h"] for f in forms])
    items: list[Item] = []
    for part in stored.items:
        if isinstance(part, dict):
            message = json.loads(bodies[part["h"]])
            items.append(Form(part["i"], part["l"], message, bool(part.get("s"))))
        else:
            items.extend(range(part[0], part[1]))
    return ViewState(
        stored.covered,
        tuple(items),
        tuple((a, b) for a, b in stored.forgotten),
        tuple(CompactionEvent(**e) for e in stored.carried),
        stored.view_tokens,
        stored.original_tokens,
    )
