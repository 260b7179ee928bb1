"""The store's calls from the event loop on PostgreSQL (store/looped.py): what they write and
read is what the thread's calls do, whatever the connections go through."""

from __future__ import annotations

import asyncio
import dataclasses
import time
from collections.abc import Iterator
from typing import Any

import pytest
from sqlalchemy import create_engine, func, select, text

from proxy.store import RequestRef, Store
from proxy.store.models import ExchangeRow
from proxy.store.states import Decisions
from proxy.testing.postgres import postgres_database
from proxy.testing.records import new_request
from strategies.events import CompactionEvent
from strategies.messages import message_hash
from strategies.state import Form, ViewState

SYSTEM = {"role": "system", "content": "You are a careful coding agent. " * 60}


@pytest.fixture
def url() -> Iterator[str]:
    with postgres_database("ctxproxy_looped") as url:
        yield url


@pytest.fixture
def store(url: str) -> Iterator[Store]:
    s = Store(url)
    s.upgrade()
    yield s
    s.close()


def user(text: str) -> dict[str, Any]:
    return {"role": "user", "content": text}


def assistant(text: str) -> dict[str, Any]:
    return {"role": "assistant", "content": text}


def decided(messages: list[dict[str, Any]], marker: dict[str, Any] | None = None) -> Decisions:
    n = len(messages)
    items = tuple(range(n)) if marker is None else (*range(n - 1), Form(n - 1, "elided", marker))
    state = ViewState(n, items, view_tokens=10 * n, original_tokens=12 * n)
    return Decisions(state, factor=1.1, raw_prompt=11 * n, tokens_original=12 * n)


async def turn(
    store: Store, messages: list[dict[str, Any]], answer: dict[str, Any], **fields: Any
) -> RequestRef:
    """A turn as the exchange takes it on the loop: state read, record, progress, finish."""
    hashes = [message_hash(m) for m in messages]
    await store.load_state_looped("s1", hashes)
    new = new_request("s1", messages, hashes=hashes, **fields)
    ref = await store.record_looped(new)
    await store.save_progress_looped(ref, answer)
    await store.finish_looped(
        ref,
        status=200,
        latency_ms=5.0,
        ttft_ms=None,
        response=answer,
        partial=False,
        usage={"prompt_tokens": 7 * len(messages)},
        error=None,
    )
    return ref


async def kept(store: Store) -> None:
    """Once a connection is kept for the loop (the first calls go a thread's way meanwhile)."""
    await store.load_state_looped("warm", [message_hash(user("warm"))])
    deadline = time.monotonic() + 5
    while not store._loop or not store._loop.idle:
        assert time.monotonic() < deadline, "no connection kept for the loop"
        await asyncio.sleep(0.01)


def test_a_session_recorded_from_the_loop_reads_as_from_a_thread(store: Store) -> None:
    async def run() -> list[dict[str, Any]]:
        await kept(store)
        history = [SYSTEM, user("one")]
        for step in range(4):
            answer = assistant(f"answer {step}")
            marker = assistant(f"[elided {step}]") if step == 2 else None
            view = history if marker is None else [*history[:-1], marker]
            await turn(store, history, answer, decided=decided(history, marker), compiled=view)
            history = [*history, answer, user(f"next {step}")]
        return history

    history = asyncio.run(run())
    hashes = [message_hash(m) for m in history]
    looped = asyncio.run(store.load_state_looped("s1", hashes))
    assert looped == store.load_state("s1", hashes)
    assert looped is not None and looped.prompt_tokens == 7 * (len(history) - 2)
    exchanges = store.list_exchanges("s1") or []
    assert [x.seq for x in exchanges] == [1, 2, 3, 4]
    last = store.get_history("s1")
    assert last is not None and [m.message for m in last.messages] == history[:-1]
    compacted = store.get_exchange("s1", 3)
    assert compacted is not None
    assert compacted.compiled_request["messages"][-1] == assistant("[elided 2]")


def test_connections_dropped_under_the_loop_write_each_turn_once(store: Store, url: str) -> None:
    """A kept connection the server closed is found dead before or while its statements go:
    the work goes a thread's way, and nothing is written twice or lost."""

    async def run() -> list[dict[str, Any]]:
        history = [SYSTEM, user("one")]
        for step in range(6):
            await kept(store)
            if step % 2:
                _drop_other_connections(url)
            answer = assistant(f"answer {step}")
            await turn(store, history, answer, decided=decided(history))
            history = [*history, answer, user(f"next {step}")]
        return history

    history = asyncio.run(run())
    with store.engine.connect() as conn:
        n = conn.execute(select(func.count(ExchangeRow.id))).scalar_one()
        assert n == 6
    assert [x.seq for x in store.list_exchanges("s1") or []] == [1, 2, 3, 4, 5, 6]
    last = store.get_history("s1")
    assert last is not None and [m.message for m in last.messages] == history[:-1]


def test_an_answer_recorded_from_the_loop_after_its_session_was_deleted_is_dropped(
    store: Store,
) -> None:
    async def run() -> None:
        await kept(store)
        history = [SYSTEM, user("one")]
        await turn(store, history, assistant("two"))
        history = [*history, assistant("two"), user("three")]
        ref = await store.record_looped(new_request("s1", history))
        assert store.delete_session("s1")
        await store.finish_looped(
            ref,
            status=200,
            latency_ms=1.0,
            ttft_ms=None,
            response=assistant("too late"),
            partial=False,
            usage=None,
            error=None,
        )

    asyncio.run(run())
    assert store.get_session("s1") is None
    assert store.get_message(message_hash(assistant("too late"))) is None


def _drop_other_connections(url: str) -> None:
    admin = create_engine(url)
    with admin.connect() as conn:
        conn.execute(
            text(
                "SELECT pg_terminate_backend(pid) FROM pg_stat_activity"
                " WHERE datname = current_database() AND pid <> pg_backend_pid()"
            )
        )
    admin.dispose()


def test_the_state_cached_for_a_session_is_the_one_its_next_turn_reads(store: Store) -> None:
    """A continuing turn compiles from the state this process recorded last, without reading
    it first: it equals what the read finds, compacted forms and carried passes included."""
    event = CompactionEvent("tiered", 1, [0], 90, 40, 200, "over budget", replayed=True)

    async def run() -> list[dict[str, Any]]:
        await kept(store)
        history = [SYSTEM, user("one"), assistant("two"), user("three")]
        marker = assistant("[elided: two]")
        state = ViewState(4, (0, 1, Form(2, "elided", marker), 3), carried=(event,))
        compacted = Decisions(state, factor=1.25, raw_prompt=80, tokens_original=95)
        view = [SYSTEM, user("one"), marker, user("three")]
        await turn(store, history, assistant("four"), decided=compacted, compiled=view)
        return [*history, assistant("four"), user("five")]

    history = asyncio.run(run())
    hashes = [message_hash(m) for m in history]
    cached = store.cached_prior("s1", hashes)
    assert cached is not None and cached.prior == store.load_state("s1", hashes)
    assert cached.prior.prompt_tokens == 7 * 4


def test_a_turn_compiled_from_a_state_stored_over_since_is_refused(store: Store, url: str) -> None:
    """Another process stored a newer state for the session: the turn compiled from this
    process's is not recorded; read again, the state is the other's."""
    other = Store(url)

    async def run() -> tuple[RequestRef | None, list[str]]:
        await kept(store)
        history = [SYSTEM, user("one")]
        await turn(store, history, assistant("two"), decided=decided(history))
        history = [*history, assistant("two"), user("three")]
        hashes = [message_hash(m) for m in history]
        cached = store.cached_prior("s1", hashes)
        assert cached is not None
        theirs = dataclasses.replace(decided(history), factor=2.0)
        sibling = new_request("s1", history, decided=theirs)
        other.record_request(sibling)  # the same history, recorded by another process
        mine = new_request("s1", history, hashes=hashes, decided=decided(history))
        return await store.record_checked(mine, cached), hashes

    try:
        ref, hashes = asyncio.run(run())
        assert ref is None
        assert [x.seq for x in store.list_exchanges("s1") or []] == [1, 2]
        prior = store.load_state("s1", hashes)
        assert prior is not None and prior.factor == 2.0
    finally:
        other.close()


def test_an_answer_larger_than_the_sockets_buffer_is_recorded_from_the_loop(
    store: Store,
) -> None:
    big = assistant("x" * 8_000_000)  # written out over many turns of the loop

    async def run() -> None:
        await kept(store)
        await turn(store, [SYSTEM, user("one")], big)

    asyncio.run(run())
    last = store.get_history("s1")
    assert last is not None and [m.message for m in last.messages] == [SYSTEM, user("one"), big]
