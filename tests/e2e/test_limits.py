"""What a client string can make the proxy keep, and what every database takes alike: the same
input gets the same answer on SQLite and PostgreSQL, a clear 400 where it cannot be stored."""

from __future__ import annotations

import asyncio
from collections.abc import Iterator

import httpx
import pytest

from proxy.settings import Upstream
from proxy.upstream.windows import Windows
from tests.conftest import proxy_on as serve_on

HELLO = [{"role": "user", "content": "hi"}]


@pytest.fixture(scope="module", params=["sqlite", "postgresql"])
def proxy_on(request: pytest.FixtureRequest, scripted_server, tmp_path_factory) -> Iterator[str]:
    upstream_url = scripted_server[1].url + "/v1"
    with serve_on(request.param, tmp_path_factory.mktemp("limits"), upstream_url) as url:
        yield url


@pytest.mark.parametrize(
    "model", ["m" * 256, "m" * 300_000, "echo\x00", "echo\nINFO forged log line", "\x7f"]
)
def test_a_model_name_that_cannot_be_stored_is_400_on_every_database(
    proxy_on: str, model: str
) -> None:
    body = {"model": model, "messages": HELLO}
    sid = {"X-Session-Id": f"refused-{len(model)}-{ord(model[-1])}"}
    r = httpx.post(proxy_on + "/v1/chat/completions", json=body, headers=sid, timeout=10)
    assert r.status_code == 400, r.text
    err = r.json()["error"]
    assert err["param"] == "model" and "model name" in err["message"]
    assert httpx.get(f"{proxy_on}/sessions/{sid['X-Session-Id']}").status_code == 404


def test_the_longest_model_name_is_stored_on_every_database(proxy_on: str) -> None:
    body = {"model": "m" * 255, "messages": HELLO}
    r = httpx.post(proxy_on + "/v1/chat/completions", json=body, timeout=10)
    assert r.status_code == 200, r.text
    sid = r.headers["x-ctxproxy-session"]
    x = httpx.get(f"{proxy_on}/sessions/{sid}/exchanges/1", timeout=10).json()
    assert x["exchange"]["model"] == "m" * 255 and x["exchange"]["status"] == 200


# --- caches a client's model names fill --------------------------------------------------


def discovering() -> tuple[Windows, list[str]]:
    asked: list[str] = []

    def handler(request: httpx.Request) -> httpx.Response:
        asked.append(request.url.path)
        if request.url.path == "/props":
            return httpx.Response(200, json={"default_generation_settings": {"n_ctx": 4096}})
        return httpx.Response(200, json={"model_info": {"general.architecture": "x"}})

    client = httpx.AsyncClient(transport=httpx.MockTransport(handler))
    return Windows(client, max_cached=64), asked


def upstream(kind: str) -> Upstream:
    return Upstream(name=kind, kind=kind, base_url="http://up.test/v1")


def test_window_cache_holds_a_bounded_number_of_model_names() -> None:
    windows, asked = discovering()

    async def many() -> None:
        for i in range(1000):
            await windows.window(upstream("ollama"), f"model-{i}")
        await windows.window(upstream("ollama"), "model-999")  # the newest stays cached

    asyncio.run(many())
    assert len(windows) == 64 and len(asked) == 1000


def test_llamacpp_window_is_one_per_server_whatever_the_model_name() -> None:
    windows, asked = discovering()

    async def many() -> list[int | None]:
        return [await windows.window(upstream("llamacpp"), f"name-{i}") for i in range(500)]

    assert set(asyncio.run(many())) == {4096}
    assert len(windows) == 1 and asked == ["/props"]
