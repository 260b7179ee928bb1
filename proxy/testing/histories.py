"""Histories that tests and benchmarks both drive: an agent fixing a failing test suite."""

from __future__ import annotations

import json

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
