"""Load: N concurrent streaming sessions through a `ctxproxy serve` process for a while.

Counts errors, checks that every request sent has its exchange stored and finished (audit API),
and samples the proxy's RSS over time. The scripted upstream (proxy/testing/scripted.py) runs
in its own process. Not part of the test suite; tests/e2e/test_faults.py runs a tiny smoke of it.

    python bench/load.py                      # 64 sessions for 60 s
    python bench/load.py --sessions 8 --seconds 5
"""

from __future__ import annotations

import argparse
import asyncio
import os
import statistics
import subprocess
import sys
import tempfile
import threading
import time
from dataclasses import dataclass, field
from pathlib import Path

import httpx

from proxy.testing.servers import free_port

ROOT = Path(__file__).resolve().parents[1]
CTXPROXY = str(Path(sys.executable).with_name("ctxproxy"))
TURNS = 8  # a conversation's length before the worker starts a new session
UPSTREAM = (
    "import sys, uvicorn; from proxy.testing.scripted import Script; "
    "uvicorn.run(Script().app, host='127.0.0.1', port=int(sys.argv[1]), log_level='warning')"
)


@dataclass
class Tally:
    sent: dict[str, int] = field(default_factory=dict)  # requests per session id
    latencies: list[float] = field(default_factory=list)
    errors: list[str] = field(default_factory=list)
    rss_kib: list[tuple[float, int]] = field(default_factory=list)


def wait_up(url: str, proc: subprocess.Popen[bytes], timeout: float = 30) -> None:
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        if proc.poll() is not None:
            raise RuntimeError(f"{url}: process exited with {proc.returncode}")
        try:
            httpx.get(url, timeout=1)
            return
        except httpx.HTTPError:
            time.sleep(0.1)
    raise RuntimeError(f"{url} did not come up")


def rss_kib(pid: int) -> int:
    for line in Path(f"/proc/{pid}/status").read_text().splitlines():
        if line.startswith("VmRSS:"):
            return int(line.split()[1])
    return 0


def sample_rss(pid: int, tally: Tally, stop: threading.Event, started: float) -> None:
    while not stop.wait(1.0):
        try:
            tally.rss_kib.append((time.monotonic() - started, rss_kib(pid)))
        except OSError:
            return


async def session_worker(
    client: httpx.AsyncClient, worker: int, deadline: float, tally: Tally
) -> None:
    conversation = 0
    while time.monotonic() < deadline:
        sid, messages = f"load-{worker}-{conversation}", []
        conversation += 1
        for turn in range(TURNS):
            if time.monotonic() >= deadline:
                break
            words = " ".join(f"w{worker}.{turn}.{k}" for k in range(16))
            messages.append({"role": "user", "content": f"turn {turn}: {words}"})
            body = {"model": "echo", "messages": messages, "stream": True}
            tally.sent[sid] = tally.sent.get(sid, 0) + 1
            started = time.monotonic()
            try:
                answer = await stream_once(client, sid, body)
            except (httpx.HTTPError, ValueError) as exc:
                tally.errors.append(f"{sid}: {type(exc).__name__}: {exc}")
                break
            tally.latencies.append(time.monotonic() - started)
            if answer.strip() != "echo: " + messages[-1]["content"]:
                tally.errors.append(f"{sid}: wrong answer {answer[:60]!r}")
                break
            messages.append({"role": "assistant", "content": answer})


async def stream_once(client: httpx.AsyncClient, sid: str, body: dict) -> str:
    import json

    pieces, done = [], False
    headers = {"X-Session-Id": sid}
    async with client.stream("POST", "/v1/chat/completions", json=body, headers=headers) as r:
        if r.status_code != 200:
            raise ValueError(f"status {r.status_code}: {(await r.aread())[:200]!r}")
        async for line in r.aiter_lines():
            if not line.startswith("data: "):
                continue
            if line == "data: [DONE]":
                done = True
                continue
            event = json.loads(line[6:])
            if "error" in event:
                raise ValueError(f"SSE error {event['error']}")
            pieces += [c["delta"].get("content") or "" for c in event.get("choices", [])]
    if not done:
        raise ValueError("stream ended without [DONE]")
    return "".join(pieces)


async def drive(url: str, sessions: int, seconds: float, tally: Tally) -> None:
    limits = httpx.Limits(max_connections=sessions * 2, max_keepalive_connections=sessions)
    async with httpx.AsyncClient(base_url=url, timeout=30, limits=limits) as client:
        deadline = time.monotonic() + seconds
        await asyncio.gather(*(session_worker(client, i, deadline, tally) for i in range(sessions)))


def check_records(url: str, tally: Tally) -> tuple[int, int]:
    """(records missing or unfinished, records stored) over all sessions the run used."""
    lost = stored = 0
    with httpx.Client(base_url=url, timeout=30) as audit:
        for sid, sent in tally.sent.items():
            r = audit.get(f"/sessions/{sid}/exchanges")
            rows = r.json()["data"] if r.status_code == 200 else []
            done = [x for x in rows if x["status"] == 200 and not x["partial"]]
            stored += len(rows)
            lost += sent - len(done)
    return lost, stored


def run(sessions: int = 64, seconds: float = 60, workdir: Path | None = None) -> dict:
    workdir = workdir or Path(tempfile.mkdtemp(prefix="ctxproxy-load-"))
    up_port, proxy_port = free_port(), free_port()
    cfg = workdir / "config.yaml"
    cfg.write_text(
        f"database_url: sqlite:///{workdir / 'load.db'}\nlog_level: warning\n"
        f"upstreams:\n  - {{name: scripted, kind: openai, "
        f"base_url: 'http://127.0.0.1:{up_port}/v1', context_window: 32000}}\n"
    )
    env = {**os.environ, "PYTHONPATH": str(ROOT)}
    upstream = subprocess.Popen([sys.executable, "-c", UPSTREAM, str(up_port)], cwd=ROOT, env=env)
    log = (workdir / "proxy.log").open("wb")
    proxy = subprocess.Popen(
        [CTXPROXY, "serve", "--config", str(cfg), "--port", str(proxy_port)],
        cwd=workdir,
        stdout=log,
        stderr=subprocess.STDOUT,
    )
    url = f"http://127.0.0.1:{proxy_port}"
    tally, stop = Tally(), threading.Event()
    try:
        wait_up(f"http://127.0.0.1:{up_port}/v1/models", upstream)
        wait_up(url + "/healthz", proxy)
        started = time.monotonic()
        tally.rss_kib.append((0.0, rss_kib(proxy.pid)))
        sampler = threading.Thread(
            target=sample_rss, args=(proxy.pid, tally, stop, started), daemon=True
        )
        sampler.start()
        asyncio.run(drive(url, sessions, seconds, tally))
        elapsed = time.monotonic() - started
        stop.set()
        sampler.join()
        lost, stored = check_records(url, tally)
    finally:
        stop.set()
        for p in (proxy, upstream):
            p.terminate()
            try:
                p.wait(timeout=30)
            except subprocess.TimeoutExpired:
                p.kill()
        log.close()
    return summarise(tally, sessions, elapsed, lost, stored)


def summarise(tally: Tally, sessions: int, elapsed: float, lost: int, stored: int) -> dict:
    lat = sorted(tally.latencies) or [0.0]
    rss = [kib for _, kib in tally.rss_kib]
    # The baseline is RSS once warm (a sixth of the way in), against the last sample.
    warm = rss[len(rss) // 6] if rss else 0
    return {
        "sessions": sessions,
        "seconds": round(elapsed, 1),
        "requests": sum(tally.sent.values()),
        "requests_per_s": round(sum(tally.sent.values()) / elapsed, 1),
        "errors": len(tally.errors),
        "first_errors": tally.errors[:5],
        "records_stored": stored,
        "records_lost": lost,
        "latency_p50_ms": round(statistics.median(lat) * 1000, 1),
        "latency_p95_ms": round(lat[int(len(lat) * 0.95) - 1 if len(lat) > 1 else 0] * 1000, 1),
        "rss_start_mib": round(rss[0] / 1024, 1) if rss else 0,
        "rss_warm_mib": round(warm / 1024, 1),
        "rss_end_mib": round(rss[-1] / 1024, 1) if rss else 0,
        "rss_max_mib": round(max(rss) / 1024, 1) if rss else 0,
        "rss_samples_mib": [round(k / 1024) for k in rss],
    }


def print_table(r: dict) -> None:
    rows = [
        ("requests (streaming)", r["requests"], "", ""),
        ("requests/s", r["requests_per_s"], "", ""),
        ("errors", r["errors"], 0, ""),
        ("records lost", r["records_lost"], 0, ""),
        ("latency p50 ms", r["latency_p50_ms"], "", ""),
        ("latency p95 ms", r["latency_p95_ms"], "", ""),
        (
            "proxy RSS MiB (end vs warm)",
            r["rss_end_mib"],
            r["rss_warm_mib"],
            f"{r['rss_end_mib'] / r['rss_warm_mib']:.2f}" if r["rss_warm_mib"] else "",
        ),
        ("proxy RSS MiB (max)", r["rss_max_mib"], "", ""),
    ]
    print(f"{r['sessions']} sessions, {r['seconds']} s")
    print(f"{'figure':<30}{'value':>12}{'baseline':>12}{'ratio':>8}")
    for name, value, base, ratio in rows:
        print(f"{name:<30}{value!s:>12}{base!s:>12}{ratio!s:>8}")
    print("RSS samples (MiB, 1/s):", r["rss_samples_mib"])
    for e in r["first_errors"]:
        print("error:", e)


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--sessions", type=int, default=64)
    parser.add_argument("--seconds", type=float, default=60)
    args = parser.parse_args()
    result = run(args.sessions, args.seconds)
    print_table(result)
    return 1 if result["errors"] or result["records_lost"] else 0


if __name__ == "__main__":
    sys.exit(main())
