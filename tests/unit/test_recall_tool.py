"""ctxproxy_recall against a history: refs, queries, caps and bad calls; the stream filter."""

from __future__ import annotations

import json
from typing import Any

from proxy.compile.tokens import TokenCounter
from proxy.exchange.recallstream import StreamFilter
from proxy.recall import tool as recall
from strategies.messages import message_hash, original_ref

COUNTER = TokenCounter()
HISTORY: list[dict[str, Any]] = [
    {"role": "system", "content": "You are a coding agent."},
    {"role": "user", "content": "Fix the build."},
    {
        "role": "assistant",
        "content": None,
        "tool_calls": [
            {
                "id": "c1",
                "type": "function",
                "function": {"name": "read_file", "arguments": '{"path": "settings.py"}'},
            }
        ],
    },
    {"role": "tool", "tool_call_id": "c1", "content": "a = 1\nPORT = 54329\nb = 2\n" * 3},
    {"role": "user", "content": [{"type": "text", "text": "The Port is wrong."}]},
]
HASHES = [message_hash(m) for m in HISTORY]


def run(args: Any, room: int = 2000) -> recall.Recalled:
    text = args if isinstance(args, str) else json.dumps(args)
    return recall.run(text, HISTORY, HASHES, room, lambda t: COUNTER.text(t))


def test_a_placeholder_ref_returns_the_whole_original_with_where_it_was() -> None:
    got = run({"ref": original_ref(HISTORY[3])})
    assert got.outcome == "ok" and got.text.count("PORT = 54329") == 3
    assert got.text.startswith('--- history:3 (tool read_file {"path": "settings.py"}) ---')


def test_a_marker_position_or_range_returns_those_messages() -> None:
    one = run({"ref": "history:3"})
    assert "PORT = 54329" in one.text and "history:2" not in one.text
    span = run({"ref": "history:2-3"})
    assert "--- history:2 (assistant) ---" in span.text and 'read_file({"path"' in span.text


def test_a_query_finds_words_in_any_case_and_regexes_with_context_lines() -> None:
    words = run({"query": "port 54329"})
    assert words.outcome == "ok" and "3 matching lines; 1 whole unit " in words.text
    assert "a = 1" in words.text  # a short output is one unit, given whole
    regex = run({"query": r"PORT\s*=\s*\d+|port is"})
    assert "2 whole units" in regex.text and "The Port is wrong." in regex.text
    args = run({"query": "settings.py"})  # tool-call arguments are searched too
    assert "--- history:2 (assistant) ---" in args.text


def test_a_result_over_room_is_cut_with_a_note_and_stays_within_it() -> None:
    big = [{"role": "tool", "tool_call_id": "x", "content": "line of output\n" * 2000}]
    cut = recall.run('{"ref": "history:0"}', big, ["h"], 300, COUNTER.text)
    assert cut.outcome == "truncated" and cut.tokens <= 300
    assert "narrow it with a more specific query" in cut.text
    assert run({"query": "PORT"}, room=10).outcome == "no_room"


def test_bad_calls_get_a_tool_result_that_says_what_to_do() -> None:
    cases = {
        "{oops": "bad_call",
        "[1, 2]": "bad_call",
        "{}": "bad_call",
        '{"ref": "the settings file"}': "bad_call",
        '{"ref": "/messages/ffffffffffffffff"}': "not_found",
        '{"ref": "history:40"}': "not_found",
        '{"query": "[unclosed"}': "bad_call",
        '{"query": "nowhere to be found"}': "no_match",
    }
    for args, outcome in cases.items():
        got = run(args)
        assert got.outcome == outcome, args
        assert got.text.startswith("[ctxproxy_recall: "), args


def sse(data: dict[str, Any]) -> bytes:
    return b"data: " + json.dumps(data).encode() + b"\n\n"


def delta(d: dict[str, Any], finish: str | None = None) -> bytes:
    return sse({"choices": [{"index": 0, "delta": d, "finish_reason": finish}]})


def call(index: int, name: str | None, args: str, id_: str | None = None) -> dict[str, Any]:
    fn = {"arguments": args} | ({"name": name} if name else {})
    return {"index": index, "function": fn} | ({"id": id_, "type": "function"} if id_ else {})


def events(data: bytes) -> list[Any]:
    return [json.loads(e[6:]) if e != b"data: [DONE]" else "DONE" for e in data.split(b"\n\n") if e]


def test_the_filter_holds_recall_calls_back_and_renumbers_the_clients() -> None:
    f = StreamFilter([])
    out = f.feed(
        delta({"role": "assistant", "content": "Let me see."})
        + delta({"tool_calls": [call(0, "ctxproxy_recall", "", "r1")]})
        + delta({"tool_calls": [call(0, None, '{"query": ')]})
        + delta({"tool_calls": [call(1, None, '{"pa', "f1")]})  # before its name came
        + delta({"tool_calls": [call(1, "read_file", 'th": 1}')]})
        + delta({"tool_calls": [call(0, None, '"x"}')]})
        + delta({}, "tool_calls")
        + b"data: [DONE]\n\n",
        more=True,
    )
    got = events(out)
    deltas = [
        tc
        for e in got
        if e != "DONE"
        for c in e["choices"]
        for tc in c["delta"].get("tool_calls", [])
    ]
    assert deltas == [
        {"index": 0, "function": {"name": "read_file", "arguments": '{"path": 1}'}, "id": "f1"}
    ]
    assert got[-1] == "DONE" and not f.going_on  # the client's call ends the answer
    assert f.recall_calls()[0]["function"]["arguments"] == '{"query": "x"}'


def test_a_round_of_recall_calls_only_loses_its_finish_usage_and_done() -> None:
    usages: list[dict[str, Any]] = []
    f = StreamFilter(usages)
    out = f.feed(
        delta({"role": "assistant", "content": ""})
        + delta({"tool_calls": [call(0, "ctxproxy_recall", '{"ref": "history:1"}', "r1")]})
        + delta({}, "tool_calls")
        + sse({"choices": [], "usage": {"prompt_tokens": 100, "completion_tokens": 5}})
        + b"data: [DONE]\n\n",
        more=True,
    )
    assert f.going_on and events(out) == [
        {
            "choices": [
                {"index": 0, "delta": {"role": "assistant", "content": ""}, "finish_reason": None}
            ]
        }
    ]
    f.start_round()
    out = f.feed(
        delta({"content": "It is 1."}, "stop")
        + sse({"choices": [], "usage": {"prompt_tokens": 130, "completion_tokens": 4}})
        + b"data: [DONE]\n\n",
        more=True,
    )
    got = events(out)
    assert got[1]["usage"] == {"prompt_tokens": 230, "completion_tokens": 9} and got[-1] == "DONE"


def test_a_search_stops_when_its_time_is_up_and_says_how_far_it_got() -> None:
    got = recall.run(json.dumps({"query": "PORT"}), HISTORY, HASHES, 2000, COUNTER.text, 0.0)
    assert got.outcome == "no_match"
    assert f"time ran out after 0 of {len(HISTORY)} messages" in got.text


def test_a_query_matches_line_by_line_as_re_would_on_each_line() -> None:
    """RE2 over the whole text gives the same lines as a per-line search, unicode included."""
    history = [{"role": "tool", "tool_call_id": "c", "content": "é = 1\nx\nPORT=2 é\n\nport=3"}]
    got = recall.run(json.dumps({"query": r"^port=\d"}), history, ["h"], 2000, COUNTER.text)
    assert "2 matching lines; 1 whole unit" in got.text
    words = recall.run(json.dumps({"query": "é port"}), history, ["h"], 2000, COUNTER.text)
    assert "1 matching lines; 1 whole unit" in words.text and "PORT=2 é" in words.text


def test_a_stream_of_malformed_recall_deltas_is_gathered_not_raised() -> None:
    filt = StreamFilter([])
    call = {"index": 0, "id": "r1", "function": {"name": recall.NAME, "arguments": {"a": 1}}}
    event = {
        "choices": [{"index": 0, "delta": {"tool_calls": [call, {"index": 1, "function": 5}]}}]
    }
    filt.feed(b"data: " + json.dumps(event).encode() + b"\n\n", True)
    assert filt.recall_calls()[0]["function"]["arguments"] == ""
