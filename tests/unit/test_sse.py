"""Assembling a streamed answer from SSE bytes split at arbitrary points."""

from __future__ import annotations

import json

from hypothesis import given
from hypothesis import strategies as st

from proxy.testing.scripted import chunk, sse

STREAM = b"".join(
    [
        sse(chunk("m", {"role": "assistant", "content": ""})),
        sse(chunk("m", {"content": "Hel"})),
        sse(chunk("m", {"content": "lo ✓"})),
        sse(
            chunk(
                "m",
                {
                    "tool_calls": [
                        {
                            "index": 0,
                            "id": "c1",
                            "type": "function",
                            "function": {"name": "ls", "arguments": '{"p'},
                        }
                    ]
                },
            )
        ),
        sse(chunk("m", {"tool_calls": [{"index": 0, "function": {"arguments": 'ath": "/"}'}}]})),
        sse(
            chunk(
                "m",
                {
                    "tool_calls": [
                        {
                            "index": 1,
                            "id": "c2",
                            "type": "function",
                            "function": {"name": "pwd", "arguments": "{}"},
                        }
                    ]
                },
            )
        ),
        sse(chunk("m", {}, finish="tool_calls")),
        sse({"choices": [], "usage": {"prompt_tokens": 9, "completion_tokens": 3}}),
        b"data: [DONE]\n\n",
    ]
)


@given(st.lists(st.integers(0, len(STREAM)), max_size=12))
def test_split_anywhere_same_answer(cuts: list[int]) -> None:
    from proxy.formats.chat_stream import StreamAssembler

    asm = StreamAssembler()
    points = [0, *sorted(cuts), len(STREAM)]
    for a, b in zip(points, points[1:], strict=False):
        asm.feed(STREAM[a:b])
    assert asm.done and asm.finish_reason == "tool_calls"
    assert asm.usage == {"prompt_tokens": 9, "completion_tokens": 3}
    msg = asm.message()
    assert msg["content"] == "Hello ✓"
    assert [
        (c["id"], c["function"]["name"], json.loads(c["function"]["arguments"]))
        for c in msg["tool_calls"]
    ] == [("c1", "ls", {"path": "/"}), ("c2", "pwd", {})]


def test_cut_off_stream_is_not_done() -> None:
    from proxy.formats.chat_stream import StreamAssembler

    asm = StreamAssembler()
    asm.feed(STREAM[: len(STREAM) // 2])
    assert not asm.done and asm.message()["content"] == "Hello ✓"
