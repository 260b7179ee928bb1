"""The ways of fitting the window the task benchmark compares, each a base URL and a trim.

full: straight to the model, no window. ctxproxy: a real ctxproxy server (subprocess, its own
SQLite file) with the model as upstream and `context_window` set. sliding: the client drops
its oldest messages (an assistant step with its results together) until the request fits.
litellm: LiteLLM's `trim_messages` (in its own venv, through bench/baselines.py's worker).
"""

from __future__ import annotations

import json
import os
import subprocess
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
        from proxy.compile.tokens import TokenCounter

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


# Run in LiteLLM's own venv (which has neither ctxproxy nor bench): JSON lines in and out.
WORKER = """
import json, sys
from litellm.utils import trim_messages
for line in sys.stdin:
    req = json.loads(line)
    try:
        out = trim_messages(req["messages"], model="gpt-4o", max_tokens=req["budget"])
    except Exception as exc:
        out = {"error": f"{type(exc).__name__}: {exc}"}
    print(json.dumps(out), flush=True)
"""


class LiteLLM:
    """LiteLLM's `trim_messages`, to `budget` tokens as LiteLLM counts them."""

    def __init__(self, budget: int):
        from bench.baselines import peer_python

        self.budget = budget
        argv = [str(peer_python("litellm")), "-c", WORKER]
        env = {**os.environ, "LITELLM_LOCAL_MODEL_COST_MAP": "True"}
        self.proc = subprocess.Popen(
            argv, stdin=subprocess.PIPE, stdout=subprocess.PIPE, text=True, env=env
        )

    def __call__(self, messages: Messages) -> Messages:
        assert self.proc.stdin and self.proc.stdout
        self.proc.stdin.write(json.dumps({"messages": messages, "budget": self.budget}) + "\n")
        self.proc.stdin.flush()
        out = json.loads(self.proc.stdout.readline())
        if isinstance(out, dict):
            raise RuntimeError(out["error"])
        return list(out)

    def close(self) -> None:
        if self.proc.stdin:
            self.proc.stdin.close()
        try:
            self.proc.wait(timeout=10)
        except subprocess.TimeoutExpired:
            self.proc.kill()


def litellm(window: int, counter: Counter) -> LiteLLM:
    """Trimmed to the window less the answer's room and the tools, which LiteLLM does not count."""
    return LiteLLM(int((window - RESERVE) / INFLATE) - counter.text(json.dumps(TOOLS)))


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
