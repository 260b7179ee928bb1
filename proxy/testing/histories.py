"""Histories that tests and benchmarks both drive: an agent fixing a failing test suite, and
agent sessions of a known size (tool calls, outputs, token counts)."""

from __future__ import annotations

import json
import random
from typing import Any

SYSTEM = {"role": "system", "content": "You are a coding agent. Fix the failing tests."}
TASK = {"role": "user", "content": "The test suite fails. Find the bug and fix it."}


def pytest_log(turn: int) -> str:
    passed = [f"tests/test_module_{turn}.py::test_case_{i} PASSED" for i in range(4)]
    return "\n".join(
        [
            "============================= test session starts ==============================",
            f"platform linux -- Python 3.11.7, pytest-8.3.{turn}, pluggy-1.5.0",
            f"collected {len(passed) + 1} items",
            "",
            *passed,
            f"tests/test_module_{turn}.py::test_config_{turn} FAILED",
            "",
            "=================================== FAILURES ===================================",
            f"________________________________ test_config_{turn} ________________________________",
            f"    def test_config_{turn}():",
            "        cfg = load_config()",
            ">       assert cfg.database_url.startswith('postgres')",
            f"E       AttributeError: 'Config' object has no attribute 'database_url' (run {turn})",
            "",
            f"tests/test_module_{turn}.py:{10 + turn}: AttributeError",
            f"FAILED tests/test_module_{turn}.py::test_config_{turn} - AttributeError",
            f"========================= 1 failed, {len(passed)} passed in 0.{turn:02d}s ==========",
        ]
    )


def agent_turn(turn: int) -> list[dict]:
    call = {
        "id": f"call_{turn}",
        "type": "function",
        "function": {"name": "run_tests", "arguments": json.dumps({"path": "tests"})},
    }
    return [
        {"role": "assistant", "content": None, "tool_calls": [call]},
        {"role": "tool", "tool_call_id": f"call_{turn}", "content": pytest_log(turn)},
    ]


# A real-shaped failing pytest run: three failures, their E lines, the short summary.
PYTEST_REPORT = """============================= test session starts ==============================
platform linux -- Python 3.11.7, pytest-8.3.2, pluggy-1.5.0
rootdir: /work/billing
collected 48 items

tests/test_invoice.py ........F...........                                [ 41%]
tests/test_tax.py .......F.F.........                                     [ 81%]
tests/test_totals.py .........                                            [100%]

=================================== FAILURES ===================================
___________________________ test_parse_amount_locale ___________________________

    def test_parse_amount_locale():
>       assert parse_amount("1.234,50", locale="de_DE") == Decimal("1234.50")

tests/test_invoice.py:88:
_ _ _ _ _ _ _ _ _ _ _ _ _ _ _ _ _ _ _ _ _ _ _ _ _ _ _ _ _ _ _ _ _ _ _ _ _ _ _ _
billing/money.py:41: in parse_amount
    return Decimal(text.replace(" ", ""))
E   decimal.InvalidOperation: [<class 'decimal.ConversionSyntax'>]
_____________________________ test_vat_reverse_charge _____________________________

    def test_vat_reverse_charge():
        inv = make_invoice(country="AT", b2b=True)
>       assert inv.tax == Decimal("0.00")
E       AssertionError: assert Decimal('3.80') == Decimal('0.00')

tests/test_tax.py:57: AssertionError
_____________________________ test_vat_rounding_half_even _____________________________

    def test_vat_rounding_half_even():
>       assert round_tax(Decimal("0.125")) == Decimal("0.12")
E       AssertionError: assert Decimal('0.13') == Decimal('0.12')

tests/test_tax.py:71: AssertionError
=========================== short test summary info ============================
FAILED tests/test_invoice.py::test_parse_amount_locale - decimal.InvalidOperation: [<class 'decimal.ConversionSyntax'>]
FAILED tests/test_tax.py::test_vat_reverse_charge - AssertionError: assert Decimal('3.80') == Decimal('0.00')
FAILED tests/test_tax.py::test_vat_rounding_half_even - AssertionError: assert Decimal('0.13') == Decimal('0.12')
========================= 3 failed, 45 passed in 1.92s ========================="""  # noqa: E501


def log_lines(
    n: int, template: str = "2024-05-14 10:21:{i:02d} INFO worker: processed batch {i}"
) -> str:
    return "\n".join(template.format(i=i) for i in range(n))


# Agent sessions of a known size: the benchmarks' histories.
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
SESSION_SYSTEM = "You are a careful coding agent. Use the tools to inspect and fix the repository."
SESSION_TASK = "The database connection test fails. Find out why and fix it."


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
        {"role": "system", "content": SESSION_SYSTEM},
        {"role": "user", "content": SESSION_TASK},
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
