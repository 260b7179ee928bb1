"""The store on real databases: content addressing, the history trie, concurrency, deletion."""

from __future__ import annotations

import threading
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
from sqlalchemy import func, select

from proxy.store import AmbiguousPrefix, RequestRef, Store
from proxy.store.models import EntryRow, ExchangeRow, MessageRow
from proxy.store.request import NewRequest
from proxy.store.states import Decisions
from proxy.testing.postgres import postgres_database
from strategies.messages import message_hash, original_ref
from strategies.state import Form, ViewState

SYSTEM = {"role": "system", "content": "You are a careful coding agent. " * 60}
EVENT = {
    "strategy": "tiered",
    "phase": 1,
    "iterations": [0],
    "tokens_before": 90,
    "tokens_after": 40,
    "chars_removed": 200,
    "reason": "over budget",
}


@pytest.fixture(params=["sqlite", "postgresql"])
def store(request: pytest.FixtureRequest, tmp_path: Path) -> Iterator[Store]:
    if request.param == "sqlite":
        s = Store(f"sqlite:///{tmp_path / 'store.db'}")
        s.upgrade()
        yield s
        s.close()
        return
    with postgres_database("ctxproxy_store") as url:
        s = Store(url)
        s.upgrade()
        yield s
        s.close()


@pytest.fixture
def sqlite_store(tmp_path: Path) -> Iterator[Store]:
    s = Store(f"sqlite:///{tmp_path / 'store.db'}")
    s.upgrade()
    yield s
    s.close()


def user(text: str) -> dict[str, Any]:
    return {"role": "user", "content": text}


def assistant(text: str) -> dict[str, Any]:
    return {"role": "assistant", "content": text}


def record(
    store: Store,
    messages: list[dict[str, Any]],
    session: str = "s1",
    compiled: list[dict[str, Any]] | None = None,
    **kw: Any,
) -> RequestRef:
    args: dict[str, Any] = dict(
        source="header",
        request={"model": "m", "messages": messages, "temperature": 0.2},
        model="m",
        upstream="local",
        stream=False,
        compiled=messages if compiled is None else compiled,
        tokens_original=100,
        tokens_compiled=60,
        budget=900,
        window=1000,
        pipeline=["traceback", "tiered"],
        events=[EVENT],
    )
    args.update(kw)
    return store.record_request(
        NewRequest(
            session_id=session,
            messages=messages,
            **args,
        )
    )


def finish(store: Store, ref: RequestRef, answer: dict[str, Any] | None, **kw: Any) -> None:
    args: dict[str, Any] = dict(
        status=200,
        latency_ms=12.5,
        ttft_ms=3.0,
        response=answer,
        partial=False,
        usage=None,
        error=None,
    )
    args.update(kw)
    store.finish_exchange(ref, **args)


def count(store: Store, column: Any) -> int:
    with store.engine.connect() as conn:
        return conn.execute(select(func.count(column))).scalar_one()


def test_an_exchange_keeps_request_compiled_view_events_and_answer(store: Store) -> None:
    history = [SYSTEM, user("fix the bug"), assistant("which one?"), user("the parser")]
    marker = assistant("[elided, see /messages/…]")
    folded = [SYSTEM, user("fix the bug"), marker, user("the parser")]
    ref = record(store, history, compiled=folded)
    usage = {
        "prompt_tokens": 60,
        "completion_tokens": 7,
        "prompt_tokens_details": {"cached_tokens": 48},
    }
    finish(store, ref, assistant("done"), usage=usage, attempts=[{"upstream": "local"}])

    assert (ref.seq, ref.new_messages) == (1, 4)
    x = store.get_exchange("s1", 1)
    assert x is not None
    assert x.request == {"model": "m", "temperature": 0.2, "messages": history}
    assert x.compiled_request == {"model": "m", "temperature": 0.2, "messages": folded}
    assert x.compiled_hashes == [message_hash(m) for m in folded]
    assert x.events == [EVENT] and x.exchange.phases == ["tiered:1"]
    assert x.response == assistant("done") and x.usage == usage and x.error is None
    assert x.exchange.status == 200 and not x.exchange.pending
    assert (x.exchange.prompt_tokens, x.exchange.completion_tokens, x.exchange.cached_tokens) == (
        60,
        7,
        48,
    )
    assert x.exchange.window == 1000 and x.exchange.budget == 900
    assert x.attempts == [{"upstream": "local"}]
    # The rewritten message is stored too, so a marker's reader and the audit both find it.
    stored = store.get_message(message_hash(folded[2]))
    assert stored is not None and stored.message == folded[2]
    # The answer joined the history, which the next request extends by one message.
    hist = store.get_history("s1")
    assert hist is not None and [m.message for m in hist.messages] == [*history, assistant("done")]
    ref2 = record(store, [*history, assistant("done"), user("thanks")])
    assert (ref2.seq, ref2.new_messages) == (2, 1)


def test_a_pending_exchange_and_a_failed_one_keep_the_history(store: Store) -> None:
    history = [user("hello")]
    ref = record(store, history)
    summary = store.list_exchanges("s1")
    assert summary is not None and summary[0].pending and summary[0].status is None
    finish(store, ref, None, status=502, error={"message": "upstream down"}, ttft_ms=None)
    x = store.get_exchange("s1", 1)
    assert x is not None and x.exchange.status == 502 and x.response is None
    assert x.error == {"message": "upstream down"}
    hist = store.get_history("s1")
    assert hist is not None and [m.message for m in hist.messages] == history


def test_a_partial_answer_is_stored_marked_partial(store: Store) -> None:
    ref = record(store, [user("tell me a story")], stream=True)
    finish(store, ref, assistant("Once upon a"), partial=True, status=200)
    hist = store.get_history("s1")
    assert hist is not None
    assert hist.messages[-1].message == assistant("Once upon a") and hist.messages[-1].partial
    x = store.get_exchange("s1", 1)
    assert x is not None and x.exchange.partial and x.exchange.stream


def test_storage_grows_with_unique_content_not_with_turns(sqlite_store: Store) -> None:
    store, turns = sqlite_store, 300
    history: list[dict[str, Any]] = [SYSTEM]
    markers = 0
    for turn in range(turns):
        history.append(user(f"step {turn}: run the tests and report " + "x" * 200))
        view = None
        if len(history) > 22:  # the compiled view: system prompt, a marker, the last 20
            view = [SYSTEM, user(f"[{len(history) - 21} earlier messages elided]"), *history[-20:]]
            markers += 1
        ref = record(store, list(history), compiled=view)
        answer = assistant(f"ran step {turn}: 3 passed, 1 failed " + "y" * 200)
        finish(store, ref, answer)
        history.append(answer)

    unique = {message_hash(m): m for m in history}
    assert count(store, MessageRow.hash) == len(unique) + markers
    assert count(store, EntryRow.id) == len(history) == 2 * turns + 1
    assert count(store, ExchangeRow.id) == turns
    with store.engine.connect() as conn:
        body_bytes = conn.execute(select(func.sum(MessageRow.size))).scalar_one()
        widest_view = max(len(v) for v in conn.execute(select(ExchangeRow.compiled)).scalars())
    content = sum(len(m["content"]) for m in unique.values())
    assert body_bytes < 1.3 * content + 200 * len(unique)
    assert widest_view <= 3  # [0, 1], the marker's hash, [start, stop]: not one hash per message
    store.engine.dispose()  # checkpoint the WAL so the file size is the database's
    db = store.sqlite_path()
    assert db is not None
    size = db.stat().st_size
    # turns × history length would be 300 × 300 × ~250 bytes ≈ 22 MB of repeated bodies.
    assert size < 4 * body_bytes + 1_000_000
    print(
        f"\n300 turns: {count(store, MessageRow.hash)} message rows ({body_bytes:,} bytes of "
        f"bodies, unique content {content:,} chars), {count(store, EntryRow.id)} entries, "
        f"{turns} exchanges, database file {size:,} bytes"
    )


def test_an_edited_history_branches_and_both_branches_stay_readable(store: Store) -> None:
    first = [SYSTEM, user("write a parser"), assistant("here it is"), user("add tests")]
    ref1 = record(store, first)
    finish(store, ref1, assistant("tests added"))
    before = store.get_history("s1")
    assert before is not None

    # The client edits its second message: shared prefix is the system prompt only.
    edited = [SYSTEM, user("write a lexer"), assistant("here it is"), user("add tests")]
    ref2 = record(store, edited)
    finish(store, ref2, assistant("lexer tests added"))
    assert ref2.new_messages == 3

    # A rewind to an earlier point adds nothing; its answer starts a third branch.
    ref3 = record(store, first[:2])
    assert ref3.new_messages == 0
    finish(store, ref3, assistant("a different parser"))

    hist = store.get_history("s1")
    assert hist is not None and hist.branch_count == 3
    assert [m.message for m in hist.messages] == [*first[:2], assistant("a different parser")]
    branches = [store.get_history("s1", b.leaf_entry_id) for b in hist.branches]
    entries = {m.entry_id for b in branches if b is not None for m in b.messages}
    assert len(entries) == count(store, EntryRow.id) == 5 + 4 + 1  # each with its answer
    old = store.get_history("s1", before.leaf_entry_id)
    assert old is not None and old.messages == before.messages  # nothing rewritten
    new = store.get_history("s1", ref2.leaf_entry_id + 1)
    assert new is not None and [m.message for m in new.messages] == [
        *edited,
        assistant("lexer tests added"),
    ]
    assert new.messages[0].entry_id == old.messages[0].entry_id  # the prefix is shared
    for seq, history in ((1, first), (2, edited), (3, first[:2])):
        x = store.get_exchange("s1", seq)
        assert x is not None and x.request["messages"] == history
    assert store.get_history("s1", 10_000) is None
    record(store, [user("other")], session="s2")
    assert store.get_history("s2", ref1.leaf_entry_id) is None  # another session's entry


def test_a_continuing_turn_adds_its_new_messages_once(store: Store) -> None:
    history = [SYSTEM, user("one")]
    first = record(store, history)
    finish(store, first, assistant("two"))
    history = [*history, assistant("two"), user("three")]
    turn = record(store, history)  # the answer is stored: one message is new
    again = record(store, history)  # the same request once more: nothing is
    assert (turn.new_messages, again.new_messages) == (1, 0)
    assert again.leaf_entry_id == turn.leaf_entry_id
    finish(store, again, assistant("four"))
    longer = [*history, assistant("four"), user("five"), assistant("six"), user("seven")]
    late = record(store, longer)  # three new messages, the last one's parent not stored
    assert late.new_messages == 3
    hist = store.get_history("s1", late.leaf_entry_id)
    assert hist is not None and [m.message for m in hist.messages] == longer
    assert [x.seq for x in store.list_exchanges("s1") or []] == [1, 2, 3, 4]


def test_a_compacted_continuing_turn_keeps_its_view_state_and_rewritten_messages(
    store: Store,
) -> None:
    history = [SYSTEM, user("fix the bug"), assistant("which one?")]
    finish(store, record(store, history[:2]), history[2])
    history.append(user("the parser"))
    marker = assistant("[elided: which one?]")
    folded = [SYSTEM, user("fix the bug"), marker, user("the parser")]
    items = (0, 1, Form(2, "elided", marker), 3)
    state = ViewState(4, items, view_tokens=50, original_tokens=80)
    decided = Decisions(state, factor=1.1, raw_prompt=90, tokens_original=80)
    ref = record(store, history, compiled=folded, decided=decided)

    assert (ref.seq, ref.new_messages) == (2, 1)
    x = store.get_exchange("s1", 2)
    assert x is not None and x.compiled_request["messages"] == folded
    prior = store.load_state("s1", [message_hash(m) for m in history])
    assert prior is not None and prior.state == state and prior.factor == 1.1
    # The exchange holds its rewritten message: deleting the session takes that one too.
    assert store.delete_session("s1")
    assert store.get_message(message_hash(marker)) is None


@pytest.mark.parametrize("stored", [False, True], ids=["new", "stored"])
def test_32_concurrent_requests_on_one_session_lose_nothing(store: Store, stored: bool) -> None:
    shared = [SYSTEM, user("start"), assistant("ok")]
    before = 0
    if stored:  # the shared history was a turn already: each request continues it
        finish(store, record(store, shared[:2]), shared[2])
        before = 1
    barrier, errors, refs = threading.Barrier(32), [], []
    lock = threading.Lock()

    def fire(i: int) -> None:
        try:
            barrier.wait()
            ref = record(store, [*shared, user(f"parallel call {i}")])
            finish(store, ref, assistant(f"answer {i}"))
            with lock:
                refs.append((i, ref))
        except Exception as exc:  # noqa: BLE001 - collected and asserted below
            errors.append(repr(exc))

    threads = [threading.Thread(target=fire, args=(i,)) for i in range(32)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()

    assert errors == []
    assert sorted(r.seq for _, r in refs) == list(range(1 + before, 33 + before))
    assert count(store, EntryRow.id) == len(shared) + 32 + 32
    assert count(store, ExchangeRow.id) == 32 + before
    for i, ref in refs:
        x = store.get_exchange("s1", ref.seq)
        assert x is not None and x.request["messages"][-1] == user(f"parallel call {i}")
        assert x.response == assistant(f"answer {i}")
    detail = store.get_session("s1")
    assert detail is not None and detail.session.turns == 32 + before
    assert detail.branch_count == 32


def test_two_stores_on_one_sqlite_file_share_it_like_two_processes(tmp_path: Path) -> None:
    url = f"sqlite:///{tmp_path / 'shared.db'}"
    stores = [Store(url), Store(url)]
    stores[0].upgrade()
    errors: list[str] = []
    barrier = threading.Barrier(32)

    def fire(i: int) -> None:
        try:
            barrier.wait()
            s = stores[i % 2]
            finish(s, record(s, [user("same start"), user(f"call {i}")]), assistant(f"a{i}"))
        except Exception as exc:  # noqa: BLE001
            errors.append(repr(exc))

    threads = [threading.Thread(target=fire, args=(i,)) for i in range(32)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    assert errors == []
    seqs = [x.seq for x in stores[1].list_exchanges("s1") or []]
    assert seqs == list(range(1, 33))
    for s in stores:
        s.close()


def test_sessions_are_listed_newest_first_with_totals(store: Store) -> None:
    for sid in ("old", "mid", "new"):
        ref = record(store, [user(f"hi from {sid}")], session=sid)
        finish(store, ref, assistant("hello"), usage={"prompt_tokens": 10, "completion_tokens": 2})
    ref = record(store, [user("hi from new"), assistant("hello"), user("again")], session="new")
    page = store.list_sessions(limit=2)
    assert [s.id for s in page.data] == ["new", "mid"] and page.total == 3 and page.has_more
    new = page.data[0]
    assert new.turns == 2 and new.totals.pending == 1
    assert (new.totals.tokens_original, new.totals.tokens_compiled, new.totals.tokens_saved) == (
        200,
        120,
        80,
    )
    assert (new.totals.prompt_tokens, new.totals.completion_tokens) == (10, 2)
    assert [s.id for s in store.list_sessions(limit=2, offset=2).data] == ["old"]
    stats = store.stats()
    assert stats.sessions == 3 and stats.totals.exchanges == 4
    assert [(p.strategy, p.phase, p.events, p.tokens_saved) for p in stats.by_phase] == [
        ("tiered", 1, 4, 200)
    ]


def test_retries_and_failures_are_counted_apart_from_turns(store: Store) -> None:
    """One user message, an SDK retrying it after failures, then one more turn: 2 turns."""
    first = [
        user("Summarise   the\nlogs of build 12, then the logs of build 13 and compare them " * 2)
    ]
    for status in (502, 502, 200):
        ref = record(store, first, tokens_original=1000, tokens_compiled=400)
        finish(store, ref, assistant("done") if status == 200 else None, status=status)
    second = [*first, assistant("done"), user("and build 14?")]
    finish(
        store, record(store, second, tokens_original=1000, tokens_compiled=400), None, status=400
    )
    s = store.list_sessions().data[0]
    assert (s.turns, s.totals.exchanges, s.totals.retries, s.totals.errors) == (2, 4, 2, 3)
    # Tokens count the requests that did not fail: one answered, 1000 → 400.
    assert (s.totals.tokens_original, s.totals.tokens_compiled) == (1000, 400)
    assert s.title is not None and s.title.startswith("Summarise the logs of build 12, then")
    assert len(s.title) == 80 and s.title.endswith("…")
    rows = store.list_exchanges("s1") or []
    assert [(x.seq, x.turn, x.retry_of) for x in rows] == [
        (1, 1, None),
        (2, 1, 1),
        (3, 1, 1),
        (4, 2, None),
    ]
    assert store.get_exchange("s1", 3).exchange.retry_of == 1  # type: ignore[union-attr]
    page = store.page_exchanges("s1", limit=3)
    assert page is not None and (page.total, page.has_more, len(page.data)) == (4, True, 3)
    parts = [
        {
            "role": "user",
            "content": [{"type": "text", "text": "look at this"}, {"type": "image_url"}],
        }
    ]
    record(store, parts, session="img")
    assert store.get_session("img").session.title == "look at this"  # type: ignore[union-attr]


def test_messages_are_found_by_hash_or_unique_prefix(store: Store) -> None:
    msgs = [user(f"message {i}") for i in range(40)]
    record(store, msgs)
    target = msgs[7]
    full = message_hash(target)
    for ref in (full, full[:12], original_ref(target).removeprefix("/messages/")):
        found = store.get_message(ref)
        assert found is not None and found.message == target and found.hash == full
    assert store.get_message("0" * 64) is None
    firsts = [message_hash(m)[0] for m in msgs]
    shared = next(c for c in firsts if firsts.count(c) > 1)
    with pytest.raises(AmbiguousPrefix):
        store.get_message(shared)


def test_deleting_a_session_keeps_messages_another_session_uses(store: Store) -> None:
    common, own = user("shared question"), user("only in doomed")
    finish(store, record(store, [SYSTEM, common], session="keep"), assistant("kept answer"))
    doomed = record(
        store, [SYSTEM, common, own], session="doomed", compiled=[SYSTEM, user("[folded]"), own]
    )
    finish(store, doomed, assistant("doomed answer"))

    assert store.delete_session("doomed") is True
    assert store.delete_session("doomed") is False
    assert store.get_session("doomed") is None and store.get_exchange("doomed", 1) is None
    for gone in (own, user("[folded]"), assistant("doomed answer")):
        assert store.get_message(message_hash(gone)) is None
    for kept in (SYSTEM, common, assistant("kept answer")):
        assert store.get_message(message_hash(kept)) is not None
    hist = store.get_history("keep")
    assert hist is not None and len(hist.messages) == 3


def test_an_exchange_finishing_after_its_session_was_deleted_is_dropped(store: Store) -> None:
    ref = record(store, [user("slow request")])
    assert store.delete_session("s1")
    finish(store, ref, assistant("too late"))
    assert store.get_session("s1") is None
    assert store.get_message(message_hash(assistant("too late"))) is None


def test_upgrade_is_idempotent_and_ping_answers(store: Store) -> None:
    store.upgrade()
    assert not store.needs_upgrade()
    store.ping()


def test_connections_the_server_dropped_are_replaced_without_a_double_write() -> None:
    """No ping per checkout on PostgreSQL: a pooled connection the server closed (a restart,
    an idle timeout) is found dead by the first statement and the work runs once more."""
    with postgres_database("ctxproxy_store") as url:
        s = Store(url)
        s.upgrade()
        history, answer = [SYSTEM, user("one")], assistant("two")
        finish(s, record(s, history), answer)
        for step in range(3):
            _drop_other_connections(url)
            history = [*history, answer, user(f"u{step}")]
            ref = record(s, history)
            _drop_other_connections(url)
            answer = assistant(f"a{step}")
            finish(s, ref, answer)
            _drop_other_connections(url)
            assert s.load_state("s1", [message_hash(m) for m in history]) is None
        _drop_other_connections(url)
        s.save_recalls(ref, [])  # a write transaction of its own
        _drop_other_connections(url)
        assert s.get_session("s1") is not None  # an audit read
        with s.engine.connect() as conn:
            assert conn.execute(select(func.count(ExchangeRow.id))).scalar_one() == 4
        assert [x.seq for x in s.list_exchanges("s1") or []] == [1, 2, 3, 4]
        s.close()


def _drop_other_connections(url: str) -> None:
    from sqlalchemy import create_engine, text

    admin = create_engine(url)
    with admin.connect() as conn:
        conn.execute(
            text(
                "SELECT pg_terminate_backend(pid) FROM pg_stat_activity"
                " WHERE datname = current_database() AND pid <> pg_backend_pid()"
            )
        )
    admin.dispose()
