"""A scripted OpenAI-compatible upstream for tests: the `model` name picks the behaviour.

echo           answers "echo: <last user text>" (streams word by word when asked)
gated          streams one chunk, then waits for `gate` before the rest (proves chunk relay)
tools          answers with two parallel tool calls (streamed as deltas when asked)
slow           streams 200 chunks 20 ms apart, recording whether the client went away
fail-<code>    answers HTTP <code> with an OpenAI error body (429 adds Retry-After)
reset          starts a stream, then drops the connection
stall          starts a stream, then sends nothing
hang           sends nothing at all, not even headers
tight          refuses prompts of 2,000+ tokens (chars/4) as llama.cpp does, else echoes
garbled        streams one chunk, then an event whose JSON is cut off, then more and [DONE]
recaller       with ctxproxy_recall offered and the last user message "RECALL <json args>",
               says "Looking." and calls it with those arguments; given the result, answers
               "recalled: <result>" (stream or not); `recaller-mixed` also calls the client's
               read_file in the same answer; a JSON list after RECALL makes one call per item
               (`RECALL 3000*<json args>`: 3,000 of that call),
               and `recaller-hang` never answers the round that brings the results
not-sse        answers 200 text/event-stream with an HTML error page for a body
bulk           streams 64 chunks of 64 KiB as fast as the reader takes them (4 MiB in all)

`streaming` counts the streams in progress, so a test can see that the proxy let go of one.
"""

from __future__ import annotations

import asyncio
import json
import sys
import threading
import time
from collections.abc import AsyncIterator
from typing import Any

from starlette.applications import Starlette
from starlette.requests import Request
from starlette.responses import JSONResponse, Response, StreamingResponse
from starlette.routing import Route


class Script:
    def __init__(self) -> None:
        self.received: list[dict[str, Any]] = []
        self.raw: list[bytes] = []
        self.headers: list[dict[str, str]] = []
        self.gate = threading.Event()
        self.slow_finished: list[bool | None] = []  # per 'slow' stream, see _slow
        self.streaming = 0
        self.app = Starlette(
            routes=[
                Route("/v1/chat/completions", self.chat, methods=["POST"]),
                Route("/v1/completions", self.completions, methods=["POST"]),
                Route("/v1/embeddings", self.embeddings, methods=["POST"]),
                Route("/v1/models", self.models),
                Route("/v1/messages", self.messages, methods=["POST"]),
                Route("/v1/responses", self.responses, methods=["POST"]),
            ]
        )

    def reset(self) -> None:
        self.received.clear()
        self.raw.clear()
        self.headers.clear()
        self.slow_finished.clear()
        self.gate.clear()
        self.streaming = 0

    async def models(self, request: Request) -> Response:
        return JSONResponse(
            {
                "object": "list",
                "data": [
                    {"id": "echo", "object": "model", "owned_by": "scripted"},
                    {"id": "tools", "object": "model", "owned_by": "scripted"},
                ],
            }
        )

    async def completions(self, request: Request) -> Response:
        body = await request.json()
        self.received.append(body)
        return JSONResponse(
            {
                "object": "text_completion",
                "model": body["model"],
                "choices": [{"index": 0, "text": "done", "finish_reason": "stop"}],
            }
        )

    async def messages(self, request: Request) -> Response:
        """Anthropic Messages, natively: answers "native: <last user text>"."""
        self.raw.append(await request.body())
        body = json.loads(self.raw[-1])
        self.received.append(body)
        self.headers.append(dict(request.headers))
        if (refused := strict_template(body["model"], body["messages"])) is not None:
            return refused
        last = body["messages"][-1]["content"]
        text = last if isinstance(last, str) else last[-1].get("text", "")
        return JSONResponse(
            {
                "id": "msg_native",
                "type": "message",
                "role": "assistant",
                "model": body["model"],
                "content": [{"type": "text", "text": "native: " + text}],
                "stop_reason": "end_turn",
                "stop_sequence": None,
                "usage": {"input_tokens": len(self.raw[-1]) // 4, "output_tokens": 3},
            }
        )

    async def responses(self, request: Request) -> Response:
        """OpenAI Responses, natively: answers "native: <last input text>"."""
        self.raw.append(await request.body())
        body = json.loads(self.raw[-1])
        self.received.append(body)
        items = body["input"] if isinstance(body["input"], list) else []
        if (refused := strict_template(body["model"], items)) is not None:
            return refused
        last = body["input"] if isinstance(body["input"], str) else body["input"][-1]
        text = last if isinstance(last, str) else str(last.get("content") or last.get("output"))
        message = {
            "type": "message",
            "id": "msg_1",
            "role": "assistant",
            "status": "completed",
            "content": [{"type": "output_text", "text": "native: " + text, "annotations": []}],
        }
        used = len(self.raw[-1]) // 4
        return JSONResponse(
            {
                "id": "resp_native",
                "object": "response",
                "created_at": int(time.time()),
                "status": "completed",
                "model": body["model"],
                "output": [message],
                "usage": {"input_tokens": used, "output_tokens": 3, "total_tokens": used + 3},
            }
        )

    async def embeddings(self, request: Request) -> Response:
        body = await request.json()
        self.received.append(body)
        return JSONResponse(
            {
                "object": "list",
                "model": body["model"],
                "data": [{"object": "embedding", "index": 0, "embedding": [0.1, 0.2]}],
            }
        )

    async def chat(self, request: Request) -> Response:
        self.raw.append(await request.body())
        body = await request.json()
        self.received.append(body)
        self.headers.append(dict(request.headers))
        model, stream = body["model"], bool(body.get("stream"))
        if (refused := strict_template(model, body["messages"])) is not None:
            return refused
        if model.startswith("fail-"):
            code = int(model.removeprefix("fail-"))
            headers = {"retry-after": "7"} if code == 429 else None
            err = {
                "error": {
                    "message": f"scripted failure {code}",
                    "type": "scripted",
                    "param": None,
                    "code": code,
                }
            }
            return JSONResponse(err, status_code=code, headers=headers)
        if model == "tight":  # a llama.cpp-like server whose real window is 2,000 tokens
            used = len(json.dumps(body["messages"])) // 4
            if used >= 2000:
                exceeded = {
                    "code": 400,
                    "type": "exceed_context_size_error",
                    "message": "the request exceeds the available context size",
                    "n_prompt_tokens": used,
                    "n_ctx": 2000,
                }
                return JSONResponse({"error": exceeded}, status_code=400)
        if model == "hang":
            await asyncio.sleep(3600)
        if model == "tools":
            return self._tools(body, stream)
        if model.startswith("call:"):  # calls the tool named after the colon, if offered
            return self._call_named(model.removeprefix("call:"), body, stream)
        if model.startswith("recaller"):
            return self._recaller(body, stream, mixed=model == "recaller-mixed")
        text = "echo: " + last_user_text(body["messages"])
        if model in ("thinker", "thinker-vllm") and not stream:  # reasoning first, as llama.cpp
            field = "reasoning" if model == "thinker-vllm" else "reasoning_content"
            msg = {"role": "assistant", "content": text, field: "I should echo it."}
            return JSONResponse(completion(model, text, body, message=msg))
        if not stream:
            return JSONResponse(completion(model, text, body))
        source = {
            "gated": self._gated,
            "slow": self._slow,
            "reset": self._reset,
            "stall": self._stall,
            "garbled": self._garbled,
            "not-sse": self._not_sse,
            "bulk": self._bulk,
        }.get(model, self._words)
        return StreamingResponse(
            self._counted(source(model, text, body)), media_type="text/event-stream"
        )

    async def _counted(self, source: AsyncIterator[bytes]) -> AsyncIterator[bytes]:
        self.streaming += 1
        try:
            async for part in source:
                yield part
        finally:
            self.streaming -= 1

    def _tools(self, body: dict[str, Any], stream: bool) -> Response:
        # Ids stay unique across an agent loop's turns: numbered by the answers so far.
        turn = sum(1 for m in body["messages"] if m["role"] == "assistant")
        suffix = f"_{turn}" if turn else ""
        calls = [
            {
                "id": "call_a" + suffix,
                "type": "function",
                "function": {"name": "get_weather", "arguments": '{"city": "Paris"}'},
            },
            {
                "id": "call_b" + suffix,
                "type": "function",
                "function": {"name": "get_weather", "arguments": '{"city": "Oslo"}'},
            },
        ]
        if not stream:
            msg = {"role": "assistant", "content": None, "tool_calls": calls}
            return JSONResponse(completion("tools", None, body, message=msg, finish="tool_calls"))
        return StreamingResponse(self._tool_deltas(calls), media_type="text/event-stream")

    def _call_named(self, name: str, body: dict[str, Any], stream: bool) -> Response:
        offered = [(t.get("function") or {}).get("name") for t in body.get("tools") or []]
        if name not in offered:
            return JSONResponse(completion(body["model"], f"no tool {name}", body))
        args = json.dumps({"input": "*** Begin Patch\n*** End Patch", "message": "look"})
        fn = {"name": name, "arguments": args}
        calls = [{"id": "call_1", "type": "function", "function": fn}]
        if not stream:
            msg = {"role": "assistant", "content": None, "tool_calls": calls}
            answer = completion(body["model"], None, body, message=msg, finish="tool_calls")
            return JSONResponse(answer)
        return StreamingResponse(self._tool_deltas(calls), media_type="text/event-stream")

    def _recaller(self, body: dict[str, Any], stream: bool, mixed: bool) -> Response:
        model, last = body["model"], body["messages"][-1]
        offered = any(
            (t.get("function") or {}).get("name") == "ctxproxy_recall"
            for t in body.get("tools", [])
        )
        asked = last_user_text(body["messages"])
        if last["role"] == "tool" and model == "recaller-hang":
            return StreamingResponse(self._hang(), media_type="text/event-stream")
        if last["role"] == "tool" or not offered or not asked.startswith("RECALL "):
            text = "recalled: " + (last["content"] if last["role"] == "tool" else "nothing")
            if not stream:
                return JSONResponse(completion(model, text, body))
            return StreamingResponse(self._words(model, text, body), media_type="text/event-stream")
        asked = asked.removeprefix("RECALL ")
        times, star, one = asked.partition("*")  # "RECALL 3000*{...}": that call, 3000 times
        listed = json.loads(asked) if asked.startswith("[") else [asked]
        listed = [one] * int(times) if star and times.isdigit() else listed
        calls = [
            {
                "id": f"call_r{len(body['messages'])}_{n}",
                "type": "function",
                "function": {
                    "name": "ctxproxy_recall",
                    "arguments": args if isinstance(args, str) else json.dumps(args),
                },
            }
            for n, args in enumerate(listed)
        ]
        if mixed:
            args = '{"path": "a.py"}'
            calls.append(
                {
                    "id": "call_f",
                    "type": "function",
                    "function": {"name": "read_file", "arguments": args},
                }
            )
        if not stream:
            msg = {"role": "assistant", "content": "Looking.", "tool_calls": calls}
            return JSONResponse(completion(model, None, body, message=msg, finish="tool_calls"))
        return StreamingResponse(
            self._tool_deltas(calls, model, "Looking.", body), media_type="text/event-stream"
        )

    async def _hang(self) -> AsyncIterator[bytes]:
        await asyncio.sleep(3600)
        yield b""

    async def _tool_deltas(
        self,
        calls: list[dict[str, Any]],
        model: str = "tools",
        text: str | None = None,
        body: dict[str, Any] | None = None,
    ) -> AsyncIterator[bytes]:
        yield sse(chunk(model, {"role": "assistant", "content": text}))
        for i, call in enumerate(calls):
            head = {
                "index": i,
                "id": call["id"],
                "type": "function",
                "function": {"name": call["function"]["name"], "arguments": ""},
            }
            yield sse(chunk(model, {"tool_calls": [head]}))
            args = call["function"]["arguments"]
            for part in (args[: len(args) // 2], args[len(args) // 2 :]):
                yield sse(
                    chunk(model, {"tool_calls": [{"index": i, "function": {"arguments": part}}]})
                )
        yield sse(chunk(model, {}, finish="tool_calls"))
        if body is not None and (body.get("stream_options") or {}).get("include_usage"):
            yield sse({**chunk(model, {}), "choices": [], "usage": usage(body, text)})
        yield b"data: [DONE]\n\n"

    async def _words(self, model: str, text: str, body: dict[str, Any]) -> AsyncIterator[bytes]:
        yield sse(chunk(model, {"role": "assistant", "content": ""}))
        if model.startswith("thinker"):
            field = "reasoning" if model == "thinker-vllm" else "reasoning_content"
            for word in ("I should ", "echo it."):
                yield sse(chunk(model, {field: word}))
        for word in text.split(" "):
            yield sse(chunk(model, {"content": word + " "}))
            await asyncio.sleep(0.001)
        yield sse(chunk(model, {}, finish="stop"))
        if (body.get("stream_options") or {}).get("include_usage"):
            yield sse({**chunk(model, {}), "choices": [], "usage": usage(body, text)})
        yield b"data: [DONE]\n\n"

    async def _gated(self, model: str, text: str, body: dict[str, Any]) -> AsyncIterator[bytes]:
        yield sse(chunk(model, {"role": "assistant", "content": "first"}))
        released = await asyncio.to_thread(self.gate.wait, 10)
        yield sse(chunk(model, {"content": " second" if released else " timeout"}))
        yield sse(chunk(model, {}, finish="stop"))
        yield b"data: [DONE]\n\n"

    async def _slow(self, model: str, text: str, body: dict[str, Any]) -> AsyncIterator[bytes]:
        index = len(self.slow_finished)
        self.slow_finished.append(None)
        try:
            for i in range(200):
                yield sse(chunk(model, {"content": f"{i} "}))
                await asyncio.sleep(0.02)
            yield b"data: [DONE]\n\n"
        finally:
            # None while running; True if sent in full; False if the reader went away.
            self.slow_finished[index] = sys.exc_info()[0] is None

    async def _reset(self, model: str, text: str, body: dict[str, Any]) -> AsyncIterator[bytes]:
        yield sse(chunk(model, {"role": "assistant", "content": "partial"}))
        await asyncio.sleep(0.05)
        raise ConnectionResetError("scripted reset")

    async def _stall(self, model: str, text: str, body: dict[str, Any]) -> AsyncIterator[bytes]:
        yield sse(chunk(model, {"role": "assistant", "content": "partial"}))
        await asyncio.sleep(3600)

    async def _garbled(self, model: str, text: str, body: dict[str, Any]) -> AsyncIterator[bytes]:
        yield sse(chunk(model, {"role": "assistant", "content": "partial"}))
        await asyncio.sleep(0.01)
        yield b'data: {"choices": [{"delta": {"content": "cut off\n\n'
        yield sse(chunk(model, {"content": " after"}, finish="stop"))
        yield b"data: [DONE]\n\n"

    async def _not_sse(self, model: str, text: str, body: dict[str, Any]) -> AsyncIterator[bytes]:
        yield b"<html><body><h1>502 Bad Gateway</h1></body></html>\n"

    async def _bulk(self, model: str, text: str, body: dict[str, Any]) -> AsyncIterator[bytes]:
        yield sse(chunk(model, {"role": "assistant", "content": ""}))
        for i in range(64):
            yield sse(chunk(model, {"content": f"{i % 10}" * 65536}))
        yield sse(chunk(model, {}, finish="stop"))
        yield b"data: [DONE]\n\n"


def strict_template(model: str, messages: list[dict[str, Any]]) -> Response | None:
    """Model "strict": a chat template that raises on a system message after the first (Qwen's,
    Llama's), answered as real llama.cpp answers it: HTTP 400."""
    roles = [m.get("role") for m in messages if isinstance(m, dict)]
    late = [r for r in roles[1:] if r in ("system", "developer")]
    if model != "strict" or not late:
        return None
    message = "Unable to generate parser for this template: System message must be at the start"
    return JSONResponse({"error": {"code": 400, "message": message}}, status_code=400)


def last_user_text(messages: list[dict[str, Any]]) -> str:
    for msg in reversed(messages):
        if msg["role"] == "user":
            content = msg.get("content")
            if isinstance(content, list):
                return " ".join(p.get("text", "") for p in content if p.get("type") == "text")
            return content or ""
    return ""


def usage(body: dict[str, Any], text: str | None) -> dict[str, int]:
    prompt = len(json.dumps(body["messages"])) // 4
    out = len(text or "") // 4
    return {"prompt_tokens": prompt, "completion_tokens": out, "total_tokens": prompt + out}


def completion(
    model: str,
    text: str | None,
    body: dict[str, Any],
    *,
    message: dict[str, Any] | None = None,
    finish: str = "stop",
) -> dict[str, Any]:
    return {
        "id": "chatcmpl-scripted",
        "object": "chat.completion",
        "created": int(time.time()),
        "model": model,
        "choices": [
            {
                "index": 0,
                "finish_reason": finish,
                "message": message or {"role": "assistant", "content": text},
            }
        ],
        "usage": usage(body, text),
    }


def chunk(model: str, delta: dict[str, Any], finish: str | None = None) -> dict[str, Any]:
    return {
        "id": "chatcmpl-scripted",
        "object": "chat.completion.chunk",
        "created": int(time.time()),
        "model": model,
        "choices": [{"index": 0, "delta": delta, "finish_reason": finish}],
    }


def sse(data: dict[str, Any]) -> bytes:
    return b"data: " + json.dumps(data).encode() + b"\n\n"
