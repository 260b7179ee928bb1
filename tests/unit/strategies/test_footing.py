"""What the next step needs stays whole: small outputs, the first steps, the failing tests'
names beside their `E` lines, and the newest read of a file the agent is editing."""

from __future__ import annotations

import json

from strategies.context import ALL_PHASES, FORGET_ANY, NO_KEEP_WINDOW
from strategies.forms import folded_output
from strategies.pipeline import Plan, compile_view
from strategies.reads import file_action, live_reads
from strategies.tiered import SMALL_TOKENS, tiered
from tests.unit.strategies.helpers import COUNTER, ctx, fixture, log_lines, usage

LISTING = "\n".join(f"shopkit/module_{i}.py" for i in range(27))
SOURCE = "\n".join(
    f"def handler_{i}(order):\n    total = order.amount * {i}\n    return round(total, 2)\n"
    for i in range(60)
)


def turn(n: int, name: str, args: dict, output: str) -> list[dict]:
    cid = f"c{n}"
    call = {
        "id": cid,
        "type": "function",
        "function": {"name": name, "arguments": json.dumps(args)},
    }
    return [
        {"role": "assistant", "content": None, "tool_calls": [call]},
        {"role": "tool", "tool_call_id": cid, "content": output},
    ]


def history(*turns: tuple[str, dict, str]) -> list[dict]:
    msgs: list[dict] = [
        {"role": "system", "content": "You are a coding agent."},
        {"role": "user", "content": "Fix the failing tests."},
    ]
    for n, (name, args, out) in enumerate(turns):
        msgs += turn(n, name, args, out)
    return msgs


RUN = ("bash", {"command": "python -m pytest -q"}, log_lines(200))


def test_a_small_listing_is_never_folded_while_long_outputs_are():
    assert COUNTER.count_message({"role": "tool", "content": LISTING}) < SMALL_TOKENS
    msgs = history(RUN, RUN, RUN, ("bash", {"command": "ls -R"}, LISTING), RUN, RUN, RUN, RUN)
    listing = 2 + 2 * 3 + 1
    for pressure in (0, ALL_PHASES, NO_KEEP_WINDOW, FORGET_ANY):
        out, events = tiered(msgs, ctx(msgs, budget=usage(msgs) // 4, pressure=pressure))
        assert events and out[listing]["content"] == LISTING
        assert any(" folded: " in (m.get("content") or "") for m in out)


def test_the_kept_first_steps_stay_verbatim_not_as_placeholders():
    look = ("bash", {"command": "cat README.md"}, log_lines(20))  # ~400 tokens: a first look
    msgs = history(look, look, *[RUN] * 30)
    plan = Plan(["traceback", "tiered", "forget"], budget=8000, target=5000, trigger=6000)
    result = compile_view(msgs, plan, COUNTER.count_message, lambda raw: raw)
    assert result.events
    contents = [m.get("content") for m in result.view]
    assert contents[3] == contents[5] == log_lines(20)  # the first steps, whole
    placeholders = [c for c in contents if c and c.startswith("[Output of tool")]
    # Forgetting, not a head of placeholders, made room: what stays after the head is recent.
    assert len(placeholders) <= 4
    assert contents[-1] == RUN[2]


def test_a_folded_test_report_names_each_failing_test_and_its_place():
    report = fixture("pytest_failures.txt")
    folded = folded_output({"role": "tool", "tool_call_id": "c", "content": report}, "bash",
                           keep_evidence=True)  # fmt: skip
    lines = folded["content"].split("\n")
    assert len(folded["content"]) < len(report) / 4
    for needed in (
        "________________________ test_engine_uses_database_url _________________________",
        "E       AttributeError: 'Config' object has no attribute 'database_url'",
        "app.py:8: AttributeError",
        "_________________________________ test_totals __________________________________",
        "E       AssertionError: totals drifted",
        "tests/test_app.py:23: AssertionError",
        "FAILED tests/test_app.py::test_totals - AssertionError: totals drifted",
    ):
        assert needed in lines, needed


def test_the_newest_read_of_a_file_being_edited_stays_verbatim_until_a_newer_read():
    read = ("read_file", {"path": "shopkit/billing.py"}, SOURCE)
    edit = ("edit", {"path": "shopkit/billing.py", "old_string": "a", "new_string": "b"}, "ok")
    msgs = history(RUN, read, edit, read, RUN, RUN, RUN, RUN, RUN)
    budget = usage(msgs) // 2
    for pressure in (0, ALL_PHASES):
        out, events = tiered(msgs, ctx(msgs, budget=budget, pressure=pressure))
        assert events and out[9]["content"] == SOURCE  # the newest read
        assert out[5]["content"] != SOURCE  # the older read folds
    # Edited again after the read: with the edit in view it is still the file the agent edits
    # from (the next bug in the same file), so it stays.
    edited = history(RUN, read, edit, read, edit, RUN, RUN, RUN, RUN, RUN)
    out, _ = tiered(edited, ctx(edited, budget=budget, pressure=ALL_PHASES))
    assert out[9]["content"] == SOURCE
    # A file only read, never edited, is an ordinary output.
    only = history(RUN, read, RUN, RUN, RUN, RUN, RUN)
    out, _ = tiered(only, ctx(only, budget=budget, pressure=ALL_PHASES))
    assert out[5]["content"] != SOURCE
    assert live_reads(msgs, ctx(msgs, budget=budget)) == [9]


def test_reads_and_edits_are_told_by_the_call():
    assert file_action({"name": "Read", "arguments": '{"file_path": "./a.py"}'}) == (
        "read",
        ["a.py"],
    )
    assert file_action({"name": "bash", "arguments": '{"command": "sed -n 1,80p a/b.py"}'}) == (
        "read",
        ["a/b.py"],
    )
    patch = "*** Begin Patch\n*** Update File: a/b.py\n@@\n-x\n+y\n*** End Patch"
    assert file_action({"name": "apply_patch", "arguments": json.dumps({"input": patch})}) == (
        "edit",
        ["a/b.py"],
    )
    editor = {
        "name": "str_replace_based_edit_tool",
        "arguments": '{"command": "view", "path": "x.py"}',
    }
    assert file_action(editor) == ("read", ["x.py"])
    assert file_action({"name": "bash", "arguments": '{"command": "pytest -q"}'}) is None


def test_forgetting_older_steps_keeps_the_read_of_the_file_the_agent_edits():
    """The read stays whole while the steps around it are forgotten: the agent's next edit of
    the same file copies from it instead of reading the file again."""
    read = ("read_file", {"path": "shopkit/billing.py"}, SOURCE)
    edit = ("edit", {"path": "shopkit/billing.py", "old_string": "a", "new_string": "b"}, "ok")
    msgs = history(*[RUN] * 50, read, RUN, RUN, edit)
    plan = Plan(["traceback", "tiered", "forget"], budget=6000, target=3000, trigger=5000)
    result = compile_view(msgs, plan, COUNTER.count_message, lambda raw: raw)
    assert any(e.strategy == "forget" for e in result.events)
    assert SOURCE in [m.get("content") for m in result.view]


def test_a_small_window_keeps_the_read_of_the_file_the_agent_edits_at_over_a_third_of_its_room():
    """At a 4k window one source file is over a third of the room: it stays, and the agent's
    next fix in that file needs no second read."""
    step = ("bash", {"command": "make"}, log_lines(8))
    read = ("read_file", {"path": "shopkit/billing.py"}, SOURCE)
    edit = ("edit", {"path": "shopkit/billing.py", "old_string": "a", "new_string": "b"}, "ok")
    msgs = history(*[step] * 40, read, step, step, edit)
    plan = Plan(["traceback", "tiered", "forget"], budget=3700, target=1850, trigger=3100)
    assert COUNTER.count_message({"role": "tool", "content": SOURCE}) > plan.budget / 3
    result = compile_view(msgs, plan, COUNTER.count_message, lambda raw: raw)
    assert any(e.strategy == "forget" for e in result.events)
    assert SOURCE in [m.get("content") for m in result.view]
