"""The benchmarks on a tiny size, so that they cannot rot: each runs, prints its table and
writes its JSON and plot. No peers and no network: only ctxproxy and the scripted upstream."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]


def run(module: str, *args: str) -> str:
    done = subprocess.run(
        [sys.executable, "-m", module, *args],
        cwd=ROOT,
        capture_output=True,
        text=True,
        timeout=120,
    )
    assert done.returncode == 0, done.stdout[-2000:] + done.stderr[-3000:]
    return done.stdout


def test_overhead_runs_on_a_tiny_history(tmp_path: Path) -> None:
    out = run("bench.overhead", "--quick", "--no-peers", "--out", str(tmp_path))
    assert "added p50 ms, non-streaming" in out
    data = json.loads((tmp_path / "overhead-quick.json").read_text())
    proxied = data["figures"]["tiny"]["ctxproxy"]
    assert "error" not in proxied, proxied
    assert proxied["p50_ms"]["median"] > 0
    assert set(proxied["rps"]) == {"1", "16", "64"}
    assert (tmp_path / "overhead-quick.png").stat().st_size > 0


def test_scaling_runs_on_a_short_session(tmp_path: Path) -> None:
    out = run("bench.scaling", "--quick", "--out", str(tmp_path))
    assert "DB bytes per byte of unique content" in out
    data = json.loads((tmp_path / "scaling-quick.json").read_text())
    assert [p["messages"] for p in data["points"]] == [10, 20, 30, 40]
    assert all(p["db_bytes"] > 0 and p["handling_ms"] > 0 for p in data["points"])
    assert len(data["e2e"]["per_turn"]) == len(data["per_turn"])
    assert (tmp_path / "scaling-quick.png").stat().st_size > 0
