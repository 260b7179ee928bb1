"""The newest output bigger than the room: what of it the view keeps, one-shot and turn by turn.

Two histories whose last message is a tool output larger than the whole budget: a 20k-token
file listing in a ~10k budget, and a ~4k-token JSON result in a ~2k budget. The newest user
text names one entry in the output's middle; the output's head holds another value the next
call needs (a page token, an export id). Each history goes through `POST /v1/compress` (sent
once) and through chat completions turn by turn (the same session, a prefix a turn), in
process against a scripted upstream. Figures: the view's tokens ÷ the budget, and whether the
head value and the named middle value are in the view.

Run from the repository root: python -m bench.oversized
"""

from __future__ import annotations

import argparse
import json
import tempfile
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import httpx
from fastapi.testclient import TestClient

from proxy.app import create_app
from proxy.settings import Settings

SYSTEM = {"role": "system", "content": "You are an operations agent with shell and API tools."}


@dataclass(frozen=True)
class Case:
    name: str
    window: int  # the budget is what the window leaves after the answer's reserve and margin
    messages: list[dict[str, Any]]
    head_value: str
    middle_value: str


def _call(cid: str, name: str, **args: Any) -> dict[str, Any]:
    fn = {"name": name, "arguments": json.dumps(args)}
    return {"id": cid, "type": "function", "function": fn}


WORDS = (
    "alpha",
    "ledger",
    "orders",
    "returns",
    "stock",
    "vendor",
    "audit",
    "refund",
    "region",
    "backup",
    "events",
    "metrics",
    "users",
    "billing",
    "catalog",
    "promo",
    "tax",
    "ship",
)


def _asked(messages: list[dict[str, Any]], ask: str, shape: str) -> list[dict[str, Any]]:
    """`pending`: the output is the last message, the user's words before the call name the
    value; `asked`: the agent answered and the user then asks about the value."""
    if shape == "pending":
        return messages
    done = {"role": "assistant", "content": "I have the result."}
    return [*messages, done, {"role": "user", "content": ask}]


def listing_case(shape: str) -> Case:
    """A 20k-token `ls -l` of a bucket; the user asks about one file in its middle."""
    lines = ["next_page_token: pg_5c1e9a77d2", "total 1875204"]
    for i in range(1000):
        size = (i * 7919) % 900_000 + 1000
        a, b = WORDS[i % len(WORDS)], WORDS[(i * 7) % len(WORDS)]
        lines.append(f"-rw-r--r-- 1 etl etl {size:>7} Nov {i % 28 + 1:>2} 10:{i % 60:02d} "
                     f"{a}-{b}-{i % 97}-part{i}.parquet")  # fmt: skip
    lines[520] = "-rw-r--r-- 1 etl etl  612733 Nov 14 09:12 invoices-2026-q3-final.parquet"
    lines.append("1000 files")
    ask = "What size is invoices-2026-q3-final.parquet? Then fetch the next page."
    task = "Audit the export bucket s3://acme-exports/ and report what is there."
    first = ask if shape == "pending" else task
    messages = [
        SYSTEM,
        {"role": "user", "content": first},
        {
            "role": "assistant",
            "content": "Listing it.",
            "tool_calls": [_call("c1", "bash", command="ls -l /mnt/exports")],
        },  # fmt: skip
        {"role": "tool", "tool_call_id": "c1", "content": "\n".join(lines)},
    ]
    name = f"listing 20k / 10k, {shape}"
    return Case(name, 11_664, _asked(messages, ask, shape), "pg_5c1e9a77d2", "612733")


def json_case(shape: str) -> Case:
    """A ~4k-token JSON result; the user asks to refund one order in its middle."""
    orders = [
        {
            "order": f"ORD-{50000 + i * 37}",
            "customer": f"cust_{(i * 104729) % 10**6:06d}",
            "amount": round(10 + (i * 7.31) % 300, 2),
            "status": "paid" if i % 3 else "shipped",
            "payment": f"pay_{(i * 2654435761) % 16**10:010x}",
        }
        for i in range(70)
    ]
    orders[33]["order"], orders[33]["payment"] = "ORD-58213", "pay_9f3b2d71ce"
    result = {"export_id": "exp_7781c0", "count": len(orders), "orders": orders}
    ask = "Find the order ORD-58213 in today's export and refund it."
    first = ask if shape == "pending" else "Export today's orders."
    messages = [
        SYSTEM,
        {"role": "user", "content": first},
        {
            "role": "assistant",
            "content": None,
            "tool_calls": [_call("c1", "export_orders", day="today")],
        },  # fmt: skip
        {"role": "tool", "tool_call_id": "c1", "content": json.dumps(result, indent=1)},
    ]
    name = f"JSON 4k / 2k, {shape}"
    return Case(name, 3_209, _asked(messages, ask, shape), "exp_7781c0", "pay_9f3b2d71ce")


def _answer(request: httpx.Request) -> httpx.Response:
    body = {
        "id": "x",
        "object": "chat.completion",
        "model": "m",
        "choices": [
            {"index": 0, "message": {"role": "assistant", "content": "ok"}, "finish_reason": "stop"}
        ],  # fmt: skip
        "usage": {"prompt_tokens": 1, "completion_tokens": 1, "total_tokens": 2},
    }
    return httpx.Response(200, json=body)


def _client(tmp: Path, window: int, sent: list[dict[str, Any]]) -> TestClient:
    def upstream(request: httpx.Request) -> httpx.Response:
        sent.append(json.loads(request.content))
        return _answer(request)

    settings = Settings(
        database_url=f"sqlite:///{tmp / 'db.sqlite'}",
        upstreams=[{"name": "up", "base_url": "http://up.test/v1", "context_window": window}],
    )
    app = create_app(settings, transport=httpx.MockTransport(upstream))
    return TestClient(app, base_url="http://localhost")


def _row(case: Case, how: str, view: list[dict[str, Any]], tokens: int, budget: int) -> dict:
    text = json.dumps(view, ensure_ascii=False)
    return {
        "case": case.name,
        "how": how,
        "view": tokens,
        "budget": budget,
        "fill": round(tokens / budget, 3),
        "head": case.head_value in text,
        "named": case.middle_value in text,
    }


def one_shot(case: Case, tmp: Path) -> dict[str, Any]:
    with _client(tmp, case.window, []) as client:
        body = {"model": "m", "messages": case.messages, "context_window": case.window}
        out = client.post("/v1/compress", json=body).json()
    return _row(case, "one-shot", out["messages"], out["tokens_after"], out["budget"])


def turn_by_turn(case: Case, tmp: Path) -> dict[str, Any]:
    sent: list[dict[str, Any]] = []
    cuts = [i + 1 for i, m in enumerate(case.messages) if m["role"] in ("user", "tool")]
    headers = {"x-session-id": "oversized"}
    with _client(tmp, case.window, sent) as client:
        for cut in cuts:
            r = client.post("/v1/chat/completions", headers=headers,
                            json={"model": "m", "messages": case.messages[:cut]})  # fmt: skip
            r.raise_for_status()
        tokens = int(r.headers["x-ctxproxy-tokens-compiled"])
        budget = int(r.headers["x-ctxproxy-budget"])
    return _row(case, "turn by turn", sent[-1]["messages"], tokens, budget)


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--show", action="store_true", help="print each one-shot view")
    args = ap.parse_args()
    runs: list[Callable[[Case, Path], dict[str, Any]]] = [one_shot, turn_by_turn]
    print(f"{'case':<30} {'how':<13} {'view':>6} {'budget':>6} {'fill':>6}  head  named")
    for case in [f(s) for f in (listing_case, json_case) for s in ("pending", "asked")]:
        for run in runs:
            with tempfile.TemporaryDirectory() as tmp:
                row = run(case, Path(tmp))
            print(f"{row['case']:<30} {row['how']:<13} {row['view']:>6} {row['budget']:>6} "
                  f"{row['fill']:>6}  {'yes' if row['head'] else 'no':<5} "
                  f"{'yes' if row['named'] else 'no'}")  # fmt: skip
        if args.show:
            with tempfile.TemporaryDirectory() as tmp, _client(Path(tmp), case.window, []) as c:
                body = {"model": "m", "messages": case.messages, "context_window": case.window}
                print(json.dumps(c.post("/v1/compress", json=body).json()["messages"], indent=1))


if __name__ == "__main__":
    main()
