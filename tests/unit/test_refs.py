"""The refs a view can name, read as the strategies write them: each parses to what it names."""

from __future__ import annotations

import pytest

from proxy.errors import BadRequest
from proxy.recall import refs
from strategies.forget import marker_text
from strategies.ledger import relay_pointer
from strategies.messages import message_hash, recall_ref


def turns(n: int) -> list[dict]:
    return [
        {"role": "user" if i % 2 == 0 else "assistant", "content": f"message {i}"} for i in range(n)
    ]


def test_the_forget_markers_spans_are_named_refs_and_an_elided_span_is_not() -> None:
    raw = turns(60)
    forgotten = [1, 2, 3, 5, 9, 10, 14, 20, 21, 22, 30, 41, 42]  # 8 spans: the marker elides some
    text = marker_text(raw, forgotten, 2000)
    named = refs.named_in(text)
    assert "history positions 1-3, 5, 9-10, …, 30, 41-42." in text
    assert named == ["history:1-3", "history:30", "history:41-42", "history:5", "history:9-10"]
    assert [refs.parse(r) for r in ["history:1-3", "history:30"]] == [
        refs.Ref(None, 1, 3),
        refs.Ref(None, 30, 30),
    ]


def test_placeholder_and_ledger_refs_name_the_message_by_its_hash() -> None:
    msg = {"role": "tool", "tool_call_id": "c1", "content": "x" * 5000}
    placeholder = f"[Truncated — 4,000 chars removed; {recall_ref(msg)}]"
    pointer = relay_pointer("pasted block", ["a", "b"], recall_ref(msg))
    for text in (placeholder, pointer):
        (named,) = refs.named_in(text)
        assert refs.parse(named) == refs.Ref(message_hash(msg)[:16])


@pytest.mark.parametrize(
    "text,ref",
    [
        ("/messages/ABCDEF0123456789", refs.Ref("abcdef0123456789")),
        ("messages/abcdef0123456789", refs.Ref("abcdef0123456789")),  # as a URL path carries it
        ("abcdef012345", refs.Ref("abcdef012345")),
        (" history:12 ", refs.Ref(None, 12, 12)),
        ("history:9-3", refs.Ref(None, 3, 9)),
        ("history:3 - 9", refs.Ref(None, 3, 9)),  # as a model may write it in a recall call
        ("/messages/abcdef01", refs.Ref("abcdef01")),  # the shortest prefix recall takes
        ("history:0-" + "9" * 100, refs.Ref(None, 0, refs.BEYOND)),  # past any end
    ],
)
def test_every_form_parses(text: str, ref: refs.Ref) -> None:
    assert refs.parse(text) == ref


@pytest.mark.parametrize(
    "text",
    [
        "",
        "history:",
        "history:x",
        "/messages/abc",
        "history:1-2-3",
        "a" * 50_000,
    ],
)
def test_anything_else_is_a_400_that_shows_the_forms_and_little_of_the_input(text: str) -> None:
    with pytest.raises(BadRequest) as caught:
        refs.parse(text)
    assert "history:<n>" in caught.value.message and len(caught.value.message) < 300
