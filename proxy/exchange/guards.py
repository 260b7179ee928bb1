"""What stands between an upstream's answer and the client: a client gone meanwhile, an answer
cut short or malformed, an overflow the upstream reports. Each closes the exchange's record."""

from __future__ import annotations

from collections.abc import Awaitable
from typing import TYPE_CHECKING, Any, TypeVar

import anyio
import httpx
import orjson
from fastapi import Request

from proxy.errors import ProxyError
from proxy.exchange.disconnect import ClientClosed, unless_disconnected
from proxy.settings import Upstream
from proxy.upstream import answers
from proxy.upstream import send as up
from proxy.upstream.overflow import Overflow, parse_overflow

if TYPE_CHECKING:  # it imports this module
    from proxy.exchange.steps import Exchange

T = TypeVar("T")


async def unless_gone(request: Request, exchange: Exchange, work: Awaitable[T]) -> T:
    """`work`, given up when the client disconnects: the upstream request is cancelled too.
    Through the exchange's one watcher while it has one."""
    try:
        if exchange.watch is not None:
            return await exchange.watch.guard(work)
        return await unless_disconnected(request, work)
    except ClientClosed as exc:
        with anyio.CancelScope(shield=True):
            await exchange.finish(status=exc.status, error=exc.body()["error"])
        raise


async def read_checked(
    r: httpx.Response, exchange: Exchange, upstream: Upstream, stream: bool
) -> None:
    """Read the whole answer; one cut short, stalled or not a completion closes the record."""
    try:
        await up.read(r, upstream)
        answers.check(r, upstream.name, stream)
    except ProxyError as exc:
        await exchange.finish(status=exc.status, error=exc.body()["error"])
        raise


async def overflow_of(r: httpx.Response, exchange: Exchange, upstream: Upstream) -> Overflow | None:
    if r.status_code < 400:
        return None
    await read_checked(r, exchange, upstream, False)
    return parse_overflow(r.status_code, r.content)


def answer_json(r: httpx.Response) -> dict[str, Any]:
    """A read answer's JSON object, or {} when it is not one."""
    try:
        data = orjson.loads(r.content)
    except orjson.JSONDecodeError:
        try:  # what orjson refuses and Python's parser takes (NaN, integers past 64 bits)
            data = r.json()
        except ValueError:
            return {}
    return data if isinstance(data, dict) else {}
