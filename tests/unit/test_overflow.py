"""The three servers' overflow errors, as they document and send them."""

from __future__ import annotations

import json

from proxy.upstream.overflow import Overflow, parse_overflow


def body(obj: object) -> bytes:
    return json.dumps(obj).encode()


def test_llamacpp_shape() -> None:
    err = {
        "error": {
            "code": 400,
            "type": "exceed_context_size_error",
            "n_prompt_tokens": 9031,
            "n_ctx": 4096,
            "message": "the request exceeds the available context size",
        }
    }
    assert parse_overflow(400, body(err)) == Overflow(9031, 4096)


def test_vllm_shapes() -> None:
    old = (
        "This model's maximum context length is 4096 tokens. However, you requested 5120 "
        "tokens (4096 in the messages, 1024 in the completion). Please reduce the length "
        "of the messages or completion."
    )
    new = (
        "This model's maximum context length is 32768 tokens. However, your request has "
        "40000 input tokens. Please reduce the length of the input messages."
    )
    vllm = {"object": "error", "type": "BadRequestError", "code": 400, "param": None}
    assert parse_overflow(400, body({"error": {**vllm, "message": old}})) == Overflow(4096, 4096)
    assert parse_overflow(400, body({"error": {**vllm, "message": new}})) == Overflow(40000, 32768)


def test_openai_and_llama_cpp_python_shape() -> None:
    msg = (
        "This model's maximum context length is 8192 tokens. However, your messages "
        "resulted in 9000 tokens."
    )
    err = {
        "error": {
            "message": msg,
            "type": "invalid_request_error",
            "code": "context_length_exceeded",
            "param": "messages",
        }
    }
    assert parse_overflow(400, body(err)) == Overflow(9000, 8192)
    bare = {"error": {"message": "too long", "code": "context_length_exceeded"}}
    assert parse_overflow(400, body(bare)) == Overflow(None, None)


def test_other_errors_are_not_overflow() -> None:
    assert parse_overflow(400, body({"error": {"message": "bad temperature"}})) is None
    assert parse_overflow(500, body({"error": {"message": "maximum context length is 5"}})) is None
    assert parse_overflow(400, b"<html>") is None
    assert parse_overflow(400, body(["x"])) is None
