"""The cost benchmarks on a tiny size: each runs and prints the figure it exists for."""

from __future__ import annotations

import json
import re
from pathlib import Path

import pytest

from tests.bench.smoke import run

pytestmark = pytest.mark.bench


def test_turn_cpu_measures_the_servers_cpu_per_request() -> None:
    out = run("bench.turn_cpu", "--profiles", "tiny", "--requests", "10", "--rounds", "1")
    row = next(line for line in out.splitlines() if line.startswith("tiny "))
    cpu = float(row.split()[2])
    assert cpu > 0 and "store" in row and "upstream" in row, out


def test_profile_turn_times_turns_in_process() -> None:
    args = ("--turns", "5", "--messages", "6", "--tokens", "1000", "--no-profile")
    out = run("bench.profile_turn", *args)
    assert re.search(r"CPU \d+\.\d+ ms per request", out), out
    assert "continuing, 6 messages" in out


def test_store_turn_times_the_stores_share() -> None:
    out = run("bench.store_turn", "--turns", "5")
    assert re.search(r"continuing turn: wall \d+\.\d+ ms, CPU \d+\.\d+ ms", out), out
    assert "of which record_request" in out


def test_transport_cpu_measures_each_client() -> None:
    args = ("--clients", "aiohttp", "httpx", "--rounds", "1", "--requests", "20")
    out = run("bench.transport_cpu", *args, "--concurrency", "2")
    rows = [line.split() for line in out.splitlines() if "concurrent" in line]
    assert {r[2] for r in rows} == {"aiohttp", "httpx"}, out


def test_compile_bench_compiles_cold_and_warm() -> None:
    out = run("bench.compile_bench", "--quick")
    rows = [line.split() for line in out.splitlines() if line.strip().startswith(("16384", "4096"))]
    assert len(rows) == 2 and all(float(r[-2]) > 0 for r in rows), out


def test_recall_search_compares_with_re() -> None:
    out = run("bench.recall_search", "--quick")
    assert "(a+)+$ (planted line)" in out and "ratio" in out, out


def test_hugemem_sees_memory_come_back(tmp_path: Path) -> None:
    args = ("--mb", "1", "--messages", "500", "--idle", "1", "--out", str(tmp_path))
    out = run("bench.hugemem", *args)
    assert "HTTP [200, 200]" in out, out
    result = json.loads((tmp_path / "hugemem.json").read_text())
    assert result["rss_peak_mb"] >= result["rss_before_mb"] > 0


def test_compile_work_gives_the_recorded_views() -> None:
    """A change to how a compile works (memos, counts) must not move one byte: the views of
    the keep-vs-trim shapes (one-shot and turn by turn) and a 60-turn agent session at 4k and
    8k, against the digests recorded at the last change meant to change views
    (tests/fixtures/compile_views.json). Such a change records them again:
    python -m bench.compile_work --record FILE, then --quick --record FILE."""
    fixture = Path(__file__).resolve().parents[1] / "fixtures" / "compile_views.json"
    out = run("bench.compile_work", "--quick", "--check", str(fixture), timeout=600)
    compared = re.search(r"same bytes: (\d+) of (\d+) views", out)
    assert compared and compared[1] == compared[2] and int(compared[2]) > 500, out
