"""Which processes are alive to finish their exchanges, and closing what dead ones left open.

Each running app registers an instance row and beats its heartbeat; an exchange records the
instance serving it. An instance is dead when its heartbeat is stale, or at once when it ran on
this host under a process id that no longer exists (a kill -9 and a restart).
"""

from __future__ import annotations

import os
from datetime import datetime, timedelta
from typing import Any

from sqlalchemy import delete, select, update
from sqlalchemy.orm import Session

from proxy.store.models import ExchangeRow, InstanceRow
from proxy.store.views import RequestRef

INTERRUPTED = {
    "message": "ctxproxy stopped before this exchange ended; what was received is kept",
    "type": "server_error",
    "param": None,
    "code": "interrupted",
}


def register(s: Session, instance: str, host: str, pid: int, now: datetime) -> None:
    s.add(InstanceRow(id=instance, host=host, pid=pid, started_at=now, heartbeat_at=now))


def beat(s: Session, instance: str, now: datetime) -> None:
    s.execute(update(InstanceRow).where(InstanceRow.id == instance).values(heartbeat_at=now))


def dead(s: Session, host: str, now: datetime, stale: float) -> list[str]:
    cutoff = now - timedelta(seconds=stale)
    found = []
    for row in s.execute(
        select(InstanceRow.id, InstanceRow.host, InstanceRow.pid, InstanceRow.heartbeat_at)
    ):
        beat_at = (
            row.heartbeat_at
            if row.heartbeat_at.tzinfo
            else row.heartbeat_at.replace(tzinfo=now.tzinfo)
        )
        gone_here = row.host == host and row.pid != os.getpid() and not pid_alive(row.pid)
        if gone_here or beat_at < cutoff:
            found.append(row.id)
    return found


def pid_alive(pid: int) -> bool:
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    except PermissionError:  # someone else's process: alive
        return True
    return True


def forget(s: Session, instances: list[str]) -> None:
    s.execute(delete(InstanceRow).where(InstanceRow.id.in_(instances)))


def open_exchanges(s: Session, owners: list[str] | None) -> list[tuple[RequestRef, Any, Any]]:
    """Pending exchanges of these instances (None: of no known instance, i.e. from before
    owners were recorded or of an instance already forgotten), with progress and start."""
    x = ExchangeRow
    query = select(
        x.session_id, x.seq, x.id, x.leaf_entry_id, x.new_messages, x.progress, x.created_at
    ).where(x.status.is_(None))
    if owners is None:
        known = select(InstanceRow.id)
        query = query.where(x.owner.is_(None) | x.owner.not_in(known))
    else:
        query = query.where(x.owner.in_(owners))
    return [(RequestRef(*r[:5]), r[5], r[6]) for r in s.execute(query)]
