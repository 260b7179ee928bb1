"""Where a chat request's time goes: N continuing turns through the app in process, profiled.

The upstream is an httpx MockTransport answering at once; work the route sends to the thread
pool runs inline here, so that one profile shows all of it. Run from the repository root:
python -m bench.profile_turn [--turns 300] [--messages 20 --tokens 8000] [--kind new]
python -m bench.profile_turn --agent claude   # a Claude-Code-shaped session on /v1/messages
python -m bench.profile_turn --postgres postgresql+psycopg://postgres@127.0.0.1:5432/test
    # the store on a fresh PostgreSQL database beside that one (dropped after)
Each run also prints the SQL statements per request, by kind.
"""

from __future__ import annotations

import argparse
import asyncio
import json
import sys
import tempfile
import time
from collections import Counter
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import Any

import httpx

from bench import spawn, stub
from proxy.testing import histories

POSTGRES: str | None = None  # an admin URL: run on a fresh database beside it (--postgres)


@contextmanager
def database(tmp: str) -> Iterator[str]:
    """A database URL for one run: SQLite in `tmp`, or a fresh PostgreSQL database."""
    if POSTGRES is None:
        yield f"sqlite:///{Path(tmp) / 'p.db'}"
        return
    from bench.overhead_agents import create_database

    url, drop = create_database(POSTGRES)
    try:
        yield url
    finally:
        drop()


class Statements:
    """SQL statements the store sends, counted by their first words, from `start()` on."""

    def __init__(self, app: Any) -> None:
        from sqlalchemy import event

        self.counts: Counter[str] = Counter()
        self.on = False
        engine = app.state.services.store.engine

        @event.listens_for(engine, "before_cursor_execute")
        def _count(conn: Any, cursor: Any, statement: str, *rest: Any) -> None:
            if self.on:
                self.counts[" ".join(statement.split()[:3])[:40]] += 1

    def start(self) -> None:
        self.on = True

    def report(self, turns: int) -> None:
        total = sum(self.counts.values())
        print(f"SQL statements per request: {total / turns:.2f}")
        for kind, n in self.counts.most_common():
            print(f"  {n / turns:6.2f}  {kind}")


def settings_for(url: str) -> Any:
    from proxy.settings import Settings

    return Settings(
        database_url=url,
        upstreams=[
            {
                "name": "bench",
                "kind": "openai",
                "base_url": "http://upstream.test/v1",
                "context_window": spawn.BIG_WINDOW,
            }
        ],
        log_level="warning",
    )


def mock_upstream() -> httpx.MockTransport:
    message = {"role": "assistant", "content": "".join(stub.WORDS_OUT)}

    def handle(request: httpx.Request) -> httpx.Response:
        answer = stub._completion(message, len(request.content) // 4)  # as the bench upstream
        return httpx.Response(200, content=answer, headers={"content-type": "application/json"})

    return httpx.MockTransport(handle)


def inline_threadpool() -> None:
    async def inline(func: Any, *args: Any, **kwargs: Any) -> Any:
        return func(*args, **kwargs)

    import proxy.exchange.steps  # noqa: F401  (loaded, so that it is patched below)

    # Every stage module that hops to a thread (the checks of a long history in prepare too).
    for name, mod in list(sys.modules.items()):
        if name.startswith("proxy.") and hasattr(mod, "hop"):
            mod.hop = inline


async def drive(turns: int, messages: int, tokens: int, kind: str, profile: bool) -> float:
    from proxy import process
    from proxy.app import create_app

    history = histories.history_for_tokens(messages, tokens)
    with tempfile.TemporaryDirectory() as tmp, database(tmp) as url:
        app = create_app(settings_for(url), transport=mock_upstream())
        process.prepare()  # as `ctxproxy serve` does
        inline_threadpool()
        async with app.router.lifespan_context(app):
            statements = Statements(app)
            transport = httpx.ASGITransport(app=app)
            local = "http://127.0.0.1"
            async with httpx.AsyncClient(transport=transport, base_url=local) as client:
                base = {"model": stub.MODEL, "messages": history}
                await client.post("/v1/chat/completions", json=base)
                answer = {"role": "assistant", "content": "".join(stub.WORDS_OUT)}

                def body(i: int) -> bytes:
                    if kind == "new":
                        msgs = list(history)
                        msgs[1] = {"role": "user", "content": f"{histories.SESSION_TASK} ({i})"}
                    else:
                        nxt = {"role": "user", "content": f"next {i}"}
                        msgs = [*history, answer, nxt]
                    return json.dumps({"model": stub.MODEL, "messages": msgs}).encode()

                bodies = [body(i) for i in range(turns + 20)]
                headers = {"content-type": "application/json"}
                for b in bodies[:20]:
                    await client.post("/v1/chat/completions", content=b, headers=headers)
                prof = None
                if profile:
                    from pyinstrument import Profiler

                    prof = Profiler(interval=0.0005, async_mode="disabled")
                    prof.start()
                statements.start()
                t0, cpu0 = time.perf_counter(), time.process_time()
                for b in bodies[20:]:
                    r = await client.post("/v1/chat/completions", content=b, headers=headers)
                    assert r.status_code == 200, r.text
                elapsed = time.perf_counter() - t0
                cpu = time.process_time() - cpu0
                if prof is not None:
                    prof.stop()
                    print(prof.output_text(unicode=False, color=False, show_all=False))
                statements.report(turns)
                print(f"CPU {cpu / turns * 1000:.2f} ms per request")
                return elapsed / turns * 1000


def agent_bodies(agent: str, turns: int, start: int) -> tuple[str, list[bytes]]:
    """(path, bodies): an agent-shaped session from `start` tool steps on, a step a request."""
    from bench import agents

    make = agents.claude_session if agent == "claude" else agents.codex_session
    body = make("profile", start)
    out = []
    for n in range(start, start + turns + 21):
        out.append(json.dumps(body).encode())
        body = agents.next_turn(agent, body, n)
    return agents.PATHS[agent], out


async def drive_agent(agent: str, turns: int, start: int, profile: bool) -> float:
    from proxy import process
    from proxy.app import create_app

    path, bodies = agent_bodies(agent, turns, start)
    headers = {"content-type": "application/json"}
    with tempfile.TemporaryDirectory() as tmp, database(tmp) as url:
        app = create_app(settings_for(url), transport=mock_upstream())
        process.prepare()  # as `ctxproxy serve` does
        inline_threadpool()
        async with app.router.lifespan_context(app):
            statements = Statements(app)
            transport = httpx.ASGITransport(app=app)
            async with httpx.AsyncClient(transport=transport, base_url="http://127.0.0.1") as cl:
                for b in bodies[:21]:
                    r = await cl.post(path, content=b, headers=headers)
                    assert r.status_code == 200, r.text
                prof = None
                if profile:
                    from pyinstrument import Profiler

                    prof = Profiler(interval=0.0005, async_mode="disabled")
                    prof.start()
                statements.start()
                t0, cpu0 = time.perf_counter(), time.process_time()
                for b in bodies[21:]:
                    r = await cl.post(path, content=b, headers=headers)
                    assert r.status_code == 200, r.text
                elapsed = time.perf_counter() - t0
                cpu = time.process_time() - cpu0
                if prof is not None:
                    prof.stop()
                    print(prof.output_text(unicode=False, color=False, show_all=False))
                statements.report(turns)
                # CPU time too: on a shared machine the wall clock also counts other processes.
                print(f"CPU {cpu / turns * 1000:.2f} ms per request")
                return elapsed / turns * 1000


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(prog="python -m bench.profile_turn", description=__doc__)
    ap.add_argument("--turns", type=int, default=300)
    ap.add_argument("--messages", type=int, default=20)
    ap.add_argument("--tokens", type=int, default=8000)
    ap.add_argument("--kind", choices=["continuing", "new"], default="continuing")
    ap.add_argument("--no-profile", action="store_true", help="time only")
    ap.add_argument(
        "--agent",
        choices=["claude", "codex"],
        help="an agent-shaped continuing session (bench/agents.py) instead of the chat history",
    )
    ap.add_argument("--start", type=int, default=20, help="the agent session's tool steps first")
    ap.add_argument(
        "--postgres",
        metavar="ADMIN_URL",
        help="run on a fresh PostgreSQL database beside this one, dropped after",
    )
    args = ap.parse_args(argv)
    global POSTGRES
    POSTGRES = args.postgres
    if args.agent:
        run = drive_agent(args.agent, args.turns, args.start, not args.no_profile)
        ms = asyncio.run(run)
        print(f"{args.agent}-shaped session from {args.start} steps: {ms:.2f} ms per request")
        return 0
    ms = asyncio.run(drive(args.turns, args.messages, args.tokens, args.kind, not args.no_profile))
    print(f"{args.kind}, {args.messages} messages ~{args.tokens:,} tokens: {ms:.2f} ms per request")
    return 0


if __name__ == "__main__":
    sys.exit(main())
