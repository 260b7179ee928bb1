"""Agent histories of a known size for the benchmarks: tool calls, outputs, token counts."""

from __future__ import annotations

import json
import random
from typing import Any

WORDS = (
    "the of config test error value request file path module line return self data import "
    "assert session cache token budget window stream client server handler retry timeout"
).split()
TRACE = (
    "Traceback (most recent call last):\n"
    '  File "/src/app/db.py", line 42, in connect\n'
    "    return engine(cfg.database_url)\n"
    "AttributeError: 'Config' object has no attribute 'database_url'"
)
SYSTEM = "You are a careful coding agent. Use the tools to inspect and fix the repository."
TASK = "The database connection test fails. Find out why and fix it."


def tool_output(n: int, lines: int | None = None) -> str:
    """Step n's command output: deterministic, unique per step, ~12 tokens a line."""
    rnd = random.Random(n)
    kind = rnd.random()
    count = lines if lines is not None else rnd.randint(8, 40)
    if kind < 0.75:
        body = [f"{n}:{i} " + " ".join(rnd.choices(WORDS, k=9)) for i in range(count)]
    elif kind < 0.9:
        body = [
            f"2024-05-14 10:{i % 60:02d}:{n % 60:02d} INFO db: attempt {i} {rnd.choice(WORDS)}"
            for i in range(count)
        ] + [TRACE]
    else:
        body = [
            f"    {rnd.choice(WORDS)}_{n} = {rnd.choice(WORDS)}({i}, {n})" for i in range(count)
        ]
    return "\n".join(body)


def assistant_step(n: int) -> dict[str, Any]:
    """The assistant message of step n: one tool call. The agent upstream answers with it."""
    args = json.dumps({"cmd": f"pytest tests/test_db.py -k case_{n} -x"})
    return {
        "role": "assistant",
        "content": f"Step {n}: running the next check.",
        "tool_calls": [
            {"id": f"call_{n}", "type": "function", "function": {"name": "run", "arguments": args}}
        ],
    }


def tool_step(n: int, lines: int | None = None) -> dict[str, Any]:
    return {"role": "tool", "tool_call_id": f"call_{n}", "content": tool_output(n, lines)}


def agent_history(messages: int, lines: int | None = None) -> list[dict[str, Any]]:
    """system + task + (assistant tool call, tool result) pairs, `messages` long in all."""
    msgs: list[dict[str, Any]] = [
        {"role": "system", "content": SYSTEM},
        {"role": "user", "content": TASK},
    ]
    n = 0
    while len(msgs) < messages:
        msgs.append(assistant_step(n))
        if len(msgs) < messages:
            msgs.append(tool_step(n, lines))
        n += 1
    return msgs


def history_for_tokens(messages: int, tokens: int) -> list[dict[str, Any]]:
    """A `messages`-long agent history of about `tokens` tokens (cl100k)."""
    from proxy.compile.tokens import TokenCounter

    counter = TokenCounter()
    pairs = max((messages - 2) // 2, 1)
    lines = 8
    for _ in range(6):  # a few steps of proportional correction converge within a few %
        got = counter.count_messages(agent_history(messages, lines))
        per_line = max(
            (got - counter.count_messages(agent_history(messages, 0))) / (pairs * lines), 1
        )
        lines = max(1, round(lines + (tokens - got) / (per_line * pairs)))
        if abs(got - tokens) / tokens < 0.03:
            break
    return agent_history(messages, lines)


def count_tokens(messages: list[dict[str, Any]]) -> int:
    from proxy.compile.tokens import TokenCounter

    return TokenCounter().count_messages(messages)
