"""The peers bench/quality.py compares ctxproxy with, each behind one call: (messages, budget).

In-process: OpenRouter-style middle-out (our own implementation) and LangChain's
`trim_messages` (langchain-core). In their own venvs, through a worker subprocess that speaks
JSON lines: LiteLLM's `trim_messages` and Headroom's `compress`. Running this file as
`python baselines.py worker litellm|headroom` is that worker; it imports only the peer.
A peer that cannot be installed or started is reported as unavailable, never a crash.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
import time
from collections.abc import Callable
from pathlib import Path

from bench.peer_proxies import QUIET  # offline, no telemetry: the same for every peer run

Messages = list[dict]
Count = Callable[[Messages], int]  # tokens of a whole request, as the benchmark counts them

CACHE = Path(os.environ.get("CTXPROXY_BENCH_CACHE", Path.home() / ".cache" / "ctxproxy-bench"))
# The same venvs bench/overhead.py runs the peers' proxies from; the proxy extras include these.
VENVS = {
    "litellm": ("venv-litellm", "litellm", ["litellm"]),
    "headroom": ("venv-headroom", "headroom", ["headroom-ai==0.42.0"]),
}


class Unavailable(Exception):
    """The peer could not be installed or started here; the reason is the message."""


# --- middle-out ---------------------------------------------------------------------------


def units(messages: Messages) -> list[list[int]]:
    """Indexes grouped so that an assistant tool call and its tool results go (or stay) together."""
    groups: list[list[int]] = []
    for i, m in enumerate(messages):
        if m.get("role") == "tool" and groups:
            groups[-1].append(i)
        else:
            groups.append([i])
    return groups


def middle_out(messages: Messages, budget: int, count: Count) -> Messages:
    """OpenRouter's middle-out transform: drop whole messages from the middle until it fits.

    The system prompt, the first user message and the final turn stay; an assistant message
    leaves together with its tool results, so the request stays valid.
    """
    groups = units(messages)
    first_user = next((n for n, g in enumerate(groups) if messages[g[0]]["role"] == "user"), 0)
    fixed = {first_user, len(groups) - 1}
    fixed.update(n for n, g in enumerate(groups) if _system(messages, g))
    removable = [n for n in range(len(groups)) if n not in fixed]
    keep = set(range(len(groups)))
    view = messages
    while count(view) > budget and removable:
        drop = removable.pop(len(removable) // 2)  # the message nearest the middle goes first
        keep.discard(drop)
        view = [messages[i] for n in sorted(keep) for i in groups[n]]
    return view


def _system(messages: Messages, group: list[int]) -> bool:
    return messages[group[0]].get("role") in ("system", "developer")


# --- LangChain ------------------------------------------------------------------------------


def langchain_trim() -> Callable[[Messages, int, Count], Messages]:
    try:
        from langchain_core.messages import convert_to_messages, convert_to_openai_messages
        from langchain_core.messages.utils import trim_messages
    except ImportError as exc:
        raise Unavailable(f"langchain-core not installed ({exc})") from exc

    def trim(messages: Messages, budget: int, count: Count) -> Messages:
        # The documented chat-history recipe (keep the latest messages and the system prompt),
        # allowed to start on an AI turn too, as agent histories have one human turn.
        # Counting with the benchmark's own counter keeps it fair.
        return convert_to_openai_messages(
            trim_messages(
                convert_to_messages(messages),
                max_tokens=budget,
                token_counter=lambda ms: count(convert_to_openai_messages(ms)),
                strategy="last",
                include_system=True,
                start_on=("human", "ai"),
                allow_partial=False,
            )
        )

    return trim


# --- subprocess peers -------------------------------------------------------------------------


def peer_python(name: str, install: bool = True) -> Path:
    venv, module, requirements = VENVS[name]
    py = CACHE / venv / "bin" / "python"
    probe = [str(py), "-c", f"import {module}"]
    if py.exists() and subprocess.run(probe, capture_output=True).returncode == 0:
        return py
    if not install:
        raise Unavailable(f"{name}: no venv at {py.parent.parent}")
    try:
        subprocess.run([sys.executable, "-m", "venv", str(py.parent.parent)], check=True)
        pip = [str(py), "-m", "pip", "install", "-q", *requirements]
        subprocess.run(pip, check=True, capture_output=True, timeout=900)
    except (subprocess.SubprocessError, OSError) as exc:
        raise Unavailable(f"{name}: install failed ({exc})") from exc
    if subprocess.run(probe, capture_output=True).returncode != 0:
        raise Unavailable(f"{name}: installed but `import {module}` fails")
    return py


class Worker:
    """One long-lived peer process; call() sends a request and returns (messages, ms inside)."""

    def __init__(self, name: str, install: bool = True):
        py = peer_python(name, install)
        env = {**os.environ, **QUIET, "HEADROOM_WORKSPACE_DIR": str(CACHE / "headroom-ws")}
        self.proc = subprocess.Popen(
            [str(py), __file__, "worker", name],
            stdin=subprocess.PIPE,
            stdout=subprocess.PIPE,
            stderr=subprocess.DEVNULL,
            text=True,
            env=env,
        )
        ready = self.proc.stdout.readline() if self.proc.stdout else ""
        if not ready.startswith("ready"):
            self.close()
            raise Unavailable(f"{name}: worker did not start ({ready.strip() or 'no answer'})")
        self.version = ready.split(" ", 1)[1].strip()

    def call(self, messages: Messages, budget: int) -> tuple[Messages, float]:
        assert self.proc.stdin and self.proc.stdout
        self.proc.stdin.write(json.dumps({"messages": messages, "budget": budget}) + "\n")
        self.proc.stdin.flush()
        answer = json.loads(self.proc.stdout.readline())
        if "error" in answer:
            raise RuntimeError(answer["error"])
        return answer["messages"], answer["ms"]

    def close(self) -> None:
        if self.proc.poll() is None:
            self.proc.stdin.close() if self.proc.stdin else None
            try:
                self.proc.wait(timeout=10)
            except subprocess.TimeoutExpired:
                self.proc.kill()


def _serve(name: str) -> None:
    """The worker loop, run inside the peer's venv."""
    import importlib.metadata as md

    out = sys.stdout  # the protocol channel; whatever the peer prints goes to stderr
    sys.stdout = sys.stderr
    if name == "litellm":
        from litellm.utils import trim_messages

        def run(messages: Messages, budget: int) -> Messages:
            # max_tokens given: LiteLLM trims to it (trim_ratio applies only to model limits).
            return trim_messages(messages, model="gpt-4o", max_tokens=budget)

        version = md.version("litellm")
    else:
        from headroom import compress

        def run(messages: Messages, budget: int) -> Messages:
            return compress(messages, model="gpt-4o", model_limit=budget).messages

        version = md.version("headroom-ai")
    print(f"ready {version}", file=out, flush=True)
    for line in sys.stdin:
        req = json.loads(line)
        start = time.perf_counter()
        try:
            view = run(req["messages"], req["budget"])
            answer = {"messages": view, "ms": (time.perf_counter() - start) * 1000}
        except Exception as exc:  # a peer's failure is a figure, not a crash of the benchmark
            answer = {"error": f"{type(exc).__name__}: {exc}"}
        print(json.dumps(answer), file=out, flush=True)


if __name__ == "__main__" and sys.argv[1:2] == ["worker"]:
    _serve(sys.argv[2])
