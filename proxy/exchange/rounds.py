"""Recall rounds: the upstream calls ctxproxy_recall, ctxproxy answers it and asks again.

The client sees only its own part of the conversation: text as it comes, its own tool calls
(renumbered when a recall call sat between them), one final finish and the usage of all
rounds added up. The calls, their results and the rounds' figures go to the audit record.
"""

from __future__ import annotations

import json
import logging
import math
import time
from typing import TYPE_CHECKING, Any

import httpx

from proxy.compile.tokens import REPLY_PRIMING
from proxy.compile.view import Compiled
from proxy.errors import UpstreamInvalid
from proxy.offload import hop
from proxy.recall import tool as recall
from proxy.settings import Upstream
from proxy.store import RequestRef
from proxy.upstream import answers
from proxy.upstream import send as up

if TYPE_CHECKING:  # it imports this module, through the routes
    from proxy.services import Services

OVERHEAD = 32  # tokens of the assistant call and tool result wrapping a recalled text
USEFUL_ROOM = 2 * recall.MIN_ROOM  # tokens: the least a first recalled excerpt should have
SHORT = 40  # tokens of a short tool result (no room, over the cap): kept free for each call
NOTE_ROOM = 48  # tokens kept for the note on calls left out
SHOWN_ARGUMENTS = 1200  # characters: longer arguments are left out of the view (the longest
# query, 1,000 characters, fits; a call that long is answered as a bad call anyway)
OVER_CAP = (
    "[ctxproxy_recall: not run: this answer has had its {} recall calls; answer from what "
    "you have.]"
)
OUT_OF_TIME = (
    "[ctxproxy_recall: not run: the time for recall searches in this answer is used up; "
    "answer from what you have.]"
)
log = logging.getLogger("ctxproxy.recall")


class Rounds:
    """One exchange's recall rounds, upstream side: the view, plus each round's call and result."""

    def __init__(
        self,
        services: Services,
        upstream: Upstream,
        body: dict[str, Any],
        compiled: Compiled,
        raw: list[dict[str, Any]],
        hashes: list[str],
        factor: float,
        ref: RequestRef | None = None,
    ) -> None:
        self.services, self.upstream = services, upstream
        self.body = body  # the client's request with the recall tool added
        self.compiled, self.raw, self.hashes = compiled, raw, hashes
        self.ref = ref  # the open exchange, where each round's calls are saved as they run
        self.counter = services.counter.corrected(factor)
        self.settings = services.settings.recall
        self.extra: list[dict[str, Any]] = []  # the rounds' calls and results, upstream side
        self.records: list[dict[str, Any]] = []  # per call, for the audit record
        self.usages: list[dict[str, Any]] = []
        self.sent = 0  # recall requests made so far
        self.answered = 0  # calls run so far, against max_calls
        self.searching = 0.0  # seconds spent on calls so far, against answer_seconds
        self.used: int | None = None  # raw tokens of the view plus extra, kept as extra grows

    def first_usage(self) -> dict[str, Any] | None:
        """The first request's usage, once further rounds ran: what the compiled view cost."""
        return self.usages[0] if len(self.usages) > 1 else None

    @property
    def more(self) -> bool:
        return self.sent < self.settings.rounds

    async def answer(self, message: dict[str, Any], calls: list[dict[str, Any]]) -> None:
        """Run the model's recall calls (off the event loop, under a time budget); their call
        and results join the upstream-side view. Past max_calls, or past what the window
        holds, calls are left out of that view, and the last result says so."""
        for n, call in enumerate(calls):  # a result must name its call: give one an id
            call["id"] = call.get("id") or f"call_ctxproxy_recall_{self.sent}_{n}"
        allowed = self.settings.max_calls - self.answered
        run, unfit = self._fitting(message, calls[: max(allowed, 1)])
        over = calls[max(allowed, 1) :]
        rest = unfit + over
        self._add(_call_message(message, run))
        for n, call in enumerate(run):
            note = _left_out(len(rest), self.settings.max_calls) if n == len(run) - 1 else ""
            keep = SHORT * (len(run) - 1 - n) + (NOTE_ROOM if rest else 0)
            got = await self._one(call, allowed > 0, keep)
            self._add({"role": "tool", "tool_call_id": call.get("id"), "content": got.text + note})
        self.records += [self._record(c, recall.Recalled("", "no_room")) for c in unfit]
        self.records += [self._record(c, recall.Recalled("", "over_cap")) for c in over]
        await self._save()

    async def _one(self, call: dict[str, Any], allowed: bool, keep: int) -> recall.Recalled:
        """One call's result: run within what is left of the answer's time, or said why not."""
        started = time.monotonic()
        arguments = (call.get("function") or {}).get("arguments")
        left = self.settings.answer_seconds - self.searching
        if not allowed:
            got = recall.Recalled(OVER_CAP.format(self.settings.max_calls), "over_cap")
        elif left <= 0:
            got = recall.Recalled(OUT_OF_TIME, "timeout")
        else:
            seconds = min(self.settings.call_seconds, left)
            got = await hop(self._run, arguments, self.room() - keep, seconds)
            self.answered += 1
        elapsed = time.monotonic() - started
        self.searching += elapsed
        self.records.append(self._record(call, got, elapsed))
        return got

    def _run(self, arguments: Any, room: int, seconds: float) -> recall.Recalled:
        try:
            return recall.run(arguments, self.raw, self.hashes, room, self.count, seconds)
        except Exception:  # a call the model got wrong in a way we did not foresee: say so
            log.exception("a ctxproxy_recall call failed")
            return recall.Recalled("[ctxproxy_recall: this call could not be answered.]", "error")

    def _record(
        self, call: dict[str, Any], got: recall.Recalled, elapsed: float = 0.0
    ) -> dict[str, Any]:
        arguments = (call.get("function") or {}).get("arguments")
        if isinstance(arguments, str) and len(arguments) > recall.MAX_ARGUMENTS:
            arguments = arguments[: recall.MAX_ARGUMENTS] + "…"
        return {
            "round": self.sent + 1,
            "arguments": arguments,
            "outcome": got.outcome,
            "tokens": got.tokens,
            "result": got.text,
            "ms": round(elapsed * 1000, 2),
        }

    def _fitting(
        self, message: dict[str, Any], calls: list[dict[str, Any]]
    ) -> tuple[list[dict[str, Any]], list[dict[str, Any]]]:
        """The calls whose own tokens, with a short result each, fit what is left; at least
        one, so the round can still say why no more was recalled."""
        run = list(calls)
        while len(run) > 1:
            need = self.counter.count_message(_call_message(message, run)) + SHORT * len(run)
            if self.counter.estimate(need) <= self.free():
                break
            run.pop()
        return run, calls[len(run) :]

    def _add(self, msg: dict[str, Any]) -> None:
        """Extend the upstream-side view, keeping its count: no recount per call."""
        self.extra.append(msg)
        self.used = self._used() + self.counter.count_message(msg)

    def _used(self) -> int:
        if self.used is None:
            self.used = sum(self.counter.count_message(m) for m in self.compiled.messages)
        return self.used

    async def _save(self) -> None:
        """The calls so far, on the open exchange: a process killed mid-round keeps them."""
        if self.ref is None:
            return
        try:
            await hop(self.services.store.save_recalls, self.ref, list(self.records))
        except Exception:  # the record is kept for the audit; the answer goes on without it
            log.exception("saving a round's recall calls failed")

    def count(self, text: str) -> int:
        return self.counter.estimate(self.counter.text(text))

    def free(self) -> int:
        """Tokens left in the budget for the next call and result."""
        if self.compiled.budget is None:
            return 1 << 30
        return self.compiled.budget - self.counter.estimate(self._used()) - OVERHEAD

    def room(self) -> int:
        """Tokens a recalled text may take: the cap, within what is left of the budget."""
        return min(self.settings.max_tokens, self.free())

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
        r = await up.ask(
            self.services.client,
            self.upstream,
            "/chat/completions",
            outgoing,
            window=self.compiled.window,
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
    return state is not None and (bool(state.forgotten) or bool(state.forms))


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
    """The assistant's turn as the upstream should see it next round: its text, recall calls
    (arguments too long to be a ref or a query are left out: they only take room)."""
    return {
        "role": "assistant",
        "content": message.get("content") or None,
        "tool_calls": [_short(c) for c in calls],
    }


def _short(call: dict[str, Any]) -> dict[str, Any]:
    fn = call.get("function")
    if not isinstance(fn, dict):
        return call
    arguments = fn.get("arguments")
    if not isinstance(arguments, str) or len(arguments) <= SHOWN_ARGUMENTS:
        return call
    left = json.dumps({"left_out": f"{len(arguments):,} characters of arguments"})
    return {**call, "function": {**fn, "arguments": left}}


def _left_out(n: int, cap: int) -> str:
    if not n:
        return ""
    return (
        f"\n[ctxproxy_recall: {n} more recall calls in this answer were not run (at most {cap} "
        "per answer, within the context window); ask for less at once.]"
    )


def dumps(data: dict[str, Any]) -> bytes:
    return json.dumps(data, ensure_ascii=False).encode()
