"""Any valid history in: a valid request within budget out, or the typed overflow error."""

from __future__ import annotations

import copy
import json
import operator
import re

from hypothesis import HealthCheck, Phase, event, example, given, settings
from hypothesis import strategies as st

from proxy.compile.tokens import TokenCounter
from proxy.compile.view import RECALL_ROOM, compile_request
from proxy.errors import ContextLengthExceeded
from proxy.exchange import rounds
from proxy.recall import tool as recall
from proxy.settings import CompactionSettings
from strategies import ledger
from strategies.calls import calls_by_id, is_viewing
from strategies.context import Context
from strategies.forms import folded_output, folded_user, skeleton
from strategies.invariants import final_turn, kept_in_latest, pairing_problems
from strategies.lineage import Lineage
from strategies.messages import PROMPT_ROLES, canonical_json, iterations, recall_ref
from strategies.pipeline import request_points
from strategies.state import ViewState
from strategies.traceback import elided
from strategies.working_set import is_error_output, working_set

COUNTER = TokenCounter()
# Tokens beyond what must stay that a view may still hold at the deepest level below the last
# resort (the working set folded to its evidence, the forget marker, a step kept for roles).
SLACK = 2500
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
    ["traceback", "tiered", "forget"],
    ["traceback", "tiered"],
    ["tiered"],
    ["fold", "tiered"],
    ["sliding_window"],
    ["traceback", "fold", "sliding_window"],
    ["none"],
]


def most_compact(msgs: list[dict]) -> int:
    """A lower bound of what cannot go: the prompts and the latest turn's assistant message as
    sent, and the task, the latest user message and the latest turn's tool outputs at their
    smallest (evidence) forms."""
    last = final_turn(msgs)
    users = [i for i, m in enumerate(msgs) if m.get("role") == "user"]
    keep = {i for i, m in enumerate(msgs) if m.get("role") in PROMPT_ROLES}
    keep |= set(users[:1] + users[-1:]) | set(range(len(msgs) - last, len(msgs)))

    def smallest(msg: dict) -> int:
        forms = [
            msg,
            elided(msg, "run", min_chars=0, head=10, tail=10),
            folded_output(msg, "run", keep_evidence=True),
            folded_output(msg, "run"),
            folded_user(msg, min_chars=0),
            skeleton(msg),
        ]
        return min(COUNTER.count_message(f) for f in forms if f is not None)

    def least(i: int) -> int:
        # The latest turn's assistant message stays as sent (kept_in_latest): no skeleton.
        if i >= len(msgs) - last and msgs[i].get("role") == "assistant":
            return COUNTER.count_message(msgs[i])
        return smallest(msgs[i])

    total = sum(least(i) for i in sorted(keep))
    if len(users) > 1 and users[-1] > users[0] + 1 and msgs[users[0] + 1]["role"] != "user":
        # Roles keep alternating as sent: one step between the task and the latest user
        # message stays, whatever it costs.
        iters = iterations(msgs)
        steps: dict[int, int] = {}
        for i in range(users[0] + 1, users[-1]):
            steps[iters[i]] = steps.get(iters[i], 0) + smallest(msgs[i])
        total += min(steps.values())
    return total


def _calls(n: int, k: int, cmd: str, depth: int) -> dict:
    args = json.dumps({"cmd": cmd, "path": "src/" + "d/" * depth})
    function = {"name": "run", "arguments": args}
    calls = [{"id": f"call_{n}_{i}", "type": "function", "function": function} for i in range(k)]
    return {"role": "assistant", "content": None, "tool_calls": calls}


def _out(n: int, k: int, content: object) -> dict:
    return {"role": "tool", "tool_call_id": f"call_{n}_{k}", "content": content}


IMAGE = {"type": "image_url", "image_url": {"url": "data:image/png;base64,AAAA"}}
SEE = {"role": "user", "content": [{"type": "text", "text": "see"}, IMAGE]}
PART = "読み込み失敗 None 连接数据库 🙂 error é"
LINES = (
    "00008660024000040006000500009070060016000030010000080996000000040806002000000280"
    "40000479034000009070900720080000908605240000000000006000000000000086000600007000"
    "00400607440000006953090002070041000000008660005001018000200020200001070013900308"
    "6004090081886114664892032441476982269232512221178018459062772610519"
)  # the log's words, as indexes into WORDS
# Found by this test: a large latest user message (an image) leaves room for one cheap step
# between it and the task; forget brought back the oldest step (300 tokens) instead of the
# cheapest (a 16-token answer) and the turn was refused.
IMAGE_AFTER_STEPS = [
    {"role": "user", "content": "task"},
    _calls(0, 3, " ".join(["error"] * 5), 52),
    _out(0, 0, "error error"),
    _out(0, 1, "error"),
    _out(0, 2, "error" * 5711),
    {"role": "assistant", "content": " ".join(["error"] * 12)},
    SEE,
    _calls(3, 1, "", 56),
    _out(3, 0, ""),
    _calls(4, 3, "", 59),
    _out(4, 0, "error error error error"),
    _out(4, 2, "\n".join([f"{WORDS[int(k)]} step {i}" for i, k in enumerate(LINES)] + [TRACE])),
    _out(4, 1, [{"type": "text", "text": PART}, {"type": "text", "text": "更多"}]),
    SEE,
    _calls(6, 1, "", 56),
    _out(6, 0, "データ" * 500),
]


@settings(max_examples=120, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@example(
    msgs=IMAGE_AFTER_STEPS, window=1500, pipeline=["traceback", "tiered", "forget"], keep_recent=0
)
@given(
    msgs=history(),
    window=st.integers(1500, 40_000),
    pipeline=st.sampled_from(PIPELINES),
    keep_recent=st.integers(0, 3),
)
def test_any_session_compiles_turn_by_turn_to_valid_requests_within_budget(
    msgs, window, pipeline, keep_recent
):
    settings_ = CompactionSettings(
        pipeline=pipeline,
        tiered={"keep_recent": keep_recent},
        fold={"keep_recent": keep_recent},
        forget={"keep_recent": keep_recent},
        sliding_window={"keep_recent": keep_recent},
    )
    prior, previous = None, None
    for end in request_points(msgs)[1:]:
        sent = msgs[:end]
        body = {"messages": sent, "max_tokens": 256}
        frozen = copy.deepcopy(body)
        try:
            result = compile_request(
                body, window=window, settings=settings_, counter=COUNTER, prior=prior
            )
        except ContextLengthExceeded as exc:
            assert exc.needed > exc.budget and body == frozen
            if pipeline == ["traceback", "tiered", "forget"]:  # the default
                # Never refused while the prompts, task and latest turn fit in their most
                # compact form (the marker needs a little room too).
                assert most_compact(sent) + 3 > exc.budget - 200, (most_compact(sent), exc)
            event("overflow")
            return
        assert body == frozen  # input never mutated
        view = result.messages
        assert result.tokens_compiled <= result.budget
        assert COUNTER.count_messages(view) <= result.budget
        assert not pairing_problems(view)
        k = final_turn(sent)
        latest = zip(view[len(view) - k :], sent[len(sent) - k :], strict=True)
        assert all(kept_in_latest(c, o) for c, o in latest)
        if sent[0]["role"] in PROMPT_ROLES:
            assert view[0] == sent[0]
        for a, b in zip(view, view[1:], strict=False):
            # no two user (or assistant) messages in a row unless the client sent them so
            if a["role"] == b["role"] and a["role"] in ("user", "assistant"):
                assert any(
                    x["role"] == y["role"] == a["role"]
                    for x, y in zip(sent, sent[1:], strict=False)
                )
        fired = [e for e in result.events if not e.replayed]
        if previous is not None and not fired:
            assert view[: len(previous)] == previous  # what was sent stays as it was sent
        # The same request again from the same stored state, by a fresh process: same bytes.
        again = compile_request(
            body, window=window, settings=settings_, counter=TokenCounter(), prior=prior
        )
        assert canonical_json(again.messages) == canonical_json(view)
        event("compacted" if fired else "unchanged")
        prior, previous = result.state, view


def must_stay_raw(msgs: list[dict]) -> int:
    """What no step below the last resort cuts, as sent: prompts, task, latest user message
    and the latest turn."""
    last = final_turn(msgs)
    users = [i for i, m in enumerate(msgs) if m.get("role") == "user"]
    keep = {i for i, m in enumerate(msgs) if m.get("role") in PROMPT_ROLES}
    keep |= set(users[:1] + users[-1:]) | set(range(len(msgs) - last, len(msgs)))
    return sum(COUNTER.count_message(msgs[i]) for i in keep)


@settings(max_examples=80, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(msgs=history(), window=st.integers(3000, 40_000))
def test_a_step_leaves_room_for_a_recalled_excerpt(msgs, window):
    """With the recall tool offered, a view holding folds always leaves a recalled excerpt
    room (no call is told "no room"), unless what must stay, as sent, nearly fills the
    budget."""
    settings_ = CompactionSettings()
    prior = None
    for end in request_points(msgs)[1:]:
        body = recall.with_tool({"messages": msgs[:end], "max_tokens": 256})
        try:
            result = compile_request(
                body, window=window, settings=settings_, counter=COUNTER, prior=prior
            )
        except ContextLengthExceeded:
            return
        prior = result.state
        slack = result.budget - must_stay_raw(msgs[:end]) - RECALL_ROOM
        if rounds.folded(result) and slack > SLACK:
            assert (rounds.room_left(result) or 0) >= rounds.USEFUL_ROOM, slack
            event("offered with folds")


# --- what compaction keeps, by what it is --------------------------------------------------

SAYINGS = [
    "Never touch the prod database.",
    "The port is 5433.",
    "The port is now 6432.",
    "Keep modules under 300 lines.",
    "How does this work?",
    "I prefer tabs.",
    "thanks",
    "データベースのポートは 5433 です。",
    "Our goal is v2 by May 3.",
    "x" * 700,  # a paste
]


@st.composite
def chat(draw) -> list[dict]:
    msgs: list[dict] = [{"role": "user", "content": "task"}]
    for n in range(draw(st.integers(1, 40))):
        said = " ".join(draw(st.lists(st.sampled_from(SAYINGS), min_size=1, max_size=3)))
        msgs.append({"role": "assistant", "content": draw(text) + f" answer {n} " + "w " * 60})
        msgs.append({"role": "user", "content": said})
    return msgs


@settings(max_examples=40, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(msgs=chat(), forgotten=st.data(), cap=st.integers(0, 3000))
def test_the_ledger_never_grows_past_its_cap(msgs, forgotten, cap):
    picked = forgotten.draw(st.sets(st.integers(1, len(msgs) - 1)))
    carried = ledger.render(msgs, sorted(picked), cap)
    assert len(carried) <= cap
    assert carried == ledger.render(copy.deepcopy(msgs), sorted(picked), cap)  # same bytes


@settings(
    max_examples=25,
    deadline=None,
    suppress_health_check=[HealthCheck.too_slow],
    phases=[Phase.explicit, Phase.reuse, Phase.generate],  # shrinking a session takes minutes
)
@given(msgs=chat(), window=st.integers(1500, 6000))
def test_user_messages_are_never_forgotten_only_counted_when_no_room_is_left(msgs, window):
    """Each user message's text (or its fold) is in the view, or the ledger counts it as left
    out for room; never silently gone."""
    settings_ = CompactionSettings()
    prior = None
    for end in request_points(msgs):
        body = {"messages": msgs[:end]}
        result = compile_request(
            body, window=window, settings=settings_, counter=COUNTER, prior=prior
        )
        prior = result.state
    seen = " ".join(" ".join(str(m.get("content")) for m in result.messages).split())
    absent = [i for i, m in enumerate(msgs) if m["role"] == "user" and not _carried(msgs, i, seen)]
    left = re.search(r"\((\d+) shortened or left out for room", seen)
    if left is None and ledger.HEADING not in seen:
        # No room for any ledger (the budget is full): the marker still counts them.
        left = re.search(r"User messages among them: (\d+)", seen)
    assert len(absent) <= (int(left.group(1)) if left else 0), [msgs[i] for i in absent]


def _carried(msgs: list[dict], i: int, seen: str) -> bool:
    """The message whole, or as the ledger carries it (relays as pointers), or folded (its
    recall pointer)."""
    carried = ledger.entries(msgs, [i])
    users = [j for j in range(i, len(msgs)) if msgs[j]["role"] == "user"]
    if not carried or all(e.index != i for e in ledger.entries(msgs, users)):
        return True  # nothing in it to carry, or a later message says the same
    forms = [msgs[i]["content"], recall_ref(msgs[i])]
    forms += [e.text for e in carried]
    return any(" ".join(f.split()) in seen for f in forms)


COMMANDS = [
    ("bash", "cat app.log"), ("bash", "grep -rn ERROR src"), ("bash", "sed -n 1,9p x.py"),
    ("bash", "git diff"), ("Read", "x.py"), ("Grep", "FAILED"),
    ("bash", "python -m pytest"), ("bash", "python run.py"), ("bash", "make"),
]  # fmt: skip
OUTPUTS = [
    TRACE,
    "FAILED tests/test_a.py::test_x - AssertionError\n=== 1 failed in 0.1s ===",
    "2024 ERROR worker lost\nFATAL: stop",
    "all good",
    "Process exited with code 1",
]


@settings(max_examples=80, deadline=None)
@given(steps=st.lists(st.tuples(st.sampled_from(COMMANDS), st.sampled_from(OUTPUTS)), max_size=12))
def test_the_working_set_is_never_a_content_viewing_output(steps):
    msgs: list[dict] = [{"role": "user", "content": "task"}]
    for n, ((name, arg), out) in enumerate(steps):
        args = json.dumps({"command": arg} if name == "bash" else {"path": arg})
        call = {"id": f"c{n}", "type": "function", "function": {"name": name, "arguments": args}}
        msgs += [
            {"role": "assistant", "content": None, "tool_calls": [call]},
            {"role": "tool", "tool_call_id": f"c{n}", "content": out},
        ]
    context = Context(4000, 2000, COUNTER.count_message, lineage=Lineage(msgs))
    calls = calls_by_id(msgs)
    for i in working_set(msgs, context):
        assert not is_viewing(calls[msgs[i]["tool_call_id"]])
    ran = [
        i
        for i, m in enumerate(msgs)
        if m["role"] == "tool"
        and not is_viewing(calls[m["tool_call_id"]])
        and is_error_output(m["content"])
    ]
    if ran:  # the newest run that failed is held, whatever was read after it
        assert ran[-1] in working_set(msgs, context)


@settings(max_examples=80, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(msgs=history(), window=st.integers(1500, 40_000))
def test_a_turn_that_compacts_nothing_keeps_the_state_a_pass_over_its_view_makes(msgs, window):
    prior = None
    for end in request_points(msgs)[1:]:
        sent = msgs[:end]
        body = {"messages": sent, "max_tokens": 256}
        try:
            result = compile_request(
                body, window=window, settings=CompactionSettings(), counter=COUNTER, prior=prior
            )
        except ContextLengthExceeded:
            return
        state = result.state
        if prior is not None and not [e for e in result.events if not e.replayed]:
            lineage = Lineage(sent)
            view = prior.restore(sent, lineage) + sent[prior.covered :]
            assert all(map(operator.is_, view, result.messages))
            captured = ViewState.capture(
                len(sent), view, lineage, state.carried, state.view_tokens, state.original_tokens
            )
            assert state == captured and state.forms == captured.forms
            event("appended to a compacted view" if prior.forms else "appended")
        prior = state
