"""The store's hot path: statements on the driver's cursor read back as SQLAlchemy's did, and
SQLite's write-ahead log kept in check while a session runs."""

from __future__ import annotations

from pathlib import Path
from typing import Any

from proxy.store import Store
from proxy.testing.records import finish_turn, new_request


def turn(store: Store, messages: list[dict[str, Any]]) -> list[dict[str, Any]]:
    new = new_request("s", messages)
    ref = store.record_request(new)
    answer = {"role": "assistant", "content": f"answer {len(messages)} " + "x" * 2000}
    finish_turn(store, ref, answer, usage={"prompt_tokens": 7})
    return [*messages, answer, {"role": "user", "content": f"next {len(messages)}"}]


def test_the_write_ahead_log_stops_growing_while_a_session_runs(tmp_path: Path) -> None:
    store = Store(f"sqlite:///{tmp_path / 'store.db'}")
    store.upgrade()
    wal = tmp_path / "store.db-wal"
    messages: list[dict[str, Any]] = [{"role": "user", "content": "start"}]
    sizes = []
    try:
        for _ in range(3):
            for _ in range(150):
                messages = turn(store, messages)
            sizes.append(wal.stat().st_size)
        history = store.get_history("s")
    finally:
        store.close()
    # Checkpointed, the log is written from its start again: it keeps the size it first had.
    assert sizes[2] <= sizes[0] * 1.2, sizes
    assert history is not None and len(history.messages) == len(messages) - 1
    reopened = Store(f"sqlite:///{tmp_path / 'store.db'}")
    try:
        last = reopened.get_exchange("s", 450)
    finally:
        reopened.close()
    assert last is not None and last.exchange.status == 200
    assert last.response == messages[-2]


def test_a_long_history_that_branches_near_its_end_stores_only_its_new_tail(
    tmp_path: Path,
) -> None:
    # Each turn goes on from a few messages before the answer stored (as agents that resend
    # their own step rather than the answer do): the new tail, whatever was deleted meanwhile.
    store = Store(f"sqlite:///{tmp_path / 'store.db'}")
    store.upgrade()
    history = [{"role": "user", "content": f"message {i}"} for i in range(1_300)]
    try:
        previous = 0
        for n in (1_200, 1_202, 1_206):
            ref = store.record_request(new_request("s", history[:n]))
            assert ref.new_messages == n - previous
            previous = n
            turn_answer = {"role": "assistant", "content": f"answer {n}"}
            finish_turn(store, ref, turn_answer)
        assert store.delete_session("s")
        ref = store.record_request(new_request("s", history[:1_208]))  # the hint is stale now
        assert ref.new_messages == 1_208
        stored = store.get_history("s", ref.leaf_entry_id)
    finally:
        store.close()
    assert stored is not None
    assert [m.message for m in stored.messages] == history[:1_208]


def test_a_long_new_history_is_stored_ahead_without_looking_up_each_slice(
    tmp_path: Path,
) -> None:
    """Stored ahead a slice at a time, each slice goes on from the one before: the stored
    prefix is looked up once for the history, not once a slice (so a step's cost is what it
    adds, whatever came before it), and the whole history is stored."""
    from sqlalchemy import event

    store = Store(f"sqlite:///{tmp_path / 'store.db'}")
    lookups: list[str] = []

    def trace(statement: str) -> None:  # every statement, the driver's cursor's too
        if statement.lstrip().upper().startswith("SELECT") and "FROM entries" in statement:
            lookups.append(statement)

    event.listen(store.engine, "connect", lambda conn, _: conn.set_trace_callback(trace))
    store.upgrade()
    history = [{"role": "user", "content": f"m{i}"} for i in range(5_000)]
    try:
        ref = store.record_request(new_request("s", history))
        stored = store.get_history("s")
    finally:
        store.close()
    assert ref.new_messages == 5_000
    assert stored is not None and [m.message for m in stored.messages] == history
    # 49 slices of 100: each reads back the ids of the entries it added, nothing more (on
    # main, 199: each slice also looked the stored prefix up again).
    assert len(lookups) <= 49 + 10, len(lookups)
