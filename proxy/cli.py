"""The `ctxproxy` command: serve, migrate, sessions."""

from __future__ import annotations

import argparse
import os
import sys
from collections.abc import Sequence
from datetime import datetime
from typing import TYPE_CHECKING, Any

from proxy.settings import ConfigError, Settings, load_settings

if TYPE_CHECKING:
    from proxy.store import ExchangeSummary, SessionDetail, SessionPage


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="ctxproxy", description=__doc__)
    parser.add_argument(
        "--config",
        help="config file (default: $CTXPROXY_CONFIG, ./config.yaml, or the embedded defaults)",
    )
    sub = parser.add_subparsers(dest="command", required=True)
    serve = sub.add_parser("serve", help="run the proxy")
    serve.add_argument("--host")
    serve.add_argument("--port", type=int)
    serve.add_argument(
        "--workers", type=int, default=1, help="worker processes sharing the port (default 1)"
    )
    sub.add_parser("migrate", help="upgrade the configured database to the newest schema")
    sessions = sub.add_parser("sessions", help="list sessions, or show one session's turns")
    sessions.add_argument("session_id", nargs="?", help="show this session's turns")
    sessions.add_argument("--limit", type=int, default=50, help="sessions to list (default 50)")
    for command in (serve, sub.choices["migrate"], sessions):
        command.add_argument("--config", dest="sub_config", help=argparse.SUPPRESS)
    args = parser.parse_args(argv)
    try:
        settings = load_settings(getattr(args, "sub_config", None) or args.config)
    except ConfigError as exc:
        print(f"ctxproxy: {exc}", file=sys.stderr)
        return 2
    if args.command == "serve":
        config = getattr(args, "sub_config", None) or args.config
        return serve_forever(settings, args.host, args.port, args.workers, config)
    if args.command == "migrate":
        return migrate(settings)
    if args.command == "sessions":
        return show_sessions(settings, args.session_id, args.limit)
    return 0


def serve_forever(
    settings: Settings,
    host: str | None,
    port: int | None,
    workers: int = 1,
    config: str | None = None,
) -> int:
    import uvicorn

    from proxy.app import create_app
    from proxy.observe import configure_logging

    if workers < 1:
        print("ctxproxy: --workers must be 1 or more", file=sys.stderr)
        return 2
    if workers > 1 and _in_memory_sqlite(settings.database_url):
        print(
            "ctxproxy: --workers needs a database the processes can share; an in-memory SQLite "
            "database exists once per process (use a SQLite file or PostgreSQL)",
            file=sys.stderr,
        )
        return 2
    configure_logging(settings.log_level)
    # Before any worker starts, so workers never race each other to migrate.
    _upgrade(settings)  # an empty or outdated database is brought up to date at start
    options: dict[str, Any] = {
        "host": host or settings.listen.host,
        "port": settings.listen.port if port is None else port,
        "log_level": settings.log_level,
        "timeout_graceful_shutdown": 30,
    }
    if workers == 1:
        uvicorn.run(create_app(settings), **options)
        return 0
    if config:  # worker processes inherit the environment: point them at the same file
        os.environ["CTXPROXY_CONFIG"] = os.path.abspath(config)
    uvicorn.run("proxy.app:app_from_env", factory=True, workers=workers, **options)
    return 0


def _in_memory_sqlite(url: str) -> bool:
    from sqlalchemy.engine import make_url

    parsed = make_url(url)
    return parsed.get_backend_name() == "sqlite" and parsed.database in (None, "", ":memory:")


def _upgrade(settings: Settings) -> None:
    from proxy.store import Store

    store = Store(settings.database_url)
    try:
        store.upgrade()
    finally:
        store.close()


def migrate(settings: Settings) -> int:
    _upgrade(settings)
    print(f"ctxproxy: database is up to date ({_safe_url(settings.database_url)})")
    return 0


def show_sessions(settings: Settings, session_id: str | None, limit: int) -> int:
    from proxy.store import Store

    store = Store(settings.database_url)
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
            _arrow(s.totals.tokens_original, s.totals.tokens_compiled),
            _percent(s.totals.tokens_saved, s.totals.tokens_original),
            _time(s.updated_at),
        ]
        for s in page.data
    ]
    table = _table(
        ["SESSION", "SOURCE", "MODEL", "TURNS", "TOKENS BEFORE → AFTER", "SAVED", "UPDATED"],
        rows,
        right={3, 4, 5},
    )
    shown = f"{page.offset + 1}–{page.offset + len(page.data)} of {page.total} sessions"
    return f"{table}\n{shown}"


def turns_table(detail: SessionDetail, exchanges: Sequence[ExchangeSummary]) -> str:
    s = detail.session
    head = (
        f"session {s.id} ({s.source}) · {s.turns} turns · {detail.history_length} messages"
        f" · {detail.branch_count} branch{'es' if detail.branch_count != 1 else ''}"
        f" · saved {_percent(s.totals.tokens_saved, s.totals.tokens_original)}"
    )
    rows = []
    for x in exchanges:
        status = "pending" if x.pending else str(x.status) + (" partial" if x.partial else "")
        rows.append(
            [
                str(x.seq),
                _time(x.created_at),
                x.model,
                status,
                _arrow(x.tokens_original, x.tokens_compiled),
                ", ".join(x.phases) or "-",
            ]
        )
    table = _table(
        ["SEQ", "TIME", "MODEL", "STATUS", "TOKENS BEFORE → AFTER", "PHASES"], rows, right={0, 4}
    )
    return f"{head}\n{table}"


def _table(header: list[str], rows: list[list[str]], right: set[int]) -> str:
    widths = [max(len(r[i]) for r in [header, *rows]) for i in range(len(header))]

    def line(cells: list[str]) -> str:
        return "  ".join(
            c.rjust(w) if i in right else c.ljust(w)
            for i, (c, w) in enumerate(zip(cells, widths, strict=True))
        ).rstrip()

    return "\n".join(line(r) for r in [header, *rows])


def _arrow(before: int, after: int) -> str:
    return f"{before:,} → {after:,}"


def _percent(part: int, whole: int) -> str:
    return f"{100 * part / whole:.0f}%" if whole else "-"


def _time(t: datetime) -> str:
    return t.strftime("%Y-%m-%d %H:%M:%S")


def _safe_url(url: str) -> str:
    from sqlalchemy.engine import make_url

    return make_url(url).render_as_string(hide_password=True)


if __name__ == "__main__":
    sys.exit(main())
