"""Scale out: two `ctxproxy serve` processes on one PostgreSQL database, and uvicorn workers on
one SQLite file; requests for the same sessions spread over both, then the audit API must show
every exchange once, in order, with each session's history complete."""

from __future__ import annotations

import asyncio
import json
import subprocess
import time
from contextlib import ExitStack
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import httpx
import pytest

from proxy.testing.postgres import postgres_database
from tests.e2e.test_cli_serve import CTXPROXY, Proxy

TURNS = 20


@dataclass
class Thread:
    """One line of conversation: the messages a client holds and what it sent at each turn."""

    label: str  # unique per thread, in every user message
    session: str
    header: bool  # send X-Session-Id, else the proxy names the session by fingerprint
    messages: list[dict[str, Any]]
    sent: list[list[dict[str, Any]]] = field(default_factory=list)
    answers: list[str] = field(default_factory=list)
    last_seq: int | None = None


def config(tmp_path: Path, name: str, database_url: str, upstream_url: str) -> Path:
    cfg = tmp_path / f"{name}.yaml"
    cfg.write_text(
        f"database_url: '{database_url}'\n"
        f"upstreams:\n  - {{name: scripted, kind: openai, base_url: '{upstream_url}'}}\n"
    )
    return cfg


async def converse(
    client: httpx.AsyncClient, thread: Thread, urls: list[str], turns: int, offset: int
) -> None:
    """Turns one after another, as an agent sends them, each to the next process in turn."""
    for turn in range(turns):
        thread.messages.append({"role": "user", "content": f"{thread.label} turn {turn}"})
        stream = turn % 2 == 1
        body = {"model": "echo", "messages": list(thread.messages), "stream": stream}
        headers = {"x-session-id": thread.session} if thread.header else {}
        url = urls[(turn + offset) % len(urls)] + "/v1/chat/completions"
        thread.sent.append(body["messages"])
        if stream:
            async with client.stream("POST", url, json=body, headers=headers) as r:
                assert r.status_code == 200, await r.aread()
                text = "".join([delta async for delta in deltas(r)])
        else:
            r = await client.post(url, json=body, headers=headers)
            assert r.status_code == 200, r.text
            text = r.json()["choices"][0]["message"]["content"]
        thread.session = r.headers["x-ctxproxy-session"]
        thread.answers.append(text)
        thread.messages.append({"role": "assistant", "content": text})


async def deltas(r: httpx.Response) -> Any:
    async for line in r.aiter_lines():
        if line.startswith("data: ") and line != "data: [DONE]":
            for choice in json.loads(line[6:]).get("choices", []):
                yield choice.get("delta", {}).get("content") or ""


def conversations(sessions: int, forked: int) -> list[Thread]:
    """`sessions` sessions of TURNS requests; the last `forked` sessions are two threads of
    TURNS/2 turns each under one session id, sent at the same time (branches of one session);
    the middle ones are named by fingerprint rather than by header."""
    threads = []
    for s in range(sessions):
        system = {"role": "system", "content": f"You are agent {s}."}
        if s >= sessions - forked:
            threads += [Thread(f"fork-{s}.{k}", f"fork-{s}", True, [system]) for k in range(2)]
        else:
            threads.append(Thread(f"s-{s}", f"s-{s}", s < sessions // 2, [system]))
    return threads


async def drive(urls: list[str], threads: list[Thread], keepalive: bool = True) -> None:
    # Without keep-alive each request is a new connection, which any worker may accept.
    limits = httpx.Limits(max_connections=64, max_keepalive_connections=64 if keepalive else 0)
    async with httpx.AsyncClient(timeout=60, limits=limits) as client:
        await asyncio.gather(
            *(
                converse(
                    client,
                    t,
                    urls,
                    TURNS if not t.session.startswith("fork") else TURNS // 2,
                    offset=i,
                )
                for i, t in enumerate(threads)
            )
        )


def verify(audit: httpx.Client, threads: list[Thread]) -> None:
    """Every session: exchanges 1..N once each, each stored request and answer as the client
    sent and got it, each thread's history complete and in order, no message stored twice."""
    by_session: dict[str, list[Thread]] = {}
    for t in threads:
        by_session.setdefault(t.session, []).append(t)
    for session, group in by_session.items():
        exchanges = audit.get(f"/sessions/{session}/exchanges").json()["data"]
        sent = [m for t in group for m in t.sent]
        assert [x["seq"] for x in exchanges] == list(range(1, len(sent) + 1)), session
        unfinished = [
            (x["seq"], x["status"], x["pending"], x["partial"], x["error_code"])
            for x in exchanges
            if x["status"] != 200 or x["pending"] or x["partial"]
        ]
        assert not unfinished, (session, unfinished)
        stored, leaves = [], {}
        for x in exchanges:
            detail = audit.get(f"/sessions/{session}/exchanges/{x['seq']}").json()
            messages = detail["request"]["messages"]
            stored.append(json.dumps(messages, sort_keys=True))
            leaves[json.dumps(messages, sort_keys=True)] = detail
        assert sorted(stored) == sorted(json.dumps(m, sort_keys=True) for m in sent), session
        for t in group:
            # Each turn waited for the one before, so the thread's seqs rise with its turns.
            seqs = [leaves[json.dumps(m, sort_keys=True)]["exchange"]["seq"] for m in t.sent]
            assert seqs == sorted(seqs), (session, seqs)
            for m, answer in zip(t.sent, t.answers, strict=True):
                assert leaves[json.dumps(m, sort_keys=True)]["response"]["content"] == answer
            last = leaves[json.dumps(t.sent[-1], sort_keys=True)]
            history = audit.get(
                f"/sessions/{session}/messages", params={"leaf": last["response_entry_id"]}
            ).json()
            got = [(h["message"]["role"], h["message"]["content"]) for h in history["messages"]]
            assert got == [(m["role"], m["content"]) for m in t.messages], session
            assert [h["position"] for h in history["messages"]] == list(range(len(got)))
        detail = audit.get(f"/sessions/{session}").json()
        # The trie holds each message once: the shared system prompt, then each thread's turns.
        expected = 1 + sum(len(t.messages) - 1 for t in group)
        assert detail["stored_entries"] == expected, (session, detail)
        assert detail["session"]["turns"] == len(sent)


def retries(*proxies: Proxy) -> int:
    return sum(p.log.read_text().count("store: retrying a write") for p in proxies)


def test_two_processes_on_one_postgres_lose_nothing(
    tmp_path: Path, upstream_url: str, capsys: pytest.CaptureFixture[str]
) -> None:
    with postgres_database("ctxproxy_scale") as url, ExitStack() as stack:
        a = Proxy(["serve", "--config", str(config(tmp_path, "a", url, upstream_url))], tmp_path)
        stack.callback(_stop, a)
        b = Proxy(["serve", "--config", str(config(tmp_path, "b", url, upstream_url))], tmp_path)
        stack.callback(_stop, b)
        threads = conversations(sessions=10, forked=2)
        started = time.monotonic()
        asyncio.run(drive([a.url, b.url], threads))
        took = time.monotonic() - started
        requests = sum(len(t.sent) for t in threads)
        assert requests == 200
        with httpx.Client(base_url=a.url, timeout=30) as audit:
            verify(audit, threads)
            assert audit.get("/stats").json()["totals"]["exchanges"] == 200
        # Both processes served: each one's access log has chat lines.
        for p in (a, b):
            assert '"event": "chat"' in p.log.read_text(), p.log.read_text()[-2000:]
        with capsys.disabled():
            print(
                f"\nscale-out/postgres: {requests} requests, {len({t.session for t in threads})}"
                f" sessions, 2 processes, {took:.2f}s, {retries(a, b)} store retries"
            )


def _stop(p: Proxy) -> None:
    if p.proc.poll() is None:
        p.stop()


def test_uvicorn_workers_on_one_sqlite_file_lose_nothing(
    tmp_path: Path, upstream_url: str, capsys: pytest.CaptureFixture[str]
) -> None:
    db = tmp_path / "shared.db"
    cfg = config(tmp_path, "w", f"sqlite:///{db}", upstream_url)
    proxy = Proxy(["serve", "--config", str(cfg), "--workers", "2"], tmp_path)
    try:
        threads = conversations(sessions=10, forked=2)
        started = time.monotonic()
        asyncio.run(drive([proxy.url], threads, keepalive=False))
        assert sum(len(t.sent) for t in threads) == 200
        took = time.monotonic() - started
        with httpx.Client(base_url=proxy.url, timeout=30) as audit:
            verify(audit, threads)
        log = proxy.log.read_text()
        assert "database is locked" not in log and "Traceback" not in log, log[-3000:]
        pids = {json.loads(line)["pid"] for line in log.splitlines() if '"event": "chat"' in line}
        assert len(pids) == 2, f"both workers should have served, got {pids}"
    finally:
        proxy.stop()
    with capsys.disabled():
        print(
            f"\nscale-out/sqlite: {sum(len(t.sent) for t in threads)} requests, 2 workers,"
            f" {took:.2f}s, {retries(proxy)} store retries"
        )


def test_workers_refuse_an_in_memory_database(tmp_path: Path) -> None:
    cfg = tmp_path / "mem.yaml"
    cfg.write_text("database_url: 'sqlite://'\n")
    out = subprocess.run(
        [CTXPROXY, "serve", "--config", str(cfg), "--workers", "2"],
        capture_output=True,
        text=True,
        timeout=60,
    )
    assert out.returncode == 2 and "in-memory SQLite" in out.stderr
