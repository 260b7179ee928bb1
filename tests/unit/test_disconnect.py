"""The exchange's one disconnect watcher: the client's leaving cancels the guarded step only, and
leaves no cancellation behind for the steps after it."""

from __future__ import annotations

import asyncio
from typing import Any

import pytest

from proxy.exchange.disconnect import ClientClosed, Watch


class Client:
    """An ASGI receive channel: the body was read; `leave()` sends the disconnect."""

    def __init__(self) -> None:
        self._left = asyncio.Event()

    def leave(self) -> None:
        self._left.set()

    async def receive(self) -> dict[str, Any]:
        await self._left.wait()
        return {"type": "http.disconnect"}


async def settle() -> None:
    for _ in range(5):
        await asyncio.sleep(0)


async def test_a_client_leaving_cancels_the_guarded_step() -> None:
    client = Client()
    watch = Watch(client.receive)  # type: ignore[arg-type]
    started = asyncio.Event()

    async def work() -> str:
        started.set()
        await asyncio.sleep(30)
        return "late"

    async def leave_once_started() -> None:
        await started.wait()
        client.leave()

    leaving = asyncio.create_task(leave_once_started())
    with pytest.raises(ClientClosed):
        await watch.guard(work())
    await leaving
    task = asyncio.current_task()
    assert task is not None and task.cancelling() == 0
    await asyncio.sleep(0.01)  # no cancellation left over for what the exchange does next
    with pytest.raises(ClientClosed):  # and a later step is refused at once
        await watch.guard(asyncio.sleep(0))
    watch.stop()


async def test_work_that_ends_despite_the_cancel_is_returned_and_leaves_none() -> None:
    client = Client()
    watch = Watch(client.receive)  # type: ignore[arg-type]

    async def stubborn() -> str:
        try:
            client.leave()
            await asyncio.sleep(30)
        except asyncio.CancelledError:
            await asyncio.sleep(0.01)  # finishes what it was doing, as a thread hop does
        return "done"

    assert await watch.guard(stubborn()) == "done"
    await asyncio.sleep(0.01)  # would raise CancelledError had the cancel stayed pending
    task = asyncio.current_task()
    assert task is not None and task.cancelling() == 0
    watch.stop()


async def test_a_step_without_a_disconnect_is_untouched() -> None:
    client = Client()
    watch = Watch(client.receive)  # type: ignore[arg-type]
    assert await watch.guard(asyncio.sleep(0.01, result=7)) == 7
    watch.stop()
    await settle()
    client.leave()  # after stop: nothing is cancelled any more
    await settle()
    assert await asyncio.sleep(0.01, result=8) == 8


async def test_a_shutdown_during_a_step_stays_a_cancellation() -> None:
    client = Client()
    watch = Watch(client.receive)  # type: ignore[arg-type]

    async def exchange() -> None:
        await watch.guard(asyncio.sleep(30))

    task = asyncio.create_task(exchange())
    await settle()
    client.leave()
    await asyncio.sleep(0)  # the watch cancels the step...
    task.cancel()  # ...and the server cancels the request's task before it runs again
    with pytest.raises(asyncio.CancelledError):
        await task
    watch.stop()
