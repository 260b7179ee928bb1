"""The tables: sessions, content-addressed messages, the history trie, exchanges."""

from __future__ import annotations

from datetime import UTC, datetime
from typing import Any

from sqlalchemy import (
    JSON,
    BigInteger,
    Boolean,
    DateTime,
    Float,
    ForeignKey,
    Integer,
    MetaData,
    String,
    Text,
    UniqueConstraint,
    false,
)
from sqlalchemy.orm import DeclarativeBase, Mapped, mapped_column

# Deterministic constraint names, so Alembic batch mode (SQLite) can find and alter them.
NAMING = {
    "ix": "ix_%(column_0_label)s",
    "uq": "uq_%(table_name)s_%(column_0_name)s_%(column_1_name)s",
    "fk": "fk_%(table_name)s_%(column_0_name)s_%(referred_table_name)s",
    "pk": "pk_%(table_name)s",
}

# SQLite only autoincrements an INTEGER PRIMARY KEY; elsewhere ids get 64 bits.
RowId = BigInteger().with_variant(Integer(), "sqlite")
Hash = String(64)


def utcnow() -> datetime:
    return datetime.now(UTC)


class Base(DeclarativeBase):
    metadata = MetaData(naming_convention=NAMING)
    type_annotation_map = {
        datetime: DateTime(timezone=True),
        dict[str, Any]: JSON,
        list[Any]: JSON,
    }


class SessionRow(Base):
    __tablename__ = "sessions"

    id: Mapped[str] = mapped_column(String(255), primary_key=True)
    created_at: Mapped[datetime]
    updated_at: Mapped[datetime] = mapped_column(index=True)
    source: Mapped[str] = mapped_column(String(16))
    model: Mapped[str | None] = mapped_column(String(255))
    # The last exchange number handed out; incrementing it row-locks the session, which is
    # what makes seq allocation safe across processes on PostgreSQL.
    last_seq: Mapped[int] = mapped_column(Integer, default=0)
    # The id (a hash) of the client key that made the session; null when api_keys is unset.
    key_id: Mapped[str | None] = mapped_column(String(32), index=True)


class MessageRow(Base):
    """One message body, stored once however many histories and views use it."""

    __tablename__ = "messages"

    hash: Mapped[str] = mapped_column(Hash, primary_key=True)  # sha256 of canonical JSON
    role: Mapped[str | None] = mapped_column(String(32))
    body: Mapped[str] = mapped_column(Text)  # compact JSON, key order as first seen
    size: Mapped[int] = mapped_column(Integer)  # bytes of body
    created_at: Mapped[datetime]


class EntryRow(Base):
    """A node of a session's history trie: one message at one position after one prefix."""

    __tablename__ = "entries"
    __table_args__ = (UniqueConstraint("session_id", "prefix_hash"),)

    id: Mapped[int] = mapped_column(RowId, primary_key=True, autoincrement=True)
    session_id: Mapped[str] = mapped_column(ForeignKey("sessions.id"))
    parent_id: Mapped[int | None] = mapped_column(RowId, ForeignKey("entries.id"), index=True)
    position: Mapped[int] = mapped_column(Integer)
    message_hash: Mapped[str] = mapped_column(ForeignKey("messages.hash"), index=True)
    # sha256(parent's prefix_hash + message_hash): names the whole history up to here.
    prefix_hash: Mapped[str] = mapped_column(Hash)
    partial: Mapped[bool] = mapped_column(Boolean, default=False)
    created_at: Mapped[datetime]


class ExchangeRow(Base):
    """One request through the proxy: what came in, what went upstream, what came back."""

    __tablename__ = "exchanges"
    __table_args__ = (UniqueConstraint("session_id", "seq"),)

    id: Mapped[int] = mapped_column(RowId, primary_key=True, autoincrement=True)
    session_id: Mapped[str] = mapped_column(ForeignKey("sessions.id"))
    seq: Mapped[int] = mapped_column(Integer)
    created_at: Mapped[datetime]
    finished_at: Mapped[datetime | None]
    model: Mapped[str] = mapped_column(String(255))
    upstream: Mapped[str] = mapped_column(String(255))
    stream: Mapped[bool] = mapped_column(Boolean)
    status: Mapped[int | None] = mapped_column(Integer)  # null while pending
    latency_ms: Mapped[float | None] = mapped_column(Float)
    ttft_ms: Mapped[float | None] = mapped_column(Float)
    tokens_original: Mapped[int] = mapped_column(Integer)
    tokens_compiled: Mapped[int] = mapped_column(Integer)
    budget: Mapped[int | None] = mapped_column(Integer)
    window: Mapped[int | None] = mapped_column("context_window", Integer)  # WINDOW is reserved
    pipeline: Mapped[list[Any]]
    events: Mapped[list[Any]]
    params: Mapped[dict[str, Any]]  # the request body minus "messages"
    leaf_entry_id: Mapped[int] = mapped_column(RowId, ForeignKey("entries.id"), index=True)
    new_messages: Mapped[int] = mapped_column(Integer)
    # The compiled view, run-length encoded against the request's own history: [start, stop]
    # for a run of raw positions, or a message hash for anything a strategy rewrote.
    compiled: Mapped[list[Any]]
    response_hash: Mapped[str | None] = mapped_column(ForeignKey("messages.hash"), index=True)
    response_entry_id: Mapped[int | None] = mapped_column(
        RowId, ForeignKey("entries.id"), index=True
    )
    partial: Mapped[bool] = mapped_column(Boolean, default=False)
    usage: Mapped[dict[str, Any] | None]
    prompt_tokens: Mapped[int | None] = mapped_column(Integer)
    completion_tokens: Mapped[int | None] = mapped_column(Integer)
    cached_tokens: Mapped[int | None] = mapped_column(Integer)
    error: Mapped[dict[str, Any] | None]
    attempts: Mapped[list[Any] | None]
    key_id: Mapped[str | None] = mapped_column(String(32))  # the client key's id, never the key
    # The process serving the exchange (InstanceRow.id) and, while it streams, the answer so
    # far: what a process that dies mid-answer leaves for the next start to close.
    owner: Mapped[str | None] = mapped_column(String(128), index=True)
    progress: Mapped[dict[str, Any] | None]
    # With n > 1: the answers of choices 1, 2, … (choice 0 is the response, in the history).
    choices: Mapped[list[Any] | None]
    # The model's ctxproxy_recall calls, one dict each: round, arguments, outcome, result.
    recalls: Mapped[list[Any] | None]
    # Observe mode: the client's request went upstream as it came; the view is what would have.
    observed: Mapped[bool] = mapped_column(Boolean, default=False, server_default=false())
    # The prompt cache (proxy/exchange/cache.py): the view's prefix expected reusable, the
    # previous view's tokens, why the upstream cached less (firing, client, evicted), how much.
    cache_expected: Mapped[int | None] = mapped_column(Integer)
    cache_previous: Mapped[int | None] = mapped_column(Integer)
    cache_cause: Mapped[str | None] = mapped_column(String(16))
    cache_lost: Mapped[int | None] = mapped_column(Integer)


class InstanceRow(Base):
    """A running ctxproxy process; its heartbeat tells the others it still serves its exchanges."""

    __tablename__ = "instances"

    id: Mapped[str] = mapped_column(String(128), primary_key=True)
    host: Mapped[str] = mapped_column(String(255))
    pid: Mapped[int] = mapped_column(Integer)
    started_at: Mapped[datetime]
    heartbeat_at: Mapped[datetime]


class CompiledRef(Base):
    """The rewritten messages an exchange's compiled view uses, so they stay referenced."""

    __tablename__ = "exchange_messages"

    exchange_id: Mapped[int] = mapped_column(
        RowId, ForeignKey("exchanges.id", ondelete="CASCADE"), primary_key=True
    )
    message_hash: Mapped[str] = mapped_column(
        ForeignKey("messages.hash"), primary_key=True, index=True
    )


class ViewStateRow(Base):
    """A session branch's compaction decisions after one exchange: the view of the history up
    to `entry_id`, message by message (raw or a stored form), what was forgotten, and the
    calibration in force. The next turn on the branch starts from the newest one."""

    __tablename__ = "view_states"

    exchange_id: Mapped[int] = mapped_column(
        RowId, ForeignKey("exchanges.id", ondelete="CASCADE"), primary_key=True
    )
    session_id: Mapped[str] = mapped_column(ForeignKey("sessions.id"), index=True)
    entry_id: Mapped[int] = mapped_column(RowId, ForeignKey("entries.id"), index=True)
    covered: Mapped[int] = mapped_column(Integer)
    # [start, stop] runs of raw positions and {"i", "l", "h"(, "s")} forms, in view order
    items: Mapped[list[Any]]
    forgotten: Mapped[list[Any]]
    carried: Mapped[list[Any]]
    view_tokens: Mapped[int] = mapped_column(Integer)
    original_tokens: Mapped[int] = mapped_column(Integer)
    factor: Mapped[float] = mapped_column(Float)
    raw_prompt: Mapped[int] = mapped_column(Integer)  # uncorrected count of the whole prompt
    tokens_original: Mapped[int] = mapped_column(Integer)  # as reported for that exchange
    created_at: Mapped[datetime]


class SecretRow(Base):
    """A per-install secret (the key signing response ids), made once by migration 0005."""

    __tablename__ = "secrets"

    name: Mapped[str] = mapped_column(String(64), primary_key=True)
    value: Mapped[str] = mapped_column(String(128))
