"""Session identity: header, path, body, then fingerprint."""

from __future__ import annotations

import pytest

from proxy.errors import BadRequest
from proxy.sessions.identify import identify

SYS = {"role": "system", "content": "be brief"}
TASK = {"role": "user", "content": "fix the bug"}


def test_order_of_sources() -> None:
    body = {"messages": [SYS, TASK], "user": "u1", "metadata": {"session_id": "m1"}}
    assert (identify("h1", "p1", body).id, identify("h1", "p1", body).source) == ("h1", "header")
    assert identify(None, "p1", body).source == "path"
    assert identify(None, None, body).id == "m1"
    assert identify(None, None, {**body, "metadata": None}).id == "u1"
    assert identify(None, None, {"messages": [SYS, TASK]}).source == "fingerprint"


def test_fingerprint_follows_the_leading_messages() -> None:
    turn1 = identify(None, None, {"messages": [SYS, TASK]})
    turn5 = identify(
        None,
        None,
        {
            "messages": [
                SYS,
                TASK,
                {"role": "assistant", "content": "ok"},
                {"role": "user", "content": "more"},
            ]
        },
    )
    other = identify(None, None, {"messages": [SYS, {"role": "user", "content": "other"}]})
    assert turn1 == turn5 and turn1.id.startswith("fp-")
    assert other != turn1


def test_bad_header_id_is_400_odd_user_is_hashed() -> None:
    with pytest.raises(BadRequest):
        identify("has space", None, {"messages": [TASK]})
    key = identify(None, None, {"messages": [TASK], "user": "Jane Doe <jane@x>"})
    assert key.source == "body" and key.id.startswith("u-")


def test_a_system_message_later_in_the_history_does_not_move_the_session() -> None:
    """Only the leading system prompt names a fingerprint session: a reminder mid-way may change."""
    answer = {"role": "assistant", "content": "ok"}

    def turn(reminder: str) -> dict:
        note = {"role": "system", "content": reminder}
        return {"messages": [SYS, TASK, answer, note, {"role": "user", "content": "go on"}]}

    first, second = identify(None, None, turn("3 files")), identify(None, None, turn("4 files"))
    assert first == second == identify(None, None, {"messages": [SYS, TASK]})
    other = identify(None, None, {"messages": [{"role": "system", "content": "be long"}, TASK]})
    assert other != first
