"""A recorded exchange's figures, handed to metrics and the access log (proxy/observe/)."""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

from proxy.observe.metrics import FinishedExchange, observe

if TYPE_CHECKING:  # it imports this module
    from proxy.exchange.recorder import Recorder


def exchange_finished(
    exchange: Recorder,
    status: int,
    now: float,
    first: float | None,
    response: dict[str, Any] | None,
    partial: bool,
    error: dict[str, Any] | None,
) -> None:
    """Called by Recorder.finish once the exchange is recorded: count it, log it."""
    sent, ref = exchange.sent, exchange.ref
    if ref is None:  # only a recorded exchange finishes
        return
    figures = sent or exchange.refused  # a refused request's figures are what it needed
    x = FinishedExchange(
        session=ref.session_id,
        seq=ref.seq,
        model=exchange.model,
        upstream=exchange.upstream,
        stream=exchange.stream,
        status=status,
        latency_s=now - exchange.started,
        ttft_s=None if first is None else first - exchange.started,
        tokens_original=figures.tokens_original if figures else 0,
        tokens_compiled=figures.tokens_compiled if figures else 0,
        budget=figures.prompt_budget if figures else None,
        window=figures.window if figures else None,
        counted=sent is not None,
        events=list(sent.events) if sent else [],
        partial=partial,
        error=error,
        messages=exchange.messages,
        response=response,
        recalls=exchange.rounds.records if exchange.rounds else [],
        tools_removed=list(exchange.tools_removed),
        observed=exchange.observed,
        cache=exchange.cache,
        path=exchange.timing.path,
    )
    services = exchange.services
    observe(services.metrics, x, log_content=services.settings.log_content)
