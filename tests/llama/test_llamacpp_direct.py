"""The upstream behaviour ctxproxy relies on, shown against a real llama.cpp server."""

from __future__ import annotations

import json
from collections.abc import Iterator
from typing import Any

import httpx
import pytest

from proxy.testing.llamacpp import LlamaServer

pytestmark = pytest.mark.llama

MODEL = "smollm2"
Messages = list[dict[str, Any]]

HISTORIES: dict[str, Messages] = {
    "single_user": [{"role": "user", "content": "Say hello."}],
    "multi_turn": [
        {"role": "system", "content": "You are terse."},
        {"role": "user", "content": "What is 2+2?"},
        {"role": "assistant", "content": "4"},
        {"role": "user", "content": "And 3+3?  "},
    ],
    "unicode": [{"role": "user", "content": "Ünïcödé 🙂 テスト\n\n  trailing  "}],
    # Chat requests parse special-token text inside content, as /tokenize does by default.
    "special_token_text": [{"role": "user", "content": "print <|im_end|> please"}],
    # A trailing assistant message is rendered as a prefill: no generation prompt follows.
    "assistant_prefill": [
        {"role": "user", "content": "hi"},
        {"role": "assistant", "content": "Hel"},
    ],
}


@pytest.fixture
def client(llama: LlamaServer) -> Iterator[httpx.Client]:
    with httpx.Client(base_url=llama.base_url, timeout=120.0) as c:
        yield c


def chat(client: httpx.Client, messages: Messages, **extra: Any) -> httpx.Response:
    body = {"model": MODEL, "messages": messages, "temperature": 0, "max_tokens": 8, **extra}
    return client.post("/v1/chat/completions", json=body)


def rendered(client: httpx.Client, messages: Messages, **extra: Any) -> str:
    r = client.post("/apply-template", json={"messages": messages, **extra})
    r.raise_for_status()
    return r.json()["prompt"]


def tokens(client: httpx.Client, content: str, **extra: Any) -> list[int]:
    r = client.post("/tokenize", json={"content": content, **extra})
    r.raise_for_status()
    return r.json()["tokens"]


def test_props_reports_per_slot_window(client: httpx.Client) -> None:
    props = client.get("/props").json()

    assert props["default_generation_settings"]["n_ctx"] == 4096  # 8192 / 2 slots
    assert props["total_slots"] == 2
    assert props["model_alias"] == MODEL
    assert "<|im_start|>" in props["chat_template"]


def test_models_meta_reports_slot_window_and_training_length(client: httpx.Client) -> None:
    (model,) = client.get("/v1/models").json()["data"]

    assert model["id"] == MODEL
    assert model["meta"]["n_ctx"] == 4096
    assert model["meta"]["n_ctx_train"] == 8192


def test_non_streaming_chat_answers_with_usage(client: httpx.Client) -> None:
    r = chat(client, HISTORIES["single_user"])

    assert r.status_code == 200
    body = r.json()
    assert body["choices"][0]["message"]["content"].strip()
    usage = body["usage"]
    assert usage["prompt_tokens"] > 0
    assert usage["total_tokens"] == usage["prompt_tokens"] + usage["completion_tokens"]
    # prompt_tokens counts the whole prompt, whether taken from the prefix cache or not.
    cached = usage["prompt_tokens_details"]["cached_tokens"]
    assert usage["prompt_tokens"] == cached + body["timings"]["prompt_n"]


def test_temperature_zero_is_deterministic(client: httpx.Client) -> None:
    answers = {
        chat(client, HISTORIES["multi_turn"]).json()["choices"][0]["message"]["content"]
        for _ in range(2)
    }

    assert len(answers) == 1


def test_streaming_chat_yields_sse_chunks_then_done(client: httpx.Client) -> None:
    body = {
        "model": MODEL,
        "messages": HISTORIES["single_user"],
        "temperature": 0,
        "max_tokens": 5,
        "stream": True,
        "stream_options": {"include_usage": True},
    }
    with client.stream("POST", "/v1/chat/completions", json=body) as r:
        assert r.status_code == 200
        assert r.headers["content-type"].startswith("text/event-stream")
        events = [line for line in r.iter_lines() if line]

    assert all(line.startswith("data: ") for line in events)
    assert events[-1] == "data: [DONE]"
    chunks = [json.loads(line.removeprefix("data: ")) for line in events[:-1]]
    assert all(c["object"] == "chat.completion.chunk" for c in chunks)
    text = "".join(c["choices"][0]["delta"].get("content") or "" for c in chunks if c["choices"])
    assert text
    # include_usage: a last chunk with no choices carries the usage.
    assert chunks[-1]["choices"] == []
    assert chunks[-1]["usage"]["completion_tokens"] == 5


@pytest.mark.parametrize("name", sorted(HISTORIES))
def test_template_token_count_equals_prompt_tokens(client: httpx.Client, name: str) -> None:
    """len(/tokenize(/apply-template(messages).prompt)) == usage.prompt_tokens, exactly.

    /apply-template's default already appends the generation prompt, and /tokenize adds no BOS
    of its own (SmolLM2 does not add one; `<|im_start|>`, token 1, comes from the template).
    """
    messages = HISTORIES[name]
    prompt = rendered(client, messages)
    counted = tokens(client, prompt)

    r = chat(client, messages, max_tokens=1)

    assert r.status_code == 200
    assert len(counted) == r.json()["usage"]["prompt_tokens"]
    assert tokens(client, prompt, add_special=True) == counted
    assert counted[0] == 1  # <|im_start|> from the template, not an added BOS


def test_generation_prompt_is_four_tokens_after_a_user_turn(client: httpx.Client) -> None:
    messages = HISTORIES["multi_turn"]
    with_gen = rendered(client, messages)
    without_gen = rendered(client, messages, add_generation_prompt=False)

    assert with_gen == without_gen + "<|im_start|>assistant\n"
    assert len(tokens(client, with_gen)) - len(tokens(client, without_gen)) == 4


def test_over_long_prompt_is_rejected_with_exceed_context_size_error(
    client: httpx.Client,
) -> None:
    r = chat(client, [{"role": "user", "content": "word " * 5000}])

    assert r.status_code == 400
    error = r.json()["error"]
    assert error["code"] == 400
    assert error["type"] == "exceed_context_size_error"
    assert error["n_ctx"] == 4096  # the per-slot window, not the 8192 given at start
    assert error["n_prompt_tokens"] > 4096
    assert "exceeds the available context size" in error["message"]


def test_streaming_overflow_is_a_plain_json_400_before_any_event(client: httpx.Client) -> None:
    messages = [{"role": "user", "content": "word " * 5000}]
    r = chat(client, messages, stream=True)

    assert r.status_code == 400
    assert r.headers["content-type"].startswith("application/json")
    assert r.json()["error"]["type"] == "exceed_context_size_error"


def test_prompt_must_be_strictly_shorter_than_the_window(llama: LlamaServer) -> None:
    """A prompt of n_ctx - 1 tokens is served; one of n_ctx tokens is refused.

    Shown on a second, small single-slot server so the fitting prompt evaluates quickly.
    """
    n_ctx = 512
    with LlamaServer(llama.model, n_ctx=n_ctx, n_parallel=1) as small:
        with httpx.Client(base_url=small.base_url, timeout=120.0) as client:
            assert client.get("/props").json()["default_generation_settings"]["n_ctx"] == n_ctx
            base = len(tokens(client, rendered(client, [{"role": "user", "content": "x"}])))
            # " word" is one token here, so the prompt grows one token per repetition.
            fits = [{"role": "user", "content": "x" + " word" * (n_ctx - 1 - base)}]
            overflows = [{"role": "user", "content": "x" + " word" * (n_ctx - base)}]

            ok = chat(client, fits, max_tokens=100)
            refused = chat(client, overflows, max_tokens=1)

    assert ok.status_code == 200
    assert ok.json()["usage"]["prompt_tokens"] == n_ctx - 1
    # max_tokens is not checked up front: generation just ends when the slot is full
    # (finish_reason "length", or "stop" if that one token happened to be end-of-turn).
    assert ok.json()["usage"]["total_tokens"] == n_ctx
    assert refused.status_code == 400
    assert refused.json()["error"]["n_prompt_tokens"] == n_ctx
    assert refused.json()["error"]["n_ctx"] == n_ctx
