"""Client keys own their sessions: two keys never share one, whatever the session is named by,
each exchange records which key made it (an id, never the key), and the audit API, /ui and
/metrics need a key once api_keys is set: the admin key sees everything, a client key its own
(and not /stats or /metrics, which count every key's requests)."""

from __future__ import annotations

import time
from collections.abc import Iterator
from typing import Any

import httpx
import pytest
from sqlalchemy import create_engine, text

from proxy.sessions.owners import key_id
from proxy.testing.postgres import postgres_database
from proxy.testing.scripted import Script
from proxy.testing.servers import ServerThread

ALICE, BOB, ADMIN = "sk-alice-secret", "sk-bob-secret", "admin-secret"
LEAD = [
    {"role": "system", "content": "You are terse."},
    {"role": "user", "content": "start"},
]


@pytest.fixture
def database_url(tmp_path) -> str:
    return f"sqlite:///{tmp_path / 'keys.db'}"


@pytest.fixture
def keyed(start_proxy, settings_for, database_url: str) -> ServerThread:
    settings = settings_for(api_keys=[ALICE, BOB], admin_key=ADMIN, database_url=database_url)
    return start_proxy(settings)


@pytest.fixture(scope="module")
def keyed_once(scripted_server, tmp_path_factory) -> Iterator[ServerThread]:
    from proxy.app import create_app
    from proxy.testing.servers import make_settings

    url = scripted_server[1].url + "/v1"
    settings = make_settings(
        tmp_path_factory.mktemp("keyed"), url, api_keys=[ALICE, BOB], admin_key=ADMIN
    )
    with ServerThread(create_app(settings)) as server:
        chat(server.url, ALICE, LEAD)
        yield server


@pytest.fixture
def on_postgres() -> Iterator[str]:
    with postgres_database("ctxproxy_keys") as url:
        yield url


def chat(
    url: str, key: str, messages: list[dict[str, Any]], path: str = "/v1", **kw: Any
) -> httpx.Response:
    body = {"model": "echo", "messages": messages, **kw.pop("body", {})}
    headers = {"Authorization": f"Bearer {key}", **kw.pop("headers", {})}
    r = httpx.post(url + path + "/chat/completions", json=body, headers=headers, timeout=10)
    assert r.status_code == 200, r.text
    return r


def audit(url: str, key: str, path: str) -> httpx.Response:
    return httpx.get(url + path, headers={"Authorization": f"Bearer {key}"}, timeout=10)


NAMINGS: list[tuple[str, dict[str, Any]]] = [
    ("fingerprint", {}),
    ("header", {"headers": {"X-Session-Id": "shared"}}),
    ("path", {"path": "/s/shared/v1"}),
    ("user", {"body": {"user": "shared"}}),
    ("metadata", {"body": {"metadata": {"session_id": "shared"}}}),
]


@pytest.mark.parametrize(("naming", "how"), NAMINGS, ids=[n for n, _ in NAMINGS])
def test_two_keys_never_share_a_session(
    keyed: ServerThread, script: Script, naming: str, how: dict[str, Any]
) -> None:
    two_keys_apart(keyed, script, how)


@pytest.mark.parametrize(("naming", "how"), NAMINGS[:2], ids=[n for n, _ in NAMINGS[:2]])
def test_two_keys_never_share_a_session_on_postgres(
    start_proxy, settings_for, on_postgres: str, script: Script, naming: str, how: dict[str, Any]
) -> None:
    settings = settings_for(api_keys=[ALICE, BOB], admin_key=ADMIN, database_url=on_postgres)
    two_keys_apart(start_proxy(settings), script, how)


def two_keys_apart(keyed: ServerThread, script: Script, how: dict[str, Any]) -> None:
    alice = chat(keyed.url, ALICE, [*LEAD, {"role": "user", "content": "alice private"}], **how)
    bob_messages = [*LEAD, {"role": "user", "content": "bob here"}]
    bob = chat(keyed.url, BOB, bob_messages, **how)
    # Bob's request went upstream with his history only.
    assert "alice private" not in str(script.received[-1])
    a_sid, b_sid = alice.headers["x-ctxproxy-session"], bob.headers["x-ctxproxy-session"]
    assert a_sid != b_sid
    assert a_sid.startswith(key_id(ALICE) + ":") and b_sid.startswith(key_id(BOB) + ":")
    # Alice's latest branch holds only her own text.
    latest = audit(keyed.url, ADMIN, f"/sessions/{a_sid}/messages").json()["messages"]
    assert "bob here" not in str(latest) and "alice private" in str(latest)
    # Each exchange names its key by id; the key itself is nowhere in the answer.
    x = audit(keyed.url, ADMIN, f"/sessions/{b_sid}/exchanges/1")
    assert x.json()["exchange"]["key_id"] == key_id(BOB) and BOB not in x.text
    # Bob, naming Alice's scoped id outright, still lands in a session of his own.
    forged = chat(keyed.url, BOB, bob_messages, headers={"X-Session-Id": a_sid})
    assert forged.headers["x-ctxproxy-session"].startswith(key_id(BOB) + ":")
    assert audit(keyed.url, ADMIN, f"/sessions/{a_sid}").json()["session"]["turns"] == 1


def test_a_scoped_id_sent_back_is_the_same_session(keyed: ServerThread) -> None:
    first = chat(keyed.url, ALICE, LEAD, headers={"X-Session-Id": "mine"})
    sid = first.headers["x-ctxproxy-session"]
    again = chat(keyed.url, ALICE, LEAD, headers={"X-Session-Id": sid})
    assert again.headers["x-ctxproxy-session"] == sid == f"{key_id(ALICE)}:mine"


@pytest.mark.parametrize("db", ["sqlite", "postgresql"])
def test_no_key_is_stored(start_proxy, settings_for, request, database_url: str, db: str) -> None:
    url = database_url if db == "sqlite" else request.getfixturevalue("on_postgres")
    keyed = start_proxy(settings_for(api_keys=[ALICE, BOB], database_url=url))
    chat(keyed.url, ALICE, LEAD, headers={"X-Session-Id": "s"})
    engine = create_engine(url)
    with engine.connect() as conn:
        for table in ("sessions", "exchanges", "messages", "entries"):
            rows = conn.execute(text(f"SELECT * FROM {table}")).all()
            assert rows and ALICE not in str(rows)
    engine.dispose()


@pytest.fixture
def two_sessions(keyed: ServerThread) -> dict[str, str]:
    a = chat(keyed.url, ALICE, [{"role": "user", "content": "alice only"}])
    b = chat(keyed.url, BOB, [{"role": "user", "content": "bob only"}])
    return {"alice": a.headers["x-ctxproxy-session"], "bob": b.headers["x-ctxproxy-session"]}


@pytest.mark.parametrize("path", ["/sessions", "/stats", "/metrics", "/ui", "/ui/"])
def test_with_api_keys_loopback_needs_a_key_too(keyed_once: ServerThread, path: str) -> None:
    r = httpx.get(keyed_once.url + path, timeout=10)
    assert r.status_code == 401, r.text
    if path.startswith("/ui"):  # a browser is asked for the key as a password
        assert r.headers["www-authenticate"].startswith("Basic")
    else:
        assert r.json()["error"]["type"] == "authentication_error"


def test_a_client_key_sees_only_its_own_sessions(
    keyed: ServerThread, two_sessions: dict[str, str]
) -> None:
    url, mine, theirs = keyed.url, two_sessions["alice"], two_sessions["bob"]
    listed = audit(url, ALICE, "/sessions").json()
    assert [s["id"] for s in listed["data"]] == [mine] and listed["total"] == 1
    assert {s["id"] for s in audit(url, ADMIN, "/sessions").json()["data"]} == {mine, theirs}
    for path in ("", "/messages", "/exchanges", "/exchanges/1"):
        assert audit(url, ALICE, f"/sessions/{mine}{path}").status_code == 200
        hidden = audit(url, ALICE, f"/sessions/{theirs}{path}")
        assert hidden.status_code == 404 and "bob only" not in hidden.text
    bob_message = audit(url, BOB, f"/sessions/{theirs}/messages").json()["messages"][0]["hash"]
    assert audit(url, ALICE, f"/messages/{bob_message}").status_code == 404
    assert audit(url, BOB, f"/messages/{bob_message}").status_code == 200
    assert audit(url, ALICE, "/stats").status_code == 403
    assert audit(url, ADMIN, "/stats").status_code == 200
    assert audit(url, ALICE, "/metrics").status_code == 403  # every tenant's counters
    assert audit(url, ADMIN, "/metrics").status_code == 200
    page = audit(url, ALICE, "/ui")
    assert page.status_code == 200 and mine in page.text and theirs not in page.text
    assert audit(url, ALICE, f"/ui/sessions/{theirs}").status_code == 404
    bye = httpx.delete(f"{url}/sessions/{theirs}", headers={"Authorization": f"Bearer {ALICE}"})
    assert bye.status_code == 404
    assert audit(url, ADMIN, f"/sessions/{theirs}").status_code == 200


def test_a_message_two_keys_sent_shows_each_only_its_own_time(keyed: ServerThread) -> None:
    """Bob sent the same words as Alice, later: he may read them (his own), but not learn that
    someone sent them first, nor when; a prefix matching only others' messages is unknown."""
    url, words = keyed.url, [{"role": "user", "content": "the merger closes on the 14th"}]
    chat(url, ALICE, words, headers={"X-Session-Id": "a"})
    time.sleep(1.1)
    bob_session = chat(url, BOB, words, headers={"X-Session-Id": "b"}).headers["x-ctxproxy-session"]
    held = audit(url, BOB, f"/sessions/{bob_session}/messages").json()["messages"][0]["hash"]
    alices = audit(url, ALICE, f"/messages/{held}").json()["created_at"]
    bobs = audit(url, BOB, f"/messages/{held}").json()["created_at"]
    assert audit(url, ADMIN, f"/messages/{held}").json()["created_at"] == alices
    assert bobs > alices  # Bob's own time, not the first time anyone stored it
    alice_only = chat(url, ALICE, [{"role": "user", "content": "only alice says this"}])
    mine = audit(url, ALICE, f"/sessions/{alice_only.headers['x-ctxproxy-session']}/messages")
    hash_ = mine.json()["messages"][0]["hash"]
    assert audit(url, BOB, f"/messages/{hash_[:12]}").status_code == 404
    assert audit(url, ALICE, f"/messages/{hash_[:12]}").status_code == 200


# --- no keys configured: trust comes from a direct loopback connection only ------------------


@pytest.fixture(scope="module")
def behind_proxy(scripted_server, tmp_path_factory) -> Iterator[ServerThread]:
    """As run behind FORWARDED_ALLOW_IPS='*': uvicorn believes any X-Forwarded-For."""
    from proxy.app import create_app
    from proxy.testing.servers import make_settings

    url = scripted_server[1].url + "/v1"
    app = create_app(make_settings(tmp_path_factory.mktemp("behind"), url))
    with ServerThread(app, proxy_headers=True, forwarded_allow_ips="*") as server:
        yield server


@pytest.fixture(scope="module")
def plain(scripted_server, tmp_path_factory) -> Iterator[ServerThread]:
    """No keys configured."""
    from proxy.app import create_app
    from proxy.testing.servers import make_settings

    url = scripted_server[1].url + "/v1"
    with ServerThread(create_app(make_settings(tmp_path_factory.mktemp("plain"), url))) as s:
        yield s


@pytest.mark.parametrize(
    "header",
    [
        {"X-Forwarded-For": "127.0.0.1"},
        {"X-Forwarded-For": "203.0.113.9, 127.0.0.1"},
        {"Forwarded": "for=127.0.0.1"},
        {"X-Real-IP": "127.0.0.1"},
    ],
)
def test_forwarded_headers_never_open_the_audit_api(
    behind_proxy: ServerThread, header: dict[str, str]
) -> None:
    url = behind_proxy.url
    chat(url, "x", LEAD, headers={"X-Session-Id": "victim"})  # the victim's session, stored
    for method, path in [("GET", "/sessions"), ("DELETE", "/sessions/victim"), ("GET", "/ui")]:
        r = httpx.request(method, url + path, headers=header, timeout=10)
        assert r.status_code == 403, (method, path, r.text)
    assert httpx.get(url + "/sessions/victim", timeout=10).status_code == 200


@pytest.mark.parametrize("path", ["/sessions", "/ui", "/metrics", "/v1/models", "/healthz"])
def test_a_foreign_host_header_is_refused(plain: ServerThread, path: str) -> None:
    proxy = plain
    r = httpx.get(proxy.url + path, headers={"Host": "rebind.attacker.example"}, timeout=10)
    assert r.status_code == 400 and r.json()["error"]["code"] == "invalid_host"
    for host in ("localhost:8080", "127.0.0.1", f"127.0.0.1:{proxy.port}", "[::1]:80"):
        assert httpx.get(proxy.url + path, headers={"Host": host}, timeout=10).status_code < 400


def test_allowed_hosts_adds_names(start_proxy, settings_for) -> None:
    proxy = start_proxy(settings_for(allowed_hosts=["ctxproxy.internal"]))
    ok = httpx.get(proxy.url + "/sessions", headers={"Host": "ctxproxy.internal:8080"})
    assert ok.status_code == 200
    bad = httpx.get(proxy.url + "/sessions", headers={"Host": "other.example"})
    assert bad.status_code == 400


@pytest.mark.parametrize(
    "ctype", ["text/plain", "application/x-www-form-urlencoded", "multipart/form-data", None]
)
@pytest.mark.parametrize("path", ["/v1/chat/completions", "/v1/embeddings"])
def test_a_body_not_declared_json_is_refused(
    plain: ServerThread, script: Script, ctype: str | None, path: str
) -> None:
    body = b'{"model": "echo", "messages": [{"role": "user", "content": "hi"}], "input": "x"}'
    headers = {"X-Session-Id": "csrf", **({"Content-Type": ctype} if ctype else {})}
    r = httpx.post(plain.url + path, content=body, headers=headers, timeout=10)
    assert r.status_code == 415 and r.json()["error"]["code"] == "unsupported_media_type"
    assert script.received == []
    assert httpx.get(plain.url + "/sessions/csrf", timeout=10).status_code == 404


def test_json_with_a_charset_or_a_json_suffix_is_fine(plain: ServerThread) -> None:
    body = b'{"model": "echo", "messages": [{"role": "user", "content": "hi"}]}'
    for ctype in ("application/json; charset=utf-8", "application/vnd.api+json"):
        r = httpx.post(
            plain.url + "/v1/chat/completions", content=body, headers={"Content-Type": ctype}
        )
        assert r.status_code == 200, r.text
