"""Starting and stopping the processes a benchmark measures: the stub upstream and ctxproxy."""

from __future__ import annotations

import os
import signal
import socket
import subprocess
import sys
import time
from dataclasses import dataclass
from pathlib import Path

from bench.tabulate import ROOT
from proxy.testing import servers


def free_port() -> int:
    """A free loopback port: within BENCH_PORTS ("23000-23999") when set, else any."""
    span = os.environ.get("BENCH_PORTS")
    if not span:
        return servers.free_port()
    low, high = (int(p) for p in span.split("-"))
    for port in range(low, high + 1):
        with socket.socket() as s:
            try:
                s.bind(("127.0.0.1", port))
            except OSError:
                continue
            return port
    raise RuntimeError(f"no free port in BENCH_PORTS={span}")


CTXPROXY = str(Path(sys.executable).with_name("ctxproxy"))
BIG_WINDOW = 1_000_000  # ctxproxy's configured context_window: no history here is compacted


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
    argv = [sys.executable, "-m", "bench.stub", "upstream", "--port", str(port)]
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
