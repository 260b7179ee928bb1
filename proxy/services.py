"""What every stage of a request needs, built once per app in the lifespan (proxy/app.py).

It sits below the stages that take it (http, api, exchange) and imports only what lies below
them: compile, sessions, store, upstream, observe, settings."""

from __future__ import annotations

from dataclasses import dataclass, field

import httpx

from proxy.compile.calibrate import Calibration
from proxy.compile.tokens import TokenCounter
from proxy.observe.metrics import Metrics
from proxy.sessions.conversations import Conversations
from proxy.settings import Settings
from proxy.store import Store
from proxy.upstream.windows import Windows


@dataclass
class Services:
    """What the handlers need, built once per app in the lifespan."""

    settings: Settings
    client: httpx.AsyncClient
    counter: TokenCounter
    store: Store
    windows: Windows
    calibration: Calibration
    metrics: Metrics
    # (upstream, api) pairs that answered 404 natively: translated from then on
    wire_fallbacks: set[tuple[str, str]] = field(default_factory=set)
    # recent fingerprint sessions, so an agent's side requests join their conversation
    conversations: Conversations = field(default_factory=Conversations)
