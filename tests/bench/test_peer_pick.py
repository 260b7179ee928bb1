"""`--peers` names which peer proxies bench/overhead.py starts, and refuses any other name.

Run as the command a user types: tests and bench never import each other."""

import subprocess
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]


def overhead(*args: str) -> subprocess.CompletedProcess[str]:
    argv = [sys.executable, "-m", "bench.overhead", *args]
    return subprocess.run(argv, cwd=ROOT, capture_output=True, text=True, timeout=60)


def test_an_unknown_peer_is_refused_before_anything_starts() -> None:
    done = overhead("--peers", "nopeer")
    assert done.returncode == 2
    assert "nopeer" in done.stderr and "context-guardian" in done.stderr


def test_the_help_names_every_peer() -> None:
    done = overhead("--help")
    assert done.returncode == 0
    for name in ("litellm", "headroom", "context-guardian"):
        assert name in done.stdout
