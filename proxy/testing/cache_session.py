"""An agent session driven through ctxproxy turn by turn, then read back from the audit API
with the prompt cache as the model server saw it: what the llama test checks and the cache
chart (bench/cache_chart.py) draws."""

from __future__ import annotations

from typing import Any

import httpx

from proxy.testing.histories import SYSTEM, TASK, agent_turn


def drive(
    proxy_url: str, session: str, turns: int, *, model: str = "smollm2", observe: bool = False
) -> list[dict[str, Any]]:
    """`turns` agent turns (a failing pytest run each), answered by the model with a few
    tokens; the exchanges as the audit API lists them."""
    headers = {"x-session-id": session}
    if observe:
        headers["x-ctxproxy-mode"] = "observe"
    messages = [SYSTEM, TASK]
    with httpx.Client(base_url=proxy_url, timeout=900, headers=headers) as client:
        for turn in range(turns):
            messages = [*messages, *agent_turn(turn)]
            body = {"model": model, "messages": messages, "max_tokens": 8, "temperature": 0}
            r = client.post("/v1/chat/completions", json=body)
            r.raise_for_status()
        found = client.get(f"/sessions/{session}/exchanges").json()["data"]
        totals = client.get(f"/sessions/{session}").json()["session"]["totals"]
    return [*found, {"totals": totals}]


def table(rows: list[dict[str, Any]]) -> str:
    """One line a turn: tokens, cached against expected, and why a turn got less."""
    lines = ["turn original compiled prompt cached expected previous cause lost phases"]
    for x in rows:
        if "totals" in x:
            continue
        lines.append(
            f"{x['seq']:4} {x['tokens_original']:8} {x['tokens_compiled']:8} "
            f"{x['prompt_tokens'] or 0:6} {x['cached_tokens'] or 0:6} "
            f"{x['cache_expected'] or 0:8} {x['cache_previous'] or 0:8} "
            f"{x['cache_cause'] or '-':7} {x['cache_lost'] or 0:5} {','.join(x['phases']) or '-'}"
        )
    return "\n".join(lines)
