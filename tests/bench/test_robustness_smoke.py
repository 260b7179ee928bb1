"""The robustness benchmarks on a tiny size: each runs and counts what it exists to count."""

from __future__ import annotations

import pytest

from tests.bench.smoke import run

pytestmark = pytest.mark.bench


def figures(out: str) -> dict[str, list[str]]:
    """A printed `figure  value...` table by its first column (the label ends at two spaces)."""
    rows = (line.split("  ", 1) for line in out.splitlines() if "  " in line)
    return {label.strip(): rest.split() for label, rest in rows}


def test_killload_kills_serve_and_loses_no_record() -> None:
    args = ("--seconds", "6", "--sessions", "2", "--kill-every", "2", "3")
    got = figures(run("bench.killload", *args))
    assert int(got["kills"][0]) >= 1 and int(got["stored"][0]) > 0, got
    assert got["records_lost"] == ["0"] and got["partial_answers_lost"] == ["0"], got


def test_slowloris_probes_healthz_while_bodies_trickle() -> None:
    got = figures(run("bench.slowloris", "--conns", "20", "--seconds", "2"))
    assert got["connections opened"] == ["20"], got
    assert got["/healthz right after"] == ["8/8", "(100%)"], got


def test_stray_counts_wrong_answers() -> None:
    out = run("bench.stray", "--seconds", "1", "--clients", "2")
    row = next(line.split() for line in out.splitlines() if line.startswith("ctxproxy "))
    requests, wrong = int(row[2]), int(row[5])
    assert requests > 0 and wrong == 0, out


def test_fuzz_finds_no_5xx_of_ctxproxys_own() -> None:
    out = run("bench.fuzz", "--examples", "1")
    last = out.strip().splitlines()[-1]  # after any hypothesis notes
    assert last.startswith("cases ") and last.endswith("own 5xx 0"), out
