"""A small request's turn on PostgreSQL, its statements sent from the event loop (the store's
pg-pipelined paths, store/on_postgres.py): what they write and read is what the thread's
calls do, whatever the connections go through."""

from __future__ import annotations

import asyncio
import dataclasses
import time
from collections.abc import Iterator
from typing import Any

import pytest
from sqlalchemy import create_engine, func, select, text

from proxy.store import Store
from proxy.store.models import ExchangeRow
from proxy.store.paths import OpenTurn, Turn
from proxy.store.request import Answer, NewRequest
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


SMALL = 1_000  # bytes of body: a request the loop's paths may take (sizes.ON_LOOP_BYTES)


def closing(answer: dict[str, Any] | None, usage: dict[str, Any] | None = None) -> Answer:
    return Answer(
        status=200,
        latency_ms=5.0,
        ttft_ms=None,
        response=answer,
        partial=False,
        usage=usage,
        error=None,
    )


async def open_turn(
    store: Store, messages: list[dict[str, Any]], seen: list[Any] | None = None, **fields: Any
) -> OpenTurn:
    """A small request's turn opened as the exchange opens it; `seen` gets each state compiled
    from."""

    def build(hashes: list[str], prior: Any) -> NewRequest:
        if seen is not None:
            seen.append(prior)
        return new_request("s1", messages, hashes=hashes, **fields)

    return await store.open_turn(Turn("s1", messages, SMALL), build)


async def turn(
    store: Store, messages: list[dict[str, Any]], answer: dict[str, Any], **fields: Any
) -> OpenTurn:
    """A turn as the exchange takes it: opened, its progress saved, closed."""
    opened = await open_turn(store, messages, **fields)
    await store.save_turn_progress(opened, answer)
    await store.close_turn(opened, closing(answer, {"prompt_tokens": 7 * len(messages)}))
    return opened


async def kept(store: Store) -> None:
    """Once a connection is kept for the loop: a small request's answer is recorded from there
    (the first calls go a thread's way meanwhile)."""
    warm = [user("warm")]
    opened = await store.open_turn(
        Turn("warm", warm, SMALL), lambda h, p: new_request("warm", warm)
    )
    await store.close_turn(opened, closing(None))
    loop = store._turns.loop  # type: ignore[attr-defined]
    deadline = time.monotonic() + 5
    while not loop.idle:
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
            opened = await turn(
                store, history, answer, decided=decided(history, marker), compiled=view
            )
            assert opened.path.name == ("pg-thread-open" if step == 0 else "pg-pipelined-recorded")
            history = [*history, answer, user(f"next {step}")]
        return history

    history = asyncio.run(run())
    hashes = [message_hash(m) for m in history]
    seen: list[Any] = []
    asyncio.run(open_turn(store, history, seen))
    assert seen == [store.load_state("s1", hashes)]
    assert seen[0] is not None and seen[0].prompt_tokens == 7 * (len(history) - 2)
    exchanges = store.list_exchanges("s1") or []
    assert [x.seq for x in exchanges] == [1, 2, 3, 4, 5]  # the last one opened, not closed
    last = store.get_history("s1")
    assert last is not None and [m.message for m in last.messages] == history
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
        mine = select(func.count(ExchangeRow.id)).where(ExchangeRow.session_id == "s1")
        n = conn.execute(mine).scalar_one()
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
        opened = await open_turn(store, history)
        assert opened.path.name == "pg-pipelined"  # no state stored to compile from
        assert store.delete_session("s1")
        await store.close_turn(opened, closing(assistant("too late")))

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
    seen: list[Any] = []
    opened = asyncio.run(open_turn(store, history, seen))
    assert opened.path.name == "pg-pipelined-recorded"  # compiled from the state recorded here
    assert seen == [store.load_state("s1", hashes)]
    assert seen[0] is not None and seen[0].prompt_tokens == 7 * 4


def test_a_turn_compiled_from_a_state_stored_over_since_is_refused(store: Store, url: str) -> None:
    """Another process stored a newer state for the session: the turn compiled from this
    process's is not recorded; read again, the state is the other's."""
    other = Store(url)

    async def run() -> tuple[OpenTurn, list[Any]]:
        await kept(store)
        history = [SYSTEM, user("one")]
        await turn(store, history, assistant("two"), decided=decided(history))
        history = [*history, assistant("two"), user("three")]
        theirs = dataclasses.replace(decided(history), factor=2.0)
        sibling = new_request("s1", history, decided=theirs)
        other.record_request(sibling)  # the same history, recorded by another process
        seen: list[Any] = []
        return await open_turn(store, history, seen, decided=decided(history)), seen

    try:
        opened, seen = asyncio.run(run())
        # Compiled from this process's state first, refused; then read again: the other's.
        assert [p.factor for p in seen] == [1.1, 2.0]
        assert opened.path.name == "pg-pipelined"
        assert [x.seq for x in store.list_exchanges("s1") or []] == [1, 2, 3]
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


def test_a_continuing_small_turn_takes_no_thread_hop(
    store: Store, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Opened, its progress saved and closed from the loop: no step falls back to a thread."""
    from proxy import offload

    hops: list[str] = []
    real = offload.hop

    async def counted(fn: Any, *args: Any, **kwargs: Any) -> Any:
        hops.append(getattr(fn, "__name__", repr(fn)))
        return await real(fn, *args, **kwargs)

    async def run() -> OpenTurn:
        await kept(store)
        history = [SYSTEM, user("one")]
        await turn(store, history, assistant("two"), decided=decided(history))
        history = [*history, assistant("two"), user("three")]
        monkeypatch.setattr(offload, "hop", counted)
        return await turn(store, history, assistant("four"), decided=decided(history))

    opened = asyncio.run(run())
    assert opened.path.name == "pg-pipelined-recorded"
    assert hops == []
