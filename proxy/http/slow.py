"""Slow clients: a deadline for each request's head and body, and a cap on open connections.

uvicorn closes idle keep-alive connections, but nothing times out a request whose head or
body arrives a byte at a time (slowloris), and nothing caps connections: thousands of half-sent
heads hold a file descriptor each until the process has none left for /healthz. This protocol
(uvicorn's httptools one, with timers) closes a connection whose head is not complete within
`head_timeout_s` of its first byte (or of the connection), or whose body is not complete within
`body_timeout_s` of its head; at `max_connections` open, a new connection closes the one that
has waited longest for its head, so a client that sends a whole head at once is always served.
"""

from __future__ import annotations

import asyncio
import resource
from collections import OrderedDict
from typing import TYPE_CHECKING, Any, ClassVar, NamedTuple

from uvicorn.protocols.http.httptools_impl import HttpToolsProtocol

if TYPE_CHECKING:
    from proxy.settings import Settings

FDS_RESERVED = 256  # for the database, logs and the like, besides the upstreams' pools


class Limits(NamedTuple):
    head_timeout_s: float
    body_timeout_s: float
    max_connections: int


class Guarded(HttpToolsProtocol):
    """uvicorn's HTTP protocol with a deadline per request head and body (see the module)."""

    limits: ClassVar[Limits | None] = None

    def __init__(self, *args: Any, **kwargs: Any) -> None:
        super().__init__(*args, **kwargs)
        self.deadline: asyncio.TimerHandle | None = None
        self.waiting = _waiting(self.server_state)

    def connection_made(self, transport: asyncio.Transport) -> None:  # type: ignore[override]
        super().connection_made(transport)
        limits = self.limits_now()
        if len(self.connections) > limits.max_connections and not self._make_room():
            transport.close()  # every connection is a request under way: none is given up
            return
        self._wait_for_head(limits)

    def connection_lost(self, exc: Exception | None) -> None:
        self._disarm()
        super().connection_lost(exc)

    def on_message_begin(self) -> None:
        super().on_message_begin()
        if self.deadline is None:  # the next request on a kept-alive connection
            self._wait_for_head(self.limits_now())

    def on_headers_complete(self) -> None:
        self._disarm()
        self.deadline = self.loop.call_later(self.limits_now().body_timeout_s, self._expire)
        super().on_headers_complete()

    def on_message_complete(self) -> None:
        self._disarm()
        super().on_message_complete()

    def on_response_complete(self) -> None:
        super().on_response_complete()
        if self.timeout_keep_alive_task is not None:  # idle until the next head: may make room
            self.waiting[self] = None

    @classmethod
    def limits_now(cls) -> Limits:
        if cls.limits is None:  # a worker process of `serve --workers N`: its own settings
            from proxy.settings import load_settings

            cls.limits = limits_of(load_settings())
        return cls.limits

    def _wait_for_head(self, limits: Limits) -> None:
        self._disarm()
        self.deadline = self.loop.call_later(limits.head_timeout_s, self._expire)
        self.waiting[self] = None

    def _disarm(self) -> None:
        if self.deadline is not None:
            self.deadline.cancel()
            self.deadline = None
        self.waiting.pop(self, None)

    def _expire(self) -> None:
        self.deadline = None
        self.waiting.pop(self, None)
        if not self.transport.is_closing():
            self.transport.close()

    def _make_room(self) -> bool:
        """Close the connection that has waited longest for its head, if any is waiting."""
        while self.waiting:
            oldest, _ = self.waiting.popitem(last=False)
            if oldest is not self:
                oldest._expire()
                return True
        return False


def _waiting(server_state: Any) -> OrderedDict[Guarded, None]:
    """This server's connections waiting for a head, oldest first (one dict per server)."""
    waiting = getattr(server_state, "ctxproxy_waiting", None)
    if waiting is None:
        waiting = server_state.ctxproxy_waiting = OrderedDict()
    return waiting


def limits_of(settings: Settings) -> Limits:
    """The settings' limits, the connection cap lowered to the file descriptors there are
    (the open-file limit raised first), less those the upstreams' pools may take."""
    pools = sum(u.max_connections for u in settings.upstreams)
    room = max(open_files() - pools - FDS_RESERVED, 16)
    limits = settings.limits
    return Limits(limits.head_timeout_s, limits.body_timeout_s, min(limits.max_connections, room))


def guarded(limits: Limits) -> type[Guarded]:
    """The protocol class for one server (uvicorn's `http=`), with these limits."""
    return type("Guarded", (Guarded,), {"limits": limits})


def open_files() -> int:
    """This process's open-file limit, raised to the hard limit first."""
    soft, hard = resource.getrlimit(resource.RLIMIT_NOFILE)
    if hard == resource.RLIM_INFINITY or hard > soft:
        wanted = 1 << 20 if hard == resource.RLIM_INFINITY else hard
        try:
            resource.setrlimit(resource.RLIMIT_NOFILE, (wanted, hard))
            soft = wanted
        except (ValueError, OSError):
            pass
    return soft
