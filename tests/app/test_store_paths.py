"""Each of the store's paths for a turn (store/on_sqlite.py, store/on_postgres.py), taken by the
request that should take it and named on its answer (Server-Timing) and in the access log."""

from __future__ import annotations

import json
import logging
import time
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import Any

import httpx
import pytest

from proxy.app import create_app
from proxy.settings import Settings
from proxy.store import Store
from proxy.testing.postgres import postgres_database
from proxy.testing.servers import ServerThread, make_settings

LONG = "The repository's conventions, read before every change. " * 1_500  # ~85 KB


def settings(tmp_path: Path, upstream_url: str, **overrides: Any) -> Settings:
    """A window known, so that every turn stores a compaction state."""
    made = make_settings(tmp_path, upstream_url, **overrides)
    made.upstreams[0].context_window = 200_000
    return made


@contextmanager
def serving(db: str, tmp_path: Path, upstream_url: str) -> Iterator[ServerThread]:
    if db == "sqlite":
        with ServerThread(create_app(settings(tmp_path, upstream_url))) as server:
            yield server
        return
    with postgres_database("ctxproxy_paths") as url:
        made = settings(tmp_path, upstream_url, database_url=url)
        with ServerThread(create_app(made)) as server:
            yield server


def store_of(server: ServerThread) -> Store:
    store: Store = server.server.config.app.state.services.store
    return store


def chat(server: ServerThread, session: str, messages: list[dict[str, Any]]) -> httpx.Response:
    body = {"model": "echo", "messages": messages}
    r = httpx.post(
        server.url + "/v1/chat/completions",
        json=body,
        headers={"x-session-id": session},
        timeout=30,
    )
    assert r.status_code == 200, r.text
    return r


def user(text: str) -> dict[str, Any]:
    return {"role": "user", "content": text}


def turns(
    server: ServerThread, session: str, first: list[dict[str, Any]], n: int
) -> httpx.Response:
    """`n` turns of a session from `first`, each answer and a new question appended."""
    messages, r = first, None
    for step in range(n):
        r = chat(server, session, messages)
        answer = r.json()["choices"][0]["message"]
        messages = [
            *messages,
            {"role": "assistant", "content": answer["content"]},
            user(f"q{step}"),
        ]
    assert r is not None
    return r


def kept(server: ServerThread) -> None:
    """PostgreSQL: once a connection is kept for the loop's statements (made after the first
    small request's answer asked for one)."""
    loop = store_of(server)._turns.loop  # type: ignore[attr-defined]
    deadline = time.monotonic() + 5
    while not loop.idle:
        assert time.monotonic() < deadline, "no connection kept for the loop"
        time.sleep(0.01)


def small(server: ServerThread) -> httpx.Response:
    return chat(server, "small", [user("hello")])


def large(server: ServerThread) -> httpx.Response:
    return chat(server, "large", [{"role": "system", "content": LONG}, user("hello")])


def agent_next(server: ServerThread) -> httpx.Response:
    """An agent's next turn: a long system prompt seen before, a short new part."""
    body: dict[str, Any] = {
        "model": "echo",
        "max_tokens": 100,
        "system": LONG,
        "messages": [user("first")],
    }
    url, headers = server.url + "/v1/messages", {"x-session-id": "agent"}
    first = httpx.post(url, json=body, headers=headers, timeout=30)
    assert first.status_code == 200, first.text
    answer = {"role": "assistant", "content": first.json()["content"]}
    body["messages"] = [*body["messages"], answer, user("second")]
    r = httpx.post(url, json=body, headers=headers, timeout=30)
    assert r.status_code == 200, r.text
    return r


def continuing(server: ServerThread) -> httpx.Response:
    """A small session's third turn, continuing what this process stored, compiled from the
    state it recorded last."""
    turns(server, "warm", [user("warm")], 1)
    kept(server)
    return turns(server, "go-on", [user("one")], 3)


def state_read(server: ServerThread) -> httpx.Response:
    """As `continuing`, but the state recorded here is forgotten (another process's since, or
    evicted): it is read first."""
    turns(server, "warm", [user("warm")], 1)
    kept(server)
    messages = [user("one")]
    r = chat(server, "read", messages)
    store = store_of(server)
    assert store.list_exchanges("read")  # an audit read: once the answer is recorded
    store._priors.forget(0, "read")
    messages = [*messages, r.json()["choices"][0]["message"], user("two")]
    return chat(server, "read", messages)


CASES: list[tuple[str, str, Callable[[ServerThread], httpx.Response]]] = [
    ("sqlite-loop", "sqlite", small),
    ("sqlite-loop-open", "sqlite", agent_next),
    ("sqlite-thread", "sqlite", large),
    ("pg-thread-open", "postgres", small),
    ("pg-pipelined-recorded", "postgres", continuing),
    ("pg-pipelined", "postgres", state_read),
    ("pg-thread", "postgres", large),
]


@pytest.mark.parametrize(("path", "db", "ask"), CASES, ids=[c[0] for c in CASES])
def test_each_path_is_taken_and_named(
    path: str,
    db: str,
    ask: Callable[[ServerThread], httpx.Response],
    tmp_path: Path,
    upstream_url: str,
) -> None:
    lines: list[str] = []
    handler = logging.Handler()
    handler.emit = lambda record: lines.append(record.getMessage())  # type: ignore[method-assign]
    access = logging.getLogger("ctxproxy.access")
    access.addHandler(handler)
    level = access.level
    access.setLevel(logging.INFO)
    try:
        with serving(db, tmp_path, upstream_url) as server:
            r = ask(server)
    finally:
        access.removeHandler(handler)
        access.setLevel(level)
    assert f'path;desc="{path}"' in r.headers["server-timing"]
    assert json.loads(lines[-1])["path"] == path
