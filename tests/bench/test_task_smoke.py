"""The task benchmark in miniature: an agent fixes a tiny generated package, with the whole
history, through ctxproxy; the table and the JSON come out."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]
pytestmark = pytest.mark.bench


def test_task_bench_solves_a_tiny_task_through_ctxproxy(tmp_path: Path) -> None:
    argv = [sys.executable, "-m", "bench.task", "--seeds", "1", "--bugs", "3"]
    argv += ["--arms", "ctxproxy-8k", "--variants", "any", "--out", str(tmp_path)]
    done = subprocess.run(argv, cwd=ROOT, capture_output=True, text=True, timeout=180)
    assert done.returncode == 0, done.stdout[-2000:] + done.stderr[-3000:]
    assert "prefix reuse" in done.stdout  # the table's header
    (run,) = json.loads((tmp_path / "task.json").read_text())["runs"]
    assert run["arm"] == "ctxproxy-8k" and run["solved"], run
    assert all(run["checks"].values()), run["checks"]
    assert run["over"] == 0 and run["prompt_tokens"] > 0 and run["steps"] >= 10
