"""bench/keep_vs_trim.py on two small shapes, so that it cannot rot: it runs, prints its table
and writes its JSON, with LiteLLM's trim when the bench extra installed it."""

from __future__ import annotations

import importlib.util
import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]
pytestmark = pytest.mark.bench


def test_keep_vs_trim_runs_on_two_small_shapes(tmp_path: Path) -> None:
    trim = importlib.util.find_spec("litellm") is not None
    args = ["--seeds=1", "--shapes=big result,earlier values", "--no-progress"]
    args += [f"--out={tmp_path}"] + ([] if trim else ["--no-trim"])
    env = {**os.environ, "LITELLM_LOCAL_MODEL_COST_MAP": "True"}
    done = subprocess.run(
        [sys.executable, "-m", "bench.keep_vs_trim", *args],
        cwd=ROOT, env=env, capture_output=True, text=True, timeout=300,
    )  # fmt: skip
    assert done.returncode == 0, done.stdout[-2000:] + done.stderr[-3000:]
    assert "ctxproxy kept" in done.stdout
    data = json.loads((tmp_path / "keep_vs_trim.json").read_text())
    methods = {(s["method"], s["mode"]) for s in data["summary"]}
    assert ("ctxproxy", "one-shot") in methods and ("ctxproxy", "turn by turn") in methods
    assert ("trim", "one-shot") in methods or not trim
    ours = [s for s in data["summary"] if s["method"] == "ctxproxy" and s["mode"] == "one-shot"]
    assert all(0 <= s["kept"] <= 1 and 0 < s["fill"] <= 1 for s in ours)
