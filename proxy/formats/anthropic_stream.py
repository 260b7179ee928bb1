"""Anthropic Messages streams: a chat-completions stream translated into Messages events, and a
native Messages stream read as it passes so the answer can be recorded."""

from __future__ import annotations

import json
import uuid
from collections.abc import AsyncIterator
from typing import Any

from proxy.errors import ProxyError
from proxy.formats import anthropic
from proxy.formats.events import ChatTranslation, Reader, event, loads
from proxy.formats.reasoning import reasoning_of, thinking_block


def error_event(exc: ProxyError) -> bytes:
    return event("error", anthropic.proxy_error_body(exc))


async def translate(
    chat: AsyncIterator[bytes], model: str, estimate: int, conversion: Any = None
) -> AsyncIterator[bytes]:
    """Messages events for the chat stream `chat` (as proxy/exchange/relay.py yields it,
    recorded there)."""
    async for piece in _Translation(model, estimate).translate(chat):
        yield piece


class _Translation(ChatTranslation):
    def __init__(self, model: str, estimate: int) -> None:
        self.model, self.estimate = model, estimate
        self.index = -1
        self.block: str | None = None  # "thinking", "text", or "tool:<n>" (chat's call index n)
        self.stop: str | None = None
        self.usage: dict[str, Any] | None = None
        self.ended = False

    def start(self) -> bytes:
        message: dict[str, Any] = {
            "id": "msg_" + uuid.uuid4().hex[:24],
            "type": "message",
            "role": "assistant",
            "model": self.model,
            "content": [],
            "stop_reason": None,
            "stop_sequence": None,
            "usage": {"input_tokens": self.estimate, "output_tokens": 0},
        }
        return event("message_start", {"type": "message_start", "message": message}) + event(
            "ping", {"type": "ping"}
        )

    def fail(self, err: dict[str, Any]) -> bytes:
        self.ended = True
        body = anthropic.error_body(_status(err), str(err.get("message", err)))
        return self._close() + event("error", body)

    def choice(self, choice: dict[str, Any]) -> bytes:
        self.stop = choice.get("finish_reason") or self.stop
        delta = choice.get("delta") or {}
        out = b""
        if thought := reasoning_of(delta):
            if self.block != "thinking":
                out += self._open("thinking", thinking_block(""))
            out += self._delta({"type": "thinking_delta", "thinking": thought})
        if isinstance(delta.get("content"), str) and delta["content"]:
            if self.block != "text":
                out += self._open("text", {"type": "text", "text": ""})
            out += self._delta({"type": "text_delta", "text": delta["content"]})
        for call in delta.get("tool_calls") or []:
            out += self._tool(call)
        return out

    def _tool(self, call: dict[str, Any]) -> bytes:
        out, fn = b"", call.get("function") or {}
        name = f"tool:{call.get('index', 0)}"
        if self.block != name:
            block: dict[str, Any] = {
                "type": "tool_use",
                "id": call.get("id") or "toolu_" + uuid.uuid4().hex[:24],
                "name": fn.get("name") or "",
                "input": {},
            }
            out += self._open(name, block)
        if fn.get("arguments"):
            out += self._delta({"type": "input_json_delta", "partial_json": fn["arguments"]})
        return out

    def _open(self, name: str, block: dict[str, Any]) -> bytes:
        out = self._close()
        self.index += 1
        self.block = name
        start = {"type": "content_block_start", "index": self.index, "content_block": block}
        return out + event("content_block_start", start)

    def _delta(self, delta: dict[str, Any]) -> bytes:
        data = {"type": "content_block_delta", "index": self.index, "delta": delta}
        return event("content_block_delta", data)

    def _close(self) -> bytes:
        if self.block is None:
            return b""
        self.block = None
        return event("content_block_stop", {"type": "content_block_stop", "index": self.index})

    def end(self) -> bytes:
        self.ended = True
        usage = anthropic.usage_from_openai(self.usage)
        if self.usage is None:
            usage["input_tokens"] = self.estimate
        delta = {
            "type": "message_delta",
            "delta": {
                "stop_reason": anthropic.STOP_REASONS.get(self.stop or "stop", "end_turn"),
                "stop_sequence": None,
            },
            "usage": usage,
        }
        stop = {"type": "message_stop"}
        return self._close() + event("message_delta", delta) + event("message_stop", stop)


def _status(err: dict[str, Any]) -> int:
    code = err.get("code")
    if isinstance(code, int):
        return code
    return 502 if err.get("type") == "upstream_error" else 500


class Assembled:
    """A native Messages stream's answer, for the audit record."""

    def __init__(self) -> None:
        self.reader = Reader()
        self.blocks: dict[int, dict[str, Any]] = {}
        self.json: dict[int, str] = {}
        self.done = False
        self.error: dict[str, Any] | None = None
        self.raw_usage: dict[str, Any] = {}
        self.our_id = ""  # unused: Messages ids are the upstream's

    @property
    def usage(self) -> dict[str, Any] | None:
        return anthropic.usage_to_openai(self.raw_usage) if self.raw_usage else None

    def renamed(self, chunk: bytes) -> bytes:
        return chunk

    def feed(self, chunk: bytes) -> None:
        for _, data in self.reader.feed(chunk):
            if (ev := loads(data)) is not None:
                self._event(ev)

    def _event(self, ev: dict[str, Any]) -> None:
        kind, index = ev.get("type"), ev.get("index", 0)
        if kind == "message_start":
            self.raw_usage.update((ev.get("message") or {}).get("usage") or {})
        elif kind == "content_block_start" and isinstance(ev.get("content_block"), dict):
            self.blocks[index] = dict(ev["content_block"])
        elif kind == "content_block_delta":
            delta = ev.get("delta") or {}
            block = self.blocks.setdefault(index, {"type": "text", "text": ""})
            if delta.get("type") == "text_delta":
                block["text"] = block.get("text", "") + delta.get("text", "")
            elif delta.get("type") == "input_json_delta":
                self.json[index] = self.json.get(index, "") + delta.get("partial_json", "")
        elif kind == "message_delta":
            self.raw_usage.update({k: v for k, v in (ev.get("usage") or {}).items() if v})
        elif kind == "message_stop":
            self.done = True
        elif kind == "error":
            self.error = ev.get("error") if isinstance(ev.get("error"), dict) else {}

    def message(self) -> dict[str, Any]:
        blocks = []
        for i in sorted(self.blocks):
            block = self.blocks[i]
            if i in self.json:
                block = {**block, "input": _json(self.json[i])}
            blocks.append(block)
        return anthropic.neutral_answer({"content": blocks})


def _json(text: str) -> Any:
    try:
        return json.loads(text or "{}")
    except ValueError:
        return {"arguments": text}
