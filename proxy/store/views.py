"""What the store's read queries return: plain typed records, ready for JSON and the terminal."""

from __future__ import annotations

from dataclasses import dataclass, field
from datetime import datetime
from typing import Any


@dataclass(frozen=True)
class RequestRef:
    session_id: str
    seq: int  # per-session exchange number, 1, 2, 3 …
    exchange_id: int
    leaf_entry_id: int  # the history entry of the request's last message
    new_messages: int  # how many history positions this request added
    # That entry's position and prefix hash, when known: the answer is stored after it.
    leaf_position: int | None = None
    leaf_prefix: str | None = None


@dataclass(frozen=True)
class Totals:
    exchanges: int = 0  # every request recorded, retries and failures included
    pending: int = 0
    errors: int = 0  # requests that ended in an HTTP error (refused, upstream down, …)
    # Tokens of the requests that did not fail (answered or still pending): what a refused
    # request would have needed was never sent, so it does not count as saved.
    tokens_original: int = 0
    tokens_compiled: int = 0
    tokens_saved: int = 0
    prompt_tokens: int = 0  # as the upstream reported them: tokens in …
    completion_tokens: int = 0  # … and out
    cached_tokens: int = 0
    turns: int = 0  # distinct histories sent: what the user counts as turns
    retries: int = 0  # requests that resent a history already sent (SDK retries, regenerates)
    # The prompt cache (proxy/exchange/cache.py): what firings cost in cached prompt tokens,
    # and prefill tokens saved net of it; with observed exchanges, what it would have been.
    cache_lost: int = 0
    net_saved: int = 0
    observed: int = 0  # exchanges in observe mode: the upstream got the client's request
    cache_breaks: int = 0  # turns that found less cached than an unchanged view would have


@dataclass(frozen=True)
class SessionSummary:
    id: str
    created_at: datetime
    updated_at: datetime
    source: str
    model: str | None
    turns: int  # distinct histories sent; totals.exchanges counts every request
    totals: Totals
    title: str | None = None  # the first user message, shortened


@dataclass(frozen=True)
class SessionPage:
    data: list[SessionSummary]
    total: int
    limit: int
    offset: int
    has_more: bool


@dataclass(frozen=True)
class Branch:
    leaf_entry_id: int
    length: int  # messages from the root to this leaf
    created_at: datetime


@dataclass(frozen=True)
class SessionDetail:
    session: SessionSummary
    history_length: int  # messages on the latest branch
    stored_entries: int  # history positions stored, over all branches
    branch_count: int


@dataclass(frozen=True)
class HistoryMessage:
    position: int
    entry_id: int
    hash: str
    partial: bool
    message: dict[str, Any]


@dataclass(frozen=True)
class History:
    session_id: str
    leaf_entry_id: int | None
    branch_count: int
    branches: list[Branch]  # newest first, at most 100
    messages: list[HistoryMessage]


@dataclass(frozen=True)
class ExchangeSummary:
    session_id: str
    seq: int  # the request's number in the session: 1, 2, 3 …
    turn: int  # the history's number: a retry of the same history has its first request's turn
    retry_of: int | None  # the seq of the first request that sent this same history
    created_at: datetime
    finished_at: datetime | None
    model: str
    upstream: str
    stream: bool
    pending: bool
    status: int | None  # the HTTP status once finished
    error_code: str | None  # the error's code when it failed: context_length_exceeded (refused) …
    latency_ms: float | None
    ttft_ms: float | None
    tokens_original: int
    tokens_compiled: int
    budget: int | None
    window: int | None
    pipeline: list[str]
    phases: list[str]  # compaction events as strategy or strategy:phase, in order, distinct
    new_messages: int
    partial: bool
    prompt_tokens: int | None
    completion_tokens: int | None
    cached_tokens: int | None
    key_id: str | None = None  # the client key's id (a hash), when api_keys is set
    observed: bool = False  # observe mode: the upstream got the client's request unchanged
    cache_expected: int | None = None  # the view's prefix expected cached (shared with the last)
    cache_previous: int | None = None  # the branch's previous view: what an unchanged one reuses
    cache_cause: str | None = None  # why less was cached: firing, client or evicted
    cache_lost: int | None = None  # tokens cached below what an unchanged view would have had


@dataclass(frozen=True)
class ExchangePage:
    data: list[ExchangeSummary]
    total: int
    limit: int
    offset: int
    has_more: bool


@dataclass(frozen=True)
class ExchangeDetail:
    exchange: ExchangeSummary
    request: dict[str, Any]  # what the client sent (params + full history), headers excluded
    compiled_request: dict[str, Any]  # what went upstream: the same params, compiled messages
    compiled_hashes: list[str]
    events: list[dict[str, Any]]
    response: dict[str, Any] | None
    response_hash: str | None
    usage: dict[str, Any] | None
    error: dict[str, Any] | None
    attempts: list[dict[str, Any]] | None
    leaf_entry_id: int
    response_entry_id: int | None
    choices: list[dict[str, Any]] | None = None  # with n > 1: the answers of choices 1, 2, …
    recalls: list[dict[str, Any]] | None = None  # the model's ctxproxy_recall calls, answered


@dataclass(frozen=True)
class StoredMessage:
    hash: str
    role: str | None
    bytes: int
    created_at: datetime
    message: dict[str, Any]


@dataclass(frozen=True)
class PhaseStats:
    strategy: str
    phase: int | None
    events: int = 0
    tokens_before: int = 0
    tokens_after: int = 0
    tokens_saved: int = 0
    chars_removed: int = 0


@dataclass(frozen=True)
class Stats:
    sessions: int
    totals: Totals
    messages_stored: int
    message_bytes: int
    history_entries: int
    by_phase: list[PhaseStats] = field(default_factory=list)
    # The in-memory caches: bytes used, the budget, each cache's share (strategies/budget.py).
    caches: dict[str, Any] = field(default_factory=dict)
