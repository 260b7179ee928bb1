"""The access log: one JSON line per chat exchange, content only where log_content says so."""

from __future__ import annotations

import json
import logging
import os
import sys
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:  # it imports this module
    from proxy.observe.metrics import FinishedExchange

access_log = logging.getLogger("ctxproxy.access")


def write(x: FinishedExchange, log_content: bool) -> None:
    if access_log.isEnabledFor(logging.INFO):
        access_log.info(json.dumps(access_record(x, log_content), default=str))


def access_record(x: FinishedExchange, log_content: bool) -> dict[str, Any]:
    phases = list(dict.fromkeys(e.label for e in x.events if not e.replayed))
    record: dict[str, Any] = {
        "event": "chat",
        "session": x.session,
        "seq": x.seq,
        "model": x.model,
        "upstream": x.upstream,
        "status": x.status,
        "stream": x.stream,
        "partial": x.partial,
        "latency_ms": round(x.latency_s * 1000, 1),
        "ttft_ms": None if x.ttft_s is None else round(x.ttft_s * 1000, 1),
        "tokens_original": x.tokens_original,
        "tokens_compiled": x.tokens_compiled,
        "budget": x.budget,
        "window": x.window,
        "phases": phases,
        "path": x.path,
        "pid": os.getpid(),
    }
    if x.recalls:
        record["recalls"] = [c["outcome"] for c in x.recalls]
    if x.tools_removed:  # the client offered them; the translated request could not carry them
        record["tools_removed"] = [t.get("name") or t.get("type") for t in x.tools_removed]
    if x.error:
        # Type and code only: an upstream's error message may quote the prompt.
        record["error"] = {"type": x.error.get("type"), "code": x.error.get("code")}
    if log_content:
        record["messages"] = x.messages
        record["response"] = x.response
        if x.error:
            record["error"]["message"] = x.error.get("message")
    return record


def configure_logging(level: str) -> None:
    """Plain lines for the app's loggers; bare JSON lines for the access log (one per request)."""
    logging.basicConfig(
        level=level.upper(), format="%(asctime)s %(levelname)s %(name)s: %(message)s"
    )
    # One line per upstream call says nothing the access log does not: keep it for debugging.
    quiet = max(logging.WARNING, logging.getLevelName(level.upper()))
    logging.getLogger("httpx").setLevel(quiet)
    # Alembic's plugin set-up and context lines say nothing to an operator: `serve` says once
    # where the database is and whether it was created or upgraded.
    logging.getLogger("alembic").setLevel(quiet)
    if not access_log.handlers:
        handler = logging.StreamHandler(sys.stderr)
        handler.setFormatter(logging.Formatter("%(message)s"))
        access_log.addHandler(handler)
        access_log.propagate = False
