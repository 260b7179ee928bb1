"""Durable storage: sessions, their raw histories (never rewritten) and exchange records."""

from proxy.store.reads import AmbiguousPrefix
from proxy.store.request import NewRequest
from proxy.store.store import Store
from proxy.store.views import (
    ExchangeDetail,
    ExchangePage,
    ExchangeSummary,
    History,
    RequestRef,
    SessionDetail,
    SessionPage,
    SessionSummary,
    Stats,
    StoredMessage,
)

__all__ = [
    "AmbiguousPrefix",
    "ExchangeDetail",
    "ExchangePage",
    "ExchangeSummary",
    "History",
    "NewRequest",
    "RequestRef",
    "SessionDetail",
    "SessionPage",
    "SessionSummary",
    "Stats",
    "Store",
    "StoredMessage",
]
