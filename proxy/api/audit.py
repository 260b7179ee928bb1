"""The audit API: sessions, their raw histories, what each exchange sent upstream and why."""

from __future__ import annotations

import re
from dataclasses import dataclass, replace
from typing import Annotated

from fastapi import APIRouter, Depends, Path, Query

from proxy.errors import BadRequest, NotFound
from proxy.http.access import Viewer, ViewerDep, audit_viewer
from proxy.http.deps import ServicesDep
from proxy.offload import hop
from proxy.recall import tool as recall
from proxy.recall.refs import stored_message
from proxy.store import (
    ExchangeDetail,
    ExchangePage,
    History,
    SessionDetail,
    SessionPage,
    Stats,
    StoredMessage,
)
from strategies.budget import SHARED

HASH_PREFIX = re.compile(r"[0-9a-fA-F]{12,64}")


router = APIRouter(tags=["audit"], dependencies=[Depends(audit_viewer)])

# Bounded to what the databases' 64-bit integers hold: a bigger number is a 400, not a 500.
INT64_MAX = 2**63 - 1
Limit = Annotated[int, Query(ge=1, le=1000)]
Offset = Annotated[int, Query(ge=0, le=INT64_MAX)]
# An exchange number is a 32-bit column: a bigger one is no exchange (and PostgreSQL's error).
Seq = Annotated[int, Path(ge=1, le=2**31 - 1)]


@dataclass(frozen=True)
class Deleted:
    id: str
    deleted: bool


def _no_session(session_id: str) -> NotFound:
    return NotFound(f"No session '{session_id}'", param="session_id")


async def check_session(services: ServicesDep, viewer: Viewer, session_id: str) -> None:
    """404 for a session that does not exist or that another client key made."""
    if viewer.admin:
        return
    found, owner = await hop(services.store.session_owner, session_id)
    if not found:
        raise _no_session(session_id)
    viewer.check_owner(owner, session_id)


@router.get("/sessions", summary="Sessions, most recently active first")
async def list_sessions(
    services: ServicesDep, viewer: ViewerDep, limit: Limit = 50, offset: Offset = 0
) -> SessionPage:
    return await hop(services.store.list_sessions, limit, offset, viewer.key_id)


@router.get("/sessions/{session_id}", summary="One session with its totals")
async def get_session(session_id: str, services: ServicesDep, viewer: ViewerDep) -> SessionDetail:
    await check_session(services, viewer, session_id)
    found = await hop(services.store.get_session, session_id)
    if found is None:
        raise _no_session(session_id)
    return found


@router.get("/sessions/{session_id}/messages", summary="The raw history, as clients sent it")
async def get_history(
    session_id: str,
    services: ServicesDep,
    viewer: ViewerDep,
    leaf: Annotated[
        int | None, Query(ge=1, le=INT64_MAX, description="entry id of another branch's end")
    ] = None,
) -> History:
    """The latest branch (the newest exchange's request and answer), or the branch ending at
    `leaf`; `branches` lists where each stored branch ends."""
    await check_session(services, viewer, session_id)
    found = await hop(services.store.get_history, session_id, leaf)
    if found is None:
        raise NotFound(f"No session '{session_id}'" + ("" if leaf is None else f" with {leaf}"))
    return found


@router.get("/sessions/{session_id}/exchanges", summary="A session's exchanges, in order")
async def list_exchanges(
    session_id: str,
    services: ServicesDep,
    viewer: ViewerDep,
    limit: Limit = 1000,
    offset: Offset = 0,
) -> ExchangePage:
    """`{data, total, limit, offset, has_more}`, as `/sessions` answers. Each request has its
    `seq`; `turn` numbers the histories sent, and `retry_of` names the first request of a
    history sent again (an SDK retry after a failure, a regenerate)."""
    await check_session(services, viewer, session_id)
    found = await hop(services.store.page_exchanges, session_id, limit, offset)
    if found is None:
        raise _no_session(session_id)
    return found


@router.get(
    "/sessions/{session_id}/exchanges/{seq}",
    summary="One exchange: the request beside the compiled one, events, response",
)
async def get_exchange(
    session_id: str, seq: Seq, services: ServicesDep, viewer: ViewerDep
) -> ExchangeDetail:
    await check_session(services, viewer, session_id)
    found = await hop(services.store.get_exchange, session_id, seq)
    found = found and recall.as_forwarded(found)
    if found is None:
        raise NotFound(f"No exchange {seq} in session '{session_id}'", param="seq")
    return found


@router.get("/messages/{ref}", summary="One stored message, by hash or unique prefix")
async def get_message(ref: str, services: ServicesDep, viewer: ViewerDep) -> StoredMessage:
    """`ref` is the full sha256 or a prefix of at least 12 hex characters; compaction markers
    name their originals this way."""
    if not HASH_PREFIX.fullmatch(ref):
        raise BadRequest("A message reference is 12 to 64 hex characters", param="hash")
    return await hop(stored_message, services.store, ref, viewer.key_id, param="hash")


@router.delete(
    "/sessions/{session_id}", summary="Delete a session, its history and messages no one else uses"
)
async def delete_session(session_id: str, services: ServicesDep, viewer: ViewerDep) -> Deleted:
    await check_session(services, viewer, session_id)
    if not await hop(services.store.delete_session, session_id):
        raise _no_session(session_id)
    return Deleted(session_id, True)


@router.get("/stats", summary="Totals, and compaction by strategy and phase")
async def stats(services: ServicesDep, viewer: ViewerDep) -> Stats:
    """Across every session: the admin key only, once api_keys is set."""
    viewer.require_admin()
    totals = await hop(services.store.stats)
    return replace(totals, caches=SHARED.report())
