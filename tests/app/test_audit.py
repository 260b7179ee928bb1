"""The audit API over a store filled directly: what a person or an agent can read back."""

from __future__ import annotations

import os
import socket
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
from fastapi.testclient import TestClient

from proxy.app import create_app
from proxy.settings import Settings
from proxy.store import Store
from proxy.testing.records import new_request
from strategies.messages import message_hash, original_ref

LOCAL = "http://localhost"  # the Host a local client sends; TestClient's own is refused

SYSTEM = {"role": "system", "content": "be brief"}
EVENT = {
    "strategy": "traceback",
    "phase": None,
    "iterations": [1],
    "tokens_before": 500,
    "tokens_after": 120,
    "chars_removed": 3000,
    "reason": "long traceback",
}
LOOPBACK = ("127.0.0.1", 50000)


def fill(store: Store) -> dict[str, Any]:
    """Session "agent": 3 finished turns, the second compacted; session "other": 1 pending,
    served by a live process (this one), so the app's start does not close it."""
    store.register_instance("filler", socket.gethostname(), os.getpid())
    history: list[dict[str, Any]] = [SYSTEM]
    folded: dict[str, Any] = {}
    for turn in range(3):
        history.append({"role": "user", "content": f"question {turn} " + "trace " * 50})
        compiled = list(history)
        events: list[dict[str, Any]] = []
        if turn == 1:
            folded = {"role": "user", "content": f"[folded, see {original_ref(history[1])}]"}
            compiled[1] = folded
            events = [EVENT]
        ref = store.record_request(
            new_request(
                "agent",
                list(history),
                request={"model": "llama", "messages": history, "max_tokens": 64},
                model="llama",
                upstream="local",
                stream=turn == 2,
                compiled=compiled,
                tokens_original=500,
                tokens_compiled=120 if events else 500,
                budget=900,
                window=1024,
                pipeline=["traceback", "tiered"],
                events=events,
            )
        )
        answer = {"role": "assistant", "content": f"answer {turn}"}
        store.finish_exchange(
            ref,
            status=200,
            latency_ms=40.0,
            ttft_ms=8.0,
            response=answer,
            partial=False,
            usage={
                "prompt_tokens": 120,
                "completion_tokens": 5,
                "prompt_tokens_details": {"cached_tokens": 100},
            },
            error=None,
        )
        history.append(answer)
    store.record_request(
        new_request(
            "other",
            [{"role": "user", "content": "hi"}],
            source="fingerprint",
            request={"model": "llama"},
            model="llama",
            upstream="local",
            tokens_original=5,
            tokens_compiled=5,
        )
    )
    return {"history": history, "folded": folded}


@pytest.fixture
def db_url(tmp_path: Path) -> str:
    return f"sqlite:///{tmp_path / 'audit.db'}"


@pytest.fixture
def filled(db_url: str) -> Iterator[dict[str, Any]]:
    store = Store(db_url)
    store.upgrade()
    yield fill(store)
    store.close()


def client_for(db_url: str, *, client: tuple[str, int] = LOOPBACK, **settings: Any) -> TestClient:
    return TestClient(
        create_app(Settings(database_url=db_url, **settings)), client=client, base_url=LOCAL
    )


@pytest.fixture
def api(db_url: str, filled: dict[str, Any]) -> Iterator[TestClient]:
    with client_for(db_url) as c:
        yield c


def test_sessions_are_paged_newest_first_with_totals(api: TestClient) -> None:
    page = api.get("/sessions", params={"limit": 1}).json()
    assert page["total"] == 2 and page["has_more"] is True
    assert [s["id"] for s in page["data"]] == ["other"]
    agent = api.get("/sessions", params={"limit": 1, "offset": 1}).json()["data"][0]
    assert agent["id"] == "agent" and agent["turns"] == 3 and agent["source"] == "header"
    assert agent["totals"]["tokens_saved"] == 380
    assert (agent["totals"]["prompt_tokens"], agent["totals"]["completion_tokens"]) == (360, 15)
    assert agent["totals"]["cached_tokens"] == 300
    assert api.get("/sessions", params={"limit": 0}).status_code == 400


def test_a_session_and_its_raw_history(api: TestClient, filled: dict[str, Any]) -> None:
    detail = api.get("/sessions/agent").json()
    assert detail["history_length"] == 7 and detail["branch_count"] == 1
    assert detail["session"]["model"] == "llama"
    hist = api.get("/sessions/agent/messages").json()
    assert [m["message"] for m in hist["messages"]] == filled["history"]
    assert [m["position"] for m in hist["messages"]] == list(range(7))
    assert hist["branch_count"] == 1 and hist["branches"][0]["length"] == 7


def test_an_exchange_shows_the_request_beside_the_compiled_one(
    api: TestClient, filled: dict[str, Any]
) -> None:
    page = api.get("/sessions/agent/exchanges").json()
    rows = page["data"]
    assert (page["total"], page["limit"], page["offset"], page["has_more"]) == (3, 1000, 0, False)
    assert api.get("/sessions/agent/exchanges?limit=2").json()["has_more"] is True
    assert [r["seq"] for r in rows] == [1, 2, 3]
    assert [r["phases"] for r in rows] == [[], ["traceback"], []]
    assert rows[2]["stream"] is True and rows[0]["status"] == 200
    x = api.get("/sessions/agent/exchanges/2").json()
    original = filled["history"][:4]
    assert x["request"] == {"model": "llama", "max_tokens": 64, "messages": original}
    assert x["compiled_request"]["messages"] == [SYSTEM, filled["folded"], *original[2:]]
    assert x["compiled_hashes"][1] == message_hash(filled["folded"])
    assert x["events"] == [EVENT]
    assert x["response"] == {"role": "assistant", "content": "answer 1"}
    assert x["usage"]["prompt_tokens_details"]["cached_tokens"] == 100
    assert x["exchange"]["tokens_original"] == 500 and x["exchange"]["tokens_compiled"] == 120
    assert "headers" not in x["request"]


def test_a_markers_reference_leads_to_the_original(api: TestClient, filled: dict[str, Any]) -> None:
    folded_text = filled["folded"]["content"]
    ref = folded_text[folded_text.index("/messages/") :].rstrip("]")
    got = api.get(ref)
    assert got.status_code == 200 and got.json()["message"] == filled["history"][1]
    full = message_hash(filled["history"][1])
    assert api.get(f"/messages/{full}").json()["hash"] == full
    assert api.get(f"/messages/{full[:12].upper()}").json()["hash"] == full


@pytest.mark.parametrize(
    ("path", "status"),
    [
        ("/sessions/nope", 404),
        ("/sessions/nope/messages", 404),
        ("/sessions/nope/exchanges", 404),
        ("/sessions/agent/exchanges/99", 404),
        ("/messages/" + "0" * 64, 404),
        ("/messages/abc123", 400),
        ("/messages/not-hex-at-all!", 400),
        ("/sessions/agent/messages?leaf=999999", 404),
    ],
)
def test_errors_come_in_openai_envelopes(api: TestClient, path: str, status: int) -> None:
    r = api.get(path)
    assert r.status_code == status
    assert set(r.json()["error"]) == {"message", "type", "param", "code"}


def test_deleting_a_session(api: TestClient) -> None:
    assert api.delete("/sessions/agent").json() == {"id": "agent", "deleted": True}
    assert api.get("/sessions/agent").status_code == 404
    assert api.delete("/sessions/agent").status_code == 404
    assert api.get("/stats").json()["sessions"] == 1


def test_stats_total_by_strategy_and_phase(api: TestClient) -> None:
    stats = api.get("/stats").json()
    assert stats["sessions"] == 2 and stats["totals"]["exchanges"] == 4
    assert stats["totals"]["pending"] == 1
    assert stats["totals"]["tokens_original"] == 1505
    assert stats["by_phase"] == [
        {
            "strategy": "traceback",
            "phase": None,
            "events": 1,
            "tokens_before": 500,
            "tokens_after": 120,
            "tokens_saved": 380,
            "chars_removed": 3000,
        }
    ]


def test_the_api_is_documented(api: TestClient) -> None:
    paths = api.get("/openapi.json").json()["paths"]
    for path in (
        "/sessions",
        "/sessions/{session_id}",
        "/sessions/{session_id}/messages",
        "/sessions/{session_id}/exchanges",
        "/sessions/{session_id}/exchanges/{seq}",
        "/messages/{ref}",
        "/stats",
    ):
        assert path in paths
    assert "delete" in paths["/sessions/{session_id}"]


def test_without_an_admin_key_only_loopback_clients_get_in(db_url: str, filled: Any) -> None:
    with client_for(db_url, client=("::1", 4000)) as c:
        assert c.get("/stats").status_code == 200
    with client_for(db_url, client=("203.0.113.9", 4000)) as c:
        r = c.get("/sessions")
        assert r.status_code == 403 and r.json()["error"]["type"] == "permission_error"
        assert c.delete("/sessions/agent").status_code == 403


def test_with_an_admin_key_every_client_needs_it(db_url: str, filled: Any) -> None:
    with client_for(db_url, client=("203.0.113.9", 4000), admin_key="root-secret") as c:
        assert c.get("/stats").status_code == 401
        wrong = c.get("/stats", headers={"Authorization": "Bearer nope"})
        assert wrong.status_code == 401 and wrong.json()["error"]["type"] == "authentication_error"
        ok = c.get("/stats", headers={"Authorization": "Bearer root-secret"})
        assert ok.status_code == 200
    with client_for(db_url, admin_key="root-secret") as c:  # loopback is no exception
        assert c.get("/stats").status_code == 401


def test_admin_key_as_basic_password_for_links_from_a_browser(db_url: str, filled: Any) -> None:
    with client_for(db_url, client=("203.0.113.9", 4000), admin_key="root-secret") as c:
        assert c.get("/sessions", auth=("anyone", "root-secret")).status_code == 200
        assert c.get("/sessions", auth=("anyone", "wrong")).status_code == 401
