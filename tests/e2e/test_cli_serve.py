"""`ctxproxy serve`, the command the README and the Docker image run, as a real process."""

from __future__ import annotations

import os
import re
import signal
import subprocess
import sys
import time
from pathlib import Path

import httpx
import openai
import pytest

from proxy.testing.servers import free_port

CTXPROXY = str(Path(sys.executable).with_name("ctxproxy"))


def write_config(tmp_path: Path, upstream_url: str) -> Path:
    cfg = tmp_path / "config.yaml"
    cfg.write_text(
        f"database_url: sqlite:///{tmp_path / 'proxy.db'}\n"
        f"upstreams:\n  - {{name: scripted, kind: openai, base_url: '{upstream_url}'}}\n"
    )
    return cfg


class Proxy:
    def __init__(self, args: list[str], cwd: Path, env: dict[str, str] | None = None):
        self.port = free_port()
        self.log = cwd / f"proxy-{self.port}.log"
        self.proc = subprocess.Popen(
            [CTXPROXY, *args, "--port", str(self.port)],
            cwd=cwd,
            stdout=self.log.open("wb"),
            stderr=subprocess.STDOUT,
            env={**os.environ, **(env or {})},
        )
        self.url = f"http://127.0.0.1:{self.port}"
        deadline = time.monotonic() + 30
        while True:
            try:
                if httpx.get(self.url + "/healthz", timeout=1).status_code == 200:
                    return
            except httpx.HTTPError:
                pass
            if self.proc.poll() is not None or time.monotonic() > deadline:
                raise RuntimeError("ctxproxy did not start:\n" + self.log.read_text()[-2000:])
            time.sleep(0.1)

    def stop(self, sig: int = signal.SIGTERM) -> int:
        self.proc.send_signal(sig)
        return self.proc.wait(timeout=30)


@pytest.fixture
def serve(tmp_path: Path, upstream_url: str):
    started: list[Proxy] = []

    def start(*extra: str) -> Proxy:
        cfg = write_config(tmp_path, upstream_url)
        started.append(Proxy(["serve", "--config", str(cfg), *extra], tmp_path))
        return started[-1]

    yield start
    for p in started:
        if p.proc.poll() is None:
            p.stop(signal.SIGKILL)


def test_serve_answers_and_stops_cleanly(serve, tmp_path: Path) -> None:
    proxy = serve()
    c = openai.OpenAI(base_url=proxy.url + "/v1", api_key="x", max_retries=0)
    r = c.chat.completions.create(model="echo", messages=[{"role": "user", "content": "hi"}])
    assert r.choices[0].message.content == "echo: hi"
    assert (tmp_path / "proxy.db").exists()
    # uvicorn re-raises the SIGTERM it handled once shut down, so the status is that signal.
    assert proxy.stop() in (0, -signal.SIGTERM)
    log = proxy.log.read_text()
    assert "Finished server process" in log
    # Said once at start, in plain lines; no Alembic set-up noise.
    assert f"  database   {tmp_path / 'proxy.db'} (created)\n" in log
    assert re.search(r"  upstream   scripted \(openai\) at http://\S+/v1: answered", log)
    assert f"  listening  {proxy.url}: OpenAI API at {proxy.url}/v1" in log
    assert "alembic" not in log.lower()


def test_bad_config_fails_at_start_naming_the_key(tmp_path: Path) -> None:
    cfg = tmp_path / "bad.yaml"
    cfg.write_text("listen: {port: 8080}\ncompaction: {pipline: [tiered]}\n")
    out = subprocess.run(
        [CTXPROXY, "serve", "--config", str(cfg)], capture_output=True, text=True, timeout=60
    )
    assert out.returncode == 2
    assert "compaction.pipline" in out.stderr and "Traceback" not in out.stderr
