"""A request record as tests and benchmarks store it directly, without the app in front."""

from __future__ import annotations

from typing import Any

from proxy.store.request import NewRequest


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
