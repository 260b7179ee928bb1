"""PrefixMemo: a resent history's values are reused, and always equal a fresh computation."""

from __future__ import annotations

from typing import Any

from hypothesis import given
from hypothesis import strategies as st

from strategies.budget import CacheBudget
from strategies.messages import message_hash
from strategies.prefix import PrefixMemo


def hashed(memo: PrefixMemo[str], messages: list[dict[str, Any]], seen: list[int]) -> list[str]:
    def extend(known: list[str]) -> list[str]:
        seen.append(len(messages) - len(known))
        return [message_hash(m) for m in messages[len(known) :]]

    return memo.values(messages, extend)


def msg(i: int, content: Any = None) -> dict[str, Any]:
    return {"role": "user" if i % 2 else "assistant", "content": content or f"m{i}"}


def test_a_history_that_grew_computes_only_its_tail() -> None:
    memo: PrefixMemo[str] = PrefixMemo("test")
    seen: list[int] = []
    history = [msg(i) for i in range(50)]
    hashed(memo, history, seen)
    grown = [*history, msg(50), msg(51)]
    assert hashed(memo, grown, seen) == [message_hash(m) for m in grown]
    assert seen == [50, 2]


def test_a_retry_reuses_all_but_its_last_message() -> None:
    memo: PrefixMemo[str] = PrefixMemo("test")
    seen: list[int] = []
    history = [msg(i) for i in range(20)]
    hashed(memo, history, seen)
    retry = [*history[:-1], msg(19, "again")]
    assert hashed(memo, retry, seen) == [message_hash(m) for m in retry]
    assert seen == [20, 1]


def test_equal_but_differently_typed_values_are_not_confused() -> None:
    memo: PrefixMemo[str] = PrefixMemo("test")
    seen: list[int] = []
    ints = [msg(0), {"role": "user", "content": "x", "n": 1}, msg(2)]
    floats = [msg(0), {"role": "user", "content": "x", "n": 1.0}, msg(2)]
    hashed(memo, ints, seen)
    assert hashed(memo, floats, seen) == [message_hash(m) for m in floats]
    assert seen == [3, 2]


def test_the_memo_stays_within_its_bytes() -> None:
    budget = CacheBudget(40_000)
    memo: PrefixMemo[str] = PrefixMemo("test", budget=budget)
    for n in range(200):
        hashed(memo, [msg(i, f"session {n} " * 20) for i in range(3)], [])
    assert 0 < budget.used <= 40_000
    assert len(memo._index) <= 3 * len(memo._known)  # an evicted list's keys go with it


VALUES = st.one_of(st.integers(-3, 3), st.floats(allow_nan=False), st.text(max_size=3))
MESSAGES = st.lists(st.dictionaries(st.sampled_from(["role", "content", "n"]), VALUES), max_size=6)


@given(st.lists(MESSAGES, min_size=1, max_size=6))
def test_values_always_equal_a_fresh_computation(histories: list[list[dict[str, Any]]]) -> None:
    memo: PrefixMemo[str] = PrefixMemo("test", budget=CacheBudget(2_000))
    base: list[dict[str, Any]] = []
    for more in histories:
        base = [*base[: len(base) // 2], *more]  # grown, rewound or edited
        assert hashed(memo, base, []) == [message_hash(m) for m in base]
