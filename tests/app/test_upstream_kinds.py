"""vLLM and Ollama as they document themselves: window discovery, overflow errors, num_ctx."""

from __future__ import annotations

import json
from pathlib import Path

import httpx
from fastapi.testclient import TestClient

from proxy.app import create_app
from proxy.settings import Settings

LOCAL = "http://localhost"  # the Host a local client sends; TestClient's own is refused

# Enough history that a small window forces compaction of the old tool outputs.
LOG = "\n".join(f"INFO step {i}: ok" for i in range(400)) + "\nValueError: boom"


def history(turns: int) -> list[dict]:
    msgs = [{"role": "system", "content": "agent"}, {"role": "user", "content": "fix it"}]
    for t in range(turns):
        call = {"id": f"c{t}", "type": "function", "function": {"name": "sh", "arguments": "{}"}}
        msgs += [
            {"role": "assistant", "content": None, "tool_calls": [call]},
            {"role": "tool", "tool_call_id": f"c{t}", "content": LOG},
        ]
    return msgs


def client_for(tmp_path: Path, kind: str, handler) -> TestClient:
    settings = Settings(
        database_url=f"sqlite:///{tmp_path / 'db.sqlite'}",
        upstreams=[{"name": kind, "kind": kind, "base_url": "http://up.test/v1"}],
    )
    return TestClient(create_app(settings, transport=httpx.MockTransport(handler)), base_url=LOCAL)


def chat_ok(body: dict) -> httpx.Response:
    return httpx.Response(
        200,
        json={
            "choices": [{"index": 0, "message": {"role": "assistant", "content": "ok"}}],
            "usage": {"prompt_tokens": 10, "completion_tokens": 1, "total_tokens": 11},
        },
    )


def test_vllm_window_from_models_and_overflow_healed(tmp_path: Path) -> None:
    sent: list[dict] = []

    def vllm(request: httpx.Request) -> httpx.Response:
        if request.url.path == "/v1/models":
            return httpx.Response(
                200,
                json={
                    "object": "list",
                    "data": [
                        {"id": "other", "object": "model", "max_model_len": 131072},
                        {"id": "qwen", "object": "model", "max_model_len": 32768},
                    ],
                },
            )
        body = json.loads(request.content)
        sent.append(body)
        if len(sent) == 1:  # the server's tokenizer counts more than our estimate
            msg = (
                "This model's maximum context length is 32768 tokens. However, you requested "
                "40000 tokens (39000 in the messages, 1000 in the completion). Please reduce "
                "the length of the messages or completion."
            )
            return httpx.Response(
                400,
                json={
                    "object": "error",
                    "message": msg,
                    "type": "BadRequestError",
                    "param": None,
                    "code": 400,
                },
            )
        return chat_ok(body)

    with client_for(tmp_path, "vllm", vllm) as client:
        r = client.post(
            "/v1/chat/completions",
            json={"model": "qwen", "messages": history(60), "max_tokens": 1000},
        )
    assert r.status_code == 200, r.text
    assert int(r.headers["x-ctxproxy-budget"]) < 32768 - 1000
    assert len(sent) == 2
    assert len(json.dumps(sent[1]["messages"])) < len(json.dumps(sent[0]["messages"]))


def test_vllm_error_shape_as_top_level_message(tmp_path: Path) -> None:
    # vLLM's ErrorResponse puts "message" at the top level of the body in some versions.
    from proxy.upstream.overflow import parse_overflow

    body = {
        "object": "error",
        "message": "This model's maximum context length is 4096 tokens. "
        "However, your request has 5000 input tokens.",
        "type": "BadRequestError",
        "code": 400,
    }
    found = parse_overflow(400, json.dumps(body).encode())
    assert found is not None and (found.prompt_tokens, found.window) == (5000, 4096)


def test_ollama_window_from_show_and_num_ctx_set(tmp_path: Path) -> None:
    sent: list[dict] = []

    def ollama(request: httpx.Request) -> httpx.Response:
        if request.url.path == "/api/show":
            assert json.loads(request.content) == {"model": "llama3.2"}
            return httpx.Response(
                200,
                json={
                    "model_info": {"general.architecture": "llama", "llama.context_length": 8192}
                },
            )
        sent.append(json.loads(request.content))
        return chat_ok(sent[-1])

    with client_for(tmp_path, "ollama", ollama) as client:
        r = client.post(
            "/v1/chat/completions",
            json={"model": "llama3.2", "messages": history(10), "max_tokens": 100},
        )
    assert r.status_code == 200
    assert sent[0]["options"] == {"num_ctx": 8192}
    assert int(r.headers["x-ctxproxy-budget"]) <= 8192 - 100


def test_ollama_recall_rounds_carry_num_ctx(tmp_path: Path) -> None:
    # A recall round is a second request for the same answer: Ollama must get the same window,
    # or it silently truncates the round's prompt to its default num_ctx.
    sent: list[dict] = []

    def ollama(request: httpx.Request) -> httpx.Response:
        if request.url.path == "/api/show":
            info = {"general.architecture": "llama", "llama.context_length": 8192}
            return httpx.Response(200, json={"model_info": info})
        sent.append(json.loads(request.content))
        if len(sent) == 1:
            args = json.dumps({"query": "ValueError"})
            call = {"id": "r1", "type": "function"}
            call["function"] = {"name": "ctxproxy_recall", "arguments": args}
            message = {"role": "assistant", "content": None, "tool_calls": [call]}
            choice = {"index": 0, "message": message, "finish_reason": "tool_calls"}
            return httpx.Response(200, json={"choices": [choice], "usage": {"prompt_tokens": 9}})
        return chat_ok(sent[-1])

    with client_for(tmp_path, "ollama", ollama) as client:
        r = client.post(
            "/v1/chat/completions",
            json={"model": "llama3.2", "messages": history(40), "max_tokens": 100},
        )
    assert r.status_code == 200, r.text
    assert r.json()["choices"][0]["message"]["content"] == "ok"
    assert len(sent) == 2  # the recall call answered by ctxproxy, then the model asked again
    assert [body.get("options") for body in sent] == [{"num_ctx": 8192}] * 2


def test_discovery_failure_falls_back_without_compaction(tmp_path: Path) -> None:
    def broken(request: httpx.Request) -> httpx.Response:
        if request.url.path == "/props":
            return httpx.Response(500, text="no props here")
        return chat_ok({})

    with client_for(tmp_path, "llamacpp", broken) as client:
        r = client.post("/v1/chat/completions", json={"model": "m", "messages": history(3)})
    assert r.status_code == 200
    assert r.headers["x-ctxproxy-budget"] == "" and r.headers["x-ctxproxy-compaction"] == "none"
