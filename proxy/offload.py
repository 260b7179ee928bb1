"""Work sent off the event loop to a thread, for the price of one executor hand-off, or done
on the loop where it is short and waits for nothing.

Starlette's `run_in_threadpool` goes through anyio (a capacity limiter, a cancel scope, the
async library looked up), which costs more than the short work a hop carries on the hot path.
The same promises here: the caller's context variables go
with the work, at most `THREADS` run at once (anyio's default), and a caller cancelled while its
work runs still waits for it to end before the cancellation goes on, so nothing the thread
writes lands after its caller has given up on it.

A hop is not free either: it costs a loop turn, and at many clients the worker threads and the
loop take turns at the GIL. Work the store knows to be short (store/paths.py) runs on the loop
through `run(True, ...)`; where it would wait after all (a lock another thread holds), it
raises `WouldWait` before it changed anything and goes to a thread."""

from __future__ import annotations

import asyncio
import contextvars
import functools
import logging
from collections.abc import Callable
from concurrent.futures import ThreadPoolExecutor
from typing import ParamSpec, TypeVar

P = ParamSpec("P")
T = TypeVar("T")
THREADS = 40
_pool: list[ThreadPoolExecutor] = []  # made at the first hop, not at import
log = logging.getLogger("ctxproxy")


class WouldWait(Exception):
    """Raised by work running on the event loop where it would have to wait (a lock another
    thread holds), before it changed anything: `run` sends it to a thread instead."""


def on_loop() -> bool:
    """Whether this thread is running an event loop (work here must not wait)."""
    return asyncio._get_running_loop() is not None


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


async def run(here: bool, fn: Callable[P, T], *args: P.args, **kwargs: P.kwargs) -> T:
    """`fn(*args, **kwargs)` on the loop when `here` (short work, which raises WouldWait before
    it waits), else, or when it would wait, on a worker thread. `fn` may run twice: once here up
    to its WouldWait, then on the thread."""
    if here:
        try:
            return fn(*args, **kwargs)
        except WouldWait:
            pass
    return await hop(fn, *args, **kwargs)


def soon(fn: Callable[[], object]) -> None:
    """`fn()` on a worker thread, awaited by no one (upkeep: its failure is logged)."""

    def logged() -> None:
        try:
            fn()
        except Exception:
            log.exception("background work failed")

    _executor().submit(logged)
