"""The benchmarks on a tiny size, so that they cannot rot: each runs, prints its table and
writes its JSON and plot. No peers and no network: only ctxproxy and the scripted upstream."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from tests.bench.smoke import run

pytestmark = pytest.mark.bench


def test_overhead_runs_on_a_tiny_history(tmp_path: Path) -> None:
    out = run("bench.overhead", "--quick", "--no-peers", "--out", str(tmp_path))
    assert "added p50 ms, non-streaming" in out
    data = json.loads((tmp_path / "overhead-quick.json").read_text())
    for kind in ("continuing", "new"):
        proxied = data["latency"]["tiny"][kind]["ctxproxy"]
        assert "error" not in proxied, proxied
        assert proxied["p50_ms"]["median"] > 0
    assert data["latency"]["tiny"]["continuing"]["ctxproxy"]["rps16"]["median"] > 0
    assert [p["messages"] for p in data["growth"]["ctxproxy"]] == [20, 40, 80]
    assert all(r["status"] == 200 for r in data["stall"]["ctxproxy"].values())
    assert data["memory"]["ctxproxy"]["rss_after_mb"] > 0
    for agent in ("claude", "codex"):  # Claude-Code- and Codex-shaped sessions
        proxied = data["agents"][agent]["ctxproxy"]
        assert "error" not in proxied, proxied
        assert proxied["p50_ms"]["median"] > 0


def test_soak_samples_rss_and_plots_it(tmp_path: Path) -> None:
    args = ("--sessions", "2", "--turns", "6", "--requests", "20")  # sessions start over
    out = run("bench.soak", *args, "--out", str(tmp_path))
    assert "over the second half" in out
    data = json.loads((tmp_path / "soak.json").read_text())
    assert data["requests"] == 20 and data["samples"][-1][1] == 20 and data["rss_end_mb"] > 0
    assert (tmp_path / "soak.png").stat().st_size > 0


def test_soak_judges_the_median_level_not_one_sample(tmp_path: Path) -> None:
    """A spike in the last sample (a request in flight) moves neither level."""
    samples = [[i * 0.5, i * 10, 100.0 + (i % 2)] for i in range(101)]  # 100-101 MiB, flat
    samples[-1] = [50.0, 1000, 160.0]
    run_json = tmp_path / "spiky.json"
    fields = {"requests": 1000, "sessions": 2, "turns": 500, "window": 4096}
    run_json.write_text(json.dumps({**fields, "samples": samples}))
    out = run("bench.soak", "--plot", str(run_json), "--out", str(tmp_path))
    figure = float(out.split("MiB, ")[1].split("%")[0])
    assert abs(figure) < 2, out


def test_scaling_runs_on_a_short_session(tmp_path: Path) -> None:
    out = run("bench.scaling", "--quick", "--out", str(tmp_path))
    assert "DB bytes per byte of unique content" in out
    data = json.loads((tmp_path / "scaling-quick.json").read_text())
    assert [p["messages"] for p in data["points"]] == [10, 20, 30, 40]
    assert all(p["db_bytes"] > 0 and p["handling_ms"] > 0 for p in data["points"])
    assert len(data["e2e"]["per_turn"]) == len(data["per_turn"])
    assert (tmp_path / "scaling-quick.png").stat().st_size > 0


def test_long_sessions_run_through_a_real_proxy(tmp_path: Path) -> None:
    out = run(
        "bench.sessions",
        "--turns=16",
        "--windows",
        "4096",
        "--configs",
        "default",
        "sliding_window",
        "--variants=1",
        "--kinds=pytest,python",
        f"--out={tmp_path}",
    )
    assert "prefix reuse" in out
    runs = json.loads((tmp_path / "sessions.json").read_text())["runs"]
    assert {r["config"] for r in runs} == {"default", "sliding_window"}
    default = next(r for r in runs if r["config"] == "default")
    assert default["turns"] == 16 and default["refused"] == 0 and default["over"] == 0
    assert 0 < default["reuse"] <= 1 and all(default["kept"].values())


def test_load_runs_a_few_sessions() -> None:
    """bench/load.py in miniature: 4 streaming sessions for 2 s; it exits 1 on any error or any
    request whose exchange was not stored and finished."""
    out = run("bench.load", "--sessions", "4", "--seconds", "2")
    figures = {line[:30].strip(): line[30:].split() for line in out.splitlines()}
    assert int(figures["requests (streaming)"][0]) > 8, out
    assert figures["errors"][0] == "0" and figures["records lost"][0] == "0", out


def test_replay_time_runs_on_a_short_session() -> None:
    out = run("bench.replay_time", "--turns", "5", "--folder", "2", "--rounds", "1")
    rows = [line.split()[:2] for line in out.splitlines()[1:]]
    assert [r[0] for r in rows] == ["5", "5", "5", "2"]  # 5 turns, stored, with --set, folder
