"""The viewer's account of one firing: what left the view beside what stands for it now."""

from __future__ import annotations

from proxy.ui.firing import firing
from strategies.messages import message_hash

S = {"role": "system", "content": "be brief"}
U1 = {"role": "user", "content": "run the tests"}
A1 = {"role": "assistant", "content": "3 failed: test_tax, test_totals, test_invoice"}
U2 = {"role": "user", "content": "fix test_tax"}
A2 = {"role": "assistant", "content": "fixed the rounding in tax.py"}
U3 = {"role": "user", "content": "now the others"}


def test_a_fold_shows_the_messages_it_took_beside_its_marker() -> None:
    before = [S, U1, A1, U2]
    now = [S, U1, A1, U2, A2, U3]
    marker = {
        "role": "user",
        "content": f"[Earlier turns folded: 3 failed … original: /messages/{message_hash(A1)}]",
    }
    f = firing((before, before), now, [S, U1, marker, A2, U3])
    assert f is not None
    assert [(m.index, m.ref) for m in f.left] == [(2, message_hash(A1)), (3, message_hash(U2))]
    assert "test_tax" in f.left[0].text
    assert [c.text for c in f.carried] == [marker["content"]]


def test_nothing_to_show_without_a_change_or_on_another_branch() -> None:
    before = [S, U1]
    assert firing((before, before), [S, U1, A1], [S, U1, A1]) is None
    assert firing(([S, U2], [S, U2]), [S, U1, A1], [S, A1]) is None  # not a prefix
