"""`ctxproxy replay` on real transcripts: figures, two configurations side by side, the same
run after run, progress over a folder, a plot; what the transcript lacks is said."""

from __future__ import annotations

import json
import shutil
from pathlib import Path

import pytest

from proxy.cli.commands import main

FIXTURES = Path(__file__).resolve().parents[2] / "fixtures"
CLAUDE = FIXTURES / "claude_code_2.1.197_transcript.jsonl"
CODEX = FIXTURES / "codex_0.171.0_rollout.jsonl"


@pytest.fixture
def config(tmp_path: Path) -> Path:
    path = tmp_path / "config.yaml"
    path.write_text(f"database_url: sqlite:///{tmp_path / 'db.sqlite'}\n")
    return path


def run(capsys: pytest.CaptureFixture[str], config: Path, *args: str) -> tuple[int, str, str]:
    code = main(["--config", str(config), "replay", *args])
    out = capsys.readouterr()
    return code, out.out, out.err


def test_vs_gives_the_same_figures_run_after_run(
    capsys: pytest.CaptureFixture[str], config: Path, tmp_path: Path
) -> None:
    other = tmp_path / "other.yaml"
    other.write_text("compaction:\n  pipeline: [sliding_window]\n  target: 0.3\n")
    args = (str(CODEX), "--window", "12000", "--vs", str(other), "--json", "--per-turn")
    first, second = run(capsys, config, *args), run(capsys, config, *args)
    assert first[0] == 0 and first == second
    [session] = json.loads(first[1])
    this, that = session["configs"]
    assert this["firings"] and that["firings"]
    assert this["tokens_sent"] != that["tokens_sent"]  # the two settings really differ


def test_side_by_side_marks_the_figures_that_differ(
    capsys: pytest.CaptureFixture[str], config: Path
) -> None:
    change = "pipeline=[sliding_window]"
    code, out, _ = run(capsys, config, str(CODEX), "--window", "12000", "--set", change)
    assert code == 0
    rows = {line[2:].split("  ")[0].strip(): line for line in out.splitlines()[1:]}
    assert rows["tokens sent"].startswith("* ")
    assert rows["overflowed uncompacted"].startswith("  ")  # the same history either way


def test_what_a_transcript_lacks_is_said_and_counted_when_given(
    capsys: pytest.CaptureFixture[str], config: Path
) -> None:
    code, out, _ = run(capsys, config, str(CLAUDE), "--window", "200000", "--json")
    [bare] = json.loads(out)
    assert code == 0 and "system prompt" in bare["lacks"][0]
    _, text, _ = run(capsys, config, str(CLAUDE), "--window", "200000")
    assert "not counted: the figures below are low by its size; give --fixed-tokens N" in text
    _, out, _ = run(capsys, config, str(CLAUDE), "--window", "200000", "--fixed-tokens", "16000")
    [fixed] = json.loads(
        run(capsys, config, str(CLAUDE), "--window", "200000", "--fixed-tokens", "16000", "--json")[
            1
        ]
    )
    turns = bare["turns"]
    sent = bare["configs"][0]["tokens_sent"], fixed["configs"][0]["tokens_sent"]
    assert sent[1] == sent[0] + 16000 * turns
    assert "counted as 16,000 tokens in every turn (--fixed-tokens)" in out


def test_the_fixed_part_takes_its_room_from_the_window(
    capsys: pytest.CaptureFixture[str], config: Path
) -> None:
    """The Claude Code session at 24k: its ~17.8k tokens of system prompt, tools and rendered
    context (what the stored session counted on its first turn, less the transcript's) make
    compaction fire from turn 4 on, as its stored session replays at 24k; uncounted, never."""
    args = (str(CLAUDE), "--window", "24000", "--json")
    [bare] = json.loads(run(capsys, config, *args)[1])
    [fixed] = json.loads(run(capsys, config, *args, "--fixed-tokens", "17800")[1])
    assert not bare["configs"][0]["firings"]
    assert [f["turn"] for f in fixed["configs"][0]["firings"]][:3] == [4, 5, 6]


def test_a_folder_shows_progress_on_stderr(
    capsys: pytest.CaptureFixture[str], config: Path, tmp_path: Path
) -> None:
    folder = tmp_path / "sessions"
    for i in range(3):
        (folder / f"p{i}").mkdir(parents=True)
        shutil.copy(CLAUDE, folder / f"p{i}" / f"s{i}.jsonl")
    (folder / "notes.jsonl").write_text('{"hello": 1}\n')  # not a session: left out
    code, out, err = run(capsys, config, str(folder), "--window", "32768")
    assert code == 0
    assert "3/3" in err and "replaying [" in err
    assert out.count("claude-code s") == 3


def test_no_window_known_is_an_error_that_says_what_to_give(
    capsys: pytest.CaptureFixture[str], config: Path
) -> None:
    code, _, err = run(capsys, config, str(CLAUDE))
    assert code == 2 and "--window N" in err


def test_a_bad_set_names_the_key(capsys: pytest.CaptureFixture[str], config: Path) -> None:
    code, _, err = run(capsys, config, str(CLAUDE), "--window", "9000", "--set", "trigerr=0.5")
    assert code == 2 and "trigerr" in err


def test_plot_writes_a_png(
    capsys: pytest.CaptureFixture[str], config: Path, tmp_path: Path
) -> None:
    pytest.importorskip("matplotlib")
    png = tmp_path / "turns.png"
    args = (str(CODEX), "--window", "12000", "--set", "target=0.3", "--plot", str(png))
    code, _, err = run(capsys, config, *args)
    assert code == 0 and f"plot: {png}" in err
    assert png.read_bytes()[:8] == b"\x89PNG\r\n\x1a\n"


def test_a_user_statement_a_marker_follows_counts_as_kept(
    capsys: pytest.CaptureFixture[str], config: Path
) -> None:
    """Codex's task at 12k: the oldest steps after it are left out behind a marker appended to
    it; the user's words are all still there."""
    args = (str(CODEX), "--window", "12000", "--fixed-tokens", "2600", "--json")
    [session] = json.loads(run(capsys, config, *args)[1])
    [this] = session["configs"]
    assert "forget" in {p for f in this["firings"] for p in f["passes"]}
    task = this["user_statements"][1]
    assert task["what"].startswith("Fix the failing test") and task["kept"]
    assert task["ref"].startswith("/messages/")


def test_refused_turns_save_nothing_and_count_their_full_history(
    capsys: pytest.CaptureFixture[str], config: Path, tmp_path: Path
) -> None:
    """A sliding window cannot fit Claude Code's session at 24k from turn 4: those turns are
    refused; the full history and its overflows are the same figures as the other side's."""
    other = tmp_path / "window.yaml"
    other.write_text("compaction:\n  pipeline: [sliding_window]\n")
    args = (str(CLAUDE), "--window", "24000", "--fixed-tokens", "17800", "--vs", str(other))
    [session] = json.loads(run(capsys, config, *args, "--json", "--per-turn")[1])
    this, that = session["configs"]
    assert that["refused_turns"] and not this["refused_turns"]
    assert this["tokens_full"] == that["tokens_full"]
    assert this["overflowed_turns"] == that["overflowed_turns"]
    answered = [t for t in that["per_turn"] if t["error"] is None]
    assert that["tokens_saved"] == sum(t["original"] - t["sent"] for t in answered)
    text = run(capsys, config, *args)[1]
    assert f"turn {that['refused_turns'][0]} refused: This request needs" in text
