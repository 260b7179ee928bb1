"""ctxproxy as a real server, driven by the official openai SDK, against the scripted upstream."""

from __future__ import annotations

import asyncio
import json
import time

import httpx
import openai
import pytest

from proxy.testing.scripted import Script
from proxy.testing.servers import ServerThread, free_port

JSON = {"Content-Type": "application/json"}
HELLO = [{"role": "user", "content": "hello there"}]


def client(proxy: ServerThread, **kw: object) -> openai.OpenAI:
    return openai.OpenAI(base_url=proxy.url + "/v1", api_key="client-key", max_retries=0, **kw)


def test_plain_chat_sync(proxy: ServerThread, script: Script) -> None:
    r = client(proxy).chat.completions.create(model="echo", messages=HELLO, temperature=0)
    assert r.choices[0].message.content == "echo: hello there"
    sent = script.received[-1]
    assert sent["messages"] == HELLO and sent["temperature"] == 0


async def test_plain_and_streaming_chat_async(proxy: ServerThread, script: Script) -> None:
    aclient = openai.AsyncOpenAI(base_url=proxy.url + "/v1", api_key="k", max_retries=0)
    r = await aclient.chat.completions.create(model="echo", messages=HELLO)
    assert r.choices[0].message.content == "echo: hello there"
    stream = await aclient.chat.completions.create(
        model="echo", messages=HELLO, stream=True, stream_options={"include_usage": True}
    )
    pieces, usage = [], None
    async for event in stream:
        pieces += [c.delta.content or "" for c in event.choices]
        usage = event.usage or usage
    assert "".join(pieces).strip() == "echo: hello there"
    assert usage is not None and usage.prompt_tokens > 0
    await aclient.close()


def test_unknown_fields_and_parts_pass_through(proxy: ServerThread, script: Script) -> None:
    messages = [
        {
            "role": "user",
            "content": [
                {"type": "text", "text": "what is this"},
                {"type": "image_url", "image_url": {"url": "data:image/png;base64,iVBORw0KGgo="}},
            ],
        }
    ]
    client(proxy).chat.completions.create(
        model="echo",
        messages=messages,
        response_format={"type": "json_object"},
        tool_choice="none",
        extra_body={"top_k": 7, "cache_prompt": True, "nested": {"a": [1]}},
    )
    sent = script.received[-1]
    assert sent["messages"] == messages
    assert sent["top_k"] == 7 and sent["cache_prompt"] is True and sent["nested"] == {"a": [1]}
    assert sent["response_format"] == {"type": "json_object"} and sent["tool_choice"] == "none"


def test_client_key_not_forwarded_upstream_key_is(proxy: ServerThread, script: Script) -> None:
    client(proxy).chat.completions.create(model="echo", messages=HELLO)
    assert script.headers[-1]["authorization"] == "Bearer upstream-secret"


def test_first_chunk_arrives_before_upstream_sends_second(
    proxy: ServerThread, script: Script
) -> None:
    stream = client(proxy).chat.completions.create(model="gated", messages=HELLO, stream=True)
    events = iter(stream)
    first = next(events)
    # The upstream is blocked on the gate: only a chunk-by-chunk relay delivers this now.
    assert first.choices[0].delta.content == "first"
    assert not script.gate.is_set()
    script.gate.set()
    rest = "".join(e.choices[0].delta.content or "" for e in events if e.choices)
    assert rest == " second"


@pytest.mark.parametrize("stream", [False, True])
def test_parallel_tool_calls_relayed(proxy: ServerThread, script: Script, stream: bool) -> None:
    tools = [
        {
            "type": "function",
            "function": {
                "name": "get_weather",
                "parameters": {"type": "object", "properties": {"city": {"type": "string"}}},
            },
        }
    ]
    c = client(proxy)
    kwargs = dict(model="tools", messages=HELLO, tools=tools, parallel_tool_calls=True)
    if not stream:
        calls = c.chat.completions.create(**kwargs).choices[0].message.tool_calls
        got = [(t.id, t.function.name, t.function.arguments) for t in calls]
    else:
        acc: dict[int, list[str]] = {}
        for event in c.chat.completions.create(**kwargs, stream=True):
            for d in event.choices[0].delta.tool_calls or [] if event.choices else []:
                slot = acc.setdefault(d.index, ["", "", ""])
                slot[0] += d.id or ""
                slot[1] += (d.function.name or "") if d.function else ""
                slot[2] += (d.function.arguments or "") if d.function else ""
        got = [tuple(acc[i]) for i in sorted(acc)]
    assert got == [
        ("call_a", "get_weather", '{"city": "Paris"}'),
        ("call_b", "get_weather", '{"city": "Oslo"}'),
    ]
    assert script.received[-1]["tools"] == tools
    assert script.received[-1]["parallel_tool_calls"] is True


def test_tool_results_in_history_forwarded(proxy: ServerThread, script: Script) -> None:
    messages = [
        {"role": "system", "content": "You are terse."},
        {"role": "user", "content": "weather?"},
        {
            "role": "assistant",
            "content": None,
            "tool_calls": [
                {
                    "id": "call_a",
                    "type": "function",
                    "function": {"name": "get_weather", "arguments": '{"city": "Paris"}'},
                }
            ],
        },
        {"role": "tool", "tool_call_id": "call_a", "content": "sunny"},
    ]
    client(proxy).chat.completions.create(model="echo", messages=messages)
    assert script.received[-1]["messages"] == messages


def test_client_disconnect_frees_upstream_stream(proxy: ServerThread, script: Script) -> None:
    with httpx.stream(
        "POST",
        proxy.url + "/v1/chat/completions",
        timeout=10,
        json={"model": "slow", "messages": HELLO, "stream": True},
    ) as r:
        assert next(r.iter_lines()).startswith("data: ")
    # The full stream takes 4 s; a proxy that lets go of the upstream ends it well before.
    deadline = time.monotonic() + 3
    while time.monotonic() < deadline and script.slow_finished != [False]:
        time.sleep(0.05)
    assert script.slow_finished == [False]


# --- errors, always in OpenAI's envelope --------------------------------------------------


def post(proxy: ServerThread, body: object = None, **kw: object) -> httpx.Response:
    return httpx.post(proxy.url + "/v1/chat/completions", json=body, timeout=10, **kw)


def assert_envelope(r: httpx.Response, status: int, code: object = None) -> dict:
    assert r.status_code == status, r.text
    err = r.json()["error"]
    assert set(err) >= {"message", "type", "param", "code"}
    assert "Traceback" not in r.text
    if code is not None:
        assert err["code"] == code
    return err


def test_invalid_json_is_400(proxy: ServerThread) -> None:
    url = proxy.url + "/v1/chat/completions"
    r = httpx.post(url, content=b"{not json", headers=JSON, timeout=10)
    assert_envelope(r, 400)


@pytest.mark.parametrize(
    "body",
    [
        {"messages": HELLO},
        {"model": "echo", "messages": []},
        {"model": "echo", "messages": [{"role": "wizard", "content": "x"}]},
        {"model": "echo", "messages": HELLO, "max_tokens": "many"},
        {"model": 5, "messages": HELLO},
        [1, 2, 3],
    ],
)
def test_schema_errors_are_400(proxy: ServerThread, body: object) -> None:
    assert_envelope(post(proxy, body), 400)


def test_deeply_nested_json_is_400(proxy: ServerThread) -> None:
    raw = b'{"model": "echo", "messages": ' + b"[" * 100_000 + b"]" * 100_000 + b"}"
    r = httpx.post(proxy.url + "/v1/chat/completions", content=raw, headers=JSON, timeout=10)
    assert_envelope(r, 400)


def test_unknown_model_is_404(start_proxy, settings_for) -> None:
    proxy = start_proxy(
        settings_for(
            upstreams=[{"name": "only", "base_url": "http://127.0.0.1:9/v1", "models": ["known"]}]
        )
    )
    with pytest.raises(openai.NotFoundError) as info:
        client(proxy).chat.completions.create(model="unknown", messages=HELLO)
    assert info.value.code == "model_not_found"


def test_keys_required_when_configured(start_proxy, settings_for, script: Script) -> None:
    proxy = start_proxy(settings_for(api_keys=["sk-right"]))
    with pytest.raises(openai.AuthenticationError):
        client(proxy).chat.completions.create(model="echo", messages=HELLO)
    assert_envelope(post(proxy, {"model": "echo", "messages": HELLO}), 401)
    ok = openai.OpenAI(base_url=proxy.url + "/v1", api_key="sk-right")
    assert ok.chat.completions.create(model="echo", messages=HELLO).choices
    assert script.headers[-1]["authorization"] == "Bearer upstream-secret"


def test_body_over_limit_is_413(start_proxy, settings_for) -> None:
    proxy = start_proxy(settings_for(max_body_bytes=1000))
    big = {"model": "echo", "messages": [{"role": "user", "content": "x" * 2000}]}
    assert_envelope(post(proxy, big), 413)


def test_upstream_refused_is_502(start_proxy, settings_for) -> None:
    dead = f"http://127.0.0.1:{free_port()}/v1"
    proxy = start_proxy(settings_for(upstreams=[{"name": "dead", "base_url": dead}]))
    with pytest.raises(openai.APIStatusError) as info:
        client(proxy).chat.completions.create(model="echo", messages=HELLO)
    assert info.value.status_code == 502
    r = post(proxy, {"model": "echo", "messages": HELLO})
    assert_envelope(r, 502)
    message = r.json()["error"]["message"]
    assert f"POST {dead}/chat/completions" in message and "connection refused" in message


def test_models_of_a_dead_upstream_say_so_or_list_the_configured_names(
    start_proxy, settings_for
) -> None:
    dead = f"http://127.0.0.1:{free_port()}/v1"
    down = start_proxy(settings_for(upstreams=[{"name": "dead", "base_url": dead}]))
    r = httpx.get(down.url + "/v1/models")
    assert_envelope(r, 502)
    assert f"GET {dead}/models" in r.json()["error"]["message"]
    named = start_proxy(
        settings_for(upstreams=[{"name": "dead", "base_url": dead, "models": ["qwen", "*"]}])
    )
    assert [m.id for m in client(named).models.list()] == ["qwen"]


def test_upstream_timeout_is_504(start_proxy, settings_for, upstream_url: str) -> None:
    proxy = start_proxy(
        settings_for(
            upstreams=[{"name": "slowpoke", "base_url": upstream_url, "read_timeout": 0.5}]
        )
    )
    for stream in (False, True):  # no answer at all, not even headers
        assert_envelope(
            post(proxy, {"model": "hang", "messages": HELLO, "stream": stream}),
            504,
            "upstream_timeout",
        )
    with pytest.raises(openai.APIStatusError) as info:
        client(proxy).chat.completions.create(model="hang", messages=HELLO)
    assert info.value.status_code == 504
    # Headers and one chunk, then silence: the stream ends in an SSE error event.
    with httpx.stream(
        "POST",
        proxy.url + "/v1/chat/completions",
        timeout=10,
        json={"model": "stall", "messages": HELLO, "stream": True},
    ) as r:
        body = r.read().decode()
    events = [e for e in body.split("\n\n") if e.strip()]
    assert events[-1] == "data: [DONE]"
    assert json.loads(events[-2].removeprefix("data: "))["error"]["code"] == "upstream_timeout"


@pytest.mark.parametrize("code", [400, 422, 429, 500, 503])
@pytest.mark.parametrize("stream", [False, True])
def test_upstream_errors_pass_through(proxy: ServerThread, code: int, stream: bool) -> None:
    r = post(proxy, {"model": f"fail-{code}", "messages": HELLO, "stream": stream})
    assert r.status_code == code
    assert r.json()["error"]["message"] == f"scripted failure {code}"
    if code == 429:
        assert r.headers["retry-after"] == "7"


def test_reset_mid_stream_ends_with_sse_error(proxy: ServerThread) -> None:
    with httpx.stream(
        "POST",
        proxy.url + "/v1/chat/completions",
        timeout=10,
        json={"model": "reset", "messages": HELLO, "stream": True},
    ) as r:
        assert r.status_code == 200
        body = r.read().decode()
    events = [e for e in body.split("\n\n") if e.strip()]
    assert "partial" in events[0]
    assert json.loads(events[-2].removeprefix("data: "))["error"]["code"] == "upstream_unavailable"
    assert events[-1] == "data: [DONE]"


def test_models_merged_and_passthrough_routes(proxy: ServerThread, script: Script) -> None:
    c = client(proxy)
    assert {"echo", "tools"} <= {m.id for m in c.models.list()}
    assert c.completions.create(model="echo", prompt="hi").choices[0].text == "done"
    assert c.embeddings.create(model="echo", input="hi").data[0].embedding == [0.1, 0.2]


def test_healthz_and_readyz(proxy: ServerThread, start_proxy, settings_for) -> None:
    assert httpx.get(proxy.url + "/healthz").json() == {"status": "ok"}
    ready = httpx.get(proxy.url + "/readyz")
    assert ready.status_code == 200 and ready.json()["upstreams"] == {"scripted": "ok"}
    dead = f"http://127.0.0.1:{free_port()}/v1"
    down = start_proxy(settings_for(upstreams=[{"name": "dead", "base_url": dead}]))
    r = httpx.get(down.url + "/readyz")
    assert r.status_code == 503 and r.json()["upstreams"]["dead"].startswith("unreachable")


def test_many_concurrent_streams(proxy: ServerThread) -> None:
    async def one(i: int, c: openai.AsyncOpenAI) -> str:
        s = await c.chat.completions.create(
            model="echo", messages=[{"role": "user", "content": f"n{i}"}], stream=True
        )
        return "".join([e.choices[0].delta.content or "" async for e in s if e.choices]).strip()

    async def main() -> list[str]:
        async with openai.AsyncOpenAI(base_url=proxy.url + "/v1", api_key="k") as c:
            return await asyncio.gather(*(one(i, c) for i in range(32)))

    assert asyncio.run(main()) == [f"echo: n{i}" for i in range(32)]


def test_a_long_history_reaches_the_upstream_as_the_same_bytes(
    proxy: ServerThread, script: Script
) -> None:
    import orjson

    messages = [{"role": "user", "content": "hello there"}]
    for i in range(300):  # past send.PARTS_FROM: its parts go one after another
        messages += [
            {"role": "assistant", "content": f"answer {i} é 😀 " + "x" * 600},
            {"role": "user", "content": f"next {i}"},
        ]
    body = {"model": "echo", "messages": messages, "temperature": 0.5}
    for turn in (body, {**body, "messages": [*messages, *messages[1:3]]}):
        r = httpx.post(proxy.url + "/v1/chat/completions", json=turn, timeout=30)
        assert r.status_code == 200, r.text
        assert script.raw[-1] == orjson.dumps(turn)
