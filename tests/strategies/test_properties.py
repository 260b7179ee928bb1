"""Any valid history in: a valid request within budget out, or the typed overflow error."""

from __future__ import annotations

import copy
import json

from hypothesis import HealthCheck, event, given, settings
from hypothesis import strategies as st

from proxy.compiler import compile_request
from proxy.errors import ContextLengthExceeded
from proxy.settings import CompactionSettings
from proxy.tokens import TokenCounter
from strategies.base import PROMPT_ROLES, canonical_json
from strategies.invariants import final_turn, kept_in_latest, pairing_problems
from strategies.replay import REPLAYS

COUNTER = TokenCounter()
WORDS = [
    "error",
    "ok",
    "読み込み失敗",
    "连接数据库",
    "データ",
    "None",
    "é",
    "🙂",
    "at frame",
    "x" * 30,
]
TRACE = "Traceback (most recent call last):\n  File \"a.py\", line 1, in <module>\nKeyError: 'k'"

text = st.lists(st.sampled_from(WORDS), min_size=0, max_size=12).map(" ".join)


@st.composite
def output(draw) -> str | None | list:
    kind = draw(st.sampled_from(["short", "huge", "log", "cjk", "parts", "null"]))
    if kind == "short":
        return draw(text)
    if kind == "huge":  # one enormous line, like minified JSON or a binary dump
        return draw(st.sampled_from(WORDS)) * draw(st.integers(500, 8000))
    if kind == "log":
        n = draw(st.integers(50, 600))
        lines = [f"{draw(st.sampled_from(WORDS))} step {i}" for i in range(n)]
        return "\n".join(lines + ([TRACE] if draw(st.booleans()) else []))
    if kind == "cjk":
        return "\n".join(["数据库连接失败，正在重试"] * draw(st.integers(1, 400)))
    if kind == "parts":
        return [{"type": "text", "text": draw(text)}, {"type": "text", "text": "更多"}]
    return None


@st.composite
def tool_turn(draw, n: int) -> list[dict]:
    ids = [f"call_{n}_{k}" for k in range(draw(st.integers(1, 3)))]  # parallel calls
    args = json.dumps({"cmd": draw(text), "path": "src/" + "d/" * draw(st.integers(0, 60))})
    assistant = {
        "role": "assistant",
        "content": draw(st.one_of(st.none(), text)),
        "tool_calls": [
            {"id": i, "type": "function", "function": {"name": "run", "arguments": args}}
            for i in ids
        ],
    }
    order = draw(st.permutations(ids))
    return [assistant] + [
        {"role": "tool", "tool_call_id": i, "content": draw(output())} for i in order
    ]


@st.composite
def history(draw) -> list[dict]:
    msgs: list[dict] = []
    if draw(st.booleans()):
        msgs.append({"role": draw(st.sampled_from(sorted(PROMPT_ROLES))), "content": draw(text)})
    msgs.append({"role": "user", "content": draw(text) or "task"})
    for n in range(draw(st.integers(0, 14))):
        step = draw(st.sampled_from(["tools", "tools", "tools", "user", "answer"]))
        if step == "tools":
            msgs += draw(tool_turn(n))
        elif step == "user":
            image = {"type": "image_url", "image_url": {"url": "data:image/png;base64,AAAA"}}
            content = draw(st.one_of(text, st.just([{"type": "text", "text": "see"}, image])))
            msgs.append({"role": "user", "content": content})
        elif msgs[-1]["role"] != "assistant":
            msgs.append({"role": "assistant", "content": draw(text) or "done"})
    if msgs[-1]["role"] == "assistant":
        msgs.append({"role": "user", "content": "continue"})
    return msgs


PIPELINES = [
    ["traceback", "tiered"],
    ["tiered"],
    ["fold", "tiered"],
    ["sliding_window"],
    ["traceback", "fold", "sliding_window"],
    ["none"],
]


@settings(max_examples=120, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(
    msgs=history(),
    window=st.integers(1500, 40_000),
    pipeline=st.sampled_from(PIPELINES),
    keep_recent=st.integers(0, 3),
)
def test_any_history_compiles_to_a_valid_request_within_budget(msgs, window, pipeline, keep_recent):
    settings_ = CompactionSettings(
        pipeline=pipeline,
        tiered={"keep_recent": keep_recent},
        fold={"keep_recent": keep_recent},
        sliding_window={"keep_recent": keep_recent},
    )
    body = {"messages": msgs, "max_tokens": 256}
    frozen = copy.deepcopy(body)
    try:
        result = compile_request(body, window=window, settings=settings_, counter=COUNTER)
    except ContextLengthExceeded as exc:
        assert exc.needed > exc.budget
        assert body == frozen
        event("overflow")
        return
    event("compacted" if result.events else "unchanged")
    assert body == frozen  # input never mutated
    view = result.messages
    assert result.tokens_compiled <= result.budget
    assert COUNTER.count_messages(view) <= result.budget
    assert not pairing_problems(view)
    k = final_turn(msgs)
    # The latest turn as sent; only a tool output may be elided, as the last resort.
    latest = zip(view[len(view) - k :], msgs[len(msgs) - k :], strict=True)
    assert all(kept_in_latest(c, o) for c, o in latest)
    if msgs[0]["role"] in PROMPT_ROLES:
        assert view[0] == msgs[0]
    assert (result.events == []) == (view == msgs)
    REPLAYS.clear()  # the second compile replays from scratch instead of resuming
    again = compile_request(body, window=window, settings=settings_, counter=TokenCounter())
    assert canonical_json(again.messages) == canonical_json(view)  # deterministic
