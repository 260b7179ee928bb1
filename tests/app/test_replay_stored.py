"""A session served by the app, replayed offline from the store: the same views, turn for turn,
as went upstream live, firings included; exported as chat JSONL, it reads back."""

from __future__ import annotations

import json
from pathlib import Path

import httpx
import pytest
from fastapi.testclient import TestClient

from proxy.app import create_app
from proxy.cli.commands import main
from proxy.compile.tokens import TokenCounter
from proxy.settings import Settings, load_settings
from proxy.testing.histories import agent_turn

LOCAL = "http://localhost"
TASK = [
    {"role": "system", "content": "You are a coding agent."},
    {"role": "user", "content": "Fix the failing tests in the parser package."},
]
TURNS = 24


COUNTER = TokenCounter()


def answer(request: httpx.Request) -> httpx.Response:
    body = json.loads(request.content)
    # The upstream counts a third more than the estimate: the session's calibration moves,
    # and with it the views. The replay must compile with the calibration each turn had.
    n = round(COUNTER.count_messages(body["messages"]) * 1.3)
    return httpx.Response(
        200,
        json={
            "id": f"c{n}",
            "object": "chat.completion",
            "model": body["model"],
            "choices": [
                {
                    "index": 0,
                    "message": {"role": "assistant", "content": "ok"},
                    "finish_reason": "stop",
                }
            ],
            "usage": {"prompt_tokens": n, "completion_tokens": 1, "total_tokens": n + 1},
        },
    )


@pytest.fixture
def served(tmp_path: Path) -> tuple[str, Path]:
    """A scripted agent session of TURNS requests through the app at a 4k window."""
    config = tmp_path / "config.yaml"
    database = f"sqlite:///{tmp_path / 'db.sqlite'}"
    upstream = {"name": "local", "base_url": "http://up.test/v1", "context_window": 4096}
    config.write_text(json.dumps({"database_url": database, "upstreams": [upstream]}))
    settings = Settings(database_url=database, upstreams=[upstream])
    app = create_app(settings, transport=httpx.MockTransport(answer))
    with TestClient(app, base_url=LOCAL) as client:
        for turn in range(TURNS):
            messages = [*TASK, *(m for t in range(turn + 1) for m in agent_turn(t))]
            r = client.post(
                "/v1/chat/completions",
                json={"model": "m", "messages": messages},
                headers={"x-session-id": "scripted"},
            )
            assert r.status_code == 200, r.text
    return "scripted", config


def replay_json(capsys: pytest.CaptureFixture[str], *args: str) -> list[dict]:
    assert main(list(args)) == 0
    return json.loads(capsys.readouterr().out)


def test_a_stored_session_replays_to_the_views_sent_live(
    served: tuple[str, Path], capsys: pytest.CaptureFixture[str]
) -> None:
    session, config = served
    [found] = replay_json(capsys, "--config", str(config), "replay", session, "--json")
    [this] = found["configs"]
    assert found["turns"] == TURNS and this["window"] == 4096
    assert this["firings"], "compaction never fired: the test shows nothing"
    assert this["same_as_live"] == [TURNS, TURNS]
    assert this["tokens_sent"] < this["tokens_full"]


def test_export_reads_back_with_replay(
    served: tuple[str, Path], tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    session, config = served
    out = tmp_path / "session.jsonl"
    assert main(["--config", str(config), "export", session, "-o", str(out)]) == 0
    lines = out.read_text().splitlines()
    assert len(lines) == TURNS
    assert json.loads(lines[-1])["messages"][-1] == agent_turn(TURNS - 1)[-1]
    capsys.readouterr()
    args = ("--config", str(config), "replay", "--json", "--per-turn", "--window", "4096")
    [stored] = replay_json(capsys, *args, session)
    [exported] = replay_json(capsys, *args, str(out))
    assert exported["kind"] == "chat-jsonl" and exported["turns"] == TURNS
    turns = [[t["messages"] for t in s["configs"][0]["per_turn"]] for s in (stored, exported)]
    assert turns[0] == turns[1]


def test_views_export_is_what_went_upstream(
    served: tuple[str, Path], tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    session, config = served
    out = tmp_path / "views.jsonl"
    assert main(["--config", str(config), "export", session, "--views", "-o", str(out)]) == 0
    views = [json.loads(line) for line in out.read_text().splitlines()]
    raw = tmp_path / "raw.jsonl"
    assert main(["--config", str(config), "export", session, "-o", str(raw)]) == 0
    histories = [json.loads(line) for line in raw.read_text().splitlines()]
    shorter = [v for v, h in zip(views, histories, strict=True) if v["messages"] != h["messages"]]
    assert shorter, "no view differs from its history: nothing was compacted"
    assert all(v["messages"][:2] == TASK for v in views)


CODEX = Path(__file__).resolve().parents[1] / "fixtures" / "codex_0.171.0_rollout.jsonl"


def test_a_recorded_replay_is_shown_marked_and_in_no_live_total(
    served: tuple[str, Path], capsys: pytest.CaptureFixture[str]
) -> None:
    _, config = served
    settings = load_settings(config)
    app = create_app(settings)
    with TestClient(app, base_url=LOCAL, client=("127.0.0.1", 50000)) as client:
        before = client.get("/stats").json()
        args = ["--config", str(config), "replay", str(CODEX), "--window", "12000", "--record"]
        for _ in range(2):  # recorded again, it replaces the first
            assert main(args) == 0
        recorded = [s for s in client.get("/sessions").json()["data"] if s["source"] == "replay"]
        after = client.get("/stats").json()
        page = client.get("/ui/").text
    assert [s["id"] for s in recorded] == ["replay:01a249a3-f2a8-70f2-af5f-35d3208bc520"]
    assert recorded[0]["totals"]["exchanges"] == 11
    assert recorded[0]["totals"]["tokens_compiled"] < recorded[0]["totals"]["tokens_original"]
    assert "recorded: session replay:" in capsys.readouterr().err
    assert (after["sessions"], after["totals"]) == (before["sessions"], before["totals"])
    assert after["by_phase"] == before["by_phase"]
    assert 'class="tag replay"' in page
