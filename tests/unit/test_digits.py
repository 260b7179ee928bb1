"""A long body that continues one parsed before: an integer past 64 bits in its new bytes, or
across the bytes it shares with the earlier body, is still read exactly."""

from __future__ import annotations

import json

from hypothesis import given, settings
from hypothesis import strategies as st

from proxy import sizes
from proxy.formats import digits
from proxy.formats.chat import parse_json

BIG = 2**70 + 12345


def body(messages: list[dict], **more: object) -> bytes:
    return json.dumps({"model": "m", "messages": messages, **more}).encode()


def history(n: int, tag: str) -> list[dict]:
    return [{"role": "user", "content": f"{tag} message {i} " + "x" * 400} for i in range(n)]


def test_a_big_integer_in_a_new_turn_of_a_known_history_stays_exact() -> None:
    old = history(300, "exact")
    assert len(body(old)) > sizes.MEMO_FROM_BYTES
    assert parse_json(body(old))["messages"] == old
    new = [*old, {"role": "user", "content": "next", "n": BIG}]
    assert parse_json(body(new))["messages"][-1]["n"] == BIG


def test_a_big_integer_after_the_messages_stays_exact() -> None:
    old = history(300, "after")
    parse_json(body(old, user="u"))
    assert parse_json(body(old, user="u", seed=BIG))["seed"] == BIG


def test_a_run_of_digits_across_what_two_bodies_share_is_found() -> None:
    # The two bodies share their bytes up to an 18-digit number, which the new one extends to
    # 20 digits, where a whole CHUNK of shared bytes ends.
    head = b'{"model": "m", "messages": [{"role": "user", "content": "'
    tail = b'"}], "seed": 999999999999999999'
    pad = -(len(head) + len(tail)) % digits.CHUNK + 4 * digits.CHUNK
    prefix = head + b"y" * pad + tail
    assert len(prefix) % digits.CHUNK == 0
    assert parse_json(prefix + b"}")["seed"] == 10**18 - 1
    assert parse_json(prefix + b"99}")["seed"] == 10**20 - 1  # past 64 bits


def test_shared_prefix_is_a_prefix_both_hold() -> None:
    a = b"a" * 50_000 + b"b" + b"c" * 10
    b = b"a" * 50_000 + b"X"
    n = digits.shared_prefix(a, b)
    assert a[:n] == b[:n] and 50_000 - digits.CHUNK < n <= 50_000


@settings(max_examples=30, deadline=None)
@given(st.lists(st.integers(0, 10**25), min_size=1, max_size=4), st.integers(0, 3))
def test_numbers_read_as_the_standard_parser_reads_them(numbers: list[int], cut: int) -> None:
    base = history(200, "prop")
    for i, n in enumerate(numbers):
        grown = [*base[: len(base) - cut], {"role": "user", "content": str(i), "n": n}]
        raw = body(grown)
        assert parse_json(raw) == json.loads(raw)
        base = grown
