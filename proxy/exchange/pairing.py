"""A client's own tool-call pairing, checked before compaction: reject, repair or pass it on."""

from __future__ import annotations

from typing import Any

from proxy.errors import BadRequest
from strategies.invariants import PairingFault, pairing_faults
from strategies.repair import repair_pairing


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
