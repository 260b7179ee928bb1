"""Recall rounds: the upstream calls ctxproxy_recall, ctxproxy answers it and asks again.

The client sees only its own part of the conversation: text as it comes, its own tool calls
(renumbered when a recall call sat between them), one final finish and the usage of all
rounds added up. The calls, their results and the rounds' figures go to the audit record.
"""

from __future__ import annotations

import json
import math
import time
from typing import Any

import httpx
from starlette.concurrency import run_in_threadpool

from proxy import answers, recall
from proxy import upstream as up
from proxy.compiler import Compiled
from proxy.errors import UpstreamInvalid
from proxy.tokens import REPLY_PRIMING

OVERHEAD = 32  # tokens of the assistant call and tool result wrapping a recalled text
USEFUL_ROOM = 2 * recall.MIN_ROOM  # tokens: the least a first recalled excerpt should have


class Rounds:
    """One exchange's recall rounds, upstream side: the view, plus each round's call and result."""

    def __init__(
        self,
        services: Any,
        upstream: Any,
        body: dict[str, Any],
        compiled: Compiled,
        raw: list[dict[str, Any]],
        hashes: list[str],
        factor: float,
    ) -> None:
        self.services, self.upstream = services, upstream
        self.body = body  # the client's request with the recall tool added
        self.compiled, self.raw, self.hashes = compiled, raw, hashes
        self.counter = services.counter.corrected(factor)
        self.settings = services.settings.recall
        self.extra: list[dict[str, Any]] = []  # the rounds' calls and results, upstream side
        self.records: list[dict[str, Any]] = []  # per call, for the audit record
        self.usages: list[dict[str, Any]] = []
        self.sent = 0  # recall requests made so far

    def first_usage(self) -> dict[str, Any] | None:
        """The first request's usage, once further rounds ran: what the compiled view cost."""
        return self.usages[0] if len(self.usages) > 1 else None

    @property
    def more(self) -> bool:
        return self.sent < self.settings.rounds

    async def answer(self, message: dict[str, Any], calls: list[dict[str, Any]]) -> None:
        """Run the model's recall calls (off the event loop: a search over a long history
        takes a while); their call and results join the upstream-side view."""
        for n, call in enumerate(calls):  # a result must name its call: give one an id
            call["id"] = call.get("id") or f"call_ctxproxy_recall_{self.sent}_{n}"
        self.extra.append(_call_message(message, calls))
        for call in calls:
            started = time.monotonic()
            arguments = (call.get("function") or {}).get("arguments")
            got = await run_in_threadpool(
                recall.run, arguments, self.raw, self.hashes, self.room(), self.count
            )
            self.extra.append({"role": "tool", "tool_call_id": call.get("id"), "content": got.text})
            self.records.append(
                {
                    "round": self.sent + 1,
                    "arguments": arguments,
                    "outcome": got.outcome,
                    "tokens": got.tokens,
                    "result": got.text,
                    "ms": round((time.monotonic() - started) * 1000, 2),
                }
            )

    def count(self, text: str) -> int:
        return self.counter.estimate(self.counter.text(text))

    def room(self) -> int:
        """Tokens a recalled text may take: the cap, within what is left of the budget."""
        cap = self.settings.max_tokens
        if self.compiled.budget is None:
            return cap
        used = sum(self.counter.count_message(m) for m in [*self.compiled.messages, *self.extra])
        return min(cap, self.compiled.budget - self.counter.estimate(used) - OVERHEAD)

    def request(self, stream: bool) -> dict[str, Any]:
        """The next upstream request; the last one allowed goes without the tool, to answer."""
        last = self.sent + 1 >= self.settings.rounds
        body = recall.without_tool(self.body) if last else self.body
        return {**body, "messages": [*self.compiled.messages, *self.extra], "stream": stream}

    async def send(self, stream: bool) -> httpx.Response:
        """Ask again with what was recalled; an error answer or a bad body is a ProxyError."""
        outgoing = self.request(stream)
        self.sent += 1
        started = time.monotonic()
        r = await up.send(
            self.services.client,
            self.upstream,
            "POST",
            "/chat/completions",
            json=outgoing,
            stream=True,
        )
        if stream and r.status_code < 400 and up.is_event_stream(r):
            return r
        await up.read(r, self.upstream)
        if r.status_code >= 400:
            raise UpstreamInvalid(
                f"Upstream '{self.upstream.name}' answered a recall round with "
                f"{r.status_code}: {r.text[:200]}"
            )
        answers.check(r, self.upstream.name, stream)
        for rec in self.records:
            if rec["round"] == self.sent:
                rec["upstream_ms"] = round((time.monotonic() - started) * 1000, 2)
        return r

    async def settle(self, data: dict[str, Any]) -> dict[str, Any] | None:
        """A non-streamed answer (`data`) with every recall call answered: the
        final answer for the client, or None when it called no recall (relay it untouched)."""
        if not split(_message(data))[0]:
            return None
        while True:
            self.usages.append(data.get("usage") or {})
            message = _message(data)
            mine, theirs = split(message)
            if not mine or theirs or not self.more:
                break
            await self.answer(message, mine)
            data = (await self.send(stream=False)).json()
        strip(data)
        data["usage"] = added(self.usages)
        return data


def room_left(compiled: Compiled) -> int | None:
    """Tokens a first recalled text could take under the budget (None: no budget known). The
    compiler keeps RECALL_ROOM free when the tool goes with the view, so this is at least
    USEFUL_ROOM unless the view needed the last resort. The tool is offered whenever the view
    is folded all the same: a tool list that comes and goes changes the prompt's start (where
    templates put tools), and the model server's cache would lose the whole prompt."""
    if compiled.budget is None or compiled.state is None:
        return None
    view = math.ceil((compiled.state.view_tokens + REPLY_PRIMING) * compiled.factor)
    return compiled.budget - view - OVERHEAD


def folded(compiled: Compiled) -> bool:
    """Whether the view holds anything folded, cut or left out (so recall has work to do)."""
    state = compiled.state
    return state is not None and (
        bool(state.forgotten) or any(not isinstance(item, int) for item in state.items)
    )


def split(message: dict[str, Any]) -> tuple[list[dict[str, Any]], list[dict[str, Any]]]:
    """(recall calls, the client's own calls) of an answer's message."""
    calls = [c for c in message.get("tool_calls") or [] if isinstance(c, dict)]
    mine = [c for c in calls if recall.is_recall_call(c)]
    return mine, [c for c in calls if not recall.is_recall_call(c)]


def strip(data: dict[str, Any]) -> None:
    """Take recall calls out of a final answer; with none of the client's left, it stopped."""
    for choice in data.get("choices") or []:
        message = choice.get("message") if isinstance(choice, dict) else None
        if not isinstance(message, dict) or not message.get("tool_calls"):
            continue
        theirs = split(message)[1]
        if theirs:
            message["tool_calls"] = theirs
        else:
            message.pop("tool_calls")
            message["content"] = message.get("content") or ""
            if choice.get("finish_reason") == "tool_calls":
                choice["finish_reason"] = "stop"


def added(usages: list[dict[str, Any]]) -> dict[str, Any]:
    """The usage of every round, added up (numbers one level deep, details included)."""
    total: dict[str, Any] = {}
    for usage in usages:
        for key, value in (usage or {}).items():
            if isinstance(value, dict):
                inner = total.setdefault(key, {})
                for k, v in value.items():
                    if _number(v) and _number(inner.get(k, 0)):
                        inner[k] = inner.get(k, 0) + v
            elif _number(value) and _number(total.get(key, 0)):
                total[key] = total.get(key, 0) + value
    return total


def _number(v: Any) -> bool:
    return isinstance(v, int | float) and not isinstance(v, bool)


def _message(data: dict[str, Any]) -> dict[str, Any]:
    choices = data.get("choices") or [{}]
    message = choices[0].get("message") if isinstance(choices[0], dict) else None
    return message if isinstance(message, dict) else {}


def _call_message(message: dict[str, Any], calls: list[dict[str, Any]]) -> dict[str, Any]:
    """The assistant's turn as the upstream should see it next round: its text, recall calls."""
    return {"role": "assistant", "content": message.get("content") or None, "tool_calls": calls}


def dumps(data: dict[str, Any]) -> bytes:
    return json.dumps(data, ensure_ascii=False).encode()
