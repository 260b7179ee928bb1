"""`ctxproxy mcp`: the stored sessions over MCP (stdio), for an agent to list, search and read.

It reads the configured database directly, keyed as the audit API is: with `api_keys` or
`admin_key` set it needs a key (`--key` or $CTXPROXY_KEY); a client key sees its own sessions,
the admin key all. Without keys the local user is the operator, as on loopback."""

from __future__ import annotations

import os
from collections.abc import Callable
from typing import Annotated, Any

import orjson
from pydantic import Field

from proxy.api.audit import INT64_MAX
from proxy.compile.tokens import TokenCounter
from proxy.errors import BadRequest, NotFound, ProxyError
from proxy.http.access import Viewer
from proxy.http.deps import key_matches
from proxy.recall import refs
from proxy.recall import tool as recall
from proxy.recall.search import MAX_QUERY
from proxy.sessions.owners import key_id
from proxy.settings import ConfigError, Settings
from proxy.store import Store

SEARCH_ROOM = 4000  # tokens of a search's result: a few whole units, as recall gives the model
# Characters, at most, of any tool result or error: a longer result comes in pages of it.
RESULT_CHARS = 40_000
PAGING = (
    f"A result longer than {RESULT_CHARS:,} characters comes in pages: each page ends by "
    "saying which page it is; call again with page=2, 3, ... for the rest."
)
INSTRUCTIONS = (
    "ctxproxy stores every conversation an agent had through it, whole, including what it "
    "folded or left out of the model's view. List sessions, search one session's history "
    "(tool outputs included), read one exchange (what was sent upstream and why) or what a "
    "ref in a view names: /messages/<hash>, history:<n> or history:<a>-<b>. " + PAGING
)

# Arguments are checked before any work, with errors that say which bound was passed.
SessionId = Annotated[str, Field(min_length=1, max_length=200, pattern=r"^[A-Za-z0-9._:@-]+$")]
Page = Annotated[int, Field(ge=1, le=2**31 - 1, description="which page of a long result, from 1")]
Limit = Annotated[int, Field(ge=1, le=200)]
Offset = Annotated[int, Field(ge=0, le=INT64_MAX)]
Seq = Annotated[int, Field(ge=1, le=2**31 - 1)]
Query = Annotated[str, Field(min_length=1, max_length=MAX_QUERY)]
Ref = Annotated[str, Field(min_length=1, max_length=refs.MAX_REF)]


def viewer_for(settings: Settings, key: str | None) -> Viewer:
    """Whose sessions the server shows: the audit API's rule, with the key given at start."""
    if settings.admin_key is not None and key_matches(key, [settings.admin_key]):
        return Viewer(None)
    if settings.api_keys and key_matches(key, settings.api_keys):
        return Viewer(key_id(key or ""))
    if settings.admin_key is not None or settings.api_keys:
        raise ConfigError("keys are set: give a client or the admin key (--key or $CTXPROXY_KEY)")
    return Viewer(None)


class Archive:
    """The tools' work on the store, each answer a JSON text."""

    def __init__(self, store: Store, viewer: Viewer) -> None:
        self.store, self.viewer = store, viewer
        self.counter = TokenCounter()

    def list_sessions(self, limit: int = 20, offset: int = 0) -> str:
        return _json(self.store.list_sessions(limit, offset, self.viewer.key_id))

    def search_session(self, session_id: str, query: str) -> str:
        history = self._history(session_id)
        messages = [m.message for m in history.messages]
        hashes = [m.hash for m in history.messages]
        found = recall.run({"query": query}, messages, hashes, SEARCH_ROOM, self.counter.text)
        return found.text

    def read_exchange(self, session_id: str, seq: int) -> str:
        self._check(session_id)
        found = self.store.get_exchange(session_id, seq)
        if found is None:
            raise NotFound(f"No exchange {seq} in session '{session_id}'")
        return _json(recall.as_forwarded(found))

    def read_message(self, ref: str, session_id: str | None = None) -> str:
        """What a view's ref names; a position needs its session."""
        return _json(refs.resolve(self.store, ref, self.viewer.key_id, session_id).answer())

    def _check(self, session_id: str) -> None:
        found, owner = self.store.session_owner(session_id)
        if not found:
            raise NotFound(f"No session '{session_id}'")
        self.viewer.check_owner(owner, session_id)

    def _history(self, session_id: str) -> Any:
        self._check(session_id)
        history = self.store.get_history(session_id)
        if history is None:
            raise NotFound(f"No session '{session_id}'")
        return history


def serve(settings: Settings, key: str | None) -> int:
    """Serve MCP over stdin/stdout until the client closes it."""
    from mcp.server.mcpserver import MCPServer
    from mcp.server.mcpserver.exceptions import ToolError

    archive = Archive(Store(settings.database_url), viewer_for(settings, key))
    server: MCPServer[Any] = MCPServer("ctxproxy", instructions=INSTRUCTIONS)

    def answer(work: Callable[..., str], page: int, *args: Any) -> str:
        try:
            return page_of(work(*args), page)
        except ProxyError as exc:  # said to the model as it is; anything else is a crash
            raise ToolError(exc.message[:RESULT_CHARS]) from exc

    def tool(work: Callable[..., str]) -> None:
        """A tool named and described by `work`, its description saying how it pages."""
        server.tool(description=f"{' '.join((work.__doc__ or '').split())} {PAGING}")(work)

    @tool
    def list_sessions(limit: Limit = 20, offset: Offset = 0, page: Page = 1) -> str:
        """Sessions, most recently active first: id, title (the task), turns, tokens saved;
        `limit` of them (at most 200) from `offset`."""
        return answer(archive.list_sessions, page, limit, offset)

    @tool
    def search_session(session_id: SessionId, query: Query, page: Page = 1) -> str:
        """Search one session's whole raw history (tool outputs included) for words or a
        regular expression; returns the matching units (a function, a failure, a message)."""
        return answer(archive.search_session, page, session_id, query)

    @tool
    def read_exchange(session_id: SessionId, seq: Seq, page: Page = 1) -> str:
        """One exchange: the request as sent, the view forwarded, what compaction did, and
        the answer."""
        return answer(archive.read_exchange, page, session_id, seq)

    @tool
    def read_message(ref: Ref, session_id: SessionId | None = None, page: Page = 1) -> str:
        """What a ref in a view names, whole, as the client sent it: /messages/<hash> (a
        placeholder's or a marker's original), or history:<n> or history:<a>-<b> (positions
        in the raw history of the session `session_id`, as the marker lists them)."""
        return answer(archive.read_message, page, ref, session_id)

    server.run("stdio")
    return 0


def page_of(text: str, page: int) -> str:
    """Page `page` (from 1) of `text`: all of it when it fits RESULT_CHARS, else a piece with a
    note of where it stands, the two within RESULT_CHARS."""
    size = RESULT_CHARS - 200  # room for the note
    pages = 1 if len(text) <= RESULT_CHARS else -(-len(text) // size)
    if page > pages:
        raise BadRequest(f"page {page} is past the end: this result has {pages} page(s)")
    if pages == 1:
        return text
    start = (page - 1) * size
    more = f"; call again with page={page + 1} for the next" if page < pages else "; the last"
    piece = text[start : start + size]
    note = f"page {page} of {pages}, characters {start:,}-{start + len(piece):,} of {len(text):,}"
    return f"{piece}\n[ctxproxy: {note}{more}]"


def key_from_env(given: str | None) -> str | None:
    return given or os.environ.get("CTXPROXY_KEY") or None


def _json(value: Any) -> str:
    return orjson.dumps(value, option=orjson.OPT_INDENT_2).decode()
