"""The session viewer: server-rendered pages under /ui over the same store as the audit API."""

from __future__ import annotations

import dataclasses
import json
import math
from collections import Counter
from dataclasses import dataclass
from datetime import datetime
from functools import cache
from pathlib import Path
from typing import Annotated, Any, Literal

import jinja2
from fastapi import APIRouter, Depends, Query, Request
from fastapi.responses import FileResponse, HTMLResponse
from fastapi.templating import Jinja2Templates
from starlette.exceptions import HTTPException

from proxy.api.audit import Seq, check_session
from proxy.compile.tokens import TokenCounter
from proxy.errors import Unauthorized
from proxy.http.access import Viewer, audit_viewer
from proxy.http.deps import ServicesDep
from proxy.offload import hop
from proxy.recall import tool as recall
from proxy.ui import chart, compare, firing
from strategies.messages import message_hash

UI_DIR = Path(__file__).resolve().parent.parent / "ui"
SESSIONS_PER_PAGE = 50
TURNS_PER_PAGE = 200
ROWS_PER_PAGE = 100
PREVIEW_CHARS = 4000


def require_viewer(request: Request, services: ServicesDep) -> Viewer:
    """The audit API's rule; a browser is asked for a key as a Basic-auth password, since it
    cannot send a bearer token from a plain link."""
    try:
        return audit_viewer(request, services)
    except Unauthorized as exc:
        raise HTTPException(
            401, exc.message, headers={"WWW-Authenticate": 'Basic realm="ctxproxy admin"'}
        ) from None


router = APIRouter(prefix="/ui", include_in_schema=False, dependencies=[Depends(require_viewer)])
UiViewer = Annotated[Viewer, Depends(require_viewer)]

# Bounded, so that no page number turns into an offset the database cannot hold (a 500).
Page = Annotated[int, Query(ge=1, le=2**31 - 1)]


@cache
def _templates() -> Jinja2Templates:
    templates = Jinja2Templates(directory=UI_DIR / "templates")
    templates.env.filters["when"] = _when
    templates.env.filters["num"] = _num
    templates.env.filters["color"] = lambda phase: chart.strategy_color(phase.split(":")[0])
    templates.env.filters["pretty"] = lambda v: json.dumps(v, indent=2, ensure_ascii=False)
    return templates


def _num(v: Any) -> str:
    """Thousands separated; anything else (events are free-form JSON) as it is, or a dash."""
    if isinstance(v, int | float) and not isinstance(v, bool):
        return f"{v:,}"
    return "–" if v is None or isinstance(v, jinja2.Undefined) else str(v)


def _when(t: datetime | None) -> str:
    return "–" if t is None else t.strftime("%Y-%m-%d %H:%M:%S")


@dataclass(frozen=True)
class Pager:
    page: int
    pages: int
    total: int
    first: int  # 1-based number of the first item shown
    last: int


def _pager(page: int, per: int, total: int) -> Pager:
    pages = max(1, math.ceil(total / per))
    page = min(page, pages)
    first = (page - 1) * per
    return Pager(page, pages, total, min(first + 1, total), min(first + per, total))


def _render(request: Request, name: str, **context: Any) -> HTMLResponse:
    root = request.scope.get("root_path", "")
    context |= {"root": root, "ui": root + "/ui"}
    return _templates().TemplateResponse(request, name, context)


@router.get("/ui.css")
async def stylesheet() -> FileResponse:
    return FileResponse(
        UI_DIR / "static" / "ui.css", headers={"Cache-Control": "private, max-age=300"}
    )


@router.get("")
@router.get("/")
async def sessions_page(
    request: Request, services: ServicesDep, viewer: UiViewer, page: Page = 1
) -> HTMLResponse:
    per, mine = SESSIONS_PER_PAGE, viewer.key_id
    found = await hop(services.store.list_sessions, per, (page - 1) * per, mine)
    pager = _pager(page, per, found.total)
    if pager.page != page:  # past the end: show the last page
        offset = (pager.page - 1) * per
        found = await hop(services.store.list_sessions, per, offset, mine)
    return _render(request, "sessions.html", sessions=found.data, pager=pager)


@router.get("/sessions/{session_id}")
async def session_page(
    request: Request,
    session_id: str,
    services: ServicesDep,
    viewer: UiViewer,
    page: Page = 1,
    scale: Literal["auto", "linear", "log"] = "auto",
) -> HTMLResponse:
    await check_session(services, viewer, session_id)
    detail = await hop(services.store.get_session, session_id)
    if detail is None:
        return _missing(request, f"No session “{session_id}”", session_id=None)
    pager = _pager(page, TURNS_PER_PAGE, detail.session.totals.exchanges)
    turns = await hop(services.store.list_exchanges, session_id, TURNS_PER_PAGE, pager.first - 1)
    return _render(
        request,
        "session.html",
        detail=detail,
        s=detail.session,
        turns=turns or [],
        chart=chart.build(turns or [], None if scale == "auto" else scale),
        pager=pager,
        scale=scale,
    )


@router.get("/sessions/{session_id}/exchanges/{seq}")
async def exchange_page(
    request: Request,
    session_id: str,
    seq: Seq,
    services: ServicesDep,
    viewer: UiViewer,
    page: Page = 1,
    show: Literal["all", "changed"] = "all",
) -> HTMLResponse:
    await check_session(services, viewer, session_id)
    x = await hop(services.store.get_exchange, session_id, seq)
    x = x and recall.as_forwarded(x)
    last = await hop(services.store.last_seq, session_id)
    if x is None:
        known = session_id if last else None
        return _missing(request, f"No request {seq} in this session", session_id=known, last=last)
    original = x.request.get("messages", [])
    compiled = x.compiled_request.get("messages", [])
    refused = x.exchange.error_code == "context_length_exceeded"
    unsent = x.error is not None and not compiled  # refused before anything went upstream
    rows = await hop(compare.align, original, compiled)
    fired = await _firing(services, x, original, compiled, rows)
    if unsent:
        rows = [dataclasses.replace(r, status="unsent") for r in rows]
    counts = Counter(r.status for r in rows)
    if show == "changed":
        rows = [r for r in rows if r.status != "kept"]
    pager = _pager(page, ROWS_PER_PAGE, len(rows))
    shown = [
        _row_view(r, original, compiled, x.compiled_hashes)
        for r in rows[pager.first - 1 : pager.last]
    ]
    params = {k: v for k, v in x.request.items() if k != "messages"}
    return _render(
        request,
        "exchange.html",
        x=x,
        e=x.exchange,
        rows=shown,
        counts=sorted(counts.items()),
        pager=pager,
        show=show,
        params=params,
        previous=seq - 1 if seq > 1 else None,
        next=seq + 1 if seq < last else None,
        refused=refused,
        unsent=unsent,
        largest=_largest(services.counter, x.request) if refused else [],
        firing=fired,
    )


async def _firing(
    services: Any,
    x: Any,
    original: list[Any],
    compiled: list[Any],
    rows: list[compare.Row],
) -> firing.Firing | None:
    """What this request's firing took out of the view, against the request before it."""
    e = x.exchange
    if not e.phases or e.seq < 2 or not compiled:
        return None
    before = await hop(services.store.get_exchange, e.session_id, e.seq - 1)
    if before is None:
        return None
    previous = (before.request.get("messages", []), before.compiled_request.get("messages", []))
    return await hop(firing.firing, previous, original, compiled, rows)


@dataclass(frozen=True)
class Size:
    what: str  # "#12 tool" or "tool schemas"
    anchor: str | None  # the row's id on the page
    tokens: int


def _largest(counter: TokenCounter, request: dict[str, Any], n: int = 5) -> list[Size]:
    """What made a refused request too big: its largest messages and its tool schemas."""
    sizes = [
        Size(f"#{i} {m.get('role', '?')}", f"m{i}", counter.count_message(m))
        for i, m in enumerate(request.get("messages", []))
        if isinstance(m, dict)
    ]
    tools = request.get("tools")
    if tools:
        sizes.append(Size(f"tool schemas ({len(tools)})", None, counter.count_tools(tools)))
    return sorted(sizes, key=lambda z: -z.tokens)[:n]


def _missing(
    request: Request, title: str, *, session_id: str | None, last: int = 0
) -> HTMLResponse:
    """A page, not a JSON error, for a browser that followed a link to nothing."""
    response = _render(request, "missing.html", title=title, session_id=session_id, last=last)
    response.status_code = 404
    return response


@dataclass(frozen=True)
class RowView:
    status: str
    original: dict[str, Any] | None
    original_index: int | None
    original_hash: str | None
    original_text: str
    compiled: dict[str, Any] | None
    compiled_index: int | None
    compiled_hash: str | None
    compiled_text: str
    diff: compare.Diff | None


def _row_view(
    row: compare.Row, original: list[Any], compiled: list[Any], hashes: list[str]
) -> RowView:
    before = original[row.original] if row.original is not None else None
    after = compiled[row.compiled] if row.compiled is not None else None
    diff = None
    if before is not None and after is not None and row.status != "kept":
        diff = compare.diff(compare.text(before), compare.text(after))
    return RowView(
        status=row.status,
        original=before,
        original_index=row.original,
        original_hash=message_hash(before) if before is not None else None,
        original_text=_preview(compare.text(before)),
        compiled=after,
        compiled_index=row.compiled,
        compiled_hash=hashes[row.compiled] if row.compiled is not None else None,
        compiled_text=_preview(compare.text(after)),
        diff=diff,
    )


def _preview(body: str) -> str:
    if len(body) <= PREVIEW_CHARS:
        return body
    return body[:PREVIEW_CHARS] + f"\n… {len(body) - PREVIEW_CHARS:,} more chars"
