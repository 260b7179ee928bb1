"""The validity judge the benchmarks score views with."""

from proxy.testing.validity import problems


def test_validity_check_catches_an_orphan_tool_message():
    call = {"id": "c1", "type": "function", "function": {"name": "f", "arguments": "{}"}}
    ok = [
        {"role": "user", "content": "go"},
        {"role": "assistant", "content": None, "tool_calls": [call]},
        {"role": "tool", "tool_call_id": "c1", "content": "done"},
    ]
    assert problems(ok) == []
    assert problems([ok[0], ok[2]]) == ["tool message 'c1' answers no call"]
    assert problems(ok[:2]) == ["tool call 'c1' unanswered", "ends with assistant"]
