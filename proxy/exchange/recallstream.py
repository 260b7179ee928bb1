"""A streamed answer, rewritten for the client while recall rounds run underneath.

Events pass byte for byte unless they carry something the client must not see: a tool-call
delta is held only until its name shows which tool it calls; recall calls are kept back (and
gathered for the round), the client's own are renumbered from 0; a round that goes on loses
its finish, its usage and its `[DONE]`; the last round's usage becomes the sum of all rounds.
"""

from __future__ import annotations

import json
from typing import Any

from proxy.exchange.rounds import added
from proxy.recall import tool as recall

DONE = b"data: [DONE]"
RECALL = -1  # the slot of a tool-call index that calls ctxproxy_recall


class StreamFilter:
    def __init__(self, usages: list[dict[str, Any]]) -> None:
        self.usages = usages  # each round's, shared with the exchange's Rounds
        self.start_round()

    def start_round(self) -> None:
        self.slots: dict[int, int] = {}  # upstream tool-call index -> client index or RECALL
        self.held: dict[int, list[dict[str, Any]]] = {}  # deltas before their name came
        self.calls: dict[int, dict[str, Any]] = {}  # the recall calls, gathered
        self.text: list[str] = []
        self.theirs = 0  # the client's own calls this round
        self.going_on = False  # this round ends in recall calls only: another round follows

    def message(self) -> dict[str, Any]:
        """The round's assistant message, upstream side: its text and recall calls."""
        return {"content": "".join(self.text) or None}

    def recall_calls(self) -> list[dict[str, Any]]:
        return [self.calls[i] for i in sorted(self.calls)]

    def feed(self, events: bytes, more: bool) -> bytes:
        """Whole events in, what the client gets out; `more`: another round may be asked."""
        out = []
        for event in events.split(b"\n\n"):
            if event.strip():
                kept = self._event(event, more)
                if kept is not None:
                    out.append(kept + b"\n\n")
        return b"".join(out)

    def _event(self, event: bytes, more: bool) -> bytes | None:
        line = event.strip()
        if line == DONE:
            return None if self.going_on else event
        if not line.startswith(b"data:"):
            return event
        try:
            data = json.loads(line[5:])
        except ValueError:
            return event  # the assembler judges it
        if not isinstance(data, dict):
            return event
        changed = self._choices(data, more)
        if isinstance(data.get("usage"), dict):
            self.usages.append(data["usage"])
            if self.going_on:  # counted with the last round's
                data["usage"], changed = None, True
            elif len(self.usages) > 1:
                data["usage"], changed = added(self.usages), True
        if not changed:
            return event
        if not data.get("choices") and not data.get("usage"):
            return None
        return b"data: " + json.dumps(data, ensure_ascii=False).encode()

    def _choices(self, data: dict[str, Any], more: bool) -> bool:
        changed = False
        for choice in data.get("choices") or []:
            if not isinstance(choice, dict) or choice.get("index", 0) != 0:
                continue
            delta = choice.get("delta")
            if not isinstance(delta, dict):
                delta = {}
            if isinstance(delta.get("content"), str):
                self.text.append(delta["content"])
            if delta.get("tool_calls"):
                kept = [c for c in map(self._call, delta["tool_calls"]) if c is not None]
                if kept != delta["tool_calls"]:
                    changed = True
                    if kept:
                        delta["tool_calls"] = kept
                    else:
                        delta.pop("tool_calls")
            if choice.get("finish_reason") and self.calls and not self.theirs:
                self.going_on = more
                choice["finish_reason"] = None if more else "stop"
                changed = True
        if changed:
            data["choices"] = [c for c in data["choices"] if not _empty(c)]
        return changed

    def _call(self, delta: Any) -> dict[str, Any] | None:
        """A tool-call delta for the client (renumbered), or None: held or a recall call's."""
        if not isinstance(delta, dict) or not isinstance(delta.get("index"), int):
            return delta
        index = delta["index"]
        slot = self.slots.get(index)
        if slot is None:
            name = _function(delta).get("name")
            if not name:
                self.held.setdefault(index, []).append(delta)
                return None
            slot = RECALL if name == recall.NAME else self.theirs
            self.theirs += int(slot != RECALL)
            self.slots[index] = slot
            delta = _joined([*self.held.pop(index, []), delta])
        if slot == RECALL:
            self._gather(index, delta)
            return None
        return {**delta, "index": slot}

    def _gather(self, index: int, delta: dict[str, Any]) -> None:
        call = self.calls.setdefault(
            index, {"id": None, "type": "function", "function": {"name": recall.NAME}}
        )
        call["id"] = call["id"] or delta.get("id")
        args = call["function"].get("arguments", "") + _arguments(delta)
        call["function"]["arguments"] = args


def _joined(deltas: list[dict[str, Any]]) -> dict[str, Any]:
    """Deltas of one call that came before its name, as one: the arguments in order."""
    out = dict(deltas[-1])
    fn = dict(_function(out))
    fn["arguments"] = "".join(_arguments(d) for d in deltas)
    out["function"] = fn
    out["id"] = next((d["id"] for d in deltas if d.get("id")), out.get("id"))
    return out


def _function(delta: dict[str, Any]) -> dict[str, Any]:
    """A delta's function, or {} when a hostile or broken upstream sent something else."""
    fn = delta.get("function")
    return fn if isinstance(fn, dict) else {}


def _arguments(delta: dict[str, Any]) -> str:
    args = _function(delta).get("arguments")
    return args if isinstance(args, str) else ""


def _empty(choice: Any) -> bool:
    """A choice-0 chunk left with nothing to say once recall calls are taken out."""
    if not isinstance(choice, dict) or choice.get("index", 0) != 0 or choice.get("finish_reason"):
        return False
    delta = choice.get("delta") or {}
    return not any(v not in (None, "", []) for v in delta.values())
