"""dense: older outputs of JSON records kept as tables (every value, a third to a half of the
tokens) where a history does not fit, so a value the next call needs from an earlier search
is still in the view; the table is lossless, names its original and is the same each time."""

from __future__ import annotations

import json
import random

from proxy.compile.tokens import TokenCounter
from proxy.compile.view import compile_request
from proxy.settings import CompactionSettings
from strategies.dense import dense_output
from strategies.forms import folded_output
from strategies.invariants import check_valid
from strategies.messages import canonical_json

COUNTER = TokenCounter()


def searches(steps: int = 14, seed: int = 0) -> tuple[list[dict], list[str]]:
    """Pages of flight records; the next call needs the cheapest of two middle pages."""
    rng = random.Random(seed)
    msgs: list[dict] = [
        {"role": "system", "content": "You are a helpful assistant."},
        {"role": "user", "content": "Book me the cheapest morning flight to Lisbon."},
    ]
    wanted = []
    for k in range(steps):
        rows = [
            {"flight": f"TP{rng.randint(1000, 9999)}", "departs": f"0{rng.randint(6, 9)}:15",
             "price_eur": rng.randint(80, 600), "seats": rng.randint(0, 9)}
            for _ in range(25)
        ]  # fmt: skip
        fn = {"name": "search_flights", "arguments": json.dumps({"page": k})}
        msgs += [
            {"role": "assistant", "content": None,
             "tool_calls": [{"id": f"c{k}", "type": "function", "function": fn}]},
            {"role": "tool", "tool_call_id": f"c{k}", "content": json.dumps(rows)},
        ]  # fmt: skip
        if k in (steps // 3, steps // 2):
            wanted.append(min(rows, key=lambda r: r["price_eur"])["flight"])
    msgs += [
        {"role": "assistant", "content": "I have the search results; booking now."},
        {"role": "user", "content": "Go ahead with the one you found cheapest."},
    ]
    return msgs, wanted


def one_shot(msgs: list[dict], window: int):
    s = CompactionSettings(reserve_tokens=0, safety_margin=0, headroom=0.0)
    return compile_request({"messages": msgs}, window=window, settings=s, counter=COUNTER)


def test_values_of_earlier_searches_stay_in_a_view_of_half_the_history():
    msgs, wanted = searches()
    result = one_shot(msgs, COUNTER.count_messages(msgs) // 2)
    text = canonical_json(result.messages)
    assert all(w in text for w in wanted)  # before: neither (their pages truncated or folded)
    assert result.tokens_compiled <= result.budget
    check_valid(msgs, result.messages)
    assert canonical_json(one_shot(msgs, result.budget).messages) == text


def test_a_table_keeps_every_value_and_names_the_original():
    rows = [{"id": f"A{i}", "name": "x, y" if i == 2 else "plain", "n": i, "ok": i % 2 == 0,
             "note": "7" if i == 3 else None} for i in range(6)]  # fmt: skip
    msg = {"role": "tool", "tool_call_id": "c1", "content": json.dumps(rows, indent=1)}
    table = dense_output(msg, "list")
    assert table is not None
    text = table["content"]
    assert "ctxproxy_recall original: /messages/" in text
    lines = text.split("\n")[1:]
    assert lines[0] == "id,name,n,ok,note"
    assert lines[1:4] == ["A0,plain,0,true,null", "A1,plain,1,false,null", 'A2,"x, y",2,true,null']
    assert lines[4] == 'A3,plain,3,false,"7"'  # a string that reads as a number is quoted
    assert len(text) < len(msg["content"])


def test_outputs_that_are_not_records_have_no_table():
    for content in ("plain text", json.dumps([1, 2, 3, 4, 5]), json.dumps({"a": 1}),
                    json.dumps([{"a": 1}] * 3)):  # fmt: skip
        assert dense_output({"role": "tool", "tool_call_id": "c", "content": content}, "t") is None


def test_at_a_quarter_the_newest_search_makes_room_for_an_earlier_one_as_a_table():
    msgs, wanted = searches()
    result = one_shot(msgs, COUNTER.count_messages(msgs) // 4)
    text = canonical_json(result.messages)
    assert wanted[-1] in text  # before: the page holding it was cut to its leading records
    assert result.tokens_compiled >= 0.9 * result.budget
    check_valid(msgs, result.messages)


def test_a_folded_json_result_keeps_its_leading_fields():
    """BFCL's route: {"distance": 980.0, "intermediaryCities": [3,000 names]} folded by a light
    step kept no word of its result, and the next call needed the distance."""
    result = {
        "distance": 980.0,
        "unit": "km",
        "intermediaryCities": [f"Town {i}" for i in range(3000)],
    }
    msg = {"role": "tool", "tool_call_id": "c1", "content": json.dumps(result)}
    folded = folded_output(msg, "estimate_distance", keep_evidence=True)
    assert folded is not None
    assert '{"distance":980.0,"unit":"km"}' in folded["content"]
    assert "leading fields kept" in folded["content"] and "/messages/" in folded["content"]
    assert len(folded["content"]) < 300
