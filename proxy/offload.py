"""Work sent off the event loop to a thread, for the price of one executor hand-off.

Starlette's `run_in_threadpool` goes through anyio (a capacity limiter, a cancel scope, the
async library looked up) and cost about a quarter of a millisecond a hop on the hot path, which
takes two or three hops a request. The same promises here: the caller's context variables go
with the work, at most `THREADS` run at once (anyio's default), and a caller cancelled while its
work runs still waits for it to end before the cancellation goes on, so nothing the thread
writes lands after its caller has given up on it."""

from __future__ import annotations

import asyncio
import contextvars
import functools
from collections.abc import Callable
from concurrent.futures import ThreadPoolExecutor
from typing import ParamSpec, TypeVar

P = ParamSpec("P")
T = TypeVar("T")
THREADS = 40
_pool: list[ThreadPoolExecutor] = []  # made at the first hop, not at import


def _executor() -> ThreadPoolExecutor:
    if not _pool:
        _pool.append(ThreadPoolExecutor(THREADS, thread_name_prefix="ctxproxy-work"))
    return _pool[0]


async def hop(fn: Callable[P, T], *args: P.args, **kwargs: P.kwargs) -> T:
    """`fn(*args, **kwargs)` on a worker thread, awaited."""
    call = functools.partial(contextvars.copy_context().run, fn, *args, **kwargs)
    future = asyncio.get_running_loop().run_in_executor(_executor(), call)
    try:
        return await asyncio.shield(future)
    except asyncio.CancelledError:
        while not future.done():  # the thread cannot be stopped: wait until it ends
            try:
                await asyncio.wait([future])
            except asyncio.CancelledError:
                continue
        raise
