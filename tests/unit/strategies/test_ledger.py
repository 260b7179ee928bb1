"""The user's words stay: forgotten user messages and the statements the session depends on are
carried verbatim in the forget marker's ledger, newest value first, within a cap."""

from __future__ import annotations

import json
import re

import pytest

from proxy.compile.view import compile_request
from proxy.settings import CompactionSettings
from strategies import ledger
from strategies.pipeline import request_points
from tests.unit.strategies.helpers import COUNTER

FILLER = (
    "Here is one way to approach it. Keep the boundaries between modules explicit, validate "
    "inputs where they enter, and push side effects to the edges of the system. "
) * 4
RULE = "Never run database migrations against the production cluster."


def chat(statements: dict[int, str], turns: int = 60) -> list[dict]:
    msgs = [
        {"role": "system", "content": "You help on a billing service."},
        {"role": "user", "content": "We are building invoicing in Python. Help me along."},
        {"role": "assistant", "content": FILLER},
    ]
    for t in range(turns):
        said = statements.get(t)
        question = f"How should module {t} be structured?"
        msgs.append({"role": "user", "content": f"{said} {question}" if said else question})
        msgs.append({"role": "assistant", "content": FILLER + f"(answer {t})"})
    msgs.append({"role": "user", "content": "Summarise what we agreed."})
    return msgs


def turn_by_turn(msgs: list[dict], window: int, **forget: float) -> list[dict]:
    settings, prior, view = CompactionSettings(forget=forget), None, []
    for end in request_points(msgs):
        body = {"messages": json.loads(json.dumps(msgs[:end]))}
        c = compile_request(body, window=window, settings=settings, counter=COUNTER, prior=prior)
        prior, view = c.state, c.messages
    return view


def text(view: list[dict]) -> str:
    return "\n".join(str(m.get("content")) for m in view)


def test_the_least_informative_leave_first_by_generic_features():
    raw = [{"role": "user", "content": "task"}]
    raw += [{"role": "user", "content": f"Thanks, that makes sense {i}."} for i in range(15)]
    raw += [{"role": "user", "content": f"How would you name module {i}?"} for i in range(15)]
    kept = [
        RULE,
        "The staging port is 5433 and the host is db-stage.internal.",
        "Invoice numbers must be at most 12 characters.",
        "I prefer type hints on every function.",
    ]
    raw += [{"role": "user", "content": k} for k in kept]
    carried = ledger.render(raw, list(range(1, len(raw))), 400)
    assert len(carried) <= 400 and all(k in carried for k in kept), carried
    assert "left out for room" in carried  # the small talk and questions left: counted
    whole = [m["content"] for m in raw[1:] if f"\n{m['content']}\n" in carried + "\n"]
    assert len(raw) - 1 - len(whole) == int(re.search(r"\((\d+) shortened", carried)[1])


def test_every_user_message_verbatim_while_room_allows_duplicates_once():
    said = ["The port is 5433.", "How do I connect?", "thanks", "The port is 5433.", "Ok!"]
    raw = [{"role": "user", "content": "task"}, *({"role": "user", "content": t} for t in said)]
    carried = ledger.render(raw, list(range(1, len(raw))), 10_000)
    assert all(f"\n{t}" in carried for t in said) and "left out" not in carried
    assert carried.count("The port is 5433.") == 1  # an exact duplicate once
    near = "the port is 5433"  # the same words and values, another form: near duplicate
    raw.append({"role": "user", "content": near})
    assert ledger.render(raw, list(range(1, len(raw))), 10_000).count("5433") == 1
    raw.append({"role": "user", "content": "The port is now 6432."})  # a new value is not one
    carried = ledger.render(raw, list(range(1, len(raw))), 10_000)
    assert "5433" in carried and carried.index("5433") < carried.index("6432")


def test_nothing_a_tool_wrote_is_carried():
    call = {
        "id": "c1",
        "type": "function",
        "function": {"name": "bash", "arguments": '{"command": "cat config/app.toml"}'},
    }
    raw = [
        {"role": "user", "content": "task"},
        {"role": "assistant", "content": "max_retries = 9 it is.", "tool_calls": [call]},
        {"role": "tool", "tool_call_id": "c1", "content": "[db]\nmax_retries = 7\n"},
    ]  # fmt: skip
    assert ledger.render(raw, [1, 2], 10_000) == ""


def test_output_relayed_in_a_user_message_is_a_pointer_not_text():
    log = "\n".join(
        f"2024-05-0{i} 10:00:0{i} WARN disk {80 + i}% full on /dev/sda{i}" for i in range(6)
    )
    for message in (
        f"The job died again, see:\n```\n{log}\n```\nPlease keep retries at 3.",
        f"Output of `tail /var/log/job.log`:\n{log}",
        f"Observation: {log}",
        f"Here it is\n\n{log}\n\nPlease keep retries at 3.",
    ):
        raw = [{"role": "user", "content": "task"}, {"role": "user", "content": message}]
        carried = ledger.render(raw, [1], 10_000)
        assert "[relayed " in carried and "chars, not carried" in carried, message
        assert "/dev/sda" not in carried and "WARN" not in carried, carried
        assert "retries at 3" in carried or "keep retries" not in message


def test_a_firing_fills_the_view_to_its_target():
    """Words are left out for room only when the view has reached its target."""
    msgs = chat({0: RULE, 20: "The staging port is 5433."}, turns=40)
    for share in (0.05, 0.3):
        settings = CompactionSettings(forget={"ledger_share": share})
        prior, c = None, None
        for end in request_points(msgs):
            body = {"messages": json.loads(json.dumps(msgs[:end]))}
            c = compile_request(body, window=4096, settings=settings, counter=COUNTER, prior=prior)
            prior = c.state
        assert c is not None
        seen = " ".join(text(c.messages).split())
        assert "earlier messages" in seen
        if "left out for room" in seen:
            assert c.budget and COUNTER.count_messages(c.messages) >= c.budget // 2 - 40, share


def test_every_user_message_survives_a_long_chat_and_the_rule_after_the_task_too():
    msgs = chat({0: RULE, 20: "The staging port is 5433.", 45: "The staging port is now 6432."})
    for window in (1536, 2048):
        view = turn_by_turn(msgs, window)
        seen = text(view)
        assert RULE in seen and "6432" in seen, window
        assert COUNTER.count_messages(view) <= window
    view = turn_by_turn(msgs, 2560)
    seen = " ".join(text(view).split())
    users = [m["content"] for m in msgs if m["role"] == "user"]
    missing = [u for u in users if u not in seen]
    # Only questions left: whole, or from a message whose statement stays.
    assert all(u.split(" How should")[0] in seen or u.startswith("How") for u in missing)
    left = re.search(r"\((\d+) shortened or left out for room", seen)
    assert not missing or (left and int(left.group(1)) >= len(missing))  # each absent is counted


def test_the_ledger_is_the_same_bytes_on_every_render():
    msgs = chat({0: RULE, 10: "The staging port is 5433."})
    forgotten = list(range(3, 40))
    assert ledger.render(msgs, forgotten, 800) == ledger.render(list(msgs), forgotten, 800)


def test_a_huge_message_is_read_in_linear_time() -> None:
    import time

    raw = [
        {"role": "user", "content": "Fix it."},
        {"role": "user", "content": "The result is " + "-" * 40_000 + " a" * 20_000},
    ]
    started = time.perf_counter()
    ledger.render(raw, [1], 500)
    assert time.perf_counter() - started < 2


def test_thousands_of_forgotten_messages_are_compared_a_bounded_number_of_times(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    # Each message is compared with at most NEAR_COMPARED later ones that share its values, not
    # with every later one: 3,000 forgotten turns once took minutes to render.
    calls = 0
    near = ledger._near

    def counted(a: ledger.Entry, b: ledger.Entry) -> bool:
        nonlocal calls
        calls += 1
        return near(a, b)

    monkeypatch.setattr(ledger, "_near", counted)
    said = [
        f"try the other branch of the loop, variant {'abcdefghij'[i % 10]} now" for i in range(3000)
    ]
    raw = [{"role": "user", "content": t} for t in said]
    carried = ledger.render(raw, list(range(len(raw))), 2_000)
    assert 0 < calls <= len(raw) * ledger.NEAR_COMPARED
    assert "variant" in carried


def test_a_near_duplicate_among_many_messages_is_carried_once() -> None:
    filler = [f"step {i}: look at module m{i}.py next" for i in range(500)]
    said = ["Never push to main; use PR 4711.", *filler, "never push to main, use PR 4711"]
    raw = [{"role": "user", "content": t} for t in said]
    carried = ledger.render(raw, list(range(len(raw))), 100_000)
    assert carried.count("4711") == 1 and "never push to main, use PR 4711" in carried


def test_statements_with_a_value_a_quantity_a_date_or_a_name_outlast_small_talk() -> None:
    """A user's statement that carries a value (an amount, a quantity or a time in words, a
    name) stays before small talk, however plainly it is phrased."""
    said = [
        "The total amount was around, oh, let's say $49.99",
        "It was posted three days ago.",
        "I have 3 kids.",
        "My flight to Lisbon leaves on Friday.",
    ]
    talk = [
        "Thanks, that makes sense.",
        "Oh nice, I did not know that!",
        "Haha, fair enough.",
        "Right, I see what you mean.",
        "Okay, sounds good to me.",
        "Wow, that is helpful.",
    ]
    raw = [{"role": "user", "content": "Let's talk about my week."}]
    raw += [{"role": "user", "content": f"{a} {b}"} for a in talk for b in talk if a != b]
    raw[10:10] = [{"role": "user", "content": s} for s in said]
    carried = ledger.render(raw, list(range(1, len(raw))), 320)
    assert "left out for room" in carried
    assert all(s in carried for s in said), carried


LEADS = ["For the record:", "Just so you know,", "Please remember that", "I decided that"]


def test_short_of_room_each_statement_keeps_the_clause_with_its_value() -> None:
    """Where whole statements do not all fit, the lead-ins and tails the user repeats go first,
    marked "…", so that every value stays, verbatim, and the heading says words were cut."""
    said = [
        f"{LEADS[i % 4]} the locker code number {i} is {1000 + 37 * i}"
        + (", and that is final." if i % 3 == 0 else ".")
        for i in range(40)
    ]
    raw = [{"role": "user", "content": "task"}, *({"role": "user", "content": t} for t in said)]
    forgotten = list(range(1, len(raw)))
    whole = ledger.render(raw, forgotten, 100_000)
    carried = ledger.render(raw, forgotten, len(whole) * 4 // 5)
    assert len(carried) <= len(whole) * 4 // 5
    assert all(f"number {i} is {1000 + 37 * i}" in carried for i in range(40)), carried
    assert "shortened or left out for room, … marks a cut" in carried
    lines = carried.split("\n")[1:]
    assert any(line.startswith("… the locker code") for line in lines)
    assert any(line.endswith(" …") for line in lines)
    for line in lines:  # what is kept of a statement is its own words, in one piece
        kept = line.strip("… ")
        assert "…" not in kept and any(kept in s for s in said), line


def test_the_ledger_uses_the_room_it_is_given_before_it_shortens_anything() -> None:
    said = [f"{LEADS[i % 4]} the locker code number {i} is {1000 + 37 * i}." for i in range(40)]
    raw = [{"role": "user", "content": "task"}, *({"role": "user", "content": t} for t in said)]
    forgotten = list(range(1, len(raw)))
    whole = ledger.render(raw, forgotten, 100_000)
    assert ledger.render(raw, forgotten, len(whole)) == whole
    assert "left out" not in whole and "…" not in whole


def test_a_relay_pointer_is_carried_whole_or_not_at_all() -> None:
    log = "\n".join(f"2024-05-0{i} WARN disk {80 + i}% full" for i in range(6))
    said = [f"Job {i} died, see:\n```\n{log}\n```\nKeep retries at {i}." for i in range(30)]
    raw = [{"role": "user", "content": "task"}, *({"role": "user", "content": t} for t in said)]
    carried = ledger.render(raw, list(range(1, len(raw))), 1500)
    assert "left out for room" in carried
    for line in carried.split("\n")[1:]:
        assert ("[relayed " in line) == ("recall ref" in line), line
        assert all(f"retries at {i}." in carried for i in range(10, 30))
