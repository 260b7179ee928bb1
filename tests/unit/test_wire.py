"""The converters at the edge: Messages and Responses to the neutral form and back."""

from __future__ import annotations

import asyncio
import json
from pathlib import Path

import pytest

from proxy.errors import BadRequest
from proxy.formats import (
    anthropic,
    anthropic_stream,
    reminders,
    responses,
    responses_stream,
    toolnames,
    tools,
)
from proxy.formats.events import event
from strategies.invariants import pairing_faults

CALL = {"type": "tool_use", "id": "toolu_1", "name": "bash", "input": {"cmd": "ls"}}
THINK = {"type": "thinking", "thinking": "hmm", "signature": "c2ln"}
MESSAGES = [
    {"role": "user", "content": [{"type": "text", "text": "go", "cache_control": {"type": "x"}}]},
    {"role": "assistant", "content": [THINK, {"type": "text", "text": "Listing."}, CALL]},
    {
        "role": "user",
        "content": [
            {"type": "tool_result", "tool_use_id": "toolu_1", "content": "a.py", "is_error": True},
            {"type": "text", "text": "and now?"},
        ],
    },
]


def test_messages_to_neutral_pairs_tool_use_with_its_result() -> None:
    raw = {"model": "m", "max_tokens": 9, "system": [{"type": "text", "text": "S"}]}
    conv = anthropic.to_neutral({**raw, "messages": MESSAGES, "stop_sequences": ["X"]})
    assert conv.body["messages"] == [
        {"role": "system", "content": "S"},
        {"role": "user", "content": "go"},
        {
            "role": "assistant",
            "content": "Listing.",
            "tool_calls": [
                {
                    "id": "toolu_1",
                    "type": "function",
                    "function": {"name": "bash", "arguments": '{"cmd": "ls"}'},
                }
            ],
        },
        {"role": "tool", "tool_call_id": "toolu_1", "content": "Error: a.py"},
        {"role": "user", "content": "and now?"},
    ]
    assert pairing_faults(conv.body["messages"]) == []
    assert conv.body["stop"] == ["X"] and conv.body["max_tokens"] == 9


def test_untouched_view_goes_back_byte_for_byte() -> None:
    raw = {"model": "m", "max_tokens": 9, "system": [{"type": "text", "text": "S"}]}
    conv = anthropic.to_neutral({**raw, "messages": MESSAGES, "unknown": 1})
    out = anthropic.from_view(conv.body["messages"], conv)
    assert json.dumps(out) == json.dumps({**raw, "messages": MESSAGES, "unknown": 1})


def test_changed_messages_are_rebuilt_and_the_rest_kept() -> None:
    conv = anthropic.to_neutral({"model": "m", "max_tokens": 9, "messages": MESSAGES})
    view = [dict(m) for m in conv.body["messages"]]
    view[2] = {**view[2], "content": "[folded]"}  # the tool result
    out = anthropic.from_view(view, conv)["messages"]
    assert out[:2] == MESSAGES[:2]  # thinking and signature kept
    assert out[2] == {
        "role": "user",
        "content": [{"type": "tool_result", "tool_use_id": "toolu_1", "content": "[folded]"}],
    }
    assert out[3] == {"role": "user", "content": "and now?"}


def test_images_both_ways() -> None:
    image = {"type": "image", "source": {"type": "base64", "media_type": "image/png", "data": "AA"}}
    conv = anthropic.to_neutral(
        {
            "model": "m",
            "messages": [{"role": "user", "content": [image, {"type": "text", "text": "?"}]}],
        }
    )
    parts = conv.body["messages"][0]["content"]
    assert parts[0] == {"type": "image_url", "image_url": {"url": "data:image/png;base64,AA"}}
    rebuilt = anthropic.from_view([{**conv.body["messages"][0], "x": 1}], conv)
    assert rebuilt["messages"][0]["content"][0] == image


def test_bad_messages_refused() -> None:
    with pytest.raises(BadRequest):
        anthropic.to_neutral({"model": "m", "messages": []})
    with pytest.raises(BadRequest):
        anthropic.to_neutral({"model": "m", "messages": [{"role": "tool", "content": "x"}]})


def test_tool_definitions_as_chat_functions() -> None:
    tool = {"name": "t", "description": "d", "input_schema": {"type": "object"}}
    function = {"name": "t", "description": "d", "parameters": {"type": "object"}}
    assert tools.anthropic_to_openai(tool) == {"type": "function", "function": function}
    fn = {"type": "function", **function}
    assert tools.responses_to_openai(fn) == {"type": "function", "function": function}
    assert tools.anthropic_tool_choice({"type": "any", "disable_parallel_tool_use": True}) == (
        "required",
        False,
    )
    assert tools.anthropic_tools([{"type": "web_search_20250305", "name": "web_search"}]) is None


ITEMS = [
    {"role": "developer", "content": "dev"},
    {"type": "message", "role": "user", "content": [{"type": "input_text", "text": "go"}]},
    {"type": "reasoning", "id": "rs_1", "summary": [], "encrypted_content": "zzz"},
    {"type": "function_call", "call_id": "c1", "name": "ls", "arguments": "{}"},
    {"type": "function_call", "call_id": "c2", "name": "pwd", "arguments": "{}"},
    {"type": "function_call_output", "call_id": "c1", "output": "a.py"},
    {"type": "function_call_output", "call_id": "c2", "output": "/w"},
]


def test_responses_items_to_neutral_and_back() -> None:
    conv = responses.to_neutral({"model": "m", "instructions": "I", "input": ITEMS})
    msgs = conv.body["messages"]
    assert [m["role"] for m in msgs] == ["system", "system", "user", "assistant", "tool", "tool"]
    assert [c["id"] for c in msgs[3]["tool_calls"]] == ["c1", "c2"]
    assert pairing_faults(msgs) == []
    out = responses.from_view(msgs, conv)
    assert out["input"] == ITEMS and out["instructions"] == "I"
    view = [*msgs[:4], {**msgs[4], "content": "[folded]"}, msgs[5]]
    out = responses.from_view(view, conv)["input"]
    assert out[:5] == ITEMS[:5]  # reasoning travels with its function calls
    assert out[5] == {"type": "function_call_output", "call_id": "c1", "output": "[folded]"}


def test_responses_string_input() -> None:
    conv = responses.to_neutral({"model": "m", "input": "hi", "max_output_tokens": 5})
    assert conv.body["messages"] == [{"role": "user", "content": "hi"}]
    assert conv.body["max_tokens"] == 5


def sse(chunk: dict) -> bytes:
    return b"data: " + json.dumps(chunk).encode() + b"\n\n"


def chat_stream() -> list[bytes]:
    def choice(delta: dict, finish: str | None = None) -> dict:
        return {"choices": [{"index": 0, "delta": delta, "finish_reason": finish}]}

    call = {"index": 0, "id": "call_1", "function": {"name": "ls", "arguments": '{"a"'}}
    return [
        sse(choice({"role": "assistant", "content": "Hi"})),
        sse(choice({"content": " there"})),
        sse(choice({"tool_calls": [call]})),
        sse(choice({"tool_calls": [{"index": 0, "function": {"arguments": ": 1}"}}]})),
        sse(choice({}, "tool_calls")),
        sse({"choices": [], "usage": {"prompt_tokens": 7, "completion_tokens": 3}}),
        b"data: [DONE]\n\n",
    ]


async def collect(stream) -> list[dict]:
    out = b"".join([part async for part in stream])
    return [json.loads(line[6:]) for line in out.split(b"\n") if line.startswith(b"data: ")]


async def chunks(parts: list[bytes]):
    for part in parts:
        yield part


def test_chat_stream_as_messages_events() -> None:
    events = asyncio.run(collect(anthropic_stream.translate(chunks(chat_stream()), "m", 5)))
    kinds = [e["type"] for e in events]
    assert kinds == [
        "message_start", "ping",
        "content_block_start", "content_block_delta", "content_block_delta", "content_block_stop",
        "content_block_start", "content_block_delta", "content_block_delta", "content_block_stop",
        "message_delta", "message_stop",
    ]  # fmt: skip
    assert events[6]["content_block"]["name"] == "ls"
    assert events[-2]["delta"]["stop_reason"] == "tool_use"
    assert events[-2]["usage"]["output_tokens"] == 3
    # The same events, read back as a native stream, give the neutral answer.
    native = anthropic_stream.Assembled()
    native.feed(b"".join(event(e["type"], e) for e in events))
    assert native.done and native.message() == {
        "role": "assistant",
        "content": "Hi there",
        "tool_calls": [
            {
                "id": "call_1",
                "type": "function",
                "function": {"name": "ls", "arguments": '{"a": 1}'},
            }
        ],
    }


def test_chat_stream_as_responses_events() -> None:
    conv = responses.to_neutral({"model": "m", "input": "hi"})
    stream = responses_stream.translate(chunks(chat_stream()), "m", 0, conv)
    events = asyncio.run(collect(stream))
    kinds = [e["type"] for e in events]
    assert kinds[:2] == ["response.created", "response.in_progress"]
    assert "response.output_text.delta" in kinds
    assert "response.function_call_arguments.delta" in kinds
    assert kinds[-1] == "response.completed"
    final = events[-1]["response"]
    assert [o["type"] for o in final["output"]] == ["message", "function_call"]
    assert final["output"][1]["arguments"] == '{"a": 1}'
    assert final["usage"]["input_tokens"] == 7
    native = responses_stream.Assembled()
    native.feed(b"".join(event(e["type"], e) for e in events))
    assert native.message()["tool_calls"][0]["function"]["name"] == "ls"


def test_stream_error_becomes_an_error_event() -> None:
    parts = [sse({"error": {"message": "boom", "type": "upstream_error", "code": 502}})]
    events = asyncio.run(collect(anthropic_stream.translate(chunks(parts), "m", 1)))
    assert events[-1] == {"type": "error", "error": {"type": "api_error", "message": "boom"}}


def test_responses_text_format_is_response_format() -> None:
    fmt = {"type": "json_schema", "name": "n", "schema": {"type": "object"}, "strict": True}
    conv = responses.to_neutral({"model": "m", "input": "x", "text": {"format": fmt}})
    assert conv.body["response_format"] == {
        "type": "json_schema",
        "json_schema": {"name": "n", "schema": {"type": "object"}, "strict": True},
    }
    conv = responses.to_neutral({"model": "m", "input": "x", "prompt_cache_key": "conv-1"})
    assert conv.body["user"] == "conv-1" and "response_format" not in conv.body


FIXTURES = Path(__file__).resolve().parent.parent / "fixtures"


def fixture(name: str) -> dict:
    return json.loads((FIXTURES / name).read_text())["body"]


def test_claude_code_mid_conversation_system_message_is_kept() -> None:
    """Claude Code 2.1.197's first request: a `role: "system"` message after the task."""
    raw = fixture("claude_code_2.1.197_first_request.json")
    conv = anthropic.to_neutral(raw)
    roles = [m["role"] for m in conv.body["messages"]]
    assert roles == ["system", "user", "system"]
    assert conv.body["messages"][2]["content"] == raw["messages"][1]["content"]
    # Untouched, it goes back natively exactly as the client sent it.
    assert anthropic.from_view(conv.body["messages"], conv)["messages"] == raw["messages"]


def test_fold_carries_a_late_system_message_in_the_next_user_turn() -> None:
    view = [
        {"role": "system", "content": "S"},
        {"role": "user", "content": "task"},
        {"role": "assistant", "content": "ok"},
        {"role": "system", "content": "Today is Friday."},
        {"role": "user", "content": "go on"},
    ]
    folded = reminders.fold(view)
    assert [m["role"] for m in folded] == ["system", "user", "assistant", "user"]
    assert folded[3]["content"] == (
        "<system-reminder>\nToday is Friday.\n</system-reminder>\n\ngo on"
    )
    assert view[3] == {"role": "system", "content": "Today is Friday."}  # input unchanged


def test_fold_with_no_user_turn_after() -> None:
    """After the last turn, or between a tool result and the next call: onto the turn before,
    else a user turn of its own; never dropped, and tool calls stay paired."""
    call = {"id": "c1", "type": "function", "function": {"name": "ls", "arguments": "{}"}}
    view = [
        {"role": "user", "content": [{"type": "text", "text": "task"}]},
        {"role": "system", "content": "R1"},
        {"role": "assistant", "content": None, "tool_calls": [call]},
        {"role": "tool", "tool_call_id": "c1", "content": "a.py"},
        {"role": "developer", "content": "R2"},
        {"role": "assistant", "content": "done"},
        {"role": "system", "content": "R3"},
    ]
    folded = reminders.fold(view)
    assert [m["role"] for m in folded] == ["user", "assistant", "tool", "assistant", "user"]
    assert folded[0]["content"][-1]["text"].endswith("R1\n</system-reminder>")
    assert folded[2]["content"].startswith("a.py\n\n<system-reminder>\nR2")
    assert "R3" in folded[4]["content"]
    assert not pairing_faults(folded)


def test_fold_joins_leading_system_messages_into_one() -> None:
    """Codex opens with two developer messages; a strict template takes only one."""
    conv = responses.to_neutral(fixture("codex_0.171.0_first_request.json"))
    folded = reminders.fold(conv.body["messages"])
    assert [m["role"] for m in folded] == ["system", "user", "user"]
    assert "<skills_instructions>" in folded[0]["content"]
    assert reminders.fold(folded) == folded  # nothing left to fold


APPLY_PATCH = {  # a freeform tool, in the shape Codex offers apply_patch to models that take it
    "type": "custom",
    "name": "apply_patch",
    "description": "Edit files with a patch.",
    "format": {"type": "grammar", "syntax": "lark", "definition": 'start: "*** Begin Patch"'},
}


def codex_request() -> dict:
    raw = fixture("codex_0.171.0_first_request.json")
    return {**raw, "tools": [*raw["tools"], APPLY_PATCH]}


def test_codex_tools_translated_and_server_tools_noted() -> None:
    conv = responses.to_neutral(codex_request())
    names = [t["function"]["name"] for t in conv.body["tools"]]
    assert names == [
        "exec_command",
        "view_image",
        "multi_agent_v1__spawn_agent",
        "multi_agent_v1__wait_agent",
        "apply_patch",
    ]
    forced = {"type": "function", "name": "wait_agent", "namespace": "multi_agent_v1"}
    choice = tools.responses_tool_choice(forced)
    assert choice == {"type": "function", "function": {"name": "multi_agent_v1__wait_agent"}}
    patch = conv.body["tools"][-1]["function"]
    assert patch["parameters"]["required"] == ["input"]
    assert 'start: "*** Begin Patch"' in patch["description"]
    assert conv.body[toolnames.REMOVED_KEY] == [
        {"type": "web_search", "name": None, "reason": tools.SERVER_TOOL}
    ]


def _chat_call(name: str, arguments: str) -> dict:
    return {"id": "call_9", "type": "function", "function": {"name": name, "arguments": arguments}}


def test_codex_answer_calls_come_back_in_its_own_form() -> None:
    conv = responses.to_neutral(codex_request())
    calls = [
        _chat_call("multi_agent_v1__spawn_agent", '{"message": "look"}'),
        _chat_call("apply_patch", '{"input": "*** Begin Patch\\n*** End Patch"}'),
        _chat_call("exec_command", '{"cmd": "ls"}'),
    ]
    message = {"role": "assistant", "content": None, "tool_calls": calls}
    answer = responses.from_completion({"choices": [{"message": message}]}, "m", conv)
    spawn, patch, ls = answer["output"]
    assert (spawn["type"], spawn["name"], spawn["namespace"]) == (
        "function_call",
        "spawn_agent",
        "multi_agent_v1",
    )
    assert spawn["arguments"] == '{"message": "look"}'
    assert (patch["type"], patch["name"]) == ("custom_tool_call", "apply_patch")
    assert patch["input"] == "*** Begin Patch\n*** End Patch"
    assert ls["type"] == "function_call" and "namespace" not in ls


def test_codex_history_of_namespaced_and_custom_calls() -> None:
    """Sent back as history they become the same chat calls; rebuilt after compaction, the
    client's own items again."""
    raw = codex_request()
    raw["input"] = [
        *raw["input"],
        {"type": "function_call", "call_id": "c1", "name": "spawn_agent",
         "namespace": "multi_agent_v1", "arguments": "{}"},
        {"type": "function_call_output", "call_id": "c1", "output": "agent 7"},
        {"type": "custom_tool_call", "call_id": "c2", "name": "apply_patch", "input": "P"},
        {"type": "custom_tool_call_output", "call_id": "c2", "output": "Done"},
    ]  # fmt: skip
    conv = responses.to_neutral(raw)
    view = conv.body["messages"]
    assert view[-4]["tool_calls"][0]["function"]["name"] == "multi_agent_v1__spawn_agent"
    assert view[-2]["tool_calls"][0]["function"]["arguments"] == '{"input": "P"}'
    changed = [*view[:-4], *({**m, "x": 1} for m in view[-4:])]  # as if compaction had
    rebuilt = responses.from_view(changed, conv)["input"][-4:]
    assert [i["type"] for i in rebuilt] == [
        "function_call",
        "function_call_output",
        "custom_tool_call",
        "custom_tool_call_output",
    ]
    assert rebuilt[0]["namespace"] == "multi_agent_v1" and rebuilt[2]["input"] == "P"


def test_codex_streamed_calls_in_its_own_form() -> None:
    conv = responses.to_neutral(codex_request())
    args = '{"input": "*** Begin Patch"}'
    deltas = [
        {"tool_calls": [{"index": 0, "id": "c1", "function": {"name": "apply_patch"}}]},
        {"tool_calls": [{"index": 0, "function": {"arguments": args[:9]}}]},
        {"tool_calls": [{"index": 0, "function": {"arguments": args[9:]}}]},
        {"tool_calls": [{"index": 1, "id": "c2",
                         "function": {"name": "multi_agent_v1__wait_agent", "arguments": "{}"}}]},
    ]  # fmt: skip
    parts = [sse({"choices": [{"index": 0, "delta": d}]}) for d in deltas]
    parts.append(sse({"choices": [{"index": 0, "delta": {}, "finish_reason": "tool_calls"}]}))
    stream = responses_stream.translate(chunks([*parts, b"data: [DONE]\n\n"]), "m", 0, conv)
    events = asyncio.run(collect(stream))
    kinds = [e["type"] for e in events]
    assert "response.custom_tool_call_input.done" in kinds
    final = events[-1]["response"]
    patch, wait = final["output"]
    assert patch == {**patch, "type": "custom_tool_call", "input": "*** Begin Patch"}
    assert "arguments" not in patch
    assert (wait["type"], wait["name"], wait["namespace"]) == (
        "function_call",
        "wait_agent",
        "multi_agent_v1",
    )


def test_anthropic_server_tools_noted() -> None:
    raw = {
        "model": "m",
        "messages": [{"role": "user", "content": "hi"}],
        "tools": [WEB_SEARCH, {"name": "Bash", "input_schema": {"type": "object"}}],
    }
    conv = anthropic.to_neutral(raw)
    assert [t["function"]["name"] for t in conv.body["tools"]] == ["Bash"]
    assert conv.body[toolnames.REMOVED_KEY] == [
        {"type": "web_search_20250305", "name": "web_search", "reason": tools.SERVER_TOOL}
    ]


WEB_SEARCH = {"type": "web_search_20250305", "name": "web_search", "max_uses": 3}


def test_a_reminder_between_a_call_and_its_result_waits_for_the_result() -> None:
    """A tool result must follow its call: the reminder goes after the call's results."""
    call = {"id": "c1", "type": "function", "function": {"name": "f", "arguments": "{}"}}
    view = [
        {"role": "system", "content": "S"},
        {"role": "user", "content": "go"},
        {"role": "assistant", "content": None, "tool_calls": [call]},
        {"role": "developer", "content": "Mind the budget."},
        {"role": "tool", "tool_call_id": "c1", "content": "out"},
        {"role": "assistant", "content": "done"},
    ]
    folded = reminders.fold(view)
    assert [m["role"] for m in folded] == ["system", "user", "assistant", "tool", "assistant"]
    assert folded[3]["content"].startswith("out") and "Mind the budget." in folded[3]["content"]


def test_a_translated_answer_has_the_bytes_json_response_gives_it() -> None:
    from starlette.responses import JSONResponse

    from proxy.exchange.wire import _json_response

    text = "".join(chr(i) for i in range(0x800)) + "\u2028\U0001f600"
    answers = [
        {"output": [{"text": text}], "tools": [{"n": [1, -2, True, None, 2**63, -(2**63)]}]},
        {"temperature": 0.7, "top_p": 1e-05, "big": 1e16},  # floats: the standard encoder's
        {"id": 2**70},  # past 64 bits
    ]
    for answer in answers:
        ours = _json_response(answer, 200, {"x-a": "b"})
        theirs = JSONResponse(answer, 200, {"x-a": "b"})
        assert ours.body == theirs.body and ours.raw_headers == theirs.raw_headers
    with pytest.raises(UnicodeEncodeError):  # a lone surrogate, refused as before
        _json_response({"text": "\ud800"}, 200, {})
