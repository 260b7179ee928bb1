"""A recall query returns whole units: the enclosing function, the failure block, the message."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

from proxy.compile.tokens import TokenCounter
from proxy.recall import tool as recall
from proxy.recall.followed import mark_rereads, reread_share

COUNTER = TokenCounter()
REPORT = (Path(__file__).parent / "strategies/fixtures/pytest_failures.txt").read_text()


def python_module(n: int) -> str:
    return "\n".join(
        f"@cached\ndef price_{i}(order, rate):\n    total = order.amount * rate\n"
        f"    if total > {i}:\n\n        total -= {i}\n    return round(total, 2)\n"
        for i in range(n)
    )


JS = "\n".join(
    f"export function tax{i}(x) {{\n  const y = x * {i};\n  return y;\n}}\n" for i in range(30)
)


def tool(n: int, name: str, content: str) -> list[dict[str, Any]]:
    call = {"id": f"c{n}", "type": "function", "function": {"name": name, "arguments": "{}"}}
    return [
        {"role": "assistant", "content": None, "tool_calls": [call]},
        {"role": "tool", "tool_call_id": f"c{n}", "content": content},
    ]


HISTORY = [
    {"role": "user", "content": "Fix the pricing.\nKeep price_7 rounding to 2 places."},
    *tool(0, "read_file", python_module(30)),
    *tool(1, "read_file", JS),
    *tool(2, "bash", REPORT),
]


def ask(query: str, room: int = 2000, history: list[dict[str, Any]] = HISTORY) -> str:
    hashes = [str(i) for i in range(len(history))]
    return recall.run(json.dumps({"query": query}), history, hashes, room, COUNTER.text).text


def test_a_definition_query_brings_back_the_whole_function_and_no_neighbour():
    got = ask(r"def price_12\b")
    body = python_module(30).split("\n")
    start = body.index("def price_12(order, rate):") - 1
    assert "\n".join(body[start : start + 7]) in got  # decorator, header, body with its blank
    assert "price_11" not in got and "price_13" not in got


def test_a_hit_inside_a_body_brings_back_its_function_in_a_brace_language_too():
    got = ask("x \\* 17;")
    assert "export function tax17(x) {\n  const y = x * 17;\n  return y;\n}" in got
    assert "tax16" not in got and "tax18" not in got


def test_a_failing_test_name_brings_back_its_whole_failure_block():
    got = ask("FAILED tests/test_app.py::test_totals")
    assert "def test_totals():" in got and "E       AssertionError: totals drifted" in got
    assert "tests/test_app.py:23: AssertionError" in got
    assert "test_engine_uses_database_url ____" not in got  # the other block stays out


def test_a_chat_hit_brings_back_the_whole_message():
    got = ask("rounding")
    assert "Fix the pricing.\nKeep price_7 rounding to 2 places." in got


def test_results_fit_the_room_newest_first_and_are_the_same_every_time():
    many = [*HISTORY, *tool(3, "read_file", python_module(30))]
    got = ask("return round", room=300, history=many)
    assert COUNTER.text(got) <= 300 and got == ask("return round", room=300, history=many)
    assert "more not shown for room" in got
    assert got.split("\n")[2].startswith("--- history:8 ")  # the newest read first


def test_a_recall_that_cannot_help_says_so_in_one_line():
    got = ask("nothing like this anywhere")
    assert got.startswith("[ctxproxy_recall: nothing") and "\n" not in got


def answer_reading(path: str) -> dict[str, Any]:
    call = {"id": "r", "type": "function",
            "function": {"name": "read_file", "arguments": json.dumps({"path": path})}}  # fmt: skip
    return {"role": "assistant", "content": None, "tool_calls": [call]}


def test_a_recall_followed_by_a_read_of_what_it_brought_back_counts_as_a_reread():
    history = [{"role": "user", "content": "go"}, *tool(0, "read_file", python_module(30))]
    history[1]["tool_calls"][0]["function"]["arguments"] = json.dumps({"path": "shop/price.py"})
    got = recall.run(json.dumps({"query": "def price_3"}), history, ["a", "b", "c"], 2000,
                     COUNTER.text)  # fmt: skip
    records = [{"outcome": got.outcome, "result": got.text}]
    mark_rereads(records, answer_reading("./shop/price.py"))
    assert records[0]["reread"] is True
    mark_rereads(records, answer_reading("shop/other.py"))  # another file: the recall served
    assert records[0]["reread"] is False
    nothing = [{"outcome": "no_match", "result": "[ctxproxy_recall: nothing …]"}]
    mark_rereads(nothing, answer_reading("shop/other.py"))  # found nothing, went to look
    assert nothing[0]["reread"] is True and reread_share(records + nothing) == 0.5
