"""`ctxproxy sessions` and `ctxproxy serve`'s start-up upgrade, on a real SQLite file."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest

from proxy.cli import commands as cli
from proxy.store import Store
from proxy.testing.records import new_request

EVENTS = [
    {"strategy": "traceback", "phase": None, "tokens_before": 900, "tokens_after": 400},
    {"strategy": "tiered", "phase": 2, "tokens_before": 400, "tokens_after": 300},
]


@pytest.fixture
def config(tmp_path: Path) -> Path:
    path = tmp_path / "config.yaml"
    path.write_text(f"database_url: sqlite:///{tmp_path / 'cli.db'}\n")
    return path


@pytest.fixture
def filled(config: Path, tmp_path: Path) -> None:
    store = Store(f"sqlite:///{tmp_path / 'cli.db'}")
    store.upgrade()
    history: list[dict[str, Any]] = []
    for turn in range(3):
        history.append({"role": "user", "content": f"turn {turn}"})
        ref = store.record_request(
            new_request(
                "agent-7",
                list(history),
                source="path",
                request={"model": "qwen"},
                model="qwen",
                upstream="local",
                stream=True,
                tokens_original=1200 * (turn + 1),
                tokens_compiled=900,
                budget=1000,
                window=2048,
                pipeline=["traceback", "tiered"],
                events=EVENTS if turn == 2 else [],
            )
        )
        if turn < 2:  # the last turn is still in flight
            answer = {"role": "assistant", "content": f"done {turn}"}
            store.finish_exchange(
                ref,
                status=200,
                latency_ms=50,
                ttft_ms=5,
                response=answer,
                partial=turn == 1,
                usage=None,
                error=None,
            )
            history.append(answer)
    store.close()


def run(config: Path, *args: str) -> int:
    return cli.main(["--config", str(config), *args])


def test_sessions_lists_a_table(
    config: Path, filled: None, capsys: pytest.CaptureFixture[str]
) -> None:
    assert run(config, "sessions") == 0
    out = capsys.readouterr().out.splitlines()
    assert out[0].split() == [
        "SESSION",
        "SOURCE",
        "MODEL",
        "TURNS",
        "RETRIES",
        "FAILED",
        "TOKENS",
        "BEFORE",
        "→",
        "AFTER",
        "SAVED",
        "NET",
        "OF",
        "CACHE",
        "UPDATED",
        "FIRST",
        "MESSAGE",
    ]
    row = out[1].split()
    assert row[:6] == ["agent-7", "path", "qwen", "3", "0", "0"]
    assert row[6:9] == ["7,200", "→", "2,700"] and row[9] == "62%"
    assert row[10] == "4,500"  # saved, no firing having cost any cache
    assert row[-2:] == ["turn", "0"]  # the first user message names the session
    assert out[-1].startswith("1–1 of 1 sessions · turns: histories sent; retries resend one")


def test_sessions_shows_one_sessions_turns(
    config: Path, filled: None, capsys: pytest.CaptureFixture[str]
) -> None:
    assert run(config, "sessions", "agent-7") == 0
    out = capsys.readouterr().out.splitlines()
    assert out[0].startswith(
        "session agent-7 (path) · 3 turns · 3 requests (0 retries, 0 failed)"
        " · 5 messages · 1 branch"
    )
    assert out[1] == "first message: turn 0"
    assert out[2].split()[:5] == ["REQUEST", "TURN", "TIME", "MODEL", "STATUS"]
    turns = [line.split() for line in out[3:]]
    assert [t[:2] for t in turns] == [["1", "1"], ["2", "2"], ["3", "3"]]
    assert turns[0][4:6] == ["qwen", "200"] and turns[0][-5:] == ["1,200", "→", "900", "-", "-"]
    assert turns[1][4:7] == ["qwen", "200", "partial"]
    assert turns[2][4:6] == ["qwen", "pending"]
    assert turns[2][-6:] == ["3,600", "→", "900", "traceback,", "tiered:2", "-"]


def test_sessions_shows_retries_and_refusals_apart(
    config: Path, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    store = Store(f"sqlite:///{tmp_path / 'cli.db'}")
    store.upgrade()
    history = [{"role": "user", "content": "one message, retried by the SDK"}]
    refused = {
        "message": "too long",
        "type": "invalid_request_error",
        "code": "context_length_exceeded",
    }
    for status, error in ((502, {"code": "upstream_unavailable"}), (400, refused), (400, refused)):
        ref = store.record_request(
            new_request(
                "retried",
                history,
                request={"model": "qwen"},
                model="qwen",
                upstream="local",
                compiled=[] if status == 400 else history,
                tokens_original=5000,
                tokens_compiled=4500,
                budget=3000,
                window=4096,
                pipeline=["tiered"],
            )
        )
        store.finish_exchange(
            ref,
            status=status,
            latency_ms=5,
            ttft_ms=None,
            response=None,
            partial=False,
            usage=None,
            error=error,
        )
    store.close()
    assert run(config, "sessions") == 0
    row = capsys.readouterr().out.splitlines()[1].split()
    assert row[3:7] == ["1", "2", "3", "0"]  # 1 turn, 2 retries, 3 failed, no tokens counted
    assert run(config, "sessions", "retried") == 0
    out = capsys.readouterr().out.splitlines()
    assert "1 turn · 3 requests (2 retries, 3 failed)" in out[0]
    assert [line.split()[4:] for line in out[3:]] == [
        ["qwen", "502", "5,000", "→", "4,500", "-", "-"],
        ["qwen", "400", "refused", "(retry", "of", "1)", "5,000", "→", "4,500", "-", "-"],
        ["qwen", "400", "refused", "(retry", "of", "1)", "5,000", "→", "4,500", "-", "-"],
    ]


def test_sessions_explains_what_is_missing(
    config: Path, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    assert run(config, "sessions") == 1
    assert "no database at" in capsys.readouterr().err
    assert not (tmp_path / "cli.db").exists()
    Store(f"sqlite:///{tmp_path / 'cli.db'}").ping()  # an empty file: not migrated yet
    assert run(config, "sessions") == 1
    assert "empty or outdated; run `ctxproxy migrate`" in capsys.readouterr().err
    assert run(config, "migrate") == 0
    assert run(config, "sessions") == 0
    assert capsys.readouterr().out.strip().endswith("no sessions")
    assert run(config, "sessions", "ghost") == 1
    assert "no session 'ghost'" in capsys.readouterr().err


def test_serve_upgrades_the_database_before_it_starts(
    config: Path, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    seen: list[bool] = []

    def fake_run(app: Any, **kw: Any) -> None:
        store = Store(f"sqlite:///{tmp_path / 'cli.db'}")
        seen.append(store.needs_upgrade())
        store.close()

    monkeypatch.setattr("uvicorn.run", fake_run)
    assert run(config, "serve", "--port", "0") == 0
    assert seen == [False]


def test_sessions_shows_the_cache_and_what_observe_mode_would_have_saved(
    config: Path, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    store = Store(f"sqlite:///{tmp_path / 'cli.db'}")
    store.upgrade()
    history = [{"role": "user", "content": "observe me"}]
    for turn, cache in enumerate(
        [{"cached_tokens": 0}, {"cached_tokens": 300, "cache_cause": "firing", "cache_lost": 700}]
    ):
        ref = store.record_request(
            new_request(
                "watched",
                list(history),
                request={"model": "qwen"},
                model="qwen",
                upstream="local",
                tokens_original=3000,
                tokens_compiled=1000,
                budget=1500,
                window=2048,
                pipeline=["tiered"],
                observed=True,
                cache_expected=300 if turn else None,
                cache_previous=1000 if turn else None,
            )
        )
        answer = {"role": "assistant", "content": f"ok {turn}"}
        store.finish_exchange(
            ref,
            status=200,
            latency_ms=5,
            ttft_ms=None,
            response=answer,
            partial=False,
            usage=None,
            error=None,
            cache=cache,
        )
        history += [answer, {"role": "user", "content": f"more {turn}"}]
    store.close()
    assert run(config, "sessions") == 0
    row = capsys.readouterr().out.splitlines()[1].split()
    assert row[10:12] == ["3,300", "(would)"]  # 2 x 2,000 saved, less 700 lost to a firing
    assert run(config, "sessions", "watched") == 0
    out = capsys.readouterr().out.splitlines()
    assert "net of cache 3,300 (would)" in out[0]
    turns = [line.split() for line in out[3:]]
    assert turns[0][-2:] == ["0/0", "observed"]
    assert turns[1][-5:] == ["300/300", "lost", "700", "(firing)", "observed"]
