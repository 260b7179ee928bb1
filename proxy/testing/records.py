"""A request record as tests and benchmarks store it directly, without the app in front, and its
exchange closed."""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

from proxy.store.request import NewRequest

if TYPE_CHECKING:
    from proxy.store import Store
    from proxy.store.views import RequestRef


def new_request(session_id: str, messages: list[dict[str, Any]], **fields: Any) -> NewRequest:
    """An uncompacted request of `messages` in `session_id`; `fields` override the rest."""
    values: dict[str, Any] = {
        "session_id": session_id,
        "source": "header",
        "key_id": None,
        "messages": messages,
        "request": {"model": "m"},
        "model": "m",
        "upstream": "u",
        "stream": False,
        "compiled": messages,
        "tokens_original": 10,
        "tokens_compiled": 10,
        "budget": None,
        "window": None,
        "pipeline": [],
        "events": [],
        "decided": None,
    }
    return NewRequest(**(values | fields))


def finish_turn(
    store: Store,
    ref: RequestRef,
    answer: dict[str, Any] | None,
    usage: dict[str, Any] | None = None,
) -> None:
    """Close `ref`'s exchange with a whole 200 answer, as the app does after a turn upstream."""
    store.finish_exchange(
        ref,
        status=200,
        latency_ms=1.0,
        ttft_ms=None,
        response=answer,
        partial=False,
        usage=usage,
        error=None,
    )
