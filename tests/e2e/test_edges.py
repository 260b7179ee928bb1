"""Smaller edges: numbers too big for any database, a full disk, answers over the size cap,
the documented error statuses, a tool message without its id."""

from __future__ import annotations

from collections.abc import Iterator

import httpx
import pytest
from sqlalchemy import event

from proxy.testing.scripted import Script
from tests.conftest import proxy_on as serve_on
from tests.e2e.test_faults import until

HELLO = [{"role": "user", "content": "hi"}]
HUGE = "99999999999999999999"


@pytest.fixture(scope="module", params=["sqlite", "postgresql"])
def proxy_on(request: pytest.FixtureRequest, scripted_server, tmp_path_factory) -> Iterator[str]:
    upstream_url = scripted_server[1].url + "/v1"
    with serve_on(request.param, tmp_path_factory.mktemp("edges"), upstream_url) as url:
        body = {"model": "echo", "messages": HELLO}
        r = httpx.post(url + "/v1/chat/completions", json=body, headers={"X-Session-Id": "s"})
        assert r.status_code == 200
        yield url


@pytest.mark.parametrize(
    "path",
    [
        f"/ui?page={HUGE}",
        f"/ui/sessions/s?page={HUGE}",
        f"/ui/sessions/s/exchanges/{HUGE}",
        f"/ui/sessions/s/exchanges/1?page={HUGE}",
        f"/sessions?offset={HUGE}",
        f"/sessions/s/exchanges?offset={HUGE}",
        f"/sessions/s/exchanges/{HUGE}",
        f"/sessions/s/messages?leaf={HUGE}",
        "/sessions/s/exchanges/9223372036854775807",
        "/ui/sessions/s/exchanges/9223372036854775807",
        "/sessions?offset=9223372036854775807",
    ],
)
def test_numbers_too_big_for_a_database_are_400_or_404(proxy_on: str, path: str) -> None:
    r = httpx.get(proxy_on + path, timeout=10)
    assert r.status_code in (400, 404, 200), r.text
    assert r.status_code < 500
    if r.status_code != 200:
        assert r.json()["error"]["type"] == "invalid_request_error"


def test_a_full_disk_is_503_and_the_store_stays_consistent(start_proxy, settings_for) -> None:
    proxy = start_proxy(settings_for())
    store = proxy.server.config.app.state.services.store
    limit = {"pages": 0}

    @event.listens_for(store.engine, "connect")
    def _cap(dbapi_conn, record) -> None:  # SQLite's page cap: a disk that is full
        if limit["pages"]:
            dbapi_conn.execute(f"PRAGMA max_page_count={limit['pages']}")

    with store.engine.connect() as conn:
        limit["pages"] = conn.exec_driver_sql("PRAGMA page_count").scalar() + 2
    store.engine.dispose()
    big = [{"role": "user", "content": "x" * 200_000}]
    url, sid = proxy.url + "/v1/chat/completions", {"X-Session-Id": "full"}
    r = httpx.post(url, json={"model": "echo", "messages": big}, headers=sid, timeout=10)
    assert r.status_code == 503, r.text
    assert r.json()["error"]["code"] == "storage_unavailable" and "Traceback" not in r.text
    assert httpx.get(proxy.url + "/sessions/full", timeout=10).status_code == 404
    limit["pages"] = 0  # space returns
    store.engine.dispose()
    r = httpx.post(url, json={"model": "echo", "messages": big}, headers=sid, timeout=10)
    assert r.status_code == 200
    x = httpx.get(proxy.url + "/sessions/full/exchanges", timeout=10).json()["data"]
    assert [(e["seq"], e["status"]) for e in x] == [(1, 200)]


@pytest.mark.parametrize("stream", [False, True])
def test_an_answer_over_the_size_cap_is_refused(
    start_proxy, settings_for, upstream_url: str, script: Script, stream: bool
) -> None:
    upstream = {"name": "capped", "base_url": upstream_url, "max_response_bytes": 1_000_000}
    proxy = start_proxy(settings_for(upstreams=[upstream]))
    if stream:  # 'bulk' streams 4 MiB
        body = {"model": "bulk", "messages": HELLO, "stream": True}
    else:  # 'echo' answers with the 1.5 MB it was sent
        body = {"model": "echo", "messages": [{"role": "user", "content": "y" * 1_500_000}]}
    r = httpx.post(
        proxy.url + "/v1/chat/completions", json=body, headers={"X-Session-Id": "big"}, timeout=20
    )
    if stream:
        assert r.status_code == 200 and len(r.content) < 1_100_000
        last = [e for e in r.text.split("\n\n") if e.strip()][-2]
        assert '"upstream_response_too_large"' in last
    else:
        assert r.status_code == 502
        assert r.json()["error"]["code"] == "upstream_response_too_large"
    # A stream's record is finished just after its last byte: wait for it.
    assert until(
        lambda: (
            (httpx.get(proxy.url + "/sessions/big/exchanges/1").json().get("error") or {}).get(
                "code"
            )
            == "upstream_response_too_large"
        )
    )


def test_the_schema_documents_400_not_422(proxy: object) -> None:
    doc = httpx.get(proxy.url + "/openapi.json", timeout=10).json()  # type: ignore[attr-defined]
    statuses = {s for ops in doc["paths"].values() for op in ops.values() for s in op["responses"]}
    assert "422" not in statuses and "HTTPValidationError" not in doc["components"]["schemas"]
    assert "400" in doc["paths"]["/sessions"]["get"]["responses"]
    assert "400" in doc["paths"]["/v1/chat/completions"]["post"]["responses"]


def test_a_tool_message_without_an_id_is_named_so(proxy: object) -> None:
    messages = [*HELLO, {"role": "tool", "content": "stale"}]
    r = httpx.post(
        proxy.url + "/v1/chat/completions",  # type: ignore[attr-defined]
        json={"model": "echo", "messages": messages},
        timeout=10,
    )
    assert r.status_code == 400
    message = r.json()["error"]["message"]
    assert "without a tool_call_id" in message and "None" not in message
