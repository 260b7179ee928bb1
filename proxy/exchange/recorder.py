"""An exchange's record: the request's, written before its answer is handed on (while the view
goes upstream, where it can), and the answer's, written once its bytes are sent; the state both
need, which the steps of steps.py fill in."""

from __future__ import annotations

import asyncio
import time
from collections.abc import Awaitable, Sequence
from typing import TYPE_CHECKING, Any

import httpx

from proxy.compile.calibrate import Opened
from proxy.compile.view import Compiled, compile_request
from proxy.errors import ContextLengthExceeded
from proxy.exchange import cache
from proxy.exchange.disconnect import Watch
from proxy.exchange.finished import exchange_finished
from proxy.exchange.rounds import Rounds
from proxy.formats.chat_stream import MAX_CHOICES
from proxy.observe.timing import Timing
from proxy.offload import hop
from proxy.recall.followed import mark_rereads
from proxy.sessions.identify import SessionKey
from proxy.store import RequestRef
from proxy.store.paths import Build, OpenTurn, Turn
from proxy.store.request import Answer, NewRequest
from proxy.store.states import Decisions, Prior
from proxy.upstream.aiotransport import ON_SENT

if TYPE_CHECKING:  # it imports the exchange's modules
    from proxy.services import Services


class Recorder:
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
        self.turn: OpenTurn | None = None  # as the store opened it, on the path it chose
        self._pending: list[Answer] = []  # answers to be recorded once their bytes are sent
        # The request's record, when the store left it to be written while the upstream works
        # (`alongside`), once that write is under way.
        self._recording: asyncio.Future[None] | None = None
        self._sending = False  # whether that write runs while the view goes upstream
        self._out: asyncio.Event | None = None  # set once the view is out: the write may start
        self.opened: tuple[str, Opened] | None = None  # until the answer is recorded
        self.observed = False  # observe mode: the client's request goes upstream as it came
        self.expectation: cache.Expectation | None = None  # of the server's prompt cache
        self.cache: dict[str, Any] = {}  # what the server cached, and why less: for the log

    def timing_header(self) -> dict[str, str]:
        """Server-Timing as of now: sent with the answer's head."""
        return {"server-timing": self.timing.header()}

    async def _open_turn(self, turn: Turn, build: Build) -> None:
        with self.timing.span("store"):
            self.turn = await self.store.open_turn(turn, build)
        self.ref = self.turn.ref
        self.timing.path = self.turn.path.name

    def _unwritten(self) -> bool:
        return self.turn is not None and self.turn.unwritten is not None

    async def alongside(self, sending: Awaitable[httpx.Response]) -> httpx.Response:
        """`sending` (the view on its way upstream) while the request's record is written, in a
        task of its own: on the loop it runs once the request is out, while the upstream works.
        The answer is handed on only once its request is recorded; a failed send still waits
        for the record (finish closes it), a failed record refuses the answer."""
        if not self._unwritten():
            return await sending
        self._out = out = asyncio.Event()  # set once the request's bytes are written
        self._recording, self._sending = asyncio.ensure_future(self._write(out)), True
        on_sent = ON_SENT.set(out.set)
        try:
            r = await sending
        finally:
            ON_SENT.reset(on_sent)
            out.set()
        try:
            await asyncio.shield(self._recording)
        except BaseException:
            await r.aclose()
            raise
        return r

    async def recorded(self) -> None:
        """The request's record written, if open() left it for later: at once where nothing
        was sent (an error first), else the write under way awaited."""
        if self._recording is None:
            if not self._unwritten():
                return
            self._recording = asyncio.ensure_future(self._write())
        if self._out is not None:  # the send is over (a failed one's finish is why we are here)
            self._out.set()
        await asyncio.shield(self._recording)

    async def _write(self, out: asyncio.Event | None = None) -> None:
        assert self.turn is not None
        if out is not None:  # on the loop, it would hold the request back
            await out.wait()
        with self.timing.span("store", within="upstream" if self._sending else None):
            self.ref = await self.store.record_turn(self.turn)
        if self.rounds is not None:  # built before the record was written
            self.rounds.ref = self.ref

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
        # Rare: recorded on a thread (no size given), as any long request.
        turn = Turn(key.id, body["messages"], None, hashes=self.hashes, fresh=True)
        await self._open_turn(turn, lambda hashes, prior: new)

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

    def calibrate(self, compiled: Compiled, prompt_tokens: Any) -> None:
        """Teach the calibration what the upstream counted for what we estimated."""
        self.services.calibration.observe(
            self.upstream, self.model, compiled.raw_prompt, prompt_tokens
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
        if self._recording is not None or self._unwritten():
            try:
                await self.recorded()
            except Exception:  # the record failed, and its error went up: nothing to close
                return
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
        answer = Answer(
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
            self._pending.append(answer)
        else:
            assert self.turn is not None
            await self.store.close_turn(self.turn, answer)
            self._recorded()
        exchange_finished(self, status, now, first, response, partial, error)

    async def flush(self) -> None:
        """Write the records deferred while the answer was sent; from now on, at once."""
        self.deferring = False
        while self._pending and self.turn is not None and self.ref is not None:
            await self.store.close_turn(self.turn, self._pending[0], expected=True)
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
