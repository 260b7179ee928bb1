"""`ctxproxy mcp`: the stored sessions over MCP (stdio), for an agent to list, search and read.

It reads the configured database directly, keyed as the audit API is: with `api_keys` or
`admin_key` set it needs a key (`--key` or $CTXPROXY_KEY); a client key sees its own sessions,
the admin key all. Without keys the local user is the operator, as on loopback."""

from __future__ import annotations

import os
from collections.abc import Callable
from typing import Any

import orjson

from proxy.compile.tokens import TokenCounter
from proxy.errors import NotFound, ProxyError
from proxy.http.access import Viewer
from proxy.http.deps import key_matches
from proxy.recall import tool as recall
from proxy.sessions.owners import key_id
from proxy.settings import ConfigError, Settings
from proxy.store import AmbiguousPrefix, Store

SEARCH_ROOM = 4000  # tokens of a search's result: a few whole units, as recall gives the model
INSTRUCTIONS = (
    "ctxproxy stores every conversation an agent had through it, whole, including what it "
    "folded or left out of the model's view. List sessions, search one session's history "
    "(tool outputs included), read one exchange (what was sent upstream and why) or one "
    "stored message by the /messages/<hash> ref a placeholder names."
)


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
        limit, offset = min(max(limit, 1), 200), max(offset, 0)
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

    def read_message(self, ref: str) -> str:
        digest = ref.strip().removeprefix("/").removeprefix("messages/")
        try:
            found = self.store.get_message(digest, self.viewer.key_id)
        except AmbiguousPrefix:
            raise NotFound(f"'{digest}' is the prefix of several messages") from None
        if found is None or len(digest) < 12:
            raise NotFound(f"No stored message '{ref}' (give 12 to 64 hex characters)")
        return _json(found)

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

    def answer(work: Callable[..., str], *args: Any) -> str:
        try:
            return work(*args)
        except ProxyError as exc:  # said to the model as it is; anything else is a crash
            raise ToolError(exc.message) from exc

    @server.tool()
    def list_sessions(limit: int = 20, offset: int = 0) -> str:
        """Sessions, most recently active first: id, title (the task), turns, tokens saved."""
        return answer(archive.list_sessions, limit, offset)

    @server.tool()
    def search_session(session_id: str, query: str) -> str:
        """Search one session's whole raw history (tool outputs included) for words or a
        regular expression; returns the matching units (a function, a failure, a message)."""
        return answer(archive.search_session, session_id, query)

    @server.tool()
    def read_exchange(session_id: str, seq: int) -> str:
        """One exchange: the request as sent, the view forwarded, what compaction did, and
        the answer."""
        return answer(archive.read_exchange, session_id, seq)

    @server.tool()
    def read_message(ref: str) -> str:
        """One stored message, whole, by the /messages/<hash> ref a placeholder or marker names."""
        return answer(archive.read_message, ref)

    server.run("stdio")
    return 0


def key_from_env(given: str | None) -> str | None:
    return given or os.environ.get("CTXPROXY_KEY") or None


def _json(value: Any) -> str:
    return orjson.dumps(value, option=orjson.OPT_INDENT_2).decode()
