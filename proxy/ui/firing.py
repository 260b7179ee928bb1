"""What one firing changed, readable: the messages that left the view since the branch's
previous request (with the ref ctxproxy_recall finds them by) beside what the markers and
compacted forms that replaced them carry."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

from proxy.ui.compare import Row, align, text
from strategies.messages import message_hash

PREVIEW = 600  # characters of each side shown; the full message is one link away


@dataclass(frozen=True)
class Left:
    index: int  # position in the request's history
    role: str
    ref: str  # the message's hash: /messages/<ref>, and what ctxproxy_recall finds it by
    now: str  # what became of it: folded, truncated, elided, dropped …
    text: str


@dataclass(frozen=True)
class Carried:
    index: int  # position in the compiled view
    role: str
    text: str


@dataclass(frozen=True)
class Firing:
    left: list[Left]
    carried: list[Carried]


def firing(
    previous: tuple[list[dict[str, Any]], list[dict[str, Any]]],
    original: list[dict[str, Any]],
    compiled: list[dict[str, Any]],
    rows: list[Row] | None = None,
) -> Firing | None:
    """None unless the previous request's history is a prefix of this one's (same branch)."""
    before, before_view = previous
    if len(before) > len(original) or original[: len(before)] != before:
        return None
    was_raw = {r.original for r in align(before, before_view) if r.status == "kept"}
    rows = rows if rows is not None else align(original, compiled)
    fate = {r.original: r.status for r in rows if r.original is not None}
    left = [
        Left(
            i,
            str(original[i].get("role", "?")),
            message_hash(original[i]),
            fate.get(i, "?"),
            _clip(text(original[i])),
        )
        for i in sorted(k for k in was_raw if k is not None and fate.get(k) != "kept")
    ]
    shown_before = list(before_view)
    carried = [
        Carried(
            r.compiled,
            str(compiled[r.compiled].get("role", "?")),
            _clip(text(compiled[r.compiled])),
        )
        for r in rows
        if r.compiled is not None
        and r.status != "kept"
        and compiled[r.compiled] not in shown_before
    ]
    return Firing(left, carried) if left or carried else None


def _clip(body: str) -> str:
    return body if len(body) <= PREVIEW else body[:PREVIEW] + " …"
