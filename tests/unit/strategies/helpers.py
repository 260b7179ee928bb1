"""Builders for chat histories and a strategy context, shared by the strategy tests."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

from proxy.compile.tokens import REPLY_PRIMING, TokenCounter
from proxy.testing.histories import log_lines as log_lines  # re-exported for the tests
from strategies.context import Context
from strategies.lineage import Lineage
from strategies.messages import Message
from strategies.options import StrategyOptions

FIXTURES = Path(__file__).parent / "fixtures"
COUNTER = TokenCounter()


def fixture(name: str) -> str:
    return (FIXTURES / name).read_text()


def call(cid: str, name: str = "run_command", **args: Any) -> dict[str, Any]:
    arguments = json.dumps(args or {"cmd": "pytest -x"})
    return {"id": cid, "type": "function", "function": {"name": name, "arguments": arguments}}


def tool_turn(n: int, output: str, *, text: str | None = None, name: str = "run_command"):
    """An assistant message with one tool call and the tool message answering it."""
    cid = f"call_{n}"
    assistant: Message = {"role": "assistant", "content": text, "tool_calls": [call(cid, name)]}
    return [assistant, {"role": "tool", "tool_call_id": cid, "content": output}]


def agent_history(outputs: list[str], *, system: str = "You are a coding agent.") -> list[Message]:
    msgs: list[Message] = [
        {"role": "system", "content": system},
        {"role": "user", "content": "Make the test suite pass."},
    ]
    for n, out in enumerate(outputs):
        msgs += tool_turn(n, out, text=f"Step {n}: running the command again to check.")
    return msgs


def ctx(
    messages: list[Message] | None = None,
    *,
    budget: int,
    target: float = 0.5,
    lineage: bool = True,
    pressure: int = 0,
    options: StrategyOptions | None = None,
) -> Context:
    """A context over the real token counter, as the compiler builds it."""
    return Context(
        budget=budget,
        target=int(target * budget),
        count=COUNTER.count_message,
        measure=lambda raw: raw + REPLY_PRIMING,
        options=options,
        pressure=pressure,
        lineage=Lineage(messages) if (lineage and messages is not None) else None,
    )


def usage(messages: list[Message]) -> int:
    return COUNTER.count_messages(messages)
