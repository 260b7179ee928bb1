"""The user's words stay: forgotten user messages and the statements the session depends on are
carried verbatim in the forget marker's ledger, newest value first, within a cap."""

from __future__ import annotations

import json
import re

from proxy.exchange.compile import compile_request
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


def test_statements_are_told_by_form_and_speaker():
    assert ledger.kind_of(RULE, "user") == "rule"
    assert ledger.kind_of("Do not commit to the release-2024 branch.", "user") == "rule"
    assert ledger.kind_of("Keep every module under 300 lines.", "user") == "rule"
    assert ledger.kind_of("The staging database port is 5433.", "user") == "fact"
    assert ledger.kind_of("I prefer tabs over spaces.", "user") == "preference"
    assert ledger.kind_of("Our goal is to ship invoices by March 14.", "user") == "goal"
    assert ledger.kind_of("Invoice numbers must be at most 12 characters.", "user") == "rule"
    # A question, chit-chat and a fact with no value are not statements.
    assert ledger.kind_of("Should we never use floats here?", "user") is None
    assert ledger.kind_of("Thanks, that was helpful.", "user") is None
    assert ledger.kind_of("The weather is nice.", "user") is None
    # An assistant's "never" is not the user's rule; its decision with a value is kept.
    assert ledger.kind_of("Never mind, I will look again.", "assistant") is None
    assert ledger.kind_of("I'll use decimal.Decimal for amounts.", "assistant") == "decision"


def test_the_newest_value_of_a_fact_wins():
    raw = [
        {"role": "user", "content": "task"},
        {"role": "user", "content": "The staging port is 5433. How do I connect?"},
        {"role": "user", "content": "Update: the staging port is now 6432."},
    ]
    carried = ledger.render(raw, [1, 2], 10_000)
    assert "6432" in carried and "5433" not in carried
    assert "How do I connect?" in carried  # the rest of the user's message stays


def test_a_setting_read_from_a_config_file_is_carried_not_any_output_line():
    call = {
        "id": "c1",
        "type": "function",
        "function": {"name": "bash", "arguments": '{"command": "cat config/app.toml"}'},
    }
    run = {
        "id": "c2",
        "type": "function",
        "function": {"name": "bash", "arguments": '{"command": "python job.py"}'},
    }
    raw = [
        {"role": "user", "content": "task"},
        {"role": "assistant", "content": None, "tool_calls": [call, run]},
        {"role": "tool", "tool_call_id": "c1", "content": "[db]\nmax_retries = 7\n"},
        {"role": "tool", "tool_call_id": "c2", "content": "elapsed: 3.2s\nrows = 10"},
    ]  # fmt: skip
    carried = ledger.render(raw, [1, 2, 3], 10_000)
    assert "max_retries = 7" in carried and "rows = 10" not in carried


def test_over_the_cap_chat_leaves_first_then_the_least_binding():
    raw = [{"role": "user", "content": "task"}]
    raw += [{"role": "user", "content": f"How do I do thing {i}?"} for i in range(40)]
    raw += [{"role": "user", "content": RULE}]
    forgotten = list(range(1, len(raw)))
    carried = ledger.render(raw, forgotten, 300)
    assert len(carried) <= 300 and RULE in carried
    assert "left out for room" in carried


def test_every_user_message_survives_a_long_chat_and_the_rule_after_the_task_too():
    msgs = chat({0: RULE, 20: "The staging port is 5433.", 45: "The staging port is now 6432."})
    for window in (1536, 2048):
        view = turn_by_turn(msgs, window)
        seen = text(view)
        assert RULE in seen and "6432" in seen, window
        assert COUNTER.count_messages(view) <= window
    # With room for them all (a larger ledger share), every user message, verbatim; with the
    # default share, the questions leave first and the ledger says how many.
    view = turn_by_turn(msgs, 4096, ledger_share=0.45)
    seen = " ".join(text(view).split())
    assert "earlier messages" in seen  # turns were forgotten
    users = [m["content"] for m in msgs if m["role"] == "user"]
    assert all(u in seen for u in users if "5433" not in u)
    view = turn_by_turn(msgs, 2560)
    seen = " ".join(text(view).split())
    missing = [u for u in users if u not in seen and "5433" not in u]
    assert missing and all(u.startswith("How should") for u in missing)
    left = re.search(r"\((\d+) left out for room\)", seen)
    assert left and int(left.group(1)) >= len(missing)  # every absent one is counted


def test_the_ledger_is_the_same_bytes_on_every_render():
    msgs = chat({0: RULE, 10: "The staging port is 5433."})
    forgotten = list(range(3, 40))
    assert ledger.render(msgs, forgotten, 800) == ledger.render(list(msgs), forgotten, 800)


def test_only_the_users_later_word_overrides_what_the_user_said() -> None:
    raw = [
        {"role": "user", "content": "The prod database is db-2. This is v3 of the API."},
        {"role": "assistant", "content": "This is `pytest` output: the prod database is up (3ms)."},
        {"role": "user", "content": "Go on."},
    ]
    carried = ledger.render(raw, [0, 1], 400, lambda text: len(text) // 4)
    assert "The prod database is db-2." in carried and "This is v3 of the API." in carried


def test_a_huge_answer_is_read_in_linear_time() -> None:
    """A dash run that made the concrete-value pattern rescan from every position (26 s)."""
    import time

    raw = [
        {"role": "user", "content": "Fix it."},
        {"role": "assistant", "content": "The result is " + "-" * 40_000},
    ]
    started = time.perf_counter()
    ledger.newest_keys(raw, {})
    assert time.perf_counter() - started < 2
