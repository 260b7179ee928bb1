"""Running a benchmark as its user does, `python -m bench.X`, from the repository root."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]


def run(module: str, *args: str, timeout: float = 300, **env: str) -> str:
    """The benchmark's printed output; fails the test with its tail if it exits non-zero.
    The timeout is for a hang: on 2 loaded cores a tiny run of the larger benchmarks took 140 s."""
    done = subprocess.run(
        [sys.executable, "-m", module, *args],
        cwd=ROOT,
        env={**os.environ, **env},
        capture_output=True,
        text=True,
        timeout=timeout,
    )
    assert done.returncode == 0, done.stdout[-2000:] + done.stderr[-3000:]
    return done.stdout
