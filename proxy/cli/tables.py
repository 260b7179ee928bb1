"""`ctxproxy sessions`: the stored sessions, or one session's turns, as text tables."""

from __future__ import annotations

import sys
from collections.abc import Sequence
from datetime import datetime
from typing import TYPE_CHECKING

from proxy.settings import Settings

if TYPE_CHECKING:
    from proxy.store import ExchangeSummary, SessionDetail, SessionPage
    from proxy.store.views import Totals

TITLE_COLUMN = 40


def show_sessions(settings: Settings, session_id: str | None, limit: int) -> int:
    from proxy.store import Store
    from proxy.store.engine import DriverMissing

    try:
        store = Store(settings.database_url)
    except DriverMissing as exc:
        print(f"ctxproxy: {exc}", file=sys.stderr)
        return 1
    db_file = store.sqlite_path()
    try:
        if db_file is not None and not db_file.exists():  # don't leave an empty file behind
            print(
                f"ctxproxy: no database at {db_file}; run `ctxproxy migrate` or `ctxproxy serve`",
                file=sys.stderr,
            )
            return 1
        if store.needs_upgrade():
            print(
                "ctxproxy: the database is empty or outdated; run `ctxproxy migrate`",
                file=sys.stderr,
            )
            return 1
        if session_id is None:
            print(sessions_table(store.list_sessions(limit=limit)))
            return 0
        detail = store.get_session(session_id)
        if detail is None:
            print(f"ctxproxy: no session '{session_id}'", file=sys.stderr)
            return 1
        print(turns_table(detail, store.list_exchanges(session_id) or []))
        return 0
    finally:
        store.close()


def sessions_table(page: SessionPage) -> str:
    if not page.data:
        return "no sessions"
    rows = [
        [
            s.id,
            s.source,
            s.model or "",
            str(s.turns),
            str(s.totals.retries),
            str(s.totals.errors),
            _arrow(s.totals.tokens_original, s.totals.tokens_compiled),
            _percent(s.totals.tokens_saved, s.totals.tokens_original),
            _net(s.totals),
            _time(s.updated_at),
            _clip(s.title or "", TITLE_COLUMN),
        ]
        for s in page.data
    ]
    table = _table(
        [
            "SESSION",
            "SOURCE",
            "MODEL",
            "TURNS",
            "RETRIES",
            "FAILED",
            "TOKENS BEFORE → AFTER",
            "SAVED",
            "NET OF CACHE",
            "UPDATED",
            "FIRST MESSAGE",
        ],
        rows,
        right={3, 4, 5, 6, 7, 8},
    )
    shown = f"{page.offset + 1}–{page.offset + len(page.data)} of {page.total} sessions"
    note = "turns: histories sent; retries resend one; tokens: requests that did not fail"
    note += "; net of cache: tokens saved less the cache firings lost (observe: would have)"
    return f"{table}\n{shown} · {note}"


def turns_table(detail: SessionDetail, exchanges: Sequence[ExchangeSummary]) -> str:
    s = detail.session
    head = (
        f"session {s.id} ({s.source}) · {_count(s.turns, 'turn')}"
        f" · {_count(s.totals.exchanges, 'request')}"
        f" ({_count(s.totals.retries, 'retry', 'retries')}, {s.totals.errors} failed)"
        f" · {detail.history_length} messages"
        f" · {detail.branch_count} branch{'es' if detail.branch_count != 1 else ''}"
        f" · saved {_percent(s.totals.tokens_saved, s.totals.tokens_original)}"
        f" · net of cache {_net(s.totals)}"
    )
    if s.title:
        head += f"\nfirst message: {s.title}"
    rows = []
    for x in exchanges:
        status = "pending" if x.pending else str(x.status) + (" partial" if x.partial else "")
        if x.error_code == "context_length_exceeded":
            status += " refused"
        if x.retry_of is not None:
            status += f" (retry of {x.retry_of})"
        rows.append(
            [
                str(x.seq),
                str(x.turn),
                _time(x.created_at),
                x.model,
                status,
                _arrow(x.tokens_original, x.tokens_compiled),
                ", ".join(x.phases) or "-",
                _cache(x),
            ]
        )
    table = _table(
        ["REQUEST", "TURN", "TIME", "MODEL", "STATUS", "TOKENS BEFORE → AFTER", "PHASES", "CACHE"],
        rows,
        right={0, 1, 5},
    )
    return f"{head}\n{table}"


def _net(t: Totals) -> str:
    """Tokens saved less the cache firings lost; 'would' where exchanges were observed."""
    return f"{t.net_saved:,}" + (" (would)" if t.observed else "")


def _cache(x: ExchangeSummary) -> str:
    """Cached/expected prompt tokens, and why less was cached when it was."""
    if x.cached_tokens is None and x.cache_expected is None:
        return "-"
    got = "?" if x.cached_tokens is None else f"{x.cached_tokens:,}"
    out = f"{got}/{x.cache_expected or 0:,}"
    if x.cache_cause:
        out += f" lost {x.cache_lost or 0:,} ({x.cache_cause})"
    return out + (" observed" if x.observed else "")


def _table(header: list[str], rows: list[list[str]], right: set[int]) -> str:
    widths = [max(len(r[i]) for r in [header, *rows]) for i in range(len(header))]

    def line(cells: list[str]) -> str:
        return "  ".join(
            c.rjust(w) if i in right else c.ljust(w)
            for i, (c, w) in enumerate(zip(cells, widths, strict=True))
        ).rstrip()

    return "\n".join(line(r) for r in [header, *rows])


def _count(n: int, one: str, many: str | None = None) -> str:
    return f"{n} {one if n == 1 else many or one + 's'}"


def _clip(text: str, width: int) -> str:
    return text if len(text) <= width else text[: width - 1] + "…"


def _arrow(before: int, after: int) -> str:
    return f"{before:,} → {after:,}"


def _percent(part: int, whole: int) -> str:
    return f"{100 * part / whole:.0f}%" if whole else "-"


def _time(t: datetime) -> str:
    return t.strftime("%Y-%m-%d %H:%M:%S")
