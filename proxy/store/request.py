"""What one request is recorded from: its history, where it goes and the view compiled for it."""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:  # states imports the store's statement modules, which need none of this
    from proxy.store.states import Decisions


@dataclass(frozen=True, kw_only=True)
class NewRequest:
    session_id: str
    source: str  # how the session was identified: "header", "path", "fingerprint", …
    messages: list[dict[str, Any]]  # the raw history as the client sent it
    request: dict[str, Any]  # the other request fields, kept as the exchange's params
    key_id: str | None = None  # the client key's id, where keys are configured
    model: str
    upstream: str
    stream: bool
    compiled: list[dict[str, Any]]  # the view sent upstream
    tokens_original: int
    tokens_compiled: int
    budget: int | None
    window: int | None
    pipeline: list[str]
    events: list[dict[str, Any]]
    decided: Decisions | None = None  # the compile's decisions: the branch's next turn starts there
    hashes: list[str] | None = None  # message_hash of each message, when the caller has them
    observed: bool = False  # observe mode: the client's request went upstream unchanged
    cache_expected: int | None = None  # the view's prefix expected cached (exchange/cache.py)
    cache_previous: int | None = None  # the previous view's tokens on the branch


@dataclass(frozen=True, kw_only=True)
class Answer:
    """What one exchange is closed with: its answer (complete or partial) and what it cost."""

    status: int
    latency_ms: float
    ttft_ms: float | None
    response: dict[str, Any] | None  # the answer's message (the first choice's)
    partial: bool
    usage: dict[str, Any] | None  # what the client got: all recall rounds added up
    error: dict[str, Any] | None
    attempts: list[dict[str, Any]] | None = None  # views refitted after an upstream overflow
    choices: Sequence[dict[str, Any] | None] | None = None  # further choices' answers (n > 1)
    recalls: list[dict[str, Any]] | None = None  # None: as saved during the rounds
    sent_usage: dict[str, Any] | None = None  # the first request's, where recall rounds ran
    cache: dict[str, Any] | None = None  # cached_tokens, cache_cause, cache_lost
