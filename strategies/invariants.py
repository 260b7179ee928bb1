"""The final gate: the compiled view is a valid request that keeps what must stay, and it fits.

A client's own invalid history is not repaired here (the route validates input); the gate only
makes sure compaction never adds a problem the client did not send.
"""

from __future__ import annotations

import functools
import operator
from collections import Counter
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any, Literal

from strategies.compact import MARKER
from strategies.context import InvariantError, OverBudget
from strategies.fit import parsed
from strategies.messages import PROMPT_ROLES, Message, iterations, original_ref, text_of, tool_calls


@dataclass(frozen=True)
class PairingFault:
    """One broken pairing: the message at `index` and the tool call id it concerns."""

    index: int
    call_id: Any
    kind: Literal["orphan_result", "unanswered_call"]

    def describe(self) -> str:
        if self.kind == "orphan_result":
            return f"tool message {self.call_id!r} answers no call"
        return f"tool call {self.call_id!r} unanswered"


def pairing_faults(messages: Sequence[Message]) -> list[PairingFault]:
    """Each tool call answered by a tool message right after it; each tool message answering one.

    An unanswered call is reported at its assistant message, an orphan result at itself.
    """
    faults: list[PairingFault] = []
    i, n = 0, len(messages)
    while i < n:
        ids = [c.get("id") for c in tool_calls(messages[i])]
        if not ids:
            if messages[i].get("role") == "tool":
                faults.append(PairingFault(i, messages[i].get("tool_call_id"), "orphan_result"))
            i += 1
            continue
        caller, i, answered = i, i + 1, set()
        while i < n and messages[i].get("role") == "tool":
            tid = messages[i].get("tool_call_id")
            if tid in ids and tid not in answered:
                answered.add(tid)
            else:
                faults.append(PairingFault(i, tid, "orphan_result"))
            i += 1
        faults += [PairingFault(caller, t, "unanswered_call") for t in ids if t not in answered]
    return faults


def pairing_problems(messages: Sequence[Message]) -> Counter[str]:
    """The pairing faults by description, counted: what the gate compares before and after."""
    return Counter(f.describe() for f in pairing_faults(messages))


def final_turn(messages: Sequence[Message]) -> int:
    """How many trailing messages form the latest turn (the last iteration)."""
    iters = iterations(messages)
    return sum(1 for it in iters if it == iters[-1]) if iters else 0


class Gate:
    """The validity checks against one original history, what they read of it read once: a
    fill checks many candidate views against the same history."""

    def __init__(self, original: Sequence[Message]) -> None:
        self.original = original

    @functools.cached_property
    def _pairing(self) -> Counter[str]:
        return pairing_problems(self.original)

    @functools.cached_property
    def _prompts(self) -> list[Message]:
        return _prompts(self.original)

    @functools.cached_property
    def _latest(self) -> list[Message]:
        """The latest turn, as sent."""
        k = final_turn(self.original)
        return list(self.original[len(self.original) - k :])

    @functools.cached_property
    def _sent(self) -> list[Message]:
        return _users(self.original)[-1:]

    @functools.cached_property
    def _clashes(self) -> set[str]:
        return _clashes(self.original)

    def check(self, compiled: Sequence[Message]) -> None:
        """Raise InvariantError if `compiled` adds a problem the original did not have."""
        original = self.original
        same = len(original) == len(compiled)
        if same and all(map(operator.is_, original, compiled)):
            return  # nothing was compacted, so nothing can have been broken
        added = pairing_problems(compiled)
        added = added and added - self._pairing
        if added:
            raise InvariantError(f"compaction broke tool-call pairing: {sorted(added)}")
        if _prompts(compiled) != self._prompts:
            raise InvariantError("compaction changed or moved a system/developer message")
        if original and original[0].get("role") in PROMPT_ROLES and compiled[:1] != original[:1]:
            raise InvariantError("the first system/developer message is not first any more")
        k = len(self._latest)
        latest = zip(compiled[len(compiled) - k :], self._latest, strict=True)
        if len(compiled) < k or not all(kept_in_latest(c, o) for c, o in latest):
            raise InvariantError("compaction changed the latest turn")
        sent = self._sent
        # The latest user message, or (a marker standing alone in the user's voice after it,
        # or an empty one that hosts the marker: the two look alike) the last user message.
        now = [_users(compiled)[-1:], [m for m in compiled if m.get("role") == "user"][-1:]]
        if not any(len(n) == len(sent) and all(map(kept_in_latest, n, sent)) for n in now):
            raise InvariantError("compaction changed the latest user message")
        if clashes := _clashes(compiled) - self._clashes:
            raise InvariantError(
                f"compaction put two {sorted(clashes)[0]} messages next to each other"
            )


def check_valid(original: Sequence[Message], compiled: Sequence[Message]) -> None:
    Gate(original).check(compiled)


def check(
    original: Sequence[Message], compiled: Sequence[Message], *, budget: int, usage: int
) -> None:
    """Raise InvariantError for an invalid view, OverBudget for one that does not fit."""
    check_valid(original, compiled)
    if usage > budget:
        raise OverBudget(usage, budget)


def kept_in_latest(compiled: Message, original: Message) -> bool:
    """The latest turn stays as sent, except a tool output or user message elided to its
    evidence: the last resort before an overflow, which keeps the error lines verbatim and
    names the original."""
    if compiled == original:
        return True
    content = compiled.get("content")
    if (
        original.get("role") not in ("tool", "user")
        or {**compiled, "content": None} != {**original, "content": None}
        or not isinstance(content, (str, list))
    ):
        return False
    if isinstance(content, str) and content.startswith(ELIDED):
        return True
    if isinstance(content, str) and _head_cut(content, text_of(original)):
        return True
    if isinstance(content, str) and _json_cut(content, original):
        return True
    if isinstance(content, str) and _lines_kept(content, original):
        return True
    sent = original.get("content")
    if _marker_after(content, sent) or _marker_before(content, sent):
        return True
    # A forget marker before a text that was itself folded or cut: that text judged alone.
    return isinstance(content, str) and any(
        kept_in_latest({**compiled, "content": rest}, original) for rest in _after_marker(content)
    )


def _after_marker(content: str) -> list[str]:
    """What may follow a leading forget marker: the text after each of its paragraph breaks."""
    if not content.startswith(MARKER):
        return []
    parts = content.split("\n\n")
    rests = ("\n\n".join(parts[i:]) for i in range(1, len(parts)))
    return [r for r in rests if r and not r.startswith(MARKER)]


ELIDED = ("[Output of tool ", "[User message elided", "[User message folded")
CUT_NOTE = " more chars cut to fit the context window; "  # strategies/cut.py's note


def _head_cut(content: str, sent: str | None) -> bool:
    """The sent text's head and tail with a note between them saying how much was cut (the
    last resort's form that uses the room left)."""
    head, sep, rest = content.rpartition("\n[… ")
    note, _, tail = rest.partition("]\n")
    if not sep or sent is None or CUT_NOTE not in note:
        return False
    return sent.startswith(head) and sent.endswith(tail)


def _json_cut(content: str, original: Message) -> bool:
    """A JSON output cut to fit (strategies/fit.py): still JSON, naming the original."""
    return original_ref(original) in content and parsed(content) is not None


def _lines_kept(content: str, original: Message) -> bool:
    """A text cut to fit (strategies/fit.py): each line one of the sent text's (or part of
    one) or a bracketed note, and the original named."""
    sent = text_of(original)
    if sent is None or original_ref(original) not in content:
        return False
    return all(line.startswith("[") or line in sent for line in content.split("\n"))


def _marker_after(content: Any, sent: Any) -> bool:
    """The task (also the latest user message) whole, a forget marker after its text."""
    if isinstance(content, list):
        return (
            content[:-1] == sent
            and isinstance(content[-1], dict)
            and str(content[-1].get("text", "")).startswith(MARKER)
        )
    if not isinstance(sent, str | None):
        return False
    return str(content).startswith(f"{sent}\n\n{MARKER}" if sent else MARKER)


def _marker_before(content: Any, sent: Any) -> bool:
    """A user message led by a forget marker, its own text whole after it."""
    if isinstance(content, list):
        return (
            content[1:] == sent
            and isinstance(content[0], dict)
            and str(content[0].get("text", "")).startswith(MARKER)
        )
    return (
        isinstance(sent, str)
        and str(content).startswith(MARKER)
        and (str(content).endswith(f"\n\n{sent}") or not sent)
    )


def _clashes(messages: Sequence[Message]) -> set[str]:
    """Roles that stand twice in a row (user after user, assistant after assistant)."""
    return {
        str(a.get("role"))
        for a, b in zip(messages, messages[1:], strict=False)
        if a.get("role") == b.get("role") and a.get("role") in ("user", "assistant")
    }


def _prompts(messages: Sequence[Message]) -> list[Message]:
    return [m for m in messages if m.get("role") in PROMPT_ROLES]


def _users(messages: Sequence[Message]) -> list[Message]:
    """The user messages, less a forget marker standing alone in the user's voice."""
    return [m for m in messages if m.get("role") == "user" and not _standalone_marker(m)]


def _standalone_marker(msg: Message) -> bool:
    content = msg.get("content")
    return isinstance(content, str) and content.startswith(MARKER) and "\n\n" not in content
