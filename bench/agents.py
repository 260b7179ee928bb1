"""Requests shaped as real agents send them, for the overhead bench and the turn profile.

Claude Code (Anthropic Messages): a ~20k-token system prompt, 24 tool definitions of ~6k tokens
in all, then tool-use turns. Codex (OpenAI Responses): ~8k tokens of instructions, 10 tools,
function_call / function_call_output items and a `prompt_cache_key`. Both continue a session:
the request at turn t is the one at turn t-1 plus the answer and the next tool result.
"""

from __future__ import annotations

import json
import random
from typing import Any

from bench import stub
from proxy.testing import histories

CLAUDE_TOOLS = 24
CODEX_TOOLS = 10


def prose(tokens: int, seed: int) -> str:
    """Deterministic documentation-like text of about `tokens` cl100k tokens (~1.3 per word)."""
    rnd = random.Random(seed)
    words = [rnd.choice(histories.WORDS) for _ in range(int(tokens / 1.08))]
    lines = [" ".join(words[i : i + 14]) + "." for i in range(0, len(words), 14)]
    return "\n".join(lines)


def _schema(i: int, tokens: int) -> dict[str, Any]:
    props = {
        f"param_{k}": {"type": "string", "description": prose(tokens // 6, i * 10 + k)}
        for k in range(4)
    }
    return {"type": "object", "properties": props, "required": ["param_0"]}


def claude_tools() -> list[dict[str, Any]]:
    return [
        {
            "name": f"Tool{i}",
            "description": prose(160, 1000 + i),
            "input_schema": _schema(i, 90),
        }
        for i in range(CLAUDE_TOOLS)
    ]


def claude_base(session: str, system_tokens: int = 20_000) -> dict[str, Any]:
    """Claude Code's first request of a session: the fixed part and the task."""
    return {
        "model": stub.MODEL,
        "max_tokens": 32_000,
        "system": [
            {"type": "text", "text": "You are Claude Code, Anthropic's official CLI for Claude."},
            {
                "type": "text",
                "text": prose(system_tokens, 7),
                "cache_control": {"type": "ephemeral"},
            },
        ],
        "tools": claude_tools(),
        "metadata": {"user_id": f"user_bench_account__session_{session}"},
        "messages": [
            {"role": "user", "content": [{"type": "text", "text": histories.SESSION_TASK}]}
        ],
    }


def claude_step(n: int) -> list[dict[str, Any]]:
    """One tool-use turn: the assistant's call and the user's tool_result."""
    call = {
        "type": "tool_use",
        "id": f"toolu_{n:06d}",
        "name": f"Tool{n % CLAUDE_TOOLS}",
        "input": {"param_0": f"pytest tests/test_db.py -k case_{n}"},
    }
    result = {"type": "tool_result", "tool_use_id": call["id"], "content": histories.tool_output(n)}
    return [
        {"role": "assistant", "content": [{"type": "text", "text": f"Step {n}."}, call]},
        {"role": "user", "content": [result]},
    ]


def claude_session(session: str, turns: int) -> dict[str, Any]:
    body = claude_base(session)
    for n in range(turns):
        body["messages"] += claude_step(n)
    return body


def codex_tools() -> list[dict[str, Any]]:
    return [
        {
            "type": "function",
            "name": f"tool_{i}",
            "description": prose(120, 2000 + i),
            "parameters": _schema(100 + i, 60),
            "strict": False,
        }
        for i in range(CODEX_TOOLS)
    ]


def codex_step(n: int) -> list[dict[str, Any]]:
    call_id = f"call_{n:06d}"
    args = json.dumps({"command": ["bash", "-lc", f"pytest -k case_{n}"]})
    return [
        {"type": "function_call", "name": "tool_0", "arguments": args, "call_id": call_id},
        {"type": "function_call_output", "call_id": call_id, "output": histories.tool_output(n)},
    ]


def codex_session(session: str, turns: int, instructions_tokens: int = 8_000) -> dict[str, Any]:
    body: dict[str, Any] = {
        "model": stub.MODEL,
        "instructions": prose(instructions_tokens, 9),
        "tools": codex_tools(),
        "tool_choice": "auto",
        "parallel_tool_calls": False,
        "store": False,
        "stream": False,
        "prompt_cache_key": f"bench-{session}",
        "input": [
            {
                "type": "message",
                "role": "user",
                "content": [{"type": "input_text", "text": histories.SESSION_TASK}],
            }
        ],
    }
    for n in range(turns):
        body["input"] += codex_step(n)
    return body


def next_turn(kind: str, body: dict[str, Any], n: int) -> dict[str, Any]:
    """`body` one turn later (a new dict; the old one's lists are not touched)."""
    if kind == "claude":
        return {**body, "messages": [*body["messages"], *claude_step(n)]}
    return {**body, "input": [*body["input"], *codex_step(n)]}


PATHS = {"claude": "/v1/messages", "codex": "/v1/responses"}
