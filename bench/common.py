"""Shared parts of the overhead and scaling benchmarks: upstream, servers, peers, client, output.

The scripted upstream answers at once from pre-built bytes, in its own process so that it does
not share the load generator's interpreter. The load generator speaks raw HTTP/1.1 over
keep-alive connections (a few microseconds per request, where an httpx client costs ~0.5 ms),
so that what is measured is the proxies and not the client.
"""

from __future__ import annotations

import argparse
import asyncio
import json
import os
import platform
import random
import re
import shutil
import signal
import socket
import statistics
import subprocess
import sys
import tempfile
import time
from collections.abc import Callable, Iterable, Sequence
from dataclasses import dataclass, field
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parent
RESULTS = ROOT / "results"
CACHE = Path(os.environ.get("CTXPROXY_BENCH_CACHE", Path.home() / ".cache" / "ctxproxy-bench"))
CTXPROXY = str(Path(sys.executable).with_name("ctxproxy"))
MODEL = "bench"
BIG_WINDOW = 1_000_000  # ctxproxy's configured context_window: no history here is compacted

# --- histories ---------------------------------------------------------------------------

WORDS = (
    "the of config test error value request file path module line return self data import "
    "assert session cache token budget window stream client server handler retry timeout"
).split()
TRACE = (
    "Traceback (most recent call last):\n"
    '  File "/src/app/db.py", line 42, in connect\n'
    "    return engine(cfg.database_url)\n"
    "AttributeError: 'Config' object has no attribute 'database_url'"
)
SYSTEM = "You are a careful coding agent. Use the tools to inspect and fix the repository."
TASK = "The database connection test fails. Find out why and fix it."


def tool_output(n: int, lines: int | None = None) -> str:
    """Step n's command output: deterministic, unique per step, ~12 tokens a line."""
    rnd = random.Random(n)
    kind = rnd.random()
    count = lines if lines is not None else rnd.randint(8, 40)
    if kind < 0.75:
        body = [f"{n}:{i} " + " ".join(rnd.choices(WORDS, k=9)) for i in range(count)]
    elif kind < 0.9:
        body = [
            f"2024-05-14 10:{i % 60:02d}:{n % 60:02d} INFO db: attempt {i} {rnd.choice(WORDS)}"
            for i in range(count)
        ] + [TRACE]
    else:
        body = [
            f"    {rnd.choice(WORDS)}_{n} = {rnd.choice(WORDS)}({i}, {n})" for i in range(count)
        ]
    return "\n".join(body)


def assistant_step(n: int) -> dict[str, Any]:
    """The assistant message of step n: one tool call. The agent upstream answers with it."""
    args = json.dumps({"cmd": f"pytest tests/test_db.py -k case_{n} -x"})
    return {
        "role": "assistant",
        "content": f"Step {n}: running the next check.",
        "tool_calls": [
            {"id": f"call_{n}", "type": "function", "function": {"name": "run", "arguments": args}}
        ],
    }


def tool_step(n: int, lines: int | None = None) -> dict[str, Any]:
    return {"role": "tool", "tool_call_id": f"call_{n}", "content": tool_output(n, lines)}


def agent_history(messages: int, lines: int | None = None) -> list[dict[str, Any]]:
    """system + task + (assistant tool call, tool result) pairs, `messages` long in all."""
    msgs: list[dict[str, Any]] = [
        {"role": "system", "content": SYSTEM},
        {"role": "user", "content": TASK},
    ]
    n = 0
    while len(msgs) < messages:
        msgs.append(assistant_step(n))
        if len(msgs) < messages:
            msgs.append(tool_step(n, lines))
        n += 1
    return msgs


def history_for_tokens(messages: int, tokens: int) -> list[dict[str, Any]]:
    """A `messages`-long agent history of about `tokens` tokens (cl100k)."""
    from proxy.exchange.tokens import TokenCounter

    counter = TokenCounter()
    pairs = max((messages - 2) // 2, 1)
    lines = 8
    for _ in range(6):  # a few steps of proportional correction converge within a few %
        got = counter.count_messages(agent_history(messages, lines))
        per_line = max(
            (got - counter.count_messages(agent_history(messages, 0))) / (pairs * lines), 1
        )
        lines = max(1, round(lines + (tokens - got) / (per_line * pairs)))
        if abs(got - tokens) / tokens < 0.03:
            break
    return agent_history(messages, lines)


def count_tokens(messages: list[dict[str, Any]]) -> int:
    from proxy.exchange.tokens import TokenCounter

    return TokenCounter().count_messages(messages)


# --- the scripted upstream ---------------------------------------------------------------

_STREAM = re.compile(rb'"stream"\s*:\s*true')
WORDS_OUT = ["Done", ":", " the", " fix", " is", " in", " db", ".py", "."]


def _completion(message: dict[str, Any], prompt_tokens: int) -> bytes:
    return json.dumps(
        {
            "id": "chatcmpl-bench",
            "object": "chat.completion",
            "created": 1700000000,
            "model": MODEL,
            "choices": [{"index": 0, "message": message, "finish_reason": "stop"}],
            "usage": {
                "prompt_tokens": prompt_tokens,
                "completion_tokens": 9,
                "total_tokens": prompt_tokens + 9,
            },
        }
    ).encode()


def _chunk(delta: dict[str, Any], finish: str | None = None) -> bytes:
    data = {
        "id": "chatcmpl-bench",
        "object": "chat.completion.chunk",
        "created": 1700000000,
        "model": MODEL,
        "choices": [{"index": 0, "delta": delta, "finish_reason": finish}],
    }
    return b"data: " + json.dumps(data).encode() + b"\n\n"


STREAM_CHUNKS = (
    [_chunk({"role": "assistant", "content": ""})]
    + [_chunk({"content": w}) for w in WORDS_OUT]
    + [_chunk({}, "stop"), b"data: [DONE]\n\n"]
)


MESSAGE_ANSWER = json.dumps(
    {
        "id": "msg_bench",
        "type": "message",
        "role": "assistant",
        "model": MODEL,
        "content": [{"type": "text", "text": "".join(WORDS_OUT)}],
        "stop_reason": "end_turn",
        "usage": {"input_tokens": 1000, "output_tokens": 9},
    }
).encode()
RESPONSE_ANSWER = json.dumps(
    {
        "id": "resp_bench",
        "object": "response",
        "status": "completed",
        "model": MODEL,
        "output": [
            {
                "type": "message",
                "id": "msg_bench",
                "role": "assistant",
                "content": [{"type": "output_text", "text": "".join(WORDS_OUT)}],
            }
        ],
        "usage": {"input_tokens": 1000, "output_tokens": 9, "total_tokens": 1009},
    }
).encode()


def upstream_app(agent: bool = False) -> Any:
    """Answers every chat completion at once. `agent`: the answer is the next assistant_step
    (so a session replayed through a proxy stays one unbranched history)."""
    from starlette.applications import Starlette
    from starlette.requests import Request
    from starlette.responses import JSONResponse, Response, StreamingResponse
    from starlette.routing import Route

    text = {"role": "assistant", "content": "".join(WORDS_OUT)}

    async def chat(request: Request) -> Response:
        body = await request.body()
        prompt_tokens = len(body) // 4
        if _STREAM.search(body):

            async def chunks():
                for c in STREAM_CHUNKS:
                    yield c

            return StreamingResponse(chunks(), media_type="text/event-stream")
        message = text
        if agent:
            msgs = json.loads(body)["messages"]
            message = assistant_step(sum(1 for m in msgs if m.get("role") == "tool"))
        return Response(_completion(message, prompt_tokens), media_type="application/json")

    async def models(request: Request) -> Response:
        data = [{"id": MODEL, "object": "model", "owned_by": "bench"}]
        return JSONResponse({"object": "list", "data": data})

    async def messages(request: Request) -> Response:  # the agent profiles' direct reference
        await request.body()
        return Response(MESSAGE_ANSWER, media_type="application/json")

    async def responses(request: Request) -> Response:
        await request.body()
        return Response(RESPONSE_ANSWER, media_type="application/json")

    routes = [
        Route("/v1/messages", messages, methods=["POST"]),
        Route("/v1/responses", responses, methods=["POST"]),
        Route("/v1/chat/completions", chat, methods=["POST"]),
        Route("/chat/completions", chat, methods=["POST"]),
        Route("/v1/models", models),
        Route("/models", models),
    ]
    return Starlette(routes=routes)


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


@dataclass
class Server:
    """A subprocess listening on a loopback port; `stop` ends it and its children."""

    name: str
    port: int
    proc: subprocess.Popen | None = None
    log: Path | None = None
    error: str | None = None

    @property
    def url(self) -> str:
        return f"http://127.0.0.1:{self.port}"

    def stop(self) -> None:
        if self.proc is None or self.proc.poll() is not None:
            return
        try:
            os.killpg(self.proc.pid, signal.SIGTERM)
            self.proc.wait(timeout=10)
        except (subprocess.TimeoutExpired, ProcessLookupError):
            try:
                os.killpg(self.proc.pid, signal.SIGKILL)
            except ProcessLookupError:
                pass
            self.proc.wait(timeout=5)

    def tail(self, chars: int = 1500) -> str:
        return (
            self.log.read_text(errors="replace")[-chars:] if self.log and self.log.exists() else ""
        )


def start(
    name: str,
    argv: list[str],
    port: int,
    health: str,
    workdir: Path,
    env: dict[str, str] | None = None,
    timeout: float = 90,
) -> Server:
    """Start argv in its own process group and poll `health` until it answers 200."""
    import httpx

    log = workdir / f"{name}.log"
    proc = subprocess.Popen(
        argv,
        cwd=workdir,
        stdout=log.open("wb"),
        stderr=subprocess.STDOUT,
        env={**os.environ, **(env or {})},
        start_new_session=True,
    )
    server = Server(name, port, proc, log)
    deadline = time.monotonic() + timeout
    while True:
        try:
            if httpx.get(server.url + health, timeout=2).status_code == 200:
                return server
        except httpx.HTTPError:
            pass
        if proc.poll() is not None or time.monotonic() > deadline:
            server.stop()
            server.error = f"{name} did not start: " + server.tail(600).strip().replace("\n", " | ")
            return server
        time.sleep(0.2)


def start_upstream(workdir: Path, agent: bool = False) -> Server:
    port = free_port()
    argv = [sys.executable, "-m", "bench.common", "upstream", "--port", str(port)]
    server = start(
        "upstream",
        argv + (["--agent"] if agent else []),
        port,
        "/v1/models",
        workdir,
        env={"PYTHONPATH": str(ROOT.parent)},
    )
    if server.error:
        raise RuntimeError(server.error)
    return server


def ctxproxy_config(
    workdir: Path, upstream: Server, window: int = BIG_WINDOW, database_url: str | None = None
) -> Path:
    cfg = workdir / "ctxproxy.yaml"
    url = database_url or f"sqlite:///{workdir / 'ctxproxy.db'}"
    cfg.write_text(
        f"database_url: {url}\n"
        "upstreams:\n"
        f"  - {{name: bench, kind: openai, base_url: '{upstream.url}/v1', "
        f"context_window: {window}}}\n"
        "log_level: warning\n"
    )
    return cfg


def start_ctxproxy(
    workdir: Path,
    upstream: Server,
    window: int = BIG_WINDOW,
    database_url: str | None = None,
    name: str = "ctxproxy",
) -> Server:
    port = free_port()
    cfg = ctxproxy_config(workdir, upstream, window, database_url)
    argv = [CTXPROXY, "serve", "--config", str(cfg), "--port", str(port)]
    return start(name, argv, port, "/healthz", workdir)


# --- peers -------------------------------------------------------------------------------

QUIET = {
    # LiteLLM: offline cost map, no telemetry
    "LITELLM_LOCAL_MODEL_COST_MAP": "True",
    "LITELLM_TELEMETRY_DISABLED": "true",
    "LITELLM_LOG": "ERROR",
    # Headroom: offline, no telemetry, no update checks, no hub downloads
    "HEADROOM_OFFLINE": "1",
    "HEADROOM_TELEMETRY": "off",
    "HEADROOM_BEACON": "off",
    "DO_NOT_TRACK": "1",
    "HEADROOM_UPDATE_CHECK": "off",
    "HEADROOM_SKIP_UPSTREAM_CHECK": "1",
    "HF_HUB_OFFLINE": "1",
    "TRANSFORMERS_OFFLINE": "1",
}
LITELLM_KEY = "sk-bench-master"


@dataclass(frozen=True)
class Peer:
    name: str
    spec: str
    exe: str

    @property
    def venv(self) -> Path:
        return CACHE / f"venv-{self.name}"

    @property
    def marker(self) -> Path:
        return self.venv / ".bench-installed"

    def installed(self) -> bool:
        return self.marker.exists() and self.marker.read_text().strip() == self.spec

    def version(self) -> str:
        return self.spec.split("==")[-1]


PEERS = [
    Peer("litellm", "litellm[proxy]==1.108.7", "litellm"),
    Peer("headroom", "headroom-ai[proxy]==0.42.0", "headroom"),
]


def setup_peer(peer: Peer, log: Callable[[str], None] = print) -> str | None:
    """Install the peer into its own venv under CACHE (once); returns an error or None."""
    if peer.installed():
        return None
    CACHE.mkdir(parents=True, exist_ok=True)
    logfile = CACHE / f"install-{peer.name}.log"
    log(f"setup: installing {peer.spec} into {peer.venv} (log: {logfile}) ...")
    started = time.monotonic()
    with logfile.open("wb") as out:
        steps = [
            [sys.executable, "-m", "venv", "--clear", str(peer.venv)],
            [str(peer.venv / "bin" / "python"), "-m", "pip", "install", "-q", peer.spec],
        ]
        for argv in steps:
            rc = subprocess.call(
                argv, stdout=out, stderr=subprocess.STDOUT, env={**os.environ, **QUIET}
            )
            if rc != 0:
                tail = logfile.read_text(errors="replace").strip().splitlines()[-1:]
                return f"install of {peer.spec} failed (rc {rc}): {' '.join(tail)}"
    peer.marker.write_text(peer.spec + "\n")
    log(f"setup: {peer.spec} installed in {time.monotonic() - started:.0f} s")
    return None


def start_peer(peer: Peer, workdir: Path, upstream: Server) -> Server:
    port = free_port()
    exe = str(peer.venv / "bin" / peer.exe)
    if not peer.installed():
        return Server(peer.name, port, error=f"{peer.name} is not installed (run --setup)")
    if peer.name == "litellm":
        cfg = workdir / "litellm.yaml"
        cfg.write_text(
            json.dumps(
                {
                    "model_list": [
                        {
                            "model_name": MODEL,
                            "litellm_params": {
                                "model": f"openai/{MODEL}",
                                "api_base": f"{upstream.url}/v1",
                                "api_key": "any",
                            },
                        }
                    ],
                    "litellm_settings": {"telemetry": False, "set_verbose": False},
                }
            )
        )
        argv = [exe, "--config", str(cfg), "--host", "127.0.0.1", "--port", str(port)]
        env = QUIET | {"LITELLM_MASTER_KEY": LITELLM_KEY}
        return start(peer.name, argv, port, "/health/liveliness", workdir, env, timeout=120)
    if peer.name == "headroom":
        workspace = workdir / "headroom-workspace"
        shutil.rmtree(workspace, ignore_errors=True)  # it keeps state across requests
        workspace.mkdir()
        api = f"{upstream.url}"
        argv = [exe, "proxy", "--host", "127.0.0.1", "--port", str(port)]
        for flag in ("openai", "anthropic", "gemini", "cloudcode", "vertex"):
            argv += [f"--{flag}-api-url", api + ("/v1" if flag == "openai" else "")]
        argv += ["--no-rate-limit", "--no-cache", "--no-subscription-tracking", "--no-telemetry"]
        env = QUIET | {"HEADROOM_WORKSPACE_DIR": str(workspace), "HOME": str(workdir)}
        return start(peer.name, argv, port, "/livez", workdir, env, timeout=120)
    raise ValueError(peer.name)


# --- the load generator ------------------------------------------------------------------


class Conn:
    """One keep-alive HTTP/1.1 connection sending pre-built requests."""

    def __init__(self, port: int):
        self.port = port
        self.reader: asyncio.StreamReader | None = None
        self.writer: asyncio.StreamWriter | None = None

    async def _open(self) -> None:
        self.reader, self.writer = await asyncio.open_connection(
            "127.0.0.1", self.port, limit=1 << 24
        )

    async def close(self) -> None:
        if self.writer is not None:
            self.writer.close()
            try:
                await self.writer.wait_closed()
            except OSError:
                pass
            self.reader = self.writer = None

    async def send(self, request: bytes) -> tuple[int, float, float, bytes]:
        """(status, seconds to the first body byte, seconds to the end, body)."""
        if self.writer is None:
            await self._open()
        assert self.reader is not None and self.writer is not None
        t0 = time.perf_counter()
        self.writer.write(request)
        head = await self.reader.readuntil(b"\r\n\r\n")
        status = int(head.split(b" ", 2)[1])
        headers = {}
        for line in head.split(b"\r\n")[1:]:
            if b":" in line:
                k, v = line.split(b":", 1)
                headers[k.strip().lower()] = v.strip().lower()
        first = None
        parts: list[bytes] = []
        if b"content-length" in headers:
            body = await self.reader.readexactly(int(headers[b"content-length"]))
            first = time.perf_counter()
            parts.append(body)
        elif headers.get(b"transfer-encoding") == b"chunked":
            while True:
                size = int((await self.reader.readuntil(b"\r\n")).split(b";")[0], 16)
                if size == 0:
                    await self.reader.readuntil(b"\r\n")
                    break
                data = await self.reader.readexactly(size + 2)
                first = first or time.perf_counter()
                parts.append(data[:-2])
        else:
            data = await self.reader.read()
            first = time.perf_counter()
            parts.append(data)
            await self.close()
        end = time.perf_counter()
        if headers.get(b"connection") == b"close":
            await self.close()
        return status, (first or end) - t0, end - t0, b"".join(parts)


def http_request(port: int, path: str, body: dict[str, Any], headers: dict[str, str]) -> bytes:
    data = json.dumps(body).encode()
    lines = [
        f"POST {path} HTTP/1.1",
        f"Host: 127.0.0.1:{port}",
        "Content-Type: application/json",
        "Accept: */*",
        f"Content-Length: {len(data)}",
        *(f"{k}: {v}" for k, v in headers.items()),
    ]
    return ("\r\n".join(lines) + "\r\n\r\n").encode() + data


@dataclass
class Target:
    """Where requests go: the upstream itself (direct) or a proxy in front of it."""

    name: str
    server: Server
    headers: dict[str, str] = field(default_factory=dict)
    path: str = "/v1/chat/completions"

    def request(self, body: dict[str, Any]) -> bytes:
        return http_request(self.server.port, self.path, body, self.headers)


class BenchError(RuntimeError):
    pass


async def sequential(
    port: int, request: bytes, n: int, budget_s: float
) -> list[tuple[float, float]]:
    """n requests one after another (fewer if budget_s runs out): (first byte, total) seconds."""
    conn, out = Conn(port), []
    stop = time.perf_counter() + budget_s
    try:
        for _ in range(n):
            status, first, total, body = await conn.send(request)
            if status != 200:
                raise BenchError(f"HTTP {status}: {body[:300]!r}")
            out.append((first, total))
            if time.perf_counter() > stop and len(out) >= 3:
                break
    finally:
        await conn.close()
    return out


async def throughput(port: int, request: bytes, concurrency: int, seconds: float) -> float:
    """Completed requests per second with `concurrency` clients, each on its own connection."""
    done = 0
    errors: list[str] = []
    stop = time.perf_counter() + seconds

    async def worker() -> None:
        nonlocal done
        conn = Conn(port)
        try:
            while time.perf_counter() < stop:
                status, _, _, body = await conn.send(request)
                if status != 200:
                    errors.append(f"HTTP {status}: {body[:200]!r}")
                    return
                done += 1
        finally:
            await conn.close()

    start = time.perf_counter()
    await asyncio.gather(*(worker() for _ in range(concurrency)))
    elapsed = time.perf_counter() - start
    if errors:
        raise BenchError(errors[0])
    return done / elapsed


# --- process memory ----------------------------------------------------------------------


def _tree(pid: int) -> list[int]:
    import psutil

    try:
        p = psutil.Process(pid)
        return [pid] + [c.pid for c in p.children(recursive=True)]
    except psutil.Error:
        return []


def reset_peak_rss(pid: int) -> None:
    """Reset the kernel's high-water mark (VmHWM) of the process tree."""
    for p in _tree(pid):
        try:
            Path(f"/proc/{p}/clear_refs").write_text("5")
        except OSError:
            pass


def peak_rss_mb(pid: int) -> float:
    """Sum of VmHWM over the process tree, MiB."""
    total = 0
    for p in _tree(pid):
        try:
            for line in Path(f"/proc/{p}/status").read_text().splitlines():
                if line.startswith("VmHWM:"):
                    total += int(line.split()[1])
        except OSError:
            pass
    return total / 1024


# --- figures -----------------------------------------------------------------------------


def percentile(xs: Sequence[float], q: float) -> float:
    s = sorted(xs)
    if not s:
        return float("nan")
    k = (len(s) - 1) * q
    lo, hi = int(k), min(int(k) + 1, len(s) - 1)
    return s[lo] + (s[hi] - s[lo]) * (k - lo)


def median(xs: Iterable[float]) -> float:
    xs = [x for x in xs if x == x]
    return statistics.median(xs) if xs else float("nan")


def spread(xs: Iterable[float]) -> tuple[float, float]:
    xs = [x for x in xs if x == x]
    return (min(xs), max(xs)) if xs else (float("nan"), float("nan"))


def fmt(x: float | None, digits: int = 1, unit: str = "") -> str:
    if x is None or x != x:
        return "-"
    if abs(x) >= 1000:
        return f"{x:,.0f}{unit}"
    return f"{x:.{digits}f}{unit}"


def ratio(a: float | None, b: float | None) -> str:
    if a is None or b is None or a != a or b != b or b == 0:
        return "-"
    r = a / b
    if 0 < abs(r) < 0.01:
        return f"{r:.1e}x"
    return f"{r:.2f}x" if r < 100 else f"{r:,.0f}x"


def table(header: list[str], rows: list[list[str]], left: int = 1) -> str:
    widths = [max(len(r[i]) for r in [header, *rows]) for i in range(len(header))]

    def line(cells: list[str]) -> str:
        return "  ".join(
            c.ljust(w) if i < left else c.rjust(w)
            for i, (c, w) in enumerate(zip(cells, widths, strict=True))
        ).rstrip()

    rule = "  ".join("-" * w for w in widths)
    return "\n".join([line(header), rule, *(line(r) for r in rows)])


def machine() -> str:
    cpu = platform.processor() or platform.machine()
    try:
        for line in Path("/proc/cpuinfo").read_text().splitlines():
            if line.startswith("model name"):
                cpu = line.split(":", 1)[1].strip()
                break
    except OSError:
        pass
    try:
        import psutil

        mem = f", {psutil.virtual_memory().total / 2**30:.0f} GiB RAM"
    except ImportError:
        mem = ""
    system = f"Linux {platform.release()}, Python {platform.python_version()}"
    return f"{os.cpu_count()} cores, {cpu}{mem}, {system}"


def now() -> str:
    return datetime.now(UTC).strftime("%Y-%m-%d %H:%M UTC")


def write_json(name: str, data: dict[str, Any], out: Path = RESULTS) -> Path:
    out.mkdir(parents=True, exist_ok=True)
    path = out / f"{name}.json"
    path.write_text(json.dumps(data, indent=2, default=str))
    return path


def save_plot(fig: Any, name: str, out: Path = RESULTS) -> Path:
    out.mkdir(parents=True, exist_ok=True)
    path = out / f"{name}.png"
    fig.tight_layout()
    fig.savefig(path, dpi=110)
    import matplotlib.pyplot as plt

    plt.close(fig)
    return path


def pyplot() -> Any:
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    return plt


def workdir(prefix: str) -> Path:
    return Path(tempfile.mkdtemp(prefix=prefix))


def main(argv: list[str] | None = None) -> None:
    parser = argparse.ArgumentParser(description="run the scripted upstream")
    sub = parser.add_subparsers(dest="command", required=True)
    up = sub.add_parser("upstream")
    up.add_argument("--port", type=int, required=True)
    up.add_argument("--agent", action="store_true")
    args = parser.parse_args(argv)
    import uvicorn

    uvicorn.run(
        upstream_app(agent=args.agent),
        host="127.0.0.1",
        port=args.port,
        log_level="warning",
        access_log=False,
    )


if __name__ == "__main__":
    main()
