"""`ctxproxy serve --local-model`, the README's first command: a chat gets a model's answer."""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import time
from pathlib import Path

import httpx
import pytest

from proxy.testing.llamacpp import LlamaServer, ensure_model
from proxy.testing.servers import free_port

pytestmark = pytest.mark.llama
CTXPROXY = str(Path(sys.executable).with_name("ctxproxy"))


def test_serve_local_model_answers_a_chat_offline(tmp_path: Path, llama: LlamaServer) -> None:
    model = ensure_model()  # the fixture's copy: nothing is fetched below
    port = free_port()
    env = {**os.environ, "CTXPROXY_MODEL_CACHE": str(model.parent), "PIP_NO_INDEX": "1"}
    log = tmp_path / "serve.log"
    proc = subprocess.Popen(
        [CTXPROXY, "serve", "--local-model", "--port", str(port)],
        cwd=tmp_path,  # no config.yaml here: the built-in defaults
        stdout=log.open("wb"),
        stderr=subprocess.STDOUT,
        env=env,
    )
    url = f"http://127.0.0.1:{port}"
    try:
        deadline = time.monotonic() + 90
        while not _up(url):
            assert proc.poll() is None and time.monotonic() < deadline, log.read_text()
            time.sleep(0.2)
        r = httpx.post(
            url + "/v1/chat/completions",
            json={
                "model": "local",
                "messages": [{"role": "user", "content": "Say hello"}],
                "max_tokens": 16,
                "temperature": 0,
            },
            timeout=120,
        )
        assert r.status_code == 200, r.text
        assert r.json()["choices"][0]["message"]["content"].strip()
        assert r.json()["model"]  # the model server's own answer, relayed
    finally:
        proc.send_signal(signal.SIGTERM)
        proc.wait(timeout=30)
    out = log.read_text()
    assert "  model      " in out and model.name in out
    assert "upstream   local (llamacpp)" in out and ": answered" in out
    assert "window 4,096 tokens (discovered)" in out


def _up(url: str) -> bool:
    try:
        return httpx.get(url + "/readyz", timeout=1).status_code == 200
    except httpx.HTTPError:
        return False
