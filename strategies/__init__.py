"""Compaction strategies: pure functions from a message list to a smaller one, by name."""

from strategies import dense, fold, forget, none, sliding_window, tiered, traceback
from strategies.context import Context, InvariantError, OverBudget, Strategy
from strategies.events import CompactionEvent
from strategies.messages import Message, canonical_json, message_hash
from strategies.pipeline import Plan, compile_view
from strategies.registry import STRATEGIES, get, register, unregister

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
    "dense",
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
