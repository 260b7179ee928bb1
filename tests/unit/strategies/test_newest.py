"""The newest output never leaves whole: bigger than the room, it is cut to fit, keeping its
head, its tail, the lines the conversation names, JSON's shape, and the ref to the rest."""

from __future__ import annotations

import dataclasses
import json

from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from strategies import invariants
from strategies.context import FORGET_ANY
from strategies.fit import named_lines, names_in
from strategies.forget import forget
from strategies.messages import original_ref
from tests.unit.strategies.helpers import COUNTER, ctx
from tests.unit.strategies.test_pipeline import plan, run

SYSTEM = {"role": "system", "content": "You are an operations agent."}
HEAD = "next_page_token: pg_5c1e9a77d2"
NAMED = "-rw-r--r-- 1 etl etl  612733 Nov 14 09:12 invoices-2026-q3-final.parquet"
ASK = "What size is invoices-2026-q3-final.parquet? Then fetch the next page."
WORDS = ("alpha", "ledger", "orders", "stock", "vendor", "audit", "region", "backup", "events")


def listing(n: int = 800) -> str:
    lines = [HEAD, "total 1875204"]
    for i in range(n):
        a, b = WORDS[i % len(WORDS)], WORDS[(i * 5) % len(WORDS)]
        lines.append(
            f"-rw-r--r-- 1 etl etl {i * 7919 % 900_000:>7} Nov {i % 28 + 1:>2} {a}-{b}-{i}.pq"
        )
    lines[n // 2] = NAMED
    return "\n".join([*lines, f"{n} files"])


def call(cid: str, name: str, **args: str) -> dict:
    fn = {"name": name, "arguments": json.dumps(args)}
    return {"role": "assistant", "content": None,
            "tool_calls": [{"id": cid, "type": "function", "function": fn}]}  # fmt: skip


def pending(output: str, ask: str = ASK) -> list[dict]:
    """The output is the last message: the pending call's result, the user's words before."""
    return [
        SYSTEM,
        {"role": "user", "content": ask},
        call("c1", "bash", command="ls -l /mnt/exports"),
        {"role": "tool", "tool_call_id": "c1", "content": output},
    ]


def asked(output: str, ask: str = ASK) -> list[dict]:
    """The agent answered, and the user then asks about a value in the output."""
    first = pending(output, "Audit the export bucket and report what is there.")
    done = {"role": "assistant", "content": "I have the listing."}
    return [*first, done, {"role": "user", "content": ask}]


def used(view: list[dict]) -> int:
    return sum(COUNTER.count_message(m) for m in view) + 3  # as plan's measure counts


def view_of(history: list[dict], budget: int) -> list[dict]:
    view = run(history, plan(budget)).view
    invariants.check_valid(history, view)
    assert used(view) <= budget
    return view


def output_in(view: list[dict]) -> str:
    return next(m["content"] for m in view if m.get("role") == "tool")


def test_an_output_over_the_room_keeps_head_tail_named_line_and_ref() -> None:
    history = pending(listing())
    assert COUNTER.count_messages(history) > 2 * 4_000
    view = view_of(history, 4_000)
    out = output_in(view)
    assert HEAD in out and NAMED in out and out.rstrip().endswith("800 files")
    assert original_ref(history[-1]) in out  # the rest can be recalled
    assert used(view) >= 0.9 * 4_000  # the room is used


def test_an_output_the_next_question_is_about_is_not_forgotten_whole() -> None:
    history = asked(listing())
    view = view_of(history, 4_000)
    out = output_in(view)
    assert HEAD in out and NAMED in out and original_ref(history[3]) in out
    assert view[-1] == history[-1]


def orders() -> str:
    rows = [
        {"order": f"ORD-{50000 + i * 37}", "amount": round(10 + i * 7.31 % 300, 2),
         "payment": f"pay_{i * 2654435761 % 16**10:010x}"}
        for i in range(90)
    ]  # fmt: skip
    rows[45] = {"order": "ORD-58213", "amount": 49.99, "payment": "pay_9f3b2d71ce"}
    return json.dumps({"export_id": "exp_7781c0", "count": 90, "orders": rows}, indent=1)


def test_a_json_output_stays_json_with_its_leading_fields_and_the_named_record() -> None:
    history = pending(orders(), "Refund the order ORD-58213 from today's export.")
    view = view_of(history, 1_500)
    value = json.loads(output_in(view))  # still valid JSON
    assert list(value)[:3] == ["export_id", "count", "orders"]
    assert value["export_id"] == "exp_7781c0"
    assert {"order": "ORD-58213", "amount": 49.99, "payment": "pay_9f3b2d71ce"} in value["orders"]
    assert value["orders"][0]["order"] == "ORD-50000"  # the shape: the leading item
    assert original_ref(history[-1]) in output_in(view)


def test_a_json_output_of_one_long_text_field_fills_its_room() -> None:
    """BFCL's car status: {"metadata": <6k chars of text>, "fuelLevel": 10.0}. The search for
    the longest form stopped at two fields' width, so the text was cut to 48 characters and
    the output used under a tenth of its room."""
    text = " ".join(f"Feature {i}: {WORDS[i % len(WORDS)]} ok;" for i in range(600))
    output = json.dumps({"metadata": text, "fuelLevel": 10.0})
    history = pending(output, "How much fuel is left?")
    view = view_of(history, 1_500)
    value = json.loads(output_in(view))  # still valid JSON
    assert value["fuelLevel"] == 10.0 and len(value["metadata"]) > 2_000
    assert used(view) >= 0.9 * 1_500


def test_an_output_that_fits_comes_back_whole() -> None:
    small = listing(40)
    history = asked(small)
    budget = COUNTER.count_messages(history) + 200
    assert output_in(view_of(history, budget)) == small


def test_names_are_values_and_rare_words_not_every_word() -> None:
    names = names_in([ASK])
    assert "invoices-2026-q3-final.parquet" in names
    lines = listing().split("\n")
    assert named_lines(lines, names)[0] == lines.index(NAMED)
    assert all("etl" not in n for n in names)


@settings(max_examples=25, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(
    st.integers(100, 1_500),
    st.integers(800, 6_000),
    st.booleans(),
    st.booleans(),
)
def test_any_oversized_newest_output_gives_a_valid_view_within_budget_same_bytes(
    lines: int, budget: int, as_json: bool, question_after: bool
) -> None:
    output = orders() if as_json else listing(lines)
    history = (asked if question_after else pending)(output)
    first = view_of(history, budget)
    assert json.dumps(first) == json.dumps(view_of(history, budget))  # deterministic
    out = output_in(first)
    if as_json and out.lstrip().startswith("{"):
        json.loads(out)
    if out != output:
        assert original_ref(history[3]) in out


def test_a_marker_that_meets_the_question_goes_before_it() -> None:
    """The question stays the last thing the model reads: the marker leads its message."""
    question = "So which of the two plans should we take?"
    history = [
        SYSTEM,
        {"role": "user", "content": "Help me plan the storage migration."},
        {"role": "assistant", "content": "Happy to help. What are the options?"},
        {"role": "user", "content": "Plan A moves all at once; plan B goes bucket by bucket."},
        {"role": "assistant", "content": "Here is a long comparison. " + "Details follow. " * 300},
        {"role": "user", "content": question},
    ]
    step = ctx(history, budget=800, pressure=FORGET_ANY)
    view, _ = forget(history, step)
    invariants.check_valid(history, view)
    assert history[4] not in view  # the answer before the question was forgotten
    latest = view[-1]["content"]
    assert latest.startswith("[ctxproxy: ") and latest.endswith(f"\n\n{question}")


def test_a_question_after_the_cut_brings_the_line_it_names_turn_by_turn() -> None:
    """The output was cut on the turn it came (the user had named nothing in it yet); the
    question that follows, fitting without a firing, names a line in its middle, and that
    line is in the next view, the output no larger than before."""
    history = asked(listing())
    before = run(history[:-2], dataclasses.replace(plan(4_000), excerpt=256))
    cut = output_in(before.view)
    assert NAMED not in cut and HEAD in cut
    after = run(history, dataclasses.replace(plan(4_200), excerpt=256), prior=before.state)
    # No pipeline firing (the question fit): only the cut made again, recorded as such.
    assert [e.strategy for e in after.events if not e.replayed] == ["cut"]
    invariants.check_valid(history, after.view)
    now = output_in(after.view)
    assert NAMED in now and HEAD in now
    assert COUNTER.count_message(after.view[3]) <= COUNTER.count_message(before.view[3])
