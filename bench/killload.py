"""kill -9 under load: streaming sessions through one or two `ctxproxy serve` processes while a
killer sends SIGKILL to a random one every few seconds and starts it again.

Afterwards every request is checked against the audit API: a request the client saw answered
(a status line, or text) must have its exchange stored (else: record lost); every exchange must
be closed (else: left pending); text the client received must be in the record, as a prefix of
what it saw (else: partial answer lost). Not part of the test suite.

    python -m bench.killload                                   # SQLite, one process, 60 s
    python -m bench.killload --processes 2 --database-url postgresql+psycopg://postgres@127.0.0.1/test
"""

from __future__ import annotations

import argparse
import asyncio
import json
import os
import random
import signal
import subprocess
import sys
import tempfile
import time
import uuid
from dataclasses import dataclass, field
from pathlib import Path

import httpx

from bench.load import CTXPROXY, ROOT, UPSTREAM, free_port, wait_up


@dataclass
class Sent:
    sid: str
    stream: bool
    status: int | None = None  # the HTTP status the client got, if any
    text: str = ""
    done: bool = False
    dropped: bool = False  # the connection broke (the process was killed)
    error: str = ""  # the body of an error status


@dataclass
class Fleet:
    cfg: Path
    workdir: Path
    ports: list[int]
    procs: list[subprocess.Popen[bytes]] = field(default_factory=list)
    kills: int = 0

    def start(self, i: int) -> None:
        log = (self.workdir / f"proxy-{i}.log").open("ab")
        proc = subprocess.Popen(
            [CTXPROXY, "serve", "--config", str(self.cfg), "--port", str(self.ports[i])],
            cwd=self.workdir,
            stdout=log,
            stderr=subprocess.STDOUT,
        )
        if i < len(self.procs):
            self.procs[i] = proc
        else:
            self.procs.append(proc)
        wait_up(f"http://127.0.0.1:{self.ports[i]}/healthz", proc, timeout=60)

    def kill(self, i: int) -> None:
        self.procs[i].send_signal(signal.SIGKILL)
        self.procs[i].wait()
        self.kills += 1

    def stop(self) -> None:
        for p in self.procs:
            if p.poll() is None:
                p.terminate()
                try:
                    p.wait(timeout=30)
                except subprocess.TimeoutExpired:
                    p.kill()


async def one(client: httpx.AsyncClient, url: str, sent: Sent) -> None:
    model = "slow" if sent.stream else "echo"
    body = {"model": model, "messages": [{"role": "user", "content": sent.sid}]}
    body["stream"] = sent.stream
    headers = {"X-Session-Id": sent.sid}
    try:
        async with client.stream(
            "POST", url + "/v1/chat/completions", json=body, headers=headers
        ) as r:
            sent.status = r.status_code
            if r.status_code >= 400:
                sent.error = (await r.aread())[:300].decode(errors="replace")
                return
            if not sent.stream:
                data = json.loads(await r.aread())
                sent.text = data["choices"][0]["message"]["content"] if r.status_code == 200 else ""
                sent.done = True
                return
            async for line in r.aiter_lines():
                if line == "data: [DONE]":
                    sent.done = True
                elif line.startswith("data: {"):
                    for c in json.loads(line[6:]).get("choices", []):
                        sent.text += c.get("delta", {}).get("content") or ""
    except httpx.ConnectError:
        raise  # never reached a process: not a request
    except (httpx.HTTPError, ValueError):
        sent.dropped = True


async def clients(urls: list[str], sessions: int, until: float, log: list[Sent]) -> None:
    async def worker(w: int) -> None:
        async with httpx.AsyncClient(timeout=30) as client:
            i = 0
            while time.monotonic() < until:
                sent = Sent(f"kl-{w}-{i}-{uuid.uuid4().hex[:6]}", stream=random.random() < 0.7)
                i += 1
                try:
                    await one(client, urls[(w + i) % len(urls)], sent)
                except httpx.ConnectError:  # that process is down: try again in a moment
                    await asyncio.sleep(0.2)
                    continue
                log.append(sent)

    await asyncio.gather(*(worker(w) for w in range(sessions)))


async def killer(fleet: Fleet, until: float, every: tuple[float, float]) -> None:
    while True:
        await asyncio.sleep(random.uniform(*every))
        if time.monotonic() >= until:
            return
        i = random.randrange(len(fleet.procs))
        fleet.kill(i)
        await asyncio.sleep(0.2)
        await asyncio.to_thread(fleet.start, i)


def check(url: str, log: list[Sent]) -> dict[str, int]:
    figures = dict.fromkeys(
        ("records_lost", "records_pending", "partial_answers_lost", "text_mismatch", "stored"), 0
    )
    with httpx.Client(base_url=url, timeout=30) as audit:
        for sent in log:
            r = audit.get(f"/sessions/{sent.sid}/exchanges/1")
            if r.status_code == 404:
                if sent.status is not None or sent.text:
                    figures["records_lost"] += 1
                continue
            x = r.json()
            figures["stored"] += 1
            if x["exchange"]["pending"]:
                figures["records_pending"] += 1
                continue
            kept = (x.get("response") or {}).get("content") or ""
            if sent.text and not kept:
                figures["partial_answers_lost"] += 1
            elif not (sent.text.startswith(kept) or kept.startswith(sent.text)):
                figures["text_mismatch"] += 1
    return figures


def run(
    processes: int, seconds: float, sessions: int, database_url: str | None, every: tuple
) -> dict:
    workdir = Path(tempfile.mkdtemp(prefix="ctxproxy-kill-"))
    database_url = database_url or f"sqlite:///{workdir / 'kill.db'}"
    up_port = free_port()
    cfg = workdir / "config.yaml"
    cfg.write_text(
        f"database_url: '{database_url}'\nlog_level: warning\n"
        f"upstreams:\n  - {{name: scripted, kind: openai, "
        f"base_url: 'http://127.0.0.1:{up_port}/v1', context_window: 32000}}\n"
    )
    env = {**os.environ, "PYTHONPATH": str(ROOT)}
    upstream = subprocess.Popen([sys.executable, "-c", UPSTREAM, str(up_port)], cwd=ROOT, env=env)
    fleet = Fleet(cfg, workdir, [free_port() for _ in range(processes)])
    log: list[Sent] = []
    try:
        wait_up(f"http://127.0.0.1:{up_port}/v1/models", upstream)
        for i in range(processes):
            fleet.start(i)
        urls = [f"http://127.0.0.1:{p}" for p in fleet.ports]

        async def main() -> None:
            until = time.monotonic() + seconds
            await asyncio.gather(clients(urls, sessions, until, log), killer(fleet, until, every))

        asyncio.run(main())
        figures = check(urls[0], log)
    finally:
        fleet.stop()
        upstream.terminate()
        upstream.wait(timeout=30)
    return {
        "database": database_url.split(":")[0],
        "processes": processes,
        "seconds": seconds,
        "kills": fleet.kills,
        "requests": len(log),
        "streamed": sum(s.stream for s in log),
        "dropped_by_kill": sum(s.dropped for s in log),
        "http_5xx": sum(1 for s in log if s.status is not None and s.status >= 500),
        **figures,
        "errors": [f"{s.status} {s.error}" for s in log if s.error][:5],
    }


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--processes", type=int, default=1)
    parser.add_argument("--seconds", type=float, default=60)
    parser.add_argument("--sessions", type=int, default=32)
    parser.add_argument("--database-url")
    parser.add_argument("--kill-every", type=float, nargs=2, default=(4.0, 8.0))
    args = parser.parse_args()
    result = run(
        args.processes, args.seconds, args.sessions, args.database_url, tuple(args.kill_every)
    )
    for name, value in result.items():
        print(f"{name:<24}{value!s:>12}" if name != "errors" else "")
    for error in result["errors"]:
        print("error:", error)
    bad = result["records_lost"] + result["records_pending"] + result["partial_answers_lost"]
    return 1 if bad or result["http_5xx"] else 0


if __name__ == "__main__":
    sys.exit(main())
