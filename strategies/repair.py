"""Mending a client's own broken tool-call pairing, for upstreams that refuse such a history.

Not a compaction strategy: it runs before compaction, only when configured
(`compaction.invalid_pairing: repair`), and the raw history is still stored as the client sent it.
"""

from __future__ import annotations

from collections.abc import Sequence

from strategies.invariants import pairing_faults
from strategies.messages import Message, tool_calls


def placeholder_result(call_id: str) -> Message:
    """The tool message that stands in for a result the client never sent."""
    return {
        "role": "tool",
        "tool_call_id": call_id,
        "content": "[No result: the client's history held no tool message for this call.]",
    }


def repair_pairing(messages: Sequence[Message]) -> list[Message]:
    """A copy where every tool call is answered right after its assistant message: tool
    messages that answer no call are dropped, and each unanswered call gets a placeholder
    result after the results that did come. The input is not mutated; a valid history comes
    back equal to it."""
    faults = pairing_faults(messages)
    if not faults:
        return list(messages)
    orphans = {f.index for f in faults if f.kind == "orphan_result"}
    unanswered: dict[int, list[str]] = {}
    for f in faults:
        if f.kind == "unanswered_call":
            unanswered.setdefault(f.index, []).append(f.call_id)
    out: list[Message] = []
    pending: list[str] = []  # placeholders owed once the current block of results ends
    for i, msg in enumerate(messages):
        if pending and msg.get("role") != "tool":
            out += [placeholder_result(cid) for cid in pending]
            pending = []
        if i in orphans:
            continue
        out.append(msg)
        if tool_calls(msg):
            pending = list(dict.fromkeys(unanswered.get(i, [])))  # a repeated id: one result
    out += [placeholder_result(cid) for cid in pending]
    return out
