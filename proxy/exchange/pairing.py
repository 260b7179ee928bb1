"""A client's own tool-call pairing, checked before compaction: reject, repair or pass it on."""

from __future__ import annotations

import dataclasses
from typing import Any

from proxy import sizes
from proxy.errors import BadRequest
from strategies.invariants import PairingFault, pairing_faults
from strategies.prefix import PrefixMemo
from strategies.repair import repair_pairing

# After each message of a history seen before: whether its scan up to there was certainly
# clean (no fault so far). A turn then scans only from the tool-call group open at the end of
# the longest such prefix; False (a fault somewhere) is only ever a reason to scan it all.
_CLEAN: PrefixMemo[bool] = PrefixMemo("pairing.clean", value_bytes=8)


class InvalidToolPairing(BadRequest):
    code = "invalid_tool_pairing"

    def __init__(self, fault: PairingFault, total: int):
        if fault.kind == "orphan_result" and fault.call_id is None:
            what = f"messages[{fault.index}] is a tool message without a tool_call_id"
        elif fault.kind == "orphan_result":
            what = (
                f"messages[{fault.index}] is a tool message with tool_call_id "
                f"{fault.call_id!r} that answers no tool call of the assistant message before it"
            )
        else:
            what = (
                f"messages[{fault.index}] has tool call {fault.call_id!r} with no tool message "
                "answering it right after"
            )
        more = f" ({total} pairing problems in all)" if total > 1 else ""
        super().__init__(
            f"Invalid tool-call pairing: {what}{more}. Set compaction.invalid_pairing to "
            "'repair' or 'pass' to accept such histories.",
            param=f"messages[{fault.index}]",
        )
        self.fault = fault


def apply_policy(body: dict[str, Any], policy: str) -> dict[str, Any]:
    """The body to compile and forward: `body` itself, or a copy with repaired messages."""
    if policy == "pass":
        return body
    faults = faults_of(body["messages"])
    if not faults:
        return body
    if policy == "repair":
        return {**body, "messages": repair_pairing(body["messages"])}
    raise InvalidToolPairing(faults[0], len(faults))


def faults_of(messages: list[Any]) -> list[PairingFault]:
    """pairing_faults(messages), for a resent history from the group its clean prefix left
    open: the same faults, in the same order."""
    if len(messages) < sizes.MEMO_FROM_MESSAGES:
        return pairing_faults(messages)
    found: list[list[PairingFault]] = []

    def scan(known: list[bool]) -> list[bool]:
        start = _group_start(messages, len(known)) if known and known[-1] else 0
        found.append(_from(messages, start))
        return [not found[0]] * (len(messages) - len(known))  # certain only when clean

    clean = _CLEAN.values(messages, scan)
    if found:  # scanned from where its prefix was clean
        return found[0]
    if clean and clean[-1]:  # resent as it was: only its last group can still fault
        return _from(messages, _group_start(messages, len(messages)))
    return pairing_faults(messages)


def _group_start(messages: list[Any], end: int) -> int:
    """Where the tool-call group open after messages[:end] starts (its assistant message), or
    the last message: a scan from there, with nothing open, goes on as the whole scan would."""
    start = end
    while start > 0 and messages[start - 1].get("role") == "tool":
        start -= 1
    return max(start - 1, 0)


def _from(messages: list[Any], start: int) -> list[PairingFault]:
    """The faults of messages[start:], after a clean prefix, at their places in `messages`."""
    faults = pairing_faults(messages[start:])
    return [dataclasses.replace(f, index=f.index + start) for f in faults] if start else faults
