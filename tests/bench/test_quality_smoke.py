"""bench/quality.py runs end to end on a tiny corpus, so the benchmark cannot rot."""

import json
import shutil

import pytest

from bench import quality


@pytest.mark.skipif(not shutil.which("node"), reason="the smoke corpus runs node")
def test_quality_runs_on_a_tiny_corpus(tmp_path, monkeypatch, capsys):
    monkeypatch.setenv("CTXPROXY_BENCH_CACHE", str(tmp_path / "cache"))
    monkeypatch.setattr("bench.corpus.build.CACHE", tmp_path / "cache")
    result = quality.main(
        [
            "--variants=1",
            "--bfcl=0",
            "--kinds=python,node",
            "--budgets=4000",
            "--peers=middle-out",
            "--no-progress",
            f"--out={tmp_path / 'out'}",
        ]
    )
    printed = capsys.readouterr().out
    assert "traceback+tiered" in printed and "middle-out" in printed
    rows = {r["method"]: r["summary"] for r in result["rows"]}
    assert rows["traceback+tiered"]["n"] == 2
    assert rows["traceback+tiered"]["validity"] == 1.0
    assert 0 <= rows["traceback+tiered"]["recall"] <= 1
    assert json.loads((tmp_path / "out" / "quality.json").read_text())["rows"]
    assert (tmp_path / "out" / "quality.png").stat().st_size > 0


def test_validity_check_catches_an_orphan_tool_message():
    call = {"id": "c1", "type": "function", "function": {"name": "f", "arguments": "{}"}}
    ok = [
        {"role": "user", "content": "go"},
        {"role": "assistant", "content": None, "tool_calls": [call]},
        {"role": "tool", "tool_call_id": "c1", "content": "done"},
    ]
    assert quality.problems(ok) == []
    assert quality.problems([ok[0], ok[2]]) == ["tool message 'c1' answers no call"]
    assert quality.problems(ok[:2]) == ["tool call 'c1' unanswered", "ends with assistant"]
