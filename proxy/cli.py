"""The `ctxproxy` command: serve, migrate, sessions."""

from __future__ import annotations

import argparse
import logging
import sys

from proxy.settings import ConfigError, Settings, load_settings


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="ctxproxy", description=__doc__)
    parser.add_argument("--config", help="config file (default: $CTXPROXY_CONFIG, ./config.yaml,"
                        " or the embedded defaults)")
    sub = parser.add_subparsers(dest="command", required=True)
    serve = sub.add_parser("serve", help="run the proxy")
    serve.add_argument("--config", dest="sub_config", help=argparse.SUPPRESS)
    serve.add_argument("--host")
    serve.add_argument("--port", type=int)
    args = parser.parse_args(argv)
    try:
        settings = load_settings(getattr(args, "sub_config", None) or args.config)
    except ConfigError as exc:
        print(f"ctxproxy: {exc}", file=sys.stderr)
        return 2
    if args.command == "serve":
        return serve_forever(settings, args.host, args.port)
    return 0


def serve_forever(settings: Settings, host: str | None, port: int | None) -> int:
    import uvicorn

    from proxy.app import create_app

    logging.basicConfig(level=settings.log_level.upper(),
                        format="%(asctime)s %(levelname)s %(name)s: %(message)s")
    uvicorn.run(
        create_app(settings),
        host=host or settings.listen.host,
        port=settings.listen.port if port is None else port,
        log_level=settings.log_level,
        timeout_graceful_shutdown=30,
    )
    return 0


if __name__ == "__main__":
    sys.exit(main())
