"""A client's own tool-call pairing, checked before compaction: reject, repair or pass it on."""

from __future__ import annotations

from typing import Any

from proxy.errors import BadRequest
from strategies import invariants
from strategies.invariants import Calls, PairingFault, pairing_step, unanswered
from strategies.prefix import PrefixMemo
from strategies.repair import repair_pairing

# After each message of a history seen before: the tool-call group left open, or FAULTY from a
# certain fault on. A turn steps only through the messages after the longest such prefix; a
# history with a fault anywhere is scanned whole, so that every fault is reported.
FAULTY = "faulty"
_SCANNED: PrefixMemo[Calls | None | str] = PrefixMemo("pairing.scanned", value_bytes=60)


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
    faults = pairing_faults(body["messages"])
    if not faults:
        return body
    if policy == "repair":
        return {**body, "messages": repair_pairing(body["messages"])}
    raise InvalidToolPairing(faults[0], len(faults))


def pairing_faults(messages: list[Any]) -> list[PairingFault]:
    """invariants.pairing_faults, stepping only through what a resent history adds."""

    def scan(known: list[Calls | None | str]) -> list[Calls | None | str]:
        calls = known[-1] if known else None
        out = []
        for i in range(len(known), len(messages)):
            if not isinstance(calls, str):
                found: list[PairingFault] = []
                calls = pairing_step(messages[i], i, calls, found)
                calls = FAULTY if found else calls
            out.append(calls)
        return out

    last = _SCANNED.values(messages, scan)[-1] if messages else None
    if isinstance(last, str):
        return invariants.pairing_faults(messages)
    return unanswered(last)
