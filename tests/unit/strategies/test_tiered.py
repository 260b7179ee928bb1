"""tiered: phases in order, each only as far as needed, never inside the keep window."""

from __future__ import annotations

import json

from strategies.context import ALL_PHASES, LAST_RESORT, NO_KEEP_WINDOW
from strategies.forms import (
    EXCERPT_CHARS,
    EXCERPT_LINES,
    REPORT_CHARS,
    REPORT_LINES,
    excerpt,
    folded_output,
    shorten_arguments,
    skeleton,
    truncated,
)
from strategies.invariants import pairing_problems
from strategies.messages import message_hash
from strategies.options import TieredOptions
from strategies.tiered import tiered
from tests.unit.strategies.helpers import agent_history, ctx, log_lines, usage

BIG = (
    log_lines(300) + '\nTraceback (most recent call last):\n  File "a.py", line 3, in <module>\n'
    "    main()\nValueError: bad input 'x'"
)


def run(history, budget, keep_recent=2):
    options = TieredOptions(keep_recent=keep_recent)
    return tiered(history, ctx(history, budget=budget, options=options))


def test_phase_one_only_when_it_suffices():
    history = agent_history([BIG] * 6)
    budget = int(usage(history) / 0.65)  # above the 0.6 threshold, below 0.75
    out, events = run(history, budget)
    assert [e.phase for e in events] == [1]
    assert events[0].tokens_after <= int(0.5 * budget) or events[0].iterations == [1, 2, 3, 4]
    assert pairing_problems(out) == pairing_problems(history)


def test_phases_escalate_when_the_previous_leaves_too_much():
    history = agent_history([BIG] * 12)
    for m in history[2::2]:
        m["content"] = "Looking at the failure, the config loader is the likely culprit. " * 8
    out, events = run(history, int(usage(history[-4:]) * 1.05))
    assert [e.phase for e in events] == [1, 2, 3]
    assert all(e.tokens_after < e.tokens_before for e in events)
    assert not pairing_problems(out)


def test_keep_window_and_prompts_untouched():
    history = agent_history([BIG] * 8)
    out, _ = run(history, usage(history) // 4, keep_recent=3)
    assert out[:2] == history[:2]
    assert out[-6:] == history[-6:]


def test_no_event_when_under_the_first_threshold():
    history = agent_history([BIG] * 4)
    out, events = run(history, usage(history) * 2)
    assert out == history and events == []


def test_phase_one_keeps_head_and_the_final_exception_line():
    msg = {"role": "tool", "tool_call_id": "c", "content": BIG}
    out = truncated(msg, 200)
    assert out is not None and out["tool_call_id"] == "c"
    text = out["content"]
    assert text.startswith(BIG[:100])
    assert "ValueError: bad input 'x'" in text.split("\n")
    removed = len(BIG) - sum(
        len(line) + 1 for line in text.split("\n")[:-1] if not line.startswith("[…")
    )
    assert text.split("\n")[-1] == (
        f"[Truncated — {removed:,} chars removed; "
        f"ctxproxy_recall original: /messages/{message_hash(msg)[:16]}]"
    )


def test_phase_one_on_a_single_huge_line_keeps_its_start():
    line = "x" * 50_000
    out = truncated({"role": "tool", "tool_call_id": "c", "content": line}, 200)
    assert out is not None
    assert out["content"].startswith("x" * 200) and len(out["content"]) < 400


def test_phase_two_keeps_tool_call_id_and_names_the_tool():
    history = agent_history([BIG] * 12)
    out, _ = run(history, usage(history) // 6)
    folded = [m for m in out if m.get("role") == "tool" and "folded" in m["content"]]
    assert folded
    for m in folded:
        assert m["content"].startswith("[Output of tool 'run_command' folded: ")
        assert m["tool_call_id"].startswith("call_")


def test_skeleton_keeps_names_and_ids_and_valid_json_arguments():
    args = {"path": "src/app.py", "content": "print('hello')\n" * 200, "n": 3}
    msg = {
        "role": "assistant",
        "content": "I will now rewrite the whole file with the fix applied. " * 5,
        "tool_calls": [
            {
                "id": "call_9",
                "type": "function",
                "function": {"name": "write_file", "arguments": json.dumps(args)},
            }
        ],
        "x-extra": {"kept": True},
    }
    out = skeleton(msg)
    assert out is not None
    assert out["content"].startswith(
        "[Assistant text folded: 280 chars; ctxproxy_recall original: /messages/"
    )
    call = out["tool_calls"][0]
    assert call["id"] == "call_9" and call["function"]["name"] == "write_file"
    short = json.loads(call["function"]["arguments"])
    assert short["path"] == "src/app.py" and short["n"] == 3
    assert short["content"].endswith("…[+2,960 chars]")
    assert out["x-extra"] == {"kept": True}
    assert msg["content"].startswith("I will")  # input untouched


def test_shortening_is_idempotent_and_leaves_invalid_json_alone():
    once = shorten_arguments(json.dumps({"a": "y" * 500}))
    assert shorten_arguments(once) == once
    assert shorten_arguments("{not json" + "z" * 100) == "{not json" + "z" * 100


def test_compacting_twice_without_lineage_does_not_drift():
    history = agent_history([BIG] * 10)
    budget = usage(history) // 3
    once, _ = tiered(history, ctx(history, budget=budget, lineage=False))
    twice, events = tiered(once, ctx(once, budget=budget, lineage=False))
    assert twice == once and events == []


def test_pressure_reaches_into_the_keep_window_but_not_the_final_turn():
    history = agent_history([BIG] * 3)
    budget = usage(history[:-2]) // 2 + usage(history[-2:])
    five = TieredOptions(keep_recent=5)
    out, _ = tiered(history, ctx(history, budget=budget, pressure=2, options=five))
    assert out[-2:] == history[-2:]
    assert out[3] != history[3]  # inside the configured keep window, yet compacted


def test_phase_two_placeholder_keeps_the_key_evidence_lines_verbatim():
    history = agent_history([BIG] * 12)
    out, _ = run(history, usage(history) // 6)
    folded = [m for m in out if m.get("role") == "tool" and " folded: " in m["content"]]
    assert folded
    for m in folded:
        header, *kept = m["content"].split("\n")
        raw = next(h for h in history if h.get("tool_call_id") == m["tool_call_id"])
        assert header.endswith(f"original: /messages/{message_hash(raw)[:16]}]")
        assert "ValueError: bad input 'x'" in kept
        assert all(line in BIG.split("\n") for line in kept)


def test_evidence_excerpt_is_capped_and_puts_the_final_error_first():
    failures = "\n".join(
        f"FAILED tests/test_{i}.py::test_case_{i} - AssertionError: expected {i}" for i in range(40)
    )
    text = f"{failures}\nTraceback (most recent call last):\n  File \"a.py\", line 3\nKeyError: 'k'"
    kept = excerpt(text)
    assert len(kept) <= REPORT_LINES and sum(len(line) + 1 for line in kept) <= REPORT_CHARS
    assert "KeyError: 'k'" in kept and kept[0].startswith("FAILED tests/test_0.py::test_case_0")
    plain = excerpt(text.replace("FAILED", "failed"))  # no report: the plain excerpt's caps
    assert len(plain) <= EXCERPT_LINES and sum(len(line) + 1 for line in plain) <= EXCERPT_CHARS
    assert "KeyError: 'k'" in plain and '  File "a.py", line 3' in plain
    assert list(kept) == [line for line in text.split("\n") if line in kept]  # text order


def test_evidence_excerpt_keeps_each_line_once_and_nothing_for_plain_output():
    block = "E       AttributeError: no attribute 'rate'\nshop/pricing.py:21: AttributeError"
    assert excerpt(f"{block}\n{block}\n{block}") == tuple(block.split("\n"))
    assert excerpt(log_lines(50)) == ()
    msg = {"role": "tool", "tool_call_id": "c", "content": log_lines(50)}
    bare = folded_output(msg, "sh", keep_evidence=True)
    assert bare == folded_output(msg, "sh") and "\n" not in bare["content"]


def test_newest_error_output_keeps_its_evidence_form_while_the_budget_allows():
    history = agent_history([log_lines(300)] * 8 + [BIG] + [log_lines(300)] * 4)
    newest_error = 2 + 2 * 8 + 1
    out, events = run(history, usage(history) // 5)
    assert [e.phase for e in events][:2] == [1, 2]
    assert " folded: " not in out[newest_error]["content"]
    assert "ValueError: bad input 'x'" in out[newest_error]["content"].split("\n")
    older = [m for m in out[3:newest_error] if m.get("role") == "tool"]
    assert all(" folded: " in m["content"] for m in older)  # the older outputs went first


def test_newest_error_output_yields_last_at_the_last_resort():
    history = agent_history([log_lines(300)] * 3 + [BIG] + [log_lines(300)] * 3)
    newest_error = 2 + 2 * 3 + 1
    tight = usage(history[-2:]) + 400
    calm, _ = tiered(history, ctx(history, budget=tight, pressure=ALL_PHASES))
    assert " folded: " not in calm[newest_error]["content"]
    # Once the keep window is gone it folds, keeping its evidence lines...
    folded, _ = tiered(history, ctx(history, budget=tight, pressure=NO_KEEP_WINDOW))
    header, *kept = folded[newest_error]["content"].split("\n")
    assert " folded: " in header and "evidence lines kept" in header
    assert "ValueError: bad input 'x'" in kept
    # ... and goes bare only as the last resort.
    last, _ = tiered(history, ctx(history, budget=tight, pressure=LAST_RESORT))
    assert " folded: " in last[newest_error]["content"]
    assert pairing_problems(last) == pairing_problems(history)
