"""Compaction strategies: pure functions from a message list to a smaller one, by name."""

from strategies import fold, forget, none, sliding_window, tiered, traceback
from strategies.base import (
    STRATEGIES,
    CompactionEvent,
    Context,
    InvariantError,
    Message,
    OverBudget,
    Strategy,
    canonical_json,
    get,
    message_hash,
    register,
    unregister,
)
from strategies.pipeline import Plan, compile_view

__all__ = [
    "STRATEGIES",
    "CompactionEvent",
    "Context",
    "InvariantError",
    "Message",
    "OverBudget",
    "Plan",
    "Strategy",
    "canonical_json",
    "compile_view",
    "fold",
    "forget",
    "get",
    "message_hash",
    "none",
    "register",
    "sliding_window",
    "tiered",
    "traceback",
    "unregister",
]
