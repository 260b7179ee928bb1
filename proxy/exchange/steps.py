"""The steps the lifecycle runs on one exchange: load its session's stored decisions, compile,
fit, forward, refit, settle a whole answer; its record and state are recorder.py's."""

from __future__ import annotations

import dataclasses
import logging
from typing import Any

import httpx

from proxy import offload
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
        *,
        later: bool = False,
    ) -> Compiled:
        """Load the session's stored decisions, compile the view and record the request, in one
        thread hop (each costs a loop turn), unless exact counts ask the upstream in between.
        `bodies`: as the client sent it, as it is to be sent, as it is counted (with the
        recall tool where it may be offered); `factor` the upstream's calibration. `later`:
        the record is written while the view goes upstream (`alongside`), not here."""
        body, sendable, counted = bodies
        length = len(body["messages"])
        # The previous answer's calibration is in the state read below, never half the time.
        await self.services.calibration.settled(key.id, length)
        compiled = await self._open_either(key, bodies, upstream, window, factor, later)
        self.opened = (key.id, self.services.calibration.opened(key.id, length))
        return compiled

    async def _open_either(
        self,
        key: SessionKey,
        bodies: tuple[dict[str, Any], dict[str, Any], dict[str, Any]],
        upstream: Upstream,
        window: int | None,
        factor: float,
        later: bool,
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
        if self.looped and self.small:
            self.hashes = hash_messages(body["messages"])
            # A turn the one-trip way records waits for the database on the loop; any other
            # (a new session, a branch) takes several round trips and one hop for them all.
            if self.store.continues(key.id, self.hashes):
                return await self._open_looped(key, bodies, upstream.name, window, factor)
        return await offload.run(
            self.opens_here, self._open, key, bodies, upstream.name, window, factor, later
        )

    async def _open_looped(
        self,
        key: SessionKey,
        bodies: tuple[dict[str, Any], dict[str, Any], dict[str, Any]],
        upstream: str,
        window: int | None,
        factor: float,
    ) -> Compiled:
        """_open on the event loop, the store's round trips awaited (store/looped.py)."""
        body, sendable, counted = bodies
        fresh = sendable["messages"] is not body["messages"]
        self.hashes = hashes = self.hashes or hash_messages(body["messages"])
        # The state this process recorded last for the session, if any, is checked in the
        # record's round trip instead of read in one of its own (store/priors.py).
        cached = None if fresh else self.store.cached_prior(key.id, hashes)
        if cached is not None:
            self.prior = cached.prior
            with self.timing.span("compile"):
                compiled = self._compile(counted, window, self.session_factor(factor))
            with self.timing.span("store"):
                new = self._new_request(key, body, upstream, compiled)
                self.ref = await self.store.record_checked(new, cached)
            if self.ref is not None:
                return compiled
        with self.timing.span("store"):
            self.prior = None if fresh else await self.store.load_state_looped(key.id, hashes)
        with self.timing.span("compile"):
            compiled = self._compile(counted, window, self.session_factor(factor))
        with self.timing.span("store"):
            new = self._new_request(key, body, upstream, compiled)
            self.ref = await self.store.record_looped(new)
        return compiled

    def _open(
        self,
        key: SessionKey,
        bodies: tuple[dict[str, Any], dict[str, Any], dict[str, Any]],
        upstream: str,
        window: int | None,
        factor: float,
        later: bool,
    ) -> Compiled:
        body, sendable, counted = bodies
        fresh = sendable["messages"] is not body["messages"]
        with self.timing.span("store"):
            self.hashes, self.prior = self._hash_and_load(key.id, body["messages"], fresh)
        with self.timing.span("compile"):
            compiled = self._compile(counted, window, self.session_factor(factor))
        new = self._new_request(key, body, upstream, compiled)
        if later:
            self._unwritten = new
            return compiled
        with self.timing.span("store"):
            self.ref = self.store.record_request(new)
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
