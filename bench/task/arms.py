"""The ways of fitting the window the task benchmark compares, each a base URL and a trim.

full: straight to the model, no window. ctxproxy: a real ctxproxy server (subprocess, its own
SQLite file) with the model as upstream and `context_window` set. sliding: the client drops
its oldest messages (an assistant step with its results together) until the request fits.
litellm: LiteLLM's `trim_messages` (in its own venv, through bench/baselines.py's worker).
"""

from __future__ import annotations

import json
import sys
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from bench import spawn, tabulate
from proxy.testing.taskmodel import INFLATE, TOOLS, render

Messages = list[dict[str, Any]]
RESERVE = 512  # tokens left for the answer by the client-side trims
ARMS = ("full", "ctxproxy-8k", "ctxproxy-16k", "sliding-8k", "litellm-8k")


@dataclass
class Arm:
    name: str
    window: int | None
    proxy: bool = False
    trim: str = ""  # "", "sliding" or "litellm"


def parse(name: str) -> Arm:
    if name == "full":
        return Arm(name, None)
    kind, size = name.rsplit("-", 1)
    window = int(size.rstrip("k")) * 1024
    return Arm(name, window, proxy=kind == "ctxproxy", trim="" if kind == "ctxproxy" else kind)


class Counter:
    """Tokens of a request as the scripted model counts them."""

    def __init__(self) -> None:
        from proxy.exchange.tokens import TokenCounter

        self._counter = TokenCounter()

    def request(self, messages: Messages) -> int:
        return round(self._counter.text(render(messages, TOOLS)) * INFLATE)

    def text(self, text: str) -> int:
        return self._counter.text(text)


def units(messages: Messages) -> list[list[int]]:
    """Indexes grouped so that an assistant's tool calls and their results go together."""
    groups: list[list[int]] = []
    for i, m in enumerate(messages):
        if m.get("role") == "tool" and groups:
            groups[-1].append(i)
        else:
            groups.append([i])
    return groups


def sliding(window: int, counter: Counter) -> Callable[[Messages], Messages]:
    def trim(messages: Messages) -> Messages:
        keep = [g for g in units(messages)]
        while len(keep) > 2 and counter.request([messages[i] for g in keep for i in g]) > (
            window - RESERVE
        ):
            del keep[1]  # keep[0] is the system prompt
        return [messages[i] for g in keep for i in g]

    return trim


def litellm(window: int, counter: Counter) -> tuple[Callable[[Messages], Messages], Any]:
    from bench.baselines import Worker

    worker = Worker("litellm")
    budget = int((window - RESERVE) / INFLATE) - counter.text(json.dumps(TOOLS))

    def trim(messages: Messages) -> Messages:
        return worker.call(messages, budget)[0]

    return trim, worker


def start_proxy(wd: Path, upstream: str, window: int, port: int) -> spawn.Server:
    wd.mkdir(parents=True, exist_ok=True)
    config = {
        "database_url": f"sqlite:///{wd / 'ctxproxy.db'}",
        "upstreams": [
            {"name": "up", "kind": "openai", "base_url": upstream + "/v1", "context_window": window}
        ],
        "log_level": "warning",
    }
    (wd / "config.yaml").write_text(json.dumps(config))
    argv = [sys.executable, "-m", "proxy.cli.commands", "serve", "--config", "config.yaml"]
    env = {"PYTHONPATH": str(tabulate.ROOT.parent)}
    server = spawn.start("ctxproxy", [*argv, "--port", str(port)], port, "/healthz", wd, env=env)
    if server.error:
        raise RuntimeError(server.error)
    return server
