"""Read queries behind the audit API and the `ctxproxy sessions` command."""

from __future__ import annotations

import json
from collections.abc import Sequence
from datetime import UTC, datetime
from typing import Any

from sqlalchemy import Row, exists, func, select
from sqlalchemy.orm import Session, aliased

from proxy.store import history, titles, totals
from proxy.store.models import CompiledRef, EntryRow, ExchangeRow, MessageRow, SessionRow
from proxy.store.views import (
    Branch,
    ExchangeDetail,
    ExchangePage,
    ExchangeSummary,
    History,
    HistoryMessage,
    SessionDetail,
    SessionPage,
    SessionSummary,
    StoredMessage,
    Totals,
)

MAX_BRANCHES_LISTED = 100


class AmbiguousPrefix(LookupError):
    """A message hash prefix that more than one stored message starts with."""


def aware(t: datetime) -> datetime:
    return t if t.tzinfo else t.replace(tzinfo=UTC)  # SQLite hands back naive UTC


TITLE_WITHIN = 16  # the first user message is looked for among the first positions only


def _summary(row: SessionRow, added: Totals, title: str | None = None) -> SessionSummary:
    return SessionSummary(
        id=row.id,
        created_at=aware(row.created_at),
        updated_at=aware(row.updated_at),
        source=row.source,
        model=row.model,
        turns=added.turns,
        totals=added,
        title=title,
    )


def _titles(s: Session, ids: list[str]) -> dict[str, str]:
    """Each session's title: the first words a person wrote among its first user messages
    (proxy/store/titles.py skips what agent harnesses put before them)."""
    if not ids:
        return {}
    e, m = EntryRow, MessageRow
    rows = s.execute(
        select(e.session_id, e.position, m.body)
        .join(m, m.hash == e.message_hash)
        .where(e.session_id.in_(ids), e.position < TITLE_WITHIN, m.role == "user")
        .order_by(e.session_id, e.position, e.id)
    ).all()
    firsts: dict[str, dict[int, Any]] = {}  # per session, per position: the first entry's
    for session_id, position, body in rows:
        firsts.setdefault(session_id, {}).setdefault(position, json.loads(body).get("content"))
    return {sid: titles.title(list(by_position.values())) for sid, by_position in firsts.items()}


def list_sessions(s: Session, limit: int, offset: int, key_id: str | None = None) -> SessionPage:
    """A page of sessions; with `key_id`, only that client key's."""
    mine = [SessionRow.key_id == key_id] if key_id is not None else []
    total = s.execute(select(func.count(SessionRow.id)).where(*mine)).scalar_one()
    rows = s.scalars(
        select(SessionRow)
        .where(*mine)
        .order_by(SessionRow.updated_at.desc(), SessionRow.id)
        .limit(limit)
        .offset(offset)
    ).all()
    ids = [r.id for r in rows]
    added, named = totals.by_session(s, ids), _titles(s, ids)
    data = [_summary(r, added.get(r.id, Totals()), named.get(r.id)) for r in rows]
    return SessionPage(data, total, limit, offset, has_more=offset + len(rows) < total)


def session_owner(s: Session, session_id: str) -> tuple[bool, str | None]:
    """(whether the session exists, the id of the client key that made it)."""
    row = s.execute(select(SessionRow.key_id).where(SessionRow.id == session_id)).first()
    return (False, None) if row is None else (True, row[0])


def _seen_by(msg_hash: Any, key_id: str) -> Any:
    """Whether a message is in a history, a compiled view or an answer of the key's sessions."""
    in_history = exists().where(
        EntryRow.message_hash == msg_hash,
        EntryRow.session_id == SessionRow.id,
        SessionRow.key_id == key_id,
    )
    in_view = exists().where(
        CompiledRef.message_hash == msg_hash,
        CompiledRef.exchange_id == ExchangeRow.id,
        ExchangeRow.session_id == SessionRow.id,
        SessionRow.key_id == key_id,
    )
    return in_history | in_view


def _first_seen_by(s: Session, msg_hash: str, key_id: str) -> datetime | None:
    """When the key's own sessions first held the message (not when anyone stored it)."""
    in_history = select(func.min(EntryRow.created_at)).where(
        EntryRow.message_hash == msg_hash,
        EntryRow.session_id == SessionRow.id,
        SessionRow.key_id == key_id,
    )
    in_view = select(func.min(ExchangeRow.created_at)).where(
        CompiledRef.message_hash == msg_hash,
        CompiledRef.exchange_id == ExchangeRow.id,
        ExchangeRow.session_id == SessionRow.id,
        SessionRow.key_id == key_id,
    )
    times = [s.execute(in_history).scalar(), s.execute(in_view).scalar()]
    return min((t for t in times if t is not None), default=None)


def get_session(s: Session, session_id: str) -> SessionDetail | None:
    row = s.get(SessionRow, session_id)
    if row is None:
        return None
    added = totals.by_session(s, [session_id]).get(session_id, Totals())
    summary = _summary(row, added, _titles(s, [session_id]).get(session_id))
    head = head_entry(s, session_id)
    length = 0
    if head is not None:
        length = s.execute(select(EntryRow.position).where(EntryRow.id == head)).scalar_one() + 1
    stored = s.execute(
        select(func.count(EntryRow.id)).where(EntryRow.session_id == session_id)
    ).scalar_one()
    return SessionDetail(summary, length, stored, _branch_count(s, session_id))


def head_entry(s: Session, session_id: str) -> int | None:
    """The end of the latest branch: the newest exchange's answer, else its request."""
    row = s.execute(
        select(ExchangeRow.response_entry_id, ExchangeRow.leaf_entry_id)
        .where(ExchangeRow.session_id == session_id)
        .order_by(ExchangeRow.seq.desc())
        .limit(1)
    ).first()
    if row is not None:
        return row[0] or row[1]
    return s.execute(  # entries without an exchange: only if written by hand
        select(func.max(EntryRow.id)).where(EntryRow.session_id == session_id)
    ).scalar_one()


def _is_leaf() -> Any:
    """The tip of a branch. A recorded answer that the client then sent back in its own form
    (keys in another order, `content: null` left out) leaves the proxy's copy as a dead end
    beside the client's, added after it: no branch the client made, so not counted as one. An
    answer beside an older sibling (a rewind, a regenerate) is a branch and counts."""
    child, sibling, answer = aliased(EntryRow), aliased(EntryRow), aliased(ExchangeRow)
    superseded_answer = exists().where(answer.response_entry_id == EntryRow.id) & exists().where(
        sibling.parent_id == EntryRow.parent_id, sibling.id > EntryRow.id
    )
    return ~exists().where(child.parent_id == EntryRow.id) & ~superseded_answer


def _branch_count(s: Session, session_id: str) -> int:
    return s.execute(
        select(func.count(EntryRow.id)).where(EntryRow.session_id == session_id, _is_leaf())
    ).scalar_one()


def get_history(s: Session, session_id: str, leaf_entry_id: int | None = None) -> History | None:
    if s.get(SessionRow, session_id) is None:
        return None
    leaf = leaf_entry_id if leaf_entry_id is not None else head_entry(s, session_id)
    if leaf is not None:
        owner = s.execute(select(EntryRow.session_id).where(EntryRow.id == leaf)).scalar()
        if owner != session_id:
            return None
    branches = [
        Branch(r.id, r.position + 1, aware(r.created_at))
        for r in s.execute(
            select(EntryRow.id, EntryRow.position, EntryRow.created_at)
            .where(EntryRow.session_id == session_id, _is_leaf())
            .order_by(EntryRow.id.desc())
            .limit(MAX_BRANCHES_LISTED)
        )
    ]
    messages = [
        HistoryMessage(i, entry_id, h, partial, json.loads(body))
        for i, (entry_id, h, partial, body) in enumerate(history.path(s, leaf) if leaf else [])
    ]
    return History(session_id, leaf, _branch_count(s, session_id), branches, messages)


def history_span(
    s: Session, session_id: str, first: int, last: int
) -> tuple[int, list[HistoryMessage]] | None:
    """The latest branch's length and its messages at positions first..last (None: no session)."""
    if s.get(SessionRow, session_id) is None:
        return None
    leaf = head_entry(s, session_id)
    if leaf is None:
        return 0, []
    length = s.execute(select(EntryRow.position).where(EntryRow.id == leaf)).scalar_one() + 1
    found = history.span(s, leaf, first, min(last, length - 1)) if first < length else []
    return length, [
        HistoryMessage(first + i, entry_id, h, partial, json.loads(body))
        for i, (entry_id, h, partial, body) in enumerate(found)
    ]


def _phases(events: list[Any]) -> list[str]:
    labels: list[str] = []
    for e in events:
        if not isinstance(e, dict) or e.get("replayed"):
            continue  # the passes that fired for this exchange, as X-Ctxproxy-Compaction says
        label = str(e.get("strategy", "?"))
        if e.get("phase") is not None:
            label += f":{e['phase']}"
        if label not in labels:
            labels.append(label)
    return labels


def _turns(s: Session, session_id: str) -> dict[int, tuple[int, int]]:
    """Each history sent in the session: leaf entry -> (its turn number, the first seq that
    sent it). A request that resends a history (an SDK retry after a failure, a regenerate)
    is the same turn: turns are what the user counts, requests what the proxy handled."""
    turns: dict[int, tuple[int, int]] = {}
    for seq, leaf in s.execute(
        select(ExchangeRow.seq, ExchangeRow.leaf_entry_id)
        .where(ExchangeRow.session_id == session_id)
        .order_by(ExchangeRow.seq)
    ):
        turns.setdefault(leaf, (len(turns) + 1, seq))
    return turns


def _error_code(error: Any) -> str | None:
    code = error.get("code") if isinstance(error, dict) else None
    return str(code) if code is not None else None


def _exchange_summary(x: ExchangeRow, turns: dict[int, tuple[int, int]]) -> ExchangeSummary:
    turn, first = turns.get(x.leaf_entry_id, (0, x.seq))
    return ExchangeSummary(
        session_id=x.session_id,
        seq=x.seq,
        turn=turn,
        retry_of=first if first != x.seq else None,
        created_at=aware(x.created_at),
        finished_at=aware(x.finished_at) if x.finished_at else None,
        model=x.model,
        upstream=x.upstream,
        stream=x.stream,
        pending=x.status is None,
        status=x.status,
        error_code=_error_code(x.error),
        latency_ms=x.latency_ms,
        ttft_ms=x.ttft_ms,
        tokens_original=x.tokens_original,
        tokens_compiled=x.tokens_compiled,
        budget=x.budget,
        window=x.window,
        pipeline=list(x.pipeline),
        phases=_phases(x.events),
        new_messages=x.new_messages,
        partial=x.partial,
        prompt_tokens=x.prompt_tokens,
        completion_tokens=x.completion_tokens,
        cached_tokens=x.cached_tokens,
        observed=bool(x.observed),
        cache_expected=x.cache_expected,
        cache_previous=x.cache_previous,
        cache_cause=x.cache_cause,
        cache_lost=x.cache_lost,
        key_id=x.key_id,
    )


def list_exchanges(
    s: Session, session_id: str, limit: int, offset: int
) -> list[ExchangeSummary] | None:
    if s.get(SessionRow, session_id) is None:
        return None
    rows = s.scalars(
        select(ExchangeRow)
        .where(ExchangeRow.session_id == session_id)
        .order_by(ExchangeRow.seq)
        .limit(limit)
        .offset(offset)
    ).all()
    turns = _turns(s, session_id)
    return [_exchange_summary(x, turns) for x in rows]


def page_exchanges(s: Session, session_id: str, limit: int, offset: int) -> ExchangePage | None:
    data = list_exchanges(s, session_id, limit, offset)
    if data is None:
        return None
    total = s.execute(
        select(func.count(ExchangeRow.id)).where(ExchangeRow.session_id == session_id)
    ).scalar_one()
    return ExchangePage(data, total, limit, offset, has_more=offset + len(data) < total)


def get_exchange(s: Session, session_id: str, seq: int) -> ExchangeDetail | None:
    x = s.execute(
        select(ExchangeRow).where(ExchangeRow.session_id == session_id, ExchangeRow.seq == seq)
    ).scalar_one_or_none()
    if x is None:
        return None
    raw = history.path(s, x.leaf_entry_id)
    raw_hashes = [h for _, h, _, _ in raw]
    compiled_hashes = history.decode_view(raw_hashes, x.compiled)
    known = {h: body for _, h, _, body in raw}
    extra = set(compiled_hashes) - known.keys()
    if x.response_hash:
        extra.add(x.response_hash)
    known.update(history.bodies(s, extra))
    original = [json.loads(body) for _, _, _, body in raw]
    compiled = [json.loads(known[h]) for h in compiled_hashes]
    response = json.loads(known[x.response_hash]) if x.response_hash else None
    return ExchangeDetail(
        exchange=_exchange_summary(x, _turns(s, session_id)),
        request={**x.params, "messages": original},
        # Without the recall tool, when it was offered (proxy/recall/tool.py: as_forwarded).
        compiled_request={**x.params, "messages": compiled},
        compiled_hashes=compiled_hashes,
        events=list(x.events),
        response=response,
        response_hash=x.response_hash,
        usage=x.usage,
        error=x.error,
        attempts=x.attempts,
        recalls=x.recalls,
        leaf_entry_id=x.leaf_entry_id,
        response_entry_id=x.response_entry_id,
        choices=x.choices,
    )


def get_message(s: Session, ref: str, key_id: str | None = None) -> StoredMessage | None:
    """A message by its full hash or a unique prefix of it (caller checks the length); with
    `key_id`, only among the messages the key's own sessions hold, and stored when they first
    held it."""
    ref = ref.lower()
    if len(ref) == 64:
        query = select(MessageRow).where(MessageRow.hash == ref)
    else:
        query = select(MessageRow).where(MessageRow.hash.startswith(ref, autoescape=True))
    if key_id is not None:
        query = query.where(_seen_by(MessageRow.hash, key_id))
    rows: Sequence[Row[Any]] = s.execute(query.limit(2)).all()
    if len(rows) > 1:
        raise AmbiguousPrefix(ref)
    if not rows:
        return None
    m: MessageRow = rows[0][0]
    created = m.created_at if key_id is None else _first_seen_by(s, m.hash, key_id)
    return StoredMessage(m.hash, m.role, m.size, aware(created or m.created_at), json.loads(m.body))
