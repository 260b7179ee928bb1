"""Deeply nested JSON: any depth on any route is a 4xx in the API's own envelope, never a 5xx,
and a body up to the depth limit is served."""

from __future__ import annotations

import json
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import httpx
import pytest

from proxy.app import create_app
from proxy.formats.chat import MAX_DEPTH
from proxy.testing.servers import ServerThread, make_settings

JSON = {"content-type": "application/json"}
DEPTHS = [100, 500, 990, 1000, 1010, 1020, 5000, 100_000]
USER = {"role": "user", "content": "hi"}


X = "@nested@"  # where the nested value goes


def chat(x: str) -> str:
    tool = {"type": "function", "function": {"name": "t", "parameters": {"x": X}}}
    body = {"model": "echo", "messages": [{**USER, "x": X}], "tools": [tool]}
    return json.dumps(body).replace(json.dumps(X), x)


def messages(x: str) -> str:
    content = [{"type": "text", "text": "hi", "x": X}]
    tool = {"name": "t", "input_schema": {"type": "object", "x": X}}
    body = {"model": "echo", "max_tokens": 10, "messages": [{"role": "user", "content": content}]}
    return json.dumps({**body, "tools": [tool]}).replace(json.dumps(X), x)


def responses(x: str) -> str:
    content = [{"type": "input_text", "text": "hi", "x": X}]
    tool = {"type": "function", "name": "t", "parameters": {"type": "object", "x": X}}
    body = {"model": "echo", "input": [{"role": "user", "content": content}], "tools": [tool]}
    return json.dumps(body).replace(json.dumps(X), x)


def compress(x: str) -> str:
    return chat(x)[:-1] + ', "context_window": 8000}'


ROUTES: dict[str, tuple[str, Callable[[str], str]]] = {
    "chat": ("/v1/chat/completions", chat),
    "messages": ("/v1/messages", messages),
    "responses": ("/v1/responses", responses),
    "compress": ("/v1/compress", compress),
}


def nested(depth: int, kind: str) -> str:
    """A JSON value `depth` levels deep: arrays in arrays, or objects in objects."""
    if kind == "arrays":
        return "[" * depth + "]" * depth
    return '{"a": ' * (depth - 1) + "{}" + "}" * (depth - 1)


def depth_of(value: Any) -> int:
    if isinstance(value, dict):
        return 1 + max(map(depth_of, value.values()), default=0)
    if isinstance(value, list):
        return 1 + max(map(depth_of, value), default=0)
    return 0


@pytest.fixture(scope="module")
def proxy(tmp_path_factory: pytest.TempPathFactory) -> Iterator[ServerThread]:
    from proxy.testing.scripted import Script

    script = Script()
    tmp: Path = tmp_path_factory.mktemp("deep")
    with ServerThread(script.app) as upstream:
        app = create_app(make_settings(tmp, upstream.url + "/v1"))
        with ServerThread(app) as server:
            yield server


def post(proxy: ServerThread, route: str, x: str) -> httpx.Response:
    path, body = ROUTES[route]
    return httpx.post(proxy.url + path, content=body(x), headers=JSON, timeout=60)


def error_of(r: httpx.Response, route: str) -> dict[str, Any]:
    """The error in the route's API envelope: Anthropic's for Messages, OpenAI's elsewhere."""
    body = r.json()
    if route == "messages":
        assert body["type"] == "error", body
    assert body["error"]["type"] == "invalid_request_error", body
    return body["error"]


@pytest.mark.parametrize("kind", ["arrays", "objects"])
@pytest.mark.parametrize("depth", DEPTHS)
@pytest.mark.parametrize("route", list(ROUTES))
def test_any_depth_is_never_a_server_error(
    proxy: ServerThread, route: str, depth: int, kind: str
) -> None:
    r = post(proxy, route, nested(depth, kind))
    if depth < MAX_DEPTH - 10:
        assert r.status_code == 200, r.text[:300]
        return
    assert r.status_code == 400, r.text[:300]
    error = error_of(r, route)
    if route != "messages":
        assert error["code"] == "json_too_deep"
    assert f"deeper than {MAX_DEPTH} levels" in error["message"]


@pytest.mark.parametrize("route", list(ROUTES))
def test_a_body_at_the_limit_is_served_and_one_level_more_is_refused(
    proxy: ServerThread, route: str
) -> None:
    _, body = ROUTES[route]
    wrapping = depth_of(json.loads(body("{}"))) - 1  # the levels around the nested value
    at_limit = post(proxy, route, nested(MAX_DEPTH - wrapping, "objects"))
    assert depth_of(json.loads(body(nested(MAX_DEPTH - wrapping, "objects")))) == MAX_DEPTH
    assert at_limit.status_code == 200, at_limit.text[:300]
    past = post(proxy, route, nested(MAX_DEPTH - wrapping + 1, "arrays"))
    assert past.status_code == 400
    assert "deeper than" in error_of(past, route)["message"]


def test_a_refused_deep_body_is_counted_as_a_400(proxy: ServerThread) -> None:
    """In /metrics as the refusal it is, not as a server error."""

    def count(status: str) -> float:
        text = httpx.get(proxy.url + "/metrics").text
        line = f'route="/v1/chat/completions",status="{status}"'
        return sum(
            float(x.rsplit(" ", 1)[1])
            for x in text.splitlines()
            if line in x and x.startswith("ctxproxy_http_requests_total")
        )

    before = count("400"), count("500")
    assert post(proxy, "chat", nested(1000, "arrays")).status_code == 400
    assert (count("400"), count("500")) == (before[0] + 1, before[1])
