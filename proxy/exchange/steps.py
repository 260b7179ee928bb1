"""One exchange's state and the steps the lifecycle runs on it: load its session's stored
decisions, compile, forward, refit, calibrate, record and finish; and the checks of an answer."""

from __future__ import annotations

import dataclasses
import functools
import logging
import time
from collections.abc import Callable, Sequence
from typing import TYPE_CHECKING, Any, TypeVar

import httpx

from proxy import offload
from proxy.compile.calibrate import Opened, exact_prompt_tokens, next_factor
from proxy.compile.view import (
    Compiled,
    answer_limit,
    compile_request,
    limited,
    message_budget,
)
from proxy.errors import (
    ContextLengthExceeded,
    ProxyError,
)
from proxy.exchange import cache, rounds
from proxy.exchange.disconnect import Watch
from proxy.exchange.finished import exchange_finished
from proxy.exchange.guards import answer_json
from proxy.exchange.rounds import Rounds, folded
from proxy.formats.chat_stream import MAX_CHOICES
from proxy.observe.timing import Timing
from proxy.offload import hop
from proxy.recall.followed import mark_rereads
from proxy.sessions.identify import SessionKey
from proxy.settings import Upstream
from proxy.store import RequestRef
from proxy.store.digest import hash_messages
from proxy.store.request import NewRequest
from proxy.store.states import Decisions, Prior
from proxy.upstream import send as up
from proxy.upstream.overflow import Overflow
from strategies.prefix import encoded

if TYPE_CHECKING:  # both import this module
    from proxy.services import Services


log = logging.getLogger("ctxproxy.exchange")
T = TypeVar("T")


class Exchange:
    """One exchange's record: written before forwarding, completed when the answer ends."""

    def __init__(self, services: Services, timing: Timing, upstream: str, model: str):
        self.services = services
        self.upstream, self.model = upstream, model
        self.store = services.store
        self.pipeline = list(services.settings.compaction.pipeline)
        self.timing = timing
        self.started = timing.started
        self.ref: RequestRef | None = None
        self.factor = 1.0
        self.compiled: Compiled | None = None
        self.sent: Compiled | None = None  # the view as recorded, for metrics and the log
        self.messages: list[dict[str, Any]] = []  # as stored: a refit's view refers to it
        self.stream = False
        self.attempts: list[dict[str, Any]] = []
        self.hashes: list[str] | None = None
        self.prior: Prior | None = None
        self.rounds: Rounds | None = None  # set when the recall tool is offered
        self.tools_removed: list[dict[str, Any]] = []  # set by the wire when it translates
        self.limit: int | None = None  # the answer length forwarded, when lower than asked
        self.refused: Compiled | None = None  # a refused request's figures, for the log
        # Set once the answer is ready to go: its record is written after its bytes (flush).
        self.deferring = False
        self.watch: Watch | None = None  # the client watched for a disconnect, while it is
        # Whether its store and compile run on the event loop: short work (a small request on
        # SQLite), which a thread hop would cost more than it takes (offload.py).
        self.here = False
        # Whether its open (store and compile) runs there: also a long agent turn's, whose
        # new part is short (lifecycle._short); its record after the answer stays off the loop,
        # where it overlaps the client's next request instead of delaying it.
        self.opens_here = False
        self._pending: list[Callable[[], None]] = []
        self.opened: tuple[str, Opened] | None = None  # until the answer is recorded
        self.observed = False  # observe mode: the client's request goes upstream as it came
        self.expectation: cache.Expectation | None = None  # of the server's prompt cache
        self.cache: dict[str, Any] = {}  # what the server cached, and why less: for the log

    async def load_prior(self, session_id: str, body: dict[str, Any], sendable: dict) -> None:
        """The session branch's stored compaction state, which this exchange's view starts from."""
        fresh = sendable["messages"] is not body["messages"]  # a repaired history compiles afresh
        self.hashes, self.prior = await hop(
            self._hash_and_load, session_id, body["messages"], fresh
        )

    def _hash_and_load(
        self, session_id: str, messages: list[dict[str, Any]], fresh: bool
    ) -> tuple[list[str], Prior | None]:
        hashes = hash_messages(messages)  # one thread hop for both: each costs a loop turn
        return hashes, None if fresh else self.store.load_state(session_id, hashes)

    def timing_header(self) -> dict[str, str]:
        """Server-Timing as of now: sent with the answer's head."""
        return {"server-timing": self.timing.header()}

    def session_factor(self, default: float) -> float:
        """The session's own calibration, moved by what the upstream counted last exchange."""
        p = self.prior
        return default if p is None else next_factor(p.factor, p.raw_prompt, p.prompt_tokens)

    async def open(
        self,
        key: SessionKey,
        bodies: tuple[dict[str, Any], dict[str, Any], dict[str, Any]],
        upstream: Upstream,
        window: int | None,
        factor: float,
    ) -> Compiled:
        """Load the session's stored decisions, compile the view and record the request, in one
        thread hop (each costs a loop turn), unless exact counts ask the upstream in between.
        `bodies`: as the client sent it, as it is to be sent, as it is counted (with the
        recall tool where it may be offered); `factor` the upstream's calibration."""
        body, sendable, counted = bodies
        length = len(body["messages"])
        # The previous answer's calibration is in the state read below, never half the time.
        await self.services.calibration.settled(key.id, length)
        compiled = await self._open_either(key, bodies, upstream, window, factor)
        self.opened = (key.id, self.services.calibration.opened(key.id, length))
        return compiled

    async def _open_either(
        self,
        key: SessionKey,
        bodies: tuple[dict[str, Any], dict[str, Any], dict[str, Any]],
        upstream: Upstream,
        window: int | None,
        factor: float,
    ) -> Compiled:
        body, sendable, counted = bodies
        if upstream.tokenizer == "upstream" and window is not None:
            with self.timing.span("store"):
                await self.load_prior(key.id, body, sendable)
            with self.timing.span("compile"):
                compiled = await self.fit(upstream, counted, window, self.session_factor(factor))
            with self.timing.span("store"):
                await self.record(key, body, upstream.name, compiled)
            return compiled
        here = self.opens_here
        return await offload.run(here, self._open, key, bodies, upstream.name, window, factor)

    def _open(
        self,
        key: SessionKey,
        bodies: tuple[dict[str, Any], dict[str, Any], dict[str, Any]],
        upstream: str,
        window: int | None,
        factor: float,
    ) -> Compiled:
        body, sendable, counted = bodies
        fresh = sendable["messages"] is not body["messages"]
        with self.timing.span("store"):
            self.hashes, self.prior = self._hash_and_load(key.id, body["messages"], fresh)
        with self.timing.span("compile"):
            compiled = self._compile(counted, window, self.session_factor(factor))
        with self.timing.span("store"):
            self.ref = self.store.record_request(self._new_request(key, body, upstream, compiled))
        return compiled

    async def compile(self, body: dict[str, Any], window: int | None, factor: float) -> Compiled:
        """Off the event loop: a long history's first compile can take a while."""
        return await hop(self._compile, body, window, factor)

    def _compile(self, body: dict[str, Any], window: int | None, factor: float) -> Compiled:
        self.factor = factor
        compiled = compile_request(
            body,
            window=window,
            settings=self.services.settings.compaction,
            counter=self.services.counter.corrected(factor),
            prior=self.prior.state if self.prior else None,
        )
        if self.prior is not None and compiled.tokens_original < self.prior.tokens_original:
            # The history only grew: a lower calibration since must not make it look smaller.
            compiled = dataclasses.replace(compiled, tokens_original=self.prior.tokens_original)
        self.compiled = compiled
        return compiled

    def outgoing(
        self, upstream: Upstream, plain: dict[str, Any], counted: dict[str, Any], compiled: Compiled
    ) -> dict[str, Any]:
        """What to send: with the recall tool when the view holds anything folded or left out,
        and an answer length that fits what the window has left."""
        self.limit = answer_limit(plain, compiled, self.services.settings.compaction)
        self.rounds = None
        if counted is plain or not folded(compiled):
            return limited(plain, self.limit)
        hashes = self.hashes or hash_messages(self.messages)
        # Recall rounds grow the prompt up to the budget: their answers keep to the reserve.
        kept = limited(counted, compiled.reserve if compiled.window else None)
        self.rounds = Rounds(
            self.services, upstream, kept, compiled, self.messages, hashes, self.factor, self.ref
        )
        return limited(counted, self.limit)

    async def settle(self, r: httpx.Response) -> bytes:
        """Close the record of a whole JSON answer; recall calls in it are answered first."""
        data = answer_json(r)
        if self.rounds is not None and r.status_code < 400:
            try:
                final = await self.rounds.settle(data)
            except ProxyError as exc:
                await self.finish(status=exc.status, error=exc.body()["error"])
                raise
            if final is not None:
                await self.finish_from_data(r.status_code, final)
                return rounds.dumps(final)
        await self.finish_from_data(r.status_code, data)
        return r.content

    def decisions(self, compiled: Compiled) -> Decisions | None:
        if compiled.state is None:
            return None
        return Decisions(
            compiled.state, compiled.factor, self._seen_raw(compiled), compiled.tokens_original
        )

    def _seen_raw(self, compiled: Compiled) -> int:
        """The uncorrected count of the prompt the upstream got: observed, the client's own,
        which is what the upstream's prompt_tokens will count (calibration compares them)."""
        if not self.observed:
            return compiled.raw_prompt
        return round(compiled.tokens_original / (compiled.factor or 1.0))

    async def fit(
        self, upstream: Upstream, body: dict[str, Any], window: int | None, factor: float
    ) -> Compiled:
        """Compile; in exact mode, recount with the upstream's tokenizer and refit if needed."""
        compiled = await self.compile(body, window, factor)
        if upstream.tokenizer != "upstream" or window is None:
            return compiled
        limit = message_budget(body, window, self.services.settings.compaction, 0)
        for attempt in range(3):
            outgoing = {**body, "messages": compiled.messages}
            try:
                exact = await exact_prompt_tokens(self.services.client, upstream, outgoing)
            except (httpx.HTTPError, KeyError, ValueError, TypeError) as exc:
                log.warning("exact count on %s failed, estimating: %r", upstream.name, exc)
                return compiled
            if exact is None:
                return compiled
            self.calibrate(compiled, exact)
            if exact <= limit or attempt == 2:
                return dataclasses.replace(compiled, tokens_compiled=exact)
            compiled = await self.compile(
                body, window, self.factor * exact / compiled.tokens_compiled
            )
        return compiled

    async def forward(
        self, upstream: Upstream, body: dict[str, Any], compiled: Compiled
    ) -> httpx.Response:
        # A view that is the request's messages as they came goes as the bytes already made.
        outgoing = {**body, "messages": encoded(compiled.messages, body["messages"])}
        try:  # the answer is read by the route, within max_response_bytes
            return await up.ask(
                self.services.client,
                upstream,
                "/chat/completions",
                outgoing,
                window=compiled.window,
            )
        except ProxyError as exc:
            await self.finish(status=exc.status, error=exc.body()["error"])
            raise

    async def refit(self, body: dict[str, Any], first: Compiled, overflow: Overflow) -> Compiled:
        self.attempts.append(
            {
                "tokens_compiled": first.tokens_compiled,
                "budget": first.prompt_budget,
                "window": first.window,
                "factor": self.factor,
                "upstream_prompt_tokens": overflow.prompt_tokens,
                "upstream_window": overflow.window,
            }
        )
        factor = self.factor * 1.25
        estimated = self.compiled or first  # the estimate, also where `first` is an exact count
        if overflow.prompt_tokens and estimated.tokens_compiled:
            self.calibrate(estimated, overflow.prompt_tokens)
            factor = self.factor * overflow.prompt_tokens / estimated.tokens_compiled * 1.02
        window = min(w for w in (first.window, overflow.window) if w)
        try:
            compiled = await self.compile(body, window, factor)
        except ContextLengthExceeded as exc:
            await self.finish(status=exc.status, error=exc.body()["error"])
            raise
        self.sent = compiled
        if self.ref is not None:
            await hop(
                self.store.replace_compiled,
                self.ref,
                self.messages,
                compiled.messages,
                tokens_compiled=compiled.tokens_compiled,
                budget=compiled.prompt_budget,
                window=compiled.window,
                events=[e.to_dict() for e in compiled.events],
                decided=self.decisions(compiled),
            )
        return compiled

    def calibrate(self, compiled: Compiled, prompt_tokens: Any) -> None:
        """Teach the calibration what the upstream counted for what we estimated."""
        self.services.calibration.observe(
            self.upstream, self.model, compiled.raw_prompt, prompt_tokens
        )

    async def record(
        self,
        key: SessionKey,
        body: dict[str, Any],
        upstream: str,
        compiled: Compiled | None,
        refused: ContextLengthExceeded | None = None,
        counted: dict[str, Any] | None = None,
    ) -> None:
        if refused is not None:  # nothing is sent; keep what it needed against which budget
            counter = self.services.counter.corrected(self.factor)
            settings = self.services.settings.compaction
            whole = await hop(  # counted as the refusal was: tools it reserved too
                compile_request, counted or body, window=None, settings=settings, counter=counter
            )
            compiled = Compiled(
                [], whole.tokens_original, refused.needed, refused.budget, refused.window
            )
            self.refused = compiled
        new = self._new_request(key, body, upstream, compiled)
        self.ref = await hop(self.store.record_request, new)

    def _new_request(
        self, key: SessionKey, body: dict[str, Any], upstream: str, compiled: Compiled | None
    ) -> NewRequest:
        self.sent, self.messages = compiled, body["messages"]
        self.stream = bool(body.get("stream"))
        if compiled is not None and self.refused is None:
            counter = self.services.counter.corrected(compiled.factor)
            self.expectation = cache.expect(
                self.prior, compiled, counter, self.messages, self.observed
            )
        expected = self.expectation
        return NewRequest(
            session_id=key.id,
            source=key.source,
            key_id=key.owner,
            messages=body["messages"],
            request={k: v for k, v in body.items() if k != "messages"},
            model=body["model"],
            upstream=upstream,
            stream=self.stream,
            compiled=compiled.messages if compiled else [],
            tokens_original=compiled.tokens_original if compiled else 0,
            tokens_compiled=compiled.tokens_compiled if compiled else 0,
            budget=compiled.prompt_budget if compiled else None,
            window=compiled.window if compiled else None,
            pipeline=self.pipeline,
            events=[e.to_dict() for e in compiled.events] if compiled else [],
            decided=self.decisions(compiled) if compiled else None,
            hashes=self.hashes,
            observed=self.observed,
            cache_expected=expected.expected if expected else None,
            cache_previous=expected.previous if expected else None,
        )

    async def finish(
        self,
        *,
        status: int,
        response: dict[str, Any] | None = None,
        partial: bool = False,
        usage: dict[str, Any] | None = None,
        error: dict[str, Any] | None = None,
        first: float | None = None,
        choices: Sequence[dict[str, Any] | None] | None = None,
        timings: Any = None,
    ) -> None:
        if self.ref is None:
            return
        sent_usage = self.rounds.first_usage() if self.rounds else None
        if self.rounds is not None and self.rounds.records:
            mark_rereads(self.rounds.records, response)  # did the recall spare a re-read?
        self.cache = self._cache_seen(sent_usage or usage, timings, status)
        calibrating = sent_usage or usage
        if isinstance(calibrating, dict) and self.compiled is not None and status < 400:
            self.services.calibration.observe(
                self.upstream,
                self.model,
                self._seen_raw(self.compiled),
                calibrating.get("prompt_tokens"),
            )
        now = time.monotonic()
        write = functools.partial(
            self.store.finish_exchange,
            self.ref,
            status=status,
            latency_ms=(now - self.started) * 1000,
            ttft_ms=None if first is None else (first - self.started) * 1000,
            response=response,
            partial=partial,
            usage=usage,
            error=error,
            attempts=self.attempts or None,
            choices=choices,
            recalls=self.rounds.records if self.rounds else None,
            sent_usage=sent_usage,
            cache=self.cache,
        )
        if status < 400 and not partial:  # later requests resend or quote it (conversations.py)
            self.services.conversations.answered(self.ref.session_id, self.messages, response)
        if self.deferring:  # the audit API's reads wait for it (Store.expect_finish)
            self.store.expect_finish(self.ref.session_id)
            self._pending.append(functools.partial(write, expected=True))
        else:
            await hop(write)
            self._recorded()
        exchange_finished(self, status, now, first, response, partial, error)

    async def flush(self) -> None:
        """Write the records deferred while the answer was sent; from now on, at once."""
        self.deferring = False
        while self._pending:
            await offload.run(self.here, self._pending[0])
            self._pending.pop(0)
        self._recorded()

    def _recorded(self) -> None:
        """The answer is recorded: the session's next request may read its state (on the loop:
        it sets an asyncio event)."""
        if self.opened is not None:
            self.services.calibration.closed(*self.opened)
            self.opened = None

    def _cache_seen(self, usage: Any, timings: Any, status: int) -> dict[str, Any]:
        """The cached prompt tokens the server reported (llama.cpp's timings where its usage
        has none) and, against what was expected, why the turn got less (exchange/cache.py)."""
        cached = cache.cached_tokens(usage, timings)
        found: dict[str, Any] = {} if cached is None else {"cached_tokens": cached}
        if self.expectation is not None and status < 400:
            cause, lost = self.expectation.cause(cached, self.observed)
            found |= {"cache_cause": cause, "cache_lost": lost}
        return found

    async def finish_from_data(self, status: int, data: dict[str, Any]) -> None:
        choices = data.get("choices") or [{}]
        message = choices[0].get("message") if isinstance(choices[0], dict) else None
        error = data.get("error") if status >= 400 else None
        others = [c.get("message") for c in choices[1:MAX_CHOICES] if isinstance(c, dict)]
        await self.finish(
            status=status,
            response=message,
            usage=data.get("usage"),
            error=error if isinstance(error, dict) else None,
            choices=others or None,
            timings=data.get("timings"),
        )
