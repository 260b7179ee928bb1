"""The fast message hash is message_hash exactly: every stored history keeps its addresses."""

from __future__ import annotations

from typing import Any

from hypothesis import given, settings
from hypothesis import strategies as st

from proxy.store.digest import fast_message_hash
from strategies.messages import message_hash

scalars = (
    st.none()
    | st.booleans()
    | st.integers(min_value=-(2**70), max_value=2**70)
    | st.floats(allow_nan=False, allow_infinity=False)
    | st.text()  # lone surrogates included
)
values = st.recursive(
    scalars,
    lambda inner: st.lists(inner, max_size=4) | st.dictionaries(st.text(), inner, max_size=4),
    max_leaves=20,
)


@settings(max_examples=300)
@given(st.dictionaries(st.text(), values, max_size=6))
def test_the_same_hex_digest_as_message_hash(msg: dict[str, Any]) -> None:
    assert fast_message_hash(msg) == message_hash(msg)
    assert fast_message_hash(msg) == message_hash(msg)  # seen before: from the cache


def test_floats_written_otherwise_by_orjson_still_agree() -> None:
    for number in (1e16, 1e-7, 1.0, -0.0, 123456789.125, 1e300):
        msg = {"role": "tool", "content": "x", "score": number, "list": [number, {"n": number}]}
        assert fast_message_hash(msg) == message_hash(msg)
    deep: Any = "leaf"
    for _ in range(300):
        deep = [deep]
    assert fast_message_hash({"content": deep}) == message_hash({"content": deep})
