"""Pinned agent CLIs installed once into the test cache: npm packages and aider's own venv.

Idempotent and safe when two test runs race: each install holds a file lock in the cache and
checks the versions already there before doing anything.
"""

from __future__ import annotations

import fcntl
import json
import os
import shutil
import subprocess
import sys
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path

NPM_PACKAGES = {
    "@anthropic-ai/claude-code": "2.1.197",
    "@openai/codex": "0.171.0",
    "opencode-ai": "1.18.33",
    "@qwen-code/qwen-code": "0.24.4",
}
AIDER = "aider-chat==0.86.2"
# Without a registry, say so in seconds rather than after npm's minutes of retries.
FAIL_FAST = ["--fetch-retries=1", "--fetch-retry-mintimeout=1000", "--fetch-retry-maxtimeout=3000"]


class Unavailable(RuntimeError):
    """The CLI cannot be installed here (no npm, no registry): its tests skip with this."""


def cache_dir() -> Path:
    env = os.environ.get("CTXPROXY_TEST_CACHE")
    base = Path(env) if env else Path.home() / ".cache" / "ctxproxy-tests"
    return base / "agents"


@contextmanager
def locked(path: Path) -> Iterator[None]:
    path.parent.mkdir(parents=True, exist_ok=True)
    with path.open("w") as lock:
        fcntl.flock(lock, fcntl.LOCK_EX)  # released when the file closes
        yield


def npm_installed(prefix: Path) -> dict[str, str]:
    """The versions of our packages found under prefix."""
    found = {}
    for name in NPM_PACKAGES:
        meta = prefix / "node_modules" / name / "package.json"
        if meta.is_file():
            found[name] = json.loads(meta.read_text()).get("version", "")
    return found


def ensure_npm() -> Path:
    """The `node_modules/.bin` holding claude, codex, opencode and qwen at the pinned versions."""
    prefix = cache_dir() / "npm"
    bin_dir = prefix / "node_modules" / ".bin"
    if npm_installed(prefix) == NPM_PACKAGES:
        return bin_dir
    npm = shutil.which("npm")
    if npm is None:
        raise Unavailable("npm is not installed: the real agent CLIs come from the npm registry")
    with locked(cache_dir() / "npm.lock"):
        if npm_installed(prefix) == NPM_PACKAGES:  # another run finished it while we waited
            return bin_dir
        specs = [f"{name}@{version}" for name, version in NPM_PACKAGES.items()]
        cmd = [npm, "install", "--prefix", str(prefix), "--no-audit", "--no-fund", "--save-exact"]
        cmd += FAIL_FAST
        _run([*cmd, *specs], "npm install")
    if npm_installed(prefix) != NPM_PACKAGES:
        raise Unavailable(f"npm install left {npm_installed(prefix)}, want {NPM_PACKAGES}")
    return bin_dir


def ensure_aider() -> Path:
    """aider at the pinned version in a venv of its own (its dependencies pin many packages)."""
    venv = cache_dir() / AIDER.replace("==", "-")
    aider, done = venv / "bin" / "aider", venv / ".installed"
    if done.is_file():
        return aider
    with locked(cache_dir() / "aider.lock"):
        if done.is_file():
            return aider
        shutil.rmtree(venv, ignore_errors=True)  # a half-made venv from an interrupted run
        _run([sys.executable, "-m", "venv", str(venv)], "python -m venv")
        _run([str(venv / "bin" / "pip"), "install", "-q", AIDER], f"pip install {AIDER}")
        done.write_text(AIDER + "\n")
    return aider


def _run(cmd: list[str], what: str) -> None:
    try:
        result = subprocess.run(cmd, capture_output=True, text=True, timeout=900)
    except subprocess.TimeoutExpired as exc:
        raise Unavailable(f"{what} timed out after 900 s (no registry reachable?)") from exc
    if result.returncode != 0:
        lines = (result.stderr or result.stdout).strip().splitlines()
        # npm's first error lines name the cause (code, URL); its last ones are a stack trace.
        said = [line for line in lines if "error" in line.lower() and " at " not in line]
        reason = " | ".join((said or lines)[:4])[:800]
        raise Unavailable(f"{what} failed (exit {result.returncode}): {reason}")
