"""traceback: real tool outputs (generated on this machine, see fixtures/README.md) keep their
evidence verbatim while the noise around it becomes counted markers."""

from __future__ import annotations

import re

import pytest

from strategies.elide import elide
from strategies.messages import message_hash
from strategies.options import TracebackOptions
from strategies.traceback import elided, traceback
from tests.unit.strategies.helpers import agent_history, ctx, fixture, log_lines, usage

MARKER = re.compile(r"^\[… ([\d,]+) (?:similar )?lines? elided …\]$")


def compact(name: str) -> str:
    text = fixture(name)
    msg = {"role": "tool", "tool_call_id": "call_1", "content": text}
    out = elided(msg, "run_command", min_chars=0, head=10, tail=10)
    assert out is not None, f"{name} did not shrink"
    return out["content"]


def assert_faithful(original: str, compacted: str) -> None:
    """Every line kept is an original line, in order; the markers count exactly what is gone."""
    lines = original.split("\n")
    body = compacted.split("\n")[1:]  # the first line is the header
    pos, elided_count = 0, 0
    for line in body:
        m = MARKER.match(line)
        if m:
            n = int(m.group(1).replace(",", ""))
            pos += n
            elided_count += n
            continue
        assert line == lines[pos], f"line {pos} rewritten: {line!r}"
        pos += 1
    assert pos == len(lines)
    assert elided_count > 0


def test_seed_demo_keeps_exception_and_failing_frame_and_shrinks_tenfold():
    text = fixture("seed_demo.txt")
    out = compact("seed_demo.txt")
    assert "AttributeError: 'Config' object has no attribute 'database_url'" in out
    assert 'line 19, in open_engine\n    return {"url": cfg.database_url}' in out
    assert "[… 104 similar lines elided …]" in out
    assert len(text) / len(out) >= 10, (len(text), len(out))
    assert_faithful(text, out)


def test_header_names_the_raw_message_by_hash():
    msg = {"role": "tool", "tool_call_id": "c", "content": fixture("seed_demo.txt")}
    out = elided(msg, "run_command", min_chars=0, head=10, tail=10)
    assert out is not None
    assert out["content"].startswith("[Output of tool 'run_command' elided: kept ")
    assert f"original: /messages/{message_hash(msg)[:16]}]" in out["content"].split("\n")[0]
    assert out["tool_call_id"] == "c"


def test_python_chained_exceptions_keep_every_cause():
    out = compact("py_chained.txt")
    for line in (
        "FileNotFoundError: [Errno 2] No such file or directory: '/nonexistent/config.json'",
        "The above exception was the direct cause of the following exception:",
        "RuntimeError: cannot load config from /nonexistent/config.json",
        "During handling of the above exception, another exception occurred:",
        "KeyError: 'fallback_url'",
    ):
        assert line in out.split("\n")
    assert "[… 29 similar lines elided …]" in out
    assert_faithful(fixture("py_chained.txt"), out)


def test_pytest_failures_keep_e_lines_and_short_summary():
    out = compact("pytest_failures.txt")
    lines = out.split("\n")
    assert "E       AttributeError: 'Config' object has no attribute 'database_url'" in lines
    assert "E       assert 6 == 7" in lines
    assert '>       assert sum(values) == 7, "totals drifted"' in lines
    assert (
        "=========================== short test summary info ============================" in lines
    )
    assert "FAILED tests/test_app.py::test_totals - AssertionError: totals drifted" in lines
    assert out.rstrip().split("\n")[-1].startswith("========================= 2 failed, 40 passed")
    assert not any("attempt 57/120" in line for line in lines)  # captured log is noise
    assert len(fixture("pytest_failures.txt")) / len(out) > 5
    assert_faithful(fixture("pytest_failures.txt"), out)


def test_node_error_keeps_source_pointer_error_and_frames():
    out = compact("node_error.txt")
    lines = out.split("\n")
    assert "TypeError: Cannot read properties of undefined (reading 'map')" in lines
    assert "    at loadRoutes (/tmp/fx/node/server.js:4:24)" in lines
    assert any(line.endswith("server.js:4") for line in lines)
    assert "[… 59 similar lines elided …]" in lines
    assert_faithful(fixture("node_error.txt"), out)


def test_java_exception_keeps_caused_by_chain():
    out = compact("java_exception.txt")
    lines = out.split("\n")
    assert any(
        line.startswith('Exception in thread "main" java.lang.IllegalStateException')
        for line in lines
    )
    assert any(line.startswith("Caused by: java.lang.NullPointerException") for line in lines)
    assert "\tat OrderService$Repository.reserve(OrderService.java:8)" in lines
    assert_faithful(fixture("java_exception.txt"), out)


@pytest.mark.parametrize(
    ("name", "errors"),
    [
        (
            "gcc_error.txt",
            [
                "c/parser.c:9:25: error: ‘const struct token’ has no member named ‘len’",
                "c/parser.c:11:17: error: expected ‘;’ before ‘}’ token",
            ],
        ),
        (
            "gxx_error.txt",
            [
                "c/vec.cpp:12:13: error: cannot convert ‘std::vector<Job>’ to ‘int’ "
                "in initialization",
                "c/vec.cpp:11:14:   required from here",
            ],
        ),
    ],
)
def test_c_and_cpp_compiler_errors_keep_location_and_code_frame(name, errors):
    out = compact(name)
    lines = out.split("\n")
    for err in errors:
        assert err in lines
        if ": error: " in err:  # the code frame right after an error line is kept with it
            assert lines[lines.index(err) + 1].lstrip()[:1].isdigit()
    assert_faithful(fixture(name), out)


def test_rust_compile_errors_keep_every_error_block():
    out = compact("rust_compile_error.txt")
    lines = out.split("\n")
    assert sum(line.startswith("error[E") for line in lines) == 5
    assert (
        'error: could not compile `inventory` (bin "inventory") due to 5 previous errors' in lines
    )
    assert "  --> src/main.rs:25:21" in lines
    assert_faithful(fixture("rust_compile_error.txt"), out)


def test_rust_panic_keeps_message_and_backtrace_head():
    out = compact("rust_panic.txt")
    assert "port must be a number: ParseIntError { kind: InvalidDigit }" in out
    assert "panicked at rs/panic.rs:2:15:" in out
    assert "   4: panic::parse_port" in out
    assert_faithful(fixture("rust_panic.txt"), out)


def test_go_panic_keeps_first_goroutine():
    # Go is not installed here; this output follows the runtime's format.
    text = "\n".join(
        [
            log_lines(80),
            "panic: runtime error: index out of range [5] with length 3",
            "",
            "goroutine 1 [running]:",
            "main.pick(...)",
            "\t/src/app/main.go:12",
            "main.main()",
            "\t/src/app/main.go:20 +0x1d",
            "exit status 2",
        ]
    )
    body, _, _ = elide(text, 10, 10)
    assert "panic: runtime error: index out of range [5] with length 3" in body
    assert "\t/src/app/main.go:12" in body


def test_long_run_of_identical_lines_collapses_with_count():
    text = "start\n" + "\n".join(["retrying connection ..."] * 500) + "\nError: gave up"
    body, _, _ = elide(text, 10, 10)
    assert "[… 499 similar lines elided …]" in body
    assert body.split("\n")[-1] == "Error: gave up"


def test_short_outputs_are_left_alone():
    msg = {"role": "tool", "tool_call_id": "c", "content": fixture("node_error.txt")}
    assert elided(msg, "x", min_chars=10_000, head=10, tail=10) is None


def test_strategy_elides_only_old_outputs_and_reports_one_event():
    history = agent_history([fixture("seed_demo.txt")] * 5)
    before = [dict(m) for m in history]
    two = TracebackOptions(keep_recent=2)
    out, events = traceback(history, ctx(history, budget=usage(history) // 2, options=two))
    assert history == before  # input untouched
    assert [e.strategy for e in events] == ["traceback"]
    assert events[0].iterations == [1, 2, 3]
    assert events[0].tokens_after < events[0].tokens_before
    assert out[-4:] == history[-4:]  # the keep window (2 iterations) is intact
    assert all(
        m.get("tool_call_id") == o.get("tool_call_id") for m, o in zip(history, out, strict=True)
    )


def test_strategy_does_nothing_under_target():
    history = agent_history([fixture("seed_demo.txt")] * 5)
    out, events = traceback(history, ctx(history, budget=usage(history) * 3))
    assert out == history and events == []


def test_one_huge_line_keeps_its_ends_not_nothing():
    from strategies.traceback import elided

    line = '{"results": [' + ", ".join(f'{{"id": {i}, "price": {i * 1.5}}}' for i in range(900))
    line += '], "total": 12446}'
    msg = {"role": "tool", "tool_call_id": "c1", "content": line}
    out = elided(msg, "search", min_chars=2000, head=10, tail=10)
    assert out is not None and out["tool_call_id"] == "c1"
    assert out["content"].endswith('"total": 12446}')
    assert '{"results": [{"id": 0' in out["content"] and "chars elided" in out["content"]
    assert len(out["content"]) < 1200
