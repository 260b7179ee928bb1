"""Evidence by what the output is: a run's failure is the working set, a file that was read or
searched never is, whatever words it holds; folds keep the `E` lines, the exception line and
the failing frame."""

from __future__ import annotations

import json

from proxy.testing.histories import PYTEST_REPORT
from strategies.calls import is_viewing, viewing_command
from strategies.forms import folded_output
from strategies.working_set import is_error_output, working_set
from tests.unit.strategies.helpers import ctx, fixture

LOGGING_GREP = (
    "/usr/lib/python3.11/logging/__init__.py:99:ERROR = 40\n"
    "/usr/lib/python3.11/logging/__init__.py:116:    'ERROR': ERROR,\n"
    "/usr/lib/python3.11/logging/__init__.py:1510:        Log 'msg % args' with severity 'ERROR'.\n"
    "/usr/lib/python3.11/logging/__init__.py:1518:            self._log(ERROR, msg, args, **kwargs)"
)
PYTEST = PYTEST_REPORT
CRASH = """Traceback (most recent call last):
  File "/work/billing/scripts/issue_invoices.py", line 63, in <module>
    main()
  File "/work/billing/billing/tax.py", line 88, in apply_rate
    return line.net * rates[line.region]
KeyError: 'DE-BY'"""


def step(n: int, command: str, output: str, name: str = "bash") -> list[dict]:
    args = json.dumps({"command": command} if name == "bash" else {"file_path": command})
    call = {"id": f"c{n}", "type": "function", "function": {"name": name, "arguments": args}}
    return [
        {"role": "assistant", "content": None, "tool_calls": [call]},
        {"role": "tool", "tool_call_id": f"c{n}", "content": output},
    ]


def session(*steps: list[dict]) -> list[dict]:
    msgs = [{"role": "user", "content": "Make the tests pass."}]
    for s in steps:
        msgs += s
    return msgs


def test_a_grep_over_logging_source_is_not_the_error_output():
    msgs = session(
        step(0, "python -m pytest -q", PYTEST + "\nexit code: 1"),
        step(1, "python scripts/issue_invoices.py", CRASH),
        step(2, 'grep -rn "ERROR" /usr/lib/python3.11/logging/', LOGGING_GREP),
        step(3, "logging/__init__.py", "ERROR = 40\nFAILED = 'x'", name="Read"),
    )
    held = working_set(msgs, ctx(msgs, budget=4000))
    assert [msgs[i]["content"] for i in held] == [PYTEST + "\nexit code: 1", CRASH]


def test_a_log_word_alone_is_not_an_error_but_a_nonzero_exit_is():
    assert not is_error_output("2024-03-01 ERROR worker-3 lost connection\nretrying")
    assert is_error_output("make: building\nProcess exited with code 2")
    assert is_error_output(CRASH) and is_error_output(PYTEST)


def test_content_viewing_calls_are_told_by_what_they_run():
    for cmd in (
        "cat a.log",
        "grep -rn ERROR src | head -50",
        "cd repo && rg FAILED",
        "git show HEAD~1",
        "git diff --stat",
        "sed -n 1,80p x.py",
        "LC_ALL=C find . -name '*.py'",
    ):
        assert viewing_command(cmd), cmd
    for cmd in ("python -m pytest", "cd repo && make", "git commit -m x", "cat x | python -"):
        assert not viewing_command(cmd), cmd
    assert is_viewing({"name": "Read", "arguments": '{"file_path": "a.py"}'})
    assert is_viewing({"name": "Glob", "arguments": "{}"})
    assert not is_viewing({"name": "Bash", "arguments": '{"command": "pytest"}'})


def test_a_folded_failing_test_report_keeps_its_E_line_and_failed_test():
    folded = folded_output({"role": "tool", "content": PYTEST}, "bash", keep_evidence=True)
    assert folded is not None
    text = folded["content"]
    assert "E   decimal.InvalidOperation: [<class 'decimal.ConversionSyntax'>]" in text
    for test in ("test_parse_amount_locale", "test_vat_reverse_charge", "test_vat_rounding"):
        assert f"::{test}" in text


def test_a_folded_crash_keeps_the_exception_line_and_the_failing_frame():
    noisy = "\n".join(f"INFO issued invoice {i}" for i in range(200)) + "\n" + CRASH
    folded = folded_output({"role": "tool", "content": noisy}, "bash", keep_evidence=True)
    assert folded is not None
    assert "KeyError: 'DE-BY'" in folded["content"]
    assert 'File "/work/billing/billing/tax.py", line 88, in apply_rate' in folded["content"]


def test_the_real_pytest_report_keeps_its_assertion_lines():
    report = fixture("pytest_failures.txt")
    folded = folded_output({"role": "tool", "content": report}, "bash", keep_evidence=True)
    assert folded is not None
    assert "E       AssertionError: totals drifted" in folded["content"]


def test_separators_inside_quotes_do_not_split_a_search() -> None:
    assert viewing_command('grep -rn "Error|Traceback" src')
    assert viewing_command("rg 'foo|bar' .")
    assert viewing_command("sed -n '1,20p;40,60p' notes.txt")
    assert not viewing_command("cat log; pytest -x")


def test_an_exit_status_reported_before_the_output_counts() -> None:
    """Codex's exec output opens with the exit status, before a long output."""
    output = "Exit code: 2\nWall time: 0.4 seconds\nOutput:\n" + "collecting ...\n" * 80
    assert is_error_output(output)
    assert not is_error_output("Exit code: 0\nOutput:\n" + "ok\n" * 80)


def test_a_long_summary_line_is_read_in_linear_time() -> None:
    """A hostile line that made the failing-tests pattern backtrack for seconds (12.7 s)."""
    import time

    from strategies.working_set import lists_failing_tests

    started = time.perf_counter()
    lists_failing_tests("= " + "1 failed " * 25_000)
    assert time.perf_counter() - started < 2
