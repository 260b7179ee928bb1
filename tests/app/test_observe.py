"""GET /metrics and the JSON access log, through a real ctxproxy and the scripted upstream."""

from __future__ import annotations

import json
import logging
from collections.abc import Callable
from pathlib import Path
from typing import Any

import httpx
import pytest
from fastapi.testclient import TestClient
from prometheus_client.parser import text_string_to_metric_families

from proxy.app import app_from_env, create_app
from proxy.observe import access_log
from proxy.observe import metrics as observe
from proxy.sessions.owners import key_id
from proxy.settings import Settings
from proxy.testing.scripted import Script
from proxy.testing.servers import ServerThread, free_port

LOCAL = "http://localhost"  # the Host a local client sends; TestClient's own is refused

HELLO = [{"role": "user", "content": "hello there"}]
Samples = dict[tuple[str, frozenset[tuple[str, str]]], float]


def scrape(proxy: ServerThread, **headers: str) -> Samples:
    r = httpx.get(proxy.url + "/metrics", headers=headers)
    assert r.status_code == 200, r.text
    assert r.headers["content-type"].startswith("text/plain; version=0.0.4")
    return {
        (s.name, frozenset(s.labels.items())): s.value
        for family in text_string_to_metric_families(r.text)
        for s in family.samples
    }


def value(samples: Samples, name: str, **labels: str) -> float:
    return samples.get((name, frozenset(labels.items())), 0.0)


def chat(proxy: ServerThread, model: str = "echo", **body: Any) -> httpx.Response:
    payload = {"model": model, "messages": HELLO, **body}
    return httpx.post(proxy.url + "/v1/chat/completions", json=payload, timeout=30)


def tool_turn(i: int | str, text: str) -> list[dict[str, Any]]:
    call = {"id": f"call_{i}", "type": "function", "function": {"name": "read", "arguments": "{}"}}
    return [
        {"role": "assistant", "content": None, "tool_calls": [call]},
        {"role": "tool", "tool_call_id": f"call_{i}", "content": text},
    ]


def test_metrics_move_with_requests(
    start_proxy: Callable[[Settings], ServerThread],
    settings_for: Callable[..., Settings],
    script: Script,
) -> None:
    proxy = start_proxy(settings_for())
    before = scrape(proxy)
    plain = [chat(proxy), chat(proxy)]
    streamed = chat(proxy, stream=True, stream_options={"include_usage": True})
    failed = [chat(proxy, "fail-500"), chat(proxy, "fail-429")]
    assert [r.status_code for r in plain + [streamed] + failed] == [200, 200, 200, 500, 429]
    after = scrape(proxy)

    def moved(name: str, **labels: str) -> float:
        return value(after, name, **labels) - value(before, name, **labels)

    up = {"upstream": "scripted"}
    assert moved("ctxproxy_chat_requests_total", status="200", stream="false", **up) == 2
    assert moved("ctxproxy_chat_requests_total", status="200", stream="true", **up) == 1
    assert moved("ctxproxy_chat_requests_total", status="500", stream="false", **up) == 1
    route = {"method": "POST", "route": "/v1/chat/completions"}
    assert moved("ctxproxy_http_requests_total", status="200", **route) == 3
    assert moved("ctxproxy_http_requests_total", status="429", **route) == 1
    assert moved("ctxproxy_http_request_duration_seconds_count", **route) == 5
    assert moved("ctxproxy_chat_latency_seconds_count", stream="false", **up) == 4
    assert moved("ctxproxy_chat_latency_seconds_count", stream="true", **up) == 1
    assert moved("ctxproxy_chat_time_to_first_token_seconds_count", **up) == 1
    assert 0 < moved("ctxproxy_chat_time_to_first_token_seconds_sum", **up)
    assert moved("ctxproxy_upstream_errors_total", kind="http_500", **up) == 1
    assert moved("ctxproxy_upstream_errors_total", kind="http_429", **up) == 1
    answered = plain + [streamed] + failed
    original = sum(int(r.headers["x-ctxproxy-tokens-original"]) for r in answered)
    compiled = sum(int(r.headers["x-ctxproxy-tokens-compiled"]) for r in answered)
    assert moved("ctxproxy_tokens_original_total", **up) == original > 0
    assert moved("ctxproxy_tokens_compiled_total", **up) == compiled
    # The scrape itself is counted by route template, like every other request.
    assert (
        value(after, "ctxproxy_http_requests_total", method="GET", route="/metrics", status="200")
        >= 1
    )


def test_compaction_counts_only_the_passes_that_fired(
    start_proxy: Callable[[Settings], ServerThread],
    settings_for: Callable[..., Settings],
    script: Script,
) -> None:
    ups = [{"name": "scripted", "base_url": script_url(settings_for), "context_window": 3000}]
    proxy = start_proxy(settings_for(upstreams=ups, compaction={"reserve_tokens": 200}))
    messages: list[dict[str, Any]] = [{"role": "system", "content": "be brief"}, *HELLO]
    for i in range(8):
        messages += tool_turn(i, f"output {i}: " + "lorem ipsum dolor sit amet " * 60)
    headers = []
    for k in range(3):
        messages += tool_turn(f"big{k}", f"big {k}: " + "alpha beta gamma delta " * 300)
        r = httpx.post(
            proxy.url + "/v1/chat/completions",
            json={"model": "echo", "messages": messages},
            headers={"x-session-id": "compacting"},
            timeout=30,
        )
        assert r.status_code == 200, r.text
        headers.append(r.headers["x-ctxproxy-compaction"])
        messages.append(r.json()["choices"][0]["message"])
    events = [
        e
        for seq in (1, 2, 3)
        for e in httpx.get(f"{proxy.url}/sessions/compacting/exchanges/{seq}").json()["events"]
    ]
    fired: dict[tuple[str, str], int] = {}
    for e in events:
        if not e["replayed"]:
            key = (e["strategy"], "" if e["phase"] is None else str(e["phase"]))
            fired[key] = fired.get(key, 0) + 1
    assert any(e["replayed"] for e in events), "the scenario should carry passes over"
    assert fired and any(h != "none" for h in headers)
    samples = scrape(proxy)
    counted = {
        (dict(labels)["strategy"], dict(labels)["phase"]): v
        for (name, labels), v in samples.items()
        if name == "ctxproxy_compaction_events_total"
    }
    assert counted == fired
    saved = sum(
        v for (name, _), v in samples.items() if name == "ctxproxy_compaction_tokens_saved_total"
    )
    assert saved > 0


def script_url(settings_for: Callable[..., Settings]) -> str:
    return settings_for().upstreams[0].base_url


def test_unreachable_upstream_counts_as_unavailable(
    start_proxy: Callable[[Settings], ServerThread], settings_for: Callable[..., Settings]
) -> None:
    dead = [{"name": "dead", "base_url": f"http://127.0.0.1:{free_port()}/v1"}]
    proxy = start_proxy(settings_for(upstreams=dead))
    assert chat(proxy).status_code == 502
    samples = scrape(proxy)
    assert value(samples, "ctxproxy_upstream_errors_total", upstream="dead", kind="unavailable")
    assert (
        value(
            samples, "ctxproxy_chat_requests_total", upstream="dead", status="502", stream="false"
        )
        == 1
    )


@pytest.mark.parametrize(
    ("status", "error", "kind"),
    [
        (200, None, None),
        (502, {"type": "upstream_error", "code": "upstream_unavailable"}, "unavailable"),
        (504, {"type": "upstream_error", "code": "upstream_timeout"}, "timeout"),
        (503, {"type": "server_error", "message": "busy"}, "http_503"),
        (400, {"type": "invalid_request_error", "code": "context_length_exceeded"}, None),
        (200, {"type": "upstream_error", "code": "upstream_unavailable"}, "unavailable"),
        (200, {"message": "model crashed"}, "stream"),
    ],
)
def test_upstream_error_kinds(status: int, error: dict[str, Any] | None, kind: str | None) -> None:
    assert observe.upstream_error_kind(status, error) == kind


def test_metrics_are_guarded_like_the_audit_api(tmp_path: Path) -> None:
    db = f"sqlite:///{tmp_path / 'db.sqlite'}"
    remote = ("203.0.113.9", 4000)
    with TestClient(create_app(Settings(database_url=db)), client=remote, base_url=LOCAL) as c:
        assert c.get("/metrics").status_code == 403
    with TestClient(
        create_app(Settings(database_url=db, admin_key="root")), client=remote, base_url=LOCAL
    ) as c:
        assert c.get("/metrics").status_code == 401
        ok = c.get("/metrics", headers={"authorization": "Bearer root"})
        assert ok.status_code == 200 and "ctxproxy_http_requests_total" in ok.text


def test_each_app_has_its_own_registry(tmp_path: Path) -> None:
    settings = Settings(database_url=f"sqlite:///{tmp_path / 'db.sqlite'}")
    apps = [create_app(settings), create_app(settings)]
    loopback = ("127.0.0.1", 5000)
    with (
        TestClient(apps[0], client=loopback, base_url=LOCAL) as a,
        TestClient(apps[1], client=loopback, base_url=LOCAL) as b,
    ):
        a.get("/healthz")
        a.get("/healthz")
        text_a, text_b = a.get("/metrics").text, b.get("/metrics").text
    healthz = 'ctxproxy_http_requests_total{method="GET",route="/healthz",status="200"}'
    assert f"{healthz} 2.0" in text_a
    assert healthz not in text_b


def access_lines(caplog: pytest.LogCaptureFixture) -> list[dict[str, Any]]:
    return [json.loads(r.getMessage()) for r in caplog.records if r.name == "ctxproxy.access"]


SECRET_TEXT = "the launch code is 0000"


def test_access_log_has_the_fields_and_no_content_or_keys(
    start_proxy: Callable[[Settings], ServerThread],
    settings_for: Callable[..., Settings],
    script: Script,
    caplog: pytest.LogCaptureFixture,
) -> None:
    caplog.set_level(logging.INFO, logger="ctxproxy.access")
    proxy = start_proxy(settings_for(api_keys=["sk-client-secret"]))
    auth = {"authorization": "Bearer sk-client-secret", "x-session-id": "logged"}
    body = {"model": "echo", "messages": [{"role": "user", "content": SECRET_TEXT}]}
    url = proxy.url + "/v1/chat/completions"
    assert httpx.post(url, json=body, headers=auth).status_code == 200
    assert httpx.post(url, json={**body, "stream": True}, headers=auth).status_code == 200
    plain, streamed = access_lines(caplog)
    # Scoped by the key's id (a hash), never the key itself.
    assert plain["session"] == key_id("sk-client-secret") + ":logged"
    assert plain["seq"] == 1 and streamed["seq"] == 2
    assert plain["model"] == "echo" and plain["upstream"] == "scripted"
    assert plain["status"] == 200 and plain["stream"] is False and plain["partial"] is False
    assert plain["latency_ms"] > 0 and plain["ttft_ms"] is None
    assert streamed["stream"] is True and 0 < streamed["ttft_ms"] <= streamed["latency_ms"]
    assert plain["tokens_original"] >= plain["tokens_compiled"] > 0
    assert plain["phases"] == []
    logged = caplog.text + json.dumps([plain, streamed])
    for secret in (SECRET_TEXT, "launch code", "echo: the", "sk-client-secret", "upstream-secret"):
        assert secret not in logged
    assert "authorization" not in logged.lower()


def test_access_log_carries_content_only_when_enabled(
    start_proxy: Callable[[Settings], ServerThread],
    settings_for: Callable[..., Settings],
    script: Script,
    caplog: pytest.LogCaptureFixture,
) -> None:
    caplog.set_level(logging.INFO, logger="ctxproxy.access")
    proxy = start_proxy(settings_for(log_content=True))
    body = {"model": "echo", "messages": [{"role": "user", "content": SECRET_TEXT}]}
    assert httpx.post(proxy.url + "/v1/chat/completions", json=body).status_code == 200
    (line,) = access_lines(caplog)
    assert line["messages"] == body["messages"]
    assert line["response"]["content"] == "echo: " + SECRET_TEXT
    assert "upstream-secret" not in caplog.text


def test_app_factory_reads_the_config_named_by_the_environment(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    cfg = tmp_path / "config.yaml"
    cfg.write_text(f"database_url: sqlite:///{tmp_path / 'f.db'}\nlog_content: true\n")
    monkeypatch.setenv("CTXPROXY_CONFIG", str(cfg))
    monkeypatch.setattr(access_log, "configure_logging", lambda level: None)  # keep caplog's root
    app = app_from_env()
    with TestClient(app, client=("127.0.0.1", 5000), base_url=LOCAL) as c:
        assert c.get("/metrics").status_code == 200
        assert app.state.services.settings.log_content is True
    assert (tmp_path / "f.db").exists()
