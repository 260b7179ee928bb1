"""Slow clients: deadlines for each request's head and body, a floor on a body's rate, and a cap
on open connections that makes room by closing the slowest.

uvicorn closes idle keep-alive connections, but nothing times out a request whose head or
body arrives a byte at a time (slowloris), and nothing caps connections: thousands of trickled
requests hold a file descriptor each until the process has none left for /healthz. This
protocol (uvicorn's httptools one, with timers) closes a connection
- whose head is not complete within `head_timeout_s` of its first byte (or of the connection);
- whose body falls behind `body_min_bytes_per_s` once `body_grace_s` have passed since its head
  (each byte buys 1/rate seconds more), or is not complete within `body_timeout_s` of its head.
At `max_connections` open, a new connection closes the connections waiting on their clients
(idle between requests, or sending a head or a body) whose deadline is nearest: the slowest. A
client that sends its whole request at once (a health probe, an ordinary request) is always
served while any connection is waiting on a slow client; only when every connection is a
request at work is a new one refused.
"""

from __future__ import annotations

import heapq
import resource
from operator import attrgetter
from typing import TYPE_CHECKING, Any, ClassVar, NamedTuple

from uvicorn.protocols.http.httptools_impl import HttpToolsProtocol

if TYPE_CHECKING:
    import asyncio

    from proxy.settings import Settings

FDS_RESERVED = 256  # for the database, logs and the like, besides the upstreams' pools
# At the cap, this share of the connections waiting on their clients is closed at once (the
# slowest of them), so that the search for the slowest runs once per so many new connections.
EVICT_SHARE = 64
IDLE = float("-inf")  # the deadline of a connection idle between requests: the first to go


class Limits(NamedTuple):
    head_timeout_s: float
    body_timeout_s: float
    max_connections: int
    body_grace_s: float = 5.0
    body_min_bytes_per_s: float = 1024.0


class Guarded(HttpToolsProtocol):
    """uvicorn's HTTP protocol with the deadlines and the cap of the module."""

    limits: ClassVar[Limits | None] = None

    def __init__(self, *args: Any, **kwargs: Any) -> None:
        super().__init__(*args, **kwargs)
        self.timer: asyncio.TimerHandle | None = None
        self.due = IDLE  # when the client must have sent more, on the loop's clock
        self.body_from = 0.0  # when the body began (its head completed)
        self.body_bytes = 0
        self.room = _room(self.server_state)
        self.waiting = self.room.waiting
        self.evicted = False

    def connection_made(self, transport: asyncio.Transport) -> None:  # type: ignore[override]
        super().connection_made(transport)
        limits = self.limits_now()
        open_now = len(self.connections) - self.room.closing
        if open_now > limits.max_connections and not self._make_room():
            transport.close()  # every connection is a request at work: none is given up
            return
        self._wait_for_head(limits)

    def connection_lost(self, exc: Exception | None) -> None:
        self._disarm()
        if self.evicted:
            self.room.closing -= 1
        super().connection_lost(exc)

    def on_message_begin(self) -> None:
        super().on_message_begin()
        if self.timer is None:  # the next request on a kept-alive connection
            self._wait_for_head(self.limits_now())

    def on_headers_complete(self) -> None:
        self._disarm()
        self.body_from, self.body_bytes = self.loop.time(), 0
        self.due = self._body_due(self.limits_now())
        self.timer = self.loop.call_at(self.due, self._check_body)
        self.waiting[self] = None
        super().on_headers_complete()

    def on_body(self, body: bytes) -> None:
        self.body_bytes += len(body)
        self.due = self._body_due(self.limits_now())  # what the cap compares
        super().on_body(body)

    def on_message_complete(self) -> None:
        self._disarm()
        super().on_message_complete()

    def on_response_complete(self) -> None:
        super().on_response_complete()
        if self.timeout_keep_alive_task is not None:  # idle until the next head: may make room
            self.due = IDLE
            self.waiting[self] = None

    @classmethod
    def limits_now(cls) -> Limits:
        if cls.limits is None:  # a worker process of `serve --workers N`: its own settings
            from proxy.settings import load_settings

            cls.limits = limits_of(load_settings())
        return cls.limits

    def _wait_for_head(self, limits: Limits) -> None:
        self._disarm()
        self.due = self.loop.time() + limits.head_timeout_s
        self.timer = self.loop.call_at(self.due, self._expire)
        self.waiting[self] = None

    def _body_due(self, limits: Limits) -> float:
        """The body's deadline for the bytes it has sent so far."""
        earned = limits.body_grace_s + self.body_bytes / limits.body_min_bytes_per_s
        return self.body_from + min(earned, limits.body_timeout_s)

    def _check_body(self) -> None:
        limits = self.limits_now()
        self.due = self._body_due(limits)
        now = self.loop.time()
        if self.flow.read_paused and now < self.body_from + limits.body_timeout_s:
            # The app has not read what came: the client is waiting on us, not we on it.
            self.due = max(self.due, now + limits.body_grace_s)
        if now < self.due:
            self.timer = self.loop.call_at(self.due, self._check_body)
        else:
            self._expire()

    def _disarm(self) -> None:
        if self.timer is not None:
            self.timer.cancel()
            self.timer = None
        self.waiting.pop(self, None)

    def _expire(self) -> None:
        self._disarm()
        if not self.transport.is_closing():
            self.transport.close()

    def _make_room(self) -> bool:
        """Close the slowest share of the connections waiting on their clients, if any is."""
        count = 1 + len(self.waiting) // EVICT_SHARE
        slowest = heapq.nsmallest(count, self.waiting, key=attrgetter("due"))
        for c in slowest:
            c.evicted = True
            self.room.closing += 1
            c._expire()
        return bool(slowest)


class Room:
    """One server's connections waiting on their clients, and those closed to make room that
    are not gone yet (they still count among uvicorn's connections until they are)."""

    def __init__(self) -> None:
        self.waiting: dict[Guarded, None] = {}
        self.closing = 0


def _room(server_state: Any) -> Room:
    room = getattr(server_state, "ctxproxy_room", None)
    if room is None:
        room = server_state.ctxproxy_room = Room()
    return room


def limits_of(settings: Settings) -> Limits:
    """The settings' limits, the connection cap lowered to the file descriptors there are
    (the open-file limit raised first), less those the upstreams' pools may take."""
    pools = sum(u.max_connections for u in settings.upstreams)
    room = max(open_files() - pools - FDS_RESERVED, 16)
    limits = settings.limits
    return Limits(
        limits.head_timeout_s,
        limits.body_timeout_s,
        min(limits.max_connections, room),
        limits.body_grace_s,
        limits.body_min_bytes_per_s,
    )


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
