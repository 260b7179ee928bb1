"""The steps the lifecycle runs on one exchange: load its session's stored decisions, compile,
fit, forward, refit, settle a whole answer; its record and state are recorder.py's."""

from __future__ import annotations

import dataclasses
import logging
from typing import Any

import httpx

from proxy.compile.calibrate import exact_prompt_tokens, next_factor
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
from proxy.exchange import rounds
from proxy.exchange.guards import answer_json
from proxy.exchange.recorder import Recorder
from proxy.exchange.rounds import Rounds, folded
from proxy.offload import hop
from proxy.sessions.identify import SessionKey
from proxy.settings import CompactionSettings, Upstream
from proxy.store.digest import hash_messages
from proxy.store.paths import Turn
from proxy.store.request import NewRequest
from proxy.store.states import Prior
from proxy.upstream import send as up
from proxy.upstream.overflow import Overflow
from strategies.prefix import encoded

log = logging.getLogger("ctxproxy.exchange")


class Exchange(Recorder):
    """One exchange: its session's stored decisions loaded, its view compiled and fitted,
    forwarded, refitted where the upstream counts it over its window; recorded (Recorder)."""

    # The request's own compaction settings, when it chose any (/v1/compress's headroom).
    compaction: CompactionSettings | None = None

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
        sizes: tuple[int | None, int | None] = (None, None),
        *,
        record_during_send: bool = False,
    ) -> Compiled:
        """Open the turn: the store reads the session's stored decisions, the view is compiled
        and the store records the request (or leaves it to be recorded while the view goes
        upstream), where the store's path for it runs them. `bodies`: as the client sent it, as
        it is to be sent, as it is counted (with the recall tool where it may be offered);
        `factor` the upstream's calibration; `sizes`: the body's bytes as read and those of
        its part no earlier request held, where known (they choose the path); with
        `record_during_send` the request may be recorded while the view goes upstream."""
        body, sendable, counted = bodies
        length = len(body["messages"])
        # The previous answer's calibration is in the state read below, never half the time.
        await self.services.calibration.settled(key.id, length)
        fresh = sendable["messages"] is not body["messages"]  # a repaired history compiles afresh
        turn = Turn(
            key.id, body["messages"], *sizes, fresh=fresh, record_during_send=record_during_send
        )
        if upstream.tokenizer == "upstream" and window is not None:
            compiled = await self._open_exact(key, body, counted, upstream, window, factor, turn)
        else:

            def build(hashes: list[str], prior: Prior | None) -> NewRequest:
                self.hashes, self.prior = hashes, prior
                with self.timing.span("compile", within="store"):
                    made = self._compile(counted, window, self.session_factor(factor))
                return self._new_request(key, body, upstream.name, made)

            await self._open_turn(turn, build)
            assert self.compiled is not None
            compiled = self.compiled
        self.opened = (key.id, self.services.calibration.opened(key.id, length))
        return compiled

    async def _open_exact(
        self,
        key: SessionKey,
        body: dict[str, Any],
        counted: dict[str, Any],
        upstream: Upstream,
        window: int,
        factor: float,
        turn: Turn,
    ) -> Compiled:
        """Exact counts ask the upstream between the state's read and the record: the store
        reads, the view is fitted, then the store opens the turn with it."""
        with self.timing.span("store"):
            self.hashes = await hop(hash_messages, body["messages"])
            read = self.store.load_state
            self.prior = None if turn.fresh else await hop(read, key.id, self.hashes)
        with self.timing.span("compile"):
            compiled = await self.fit(upstream, counted, window, self.session_factor(factor))
        new = self._new_request(key, body, upstream.name, compiled)
        plain = dataclasses.replace(turn, hashes=self.hashes, fresh=True, record_during_send=False)
        await self._open_turn(plain, lambda hashes, prior: new)
        return compiled

    async def compile(self, body: dict[str, Any], window: int | None, factor: float) -> Compiled:
        """Off the event loop: a long history's first compile can take a while."""
        return await hop(self._compile, body, window, factor)

    def _compile(self, body: dict[str, Any], window: int | None, factor: float) -> Compiled:
        self.factor = factor
        compiled = compile_request(
            body,
            window=window,
            settings=self.compaction or self.services.settings.compaction,
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
