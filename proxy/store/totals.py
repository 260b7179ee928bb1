"""What a session's exchanges (or all of them) add up to, for the audit API and `ctxproxy
sessions`: counts, tokens, the cache, and what each compaction phase did."""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

from sqlalchemy import case, func, select
from sqlalchemy.orm import Session

from proxy.store.models import EntryRow, ExchangeRow, MessageRow, SessionRow
from proxy.store.views import PhaseStats, Stats, Totals


def columns() -> list[Any]:
    x = ExchangeRow
    kept = x.status.is_(None) | (x.status < 400)  # the failed ones are counted apart

    def tokens(column: Any) -> Any:
        return func.sum(case((kept, column), else_=0))

    return [
        func.count(x.id),
        func.sum(case((x.status.is_(None), 1), else_=0)),
        func.sum(case((x.status >= 400, 1), else_=0)),
        tokens(x.tokens_original),
        tokens(x.tokens_compiled),
        func.sum(x.prompt_tokens),
        func.sum(x.completion_tokens),
        func.sum(x.cached_tokens),
        func.count(x.leaf_entry_id.distinct()),
        tokens(case((x.cache_cause == "firing", x.cache_lost), else_=0)),
        func.sum(case((x.observed, 1), else_=0)),
        func.sum(case((x.cache_cause.is_not(None), 1), else_=0)),
    ]


def of_row(row: Sequence[Any] | None) -> Totals:
    if row is None:
        return Totals()
    n, pending, errors, orig, comp, prompt, completion, cached, turns, lost, observed, broke = (
        int(v or 0) for v in row
    )
    return Totals(
        n,
        pending,
        errors,
        orig,
        comp,
        orig - comp,
        prompt,
        completion,
        cached,
        turns,
        n - turns,
        cache_lost=lost,
        net_saved=orig - comp - lost,
        observed=observed,
        cache_breaks=broke,
    )


def by_session(s: Session, ids: list[str]) -> dict[str, Totals]:
    if not ids:
        return {}
    rows = s.execute(
        select(ExchangeRow.session_id, *columns())
        .where(ExchangeRow.session_id.in_(ids))
        .group_by(ExchangeRow.session_id)
    ).all()
    return {r[0]: of_row(r[1:]) for r in rows}


# A session `ctxproxy replay --record` wrote: shown like any other, counted in no live total.
REPLAY = "replay"


def _live_exchanges() -> Any:
    replayed = select(SessionRow.id).where(SessionRow.source == REPLAY)
    return ExchangeRow.session_id.not_in(replayed)


def stats(s: Session) -> Stats:
    live = SessionRow.source != REPLAY
    sessions = s.execute(select(func.count(SessionRow.id)).where(live)).scalar_one()
    totals = of_row(s.execute(select(*columns()).where(_live_exchanges())).one())
    messages, size = s.execute(select(func.count(MessageRow.hash), func.sum(MessageRow.size))).one()
    entries = s.execute(select(func.count(EntryRow.id))).scalar_one()
    return Stats(sessions, totals, messages, int(size or 0), entries, phase_stats(s))


def phase_stats(s: Session) -> list[PhaseStats]:
    # Events are kept as the strategies wrote them (JSON), so they are summed here rather than
    # in SQL, whose JSON functions differ between SQLite and PostgreSQL.
    acc: dict[tuple[str, int | None], list[int]] = {}
    query = select(ExchangeRow.events).where(_live_exchanges())
    for events in s.scalars(query.execution_options(yield_per=500)):
        for e in events or []:
            if not isinstance(e, dict) or e.get("replayed"):
                continue  # a pass carried over from an earlier turn was counted when it fired
            phase = e.get("phase")
            key = (str(e.get("strategy", "?")), phase if isinstance(phase, int) else None)
            a = acc.setdefault(key, [0, 0, 0, 0])
            a[0] += 1
            a[1] += int(e.get("tokens_before") or 0)
            a[2] += int(e.get("tokens_after") or 0)
            a[3] += int(e.get("chars_removed") or 0)
    return [
        PhaseStats(strategy, phase, n, before, after, before - after, chars)
        for (strategy, phase), (n, before, after, chars) in sorted(
            acc.items(), key=lambda kv: (kv[0][0], kv[0][1] if kv[0][1] is not None else -1)
        )
    ]
