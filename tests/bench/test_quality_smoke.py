"""bench/quality.py runs end to end on a tiny corpus, so the benchmark cannot rot."""

import json
import os
import re
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

from tests.bench.smoke import run

ROOT = Path(__file__).resolve().parents[2]
pytestmark = pytest.mark.bench


@pytest.mark.skipif(not shutil.which("node"), reason="the smoke corpus runs node")
def test_quality_runs_on_a_tiny_corpus(tmp_path: Path) -> None:
    args = [
        "--variants=1",
        "--bfcl=0",
        "--kinds=python,node",
        "--budgets=4000",
        "--peers=middle-out",
        "--no-progress",
        f"--out={tmp_path / 'out'}",
    ]
    env = {**os.environ, "CTXPROXY_BENCH_CACHE": str(tmp_path / "cache")}
    done = subprocess.run(
        [sys.executable, "-m", "bench.quality", *args],
        cwd=ROOT, env=env, capture_output=True, text=True, timeout=300,
    )  # fmt: skip
    assert done.returncode == 0, done.stdout[-2000:] + done.stderr[-3000:]
    assert "traceback+tiered" in done.stdout and "middle-out" in done.stdout
    result = json.loads((tmp_path / "out" / "quality.json").read_text())
    rows = {r["method"]: r["summary"] for r in result["rows"]}
    assert rows["traceback+tiered"]["n"] == 2
    assert rows["traceback+tiered"]["validity"] == 1.0
    assert 0 <= rows["traceback+tiered"]["recall"] <= 1
    assert (tmp_path / "out" / "quality.png").stat().st_size > 0


def test_keep_scores_planted_and_misleading_sessions() -> None:
    args = ("--seeds", "1", "--windows", "2048", "--agent-windows", "4096", "--peers", "")
    out = run("bench.keep", *args, "--methods", "default")
    rows = [line.split("|") for line in out.splitlines() if line.startswith("| default |")]
    assert len(rows) == 3, out  # chat-only, agentic, misleading
    for row in rows:
        assert [cell.strip() for cell in row[6:9]] == ["0", "0", "0"], row  # refused, over, invalid
        assert 0 <= float(row[3]) <= 1


def test_claude_code_runs_a_short_messages_session(tmp_path: Path) -> None:
    out = run("bench.claude_code", "--quick", "--modes", "translated", "--out", str(tmp_path))
    row = next(line.split() for line in out.splitlines() if line.startswith("4,000 "))
    assert row[2] == "translated" and row[4:7] == ["0", "0", "0"], out  # refused, over, errors
    assert (tmp_path / "claude_code.json").stat().st_size > 0


def test_reuse_loss_names_where_each_firing_changes_the_prompt() -> None:
    out = run("bench.reuse_loss", "--turns", "30", "--windows", "4096")
    head = re.search(r"prefix reuse 0\.\d+, (\d+) of 30 turns changed the prompt", out)
    assert head and int(head.group(1)) > 0, out
    rows = re.findall(r"^(\S.*?)\s{2,}(\d+)\s+[\d,]+\s+[\d,]+$", out, re.M)
    assert sum(int(n) for _, n in rows) == int(head.group(1)), out  # every change has a cause
