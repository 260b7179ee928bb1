"""The peer proxies (LiteLLM, Headroom, context-guardian), each in its own venv, beside ctxproxy."""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys
import time
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path

from bench.spawn import Server, free_port, start
from bench.stub import MODEL

CACHE = Path(os.environ.get("CTXPROXY_BENCH_CACHE", Path.home() / ".cache" / "ctxproxy-bench"))
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
    # context-guardian: no PyPI version check at start
    "GUARDIAN_VERSION_CHECK": "0",
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
    Peer("context-guardian", "context-guardian==0.12.0", "context-guardian"),
]
# A window no bench history reaches: context-guardian then summarises nothing, forwards the
# client's bytes and stores nothing, as ctxproxy compacts nothing under its BIG_WINDOW.
GUARDIAN_NUM_CTX = 1_000_000


def pick(names: list[str] | None) -> list[Peer]:
    """The peers named (all when None), in PEERS' order."""
    known = {p.name for p in PEERS}
    if names is not None and not set(names) <= known:
        raise ValueError(f"unknown peers {sorted(set(names) - known)}; known: {sorted(known)}")
    return [p for p in PEERS if names is None or p.name in names]


def headers(peer: Peer) -> dict[str, str]:
    """The headers a client sends the peer (LiteLLM wants its master key)."""
    key = LITELLM_KEY if peer.name == "litellm" else "unused"
    return {"Authorization": f"Bearer {key}"}


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
    if peer.name == "context-guardian":
        data = workdir / "guardian-data"
        shutil.rmtree(data, ignore_errors=True)
        data.mkdir()
        env = QUIET | {
            "GUARDIAN_NUM_CTX": str(GUARDIAN_NUM_CTX),
            "GUARDIAN_UPSTREAM_URL": f"{upstream.url}/v1",
            "GUARDIAN_HOST": "127.0.0.1",
            "GUARDIAN_PORT": str(port),
            "GUARDIAN_DATA_DIR": str(data),
        }
        return start(peer.name, [exe], port, "/guardian/stats", workdir, env, timeout=60)
    raise ValueError(peer.name)
