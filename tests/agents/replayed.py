"""A real CLI's session replayed offline: from the store, the views sent live; from the
transcript the CLI wrote, the same requests and messages."""

from __future__ import annotations

from collections.abc import Callable
from pathlib import Path

from proxy.compile.tokens import TokenCounter
from proxy.replay import stored
from proxy.replay.runner import Config, replay
from proxy.replay.session import Session
from proxy.store import Store
from proxy.testing.transcripts import differences
from tests.agents.clis import Scene


def check_replay(
    scene: Scene, transcripts: str, read: Callable[[Path], list[Session]], skip: int = 0
) -> None:
    """`transcripts`: where under the scratch HOME the CLI wrote its session; `skip`: leading
    messages the transcript keeps otherwise than sent (Codex's base instructions)."""
    settings = scene.settings
    assert settings is not None
    store = Store(settings.database_url)
    try:
        [row] = store.list_sessions().data
        [live] = stored.read(store, row.id)
    finally:
        store.close()
    window = live.turns[-1].window
    replayed = replay(live, Config("live", settings, window), TokenCounter())
    same = [t.same_as_live for t in replayed.turns]
    assert same == [True] * len(same), f"views that differ from those sent live: {same}"
    [path] = sorted(scene.home.glob(transcripts))
    [written] = read(path)
    assert len(written.turns) == len(live.turns), "the transcript's requests"
    assert not written.broken and not written.skipped, (written.broken, written.skipped)
    for i, (a, b) in enumerate(zip(written.turns, live.turns, strict=True)):
        found = differences(a.body["messages"][skip:], b.body["messages"][skip:], skip > 0)
        assert found == [], f"request {i + 1}: {found}"
