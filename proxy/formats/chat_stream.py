"""Reading an OpenAI chat stream as it passes: the answer it assembles and the usage it reports."""

from __future__ import annotations

import json
from typing import Any

MAX_CHOICES = 128  # `n` is the client's: only this many answers are assembled


class StreamAssembler:
    """Feed raw SSE bytes; read back the assistant message, usage and whether [DONE] came."""

    def __init__(self) -> None:
        self._buffer = b""
        self.content: list[str] = []
        self.tool_calls: dict[int, dict[str, Any]] = {}
        self.role = "assistant"
        self.finish_reason: str | None = None
        self.usage: dict[str, Any] | None = None
        self.timings: dict[str, Any] | None = None
        self.error: dict[str, Any] | None = None
        self.done = False
        self.malformed: bytes | None = None  # the first line that is not OpenAI's SSE; then stop
        self.others: dict[int, StreamAssembler] = {}  # choices 1, 2, … when the request set n

    def feed(self, chunk: bytes) -> None:
        if self.malformed is not None:
            return
        self._buffer += chunk
        *lines, self._buffer = self._buffer.split(b"\n")
        for line in lines:
            if line.startswith(b"data:"):
                self._event(line, line[5:].strip())
            elif not _is_sse_line(line):
                self.malformed = line
            if self.malformed is not None:
                return

    def _event(self, line: bytes, data: bytes) -> None:
        if data == b"[DONE]":
            self.done = True
            return
        try:
            event = json.loads(data) if data else {}
        except ValueError:
            event = None
        if not isinstance(event, dict):
            self.malformed = line
            return
        if isinstance(event.get("error"), dict):
            self.error = event["error"]
        if isinstance(event.get("usage"), dict):
            self.usage = event["usage"]
        if isinstance(event.get("timings"), dict):  # llama.cpp's: its prompt cache (cache_n)
            self.timings = event["timings"]
        for choice in event.get("choices") or []:
            index = choice.get("index", 0) if isinstance(choice, dict) else None
            if index == 0:
                self._choice(choice)
            elif isinstance(index, int) and 0 < index < MAX_CHOICES:
                self.others.setdefault(index, StreamAssembler())._choice(choice)

    def _choice(self, choice: dict[str, Any]) -> None:
        self.finish_reason = choice.get("finish_reason") or self.finish_reason
        delta = choice.get("delta") or {}
        self.role = delta.get("role") or self.role
        if isinstance(delta.get("content"), str):
            self.content.append(delta["content"])
        for call in delta.get("tool_calls") or []:
            self._tool_delta(call)

    def _tool_delta(self, delta: dict[str, Any]) -> None:
        slot = self.tool_calls.setdefault(
            int(delta.get("index", 0)),
            {"id": "", "type": "function", "function": {"name": "", "arguments": ""}},
        )
        slot["id"] = delta.get("id") or slot["id"]
        slot["type"] = delta.get("type") or slot["type"]
        fn = delta.get("function") or {}
        slot["function"]["name"] += fn.get("name") or ""
        slot["function"]["arguments"] += fn.get("arguments") or ""

    def other_messages(self) -> list[dict[str, Any]] | None:
        """The answers of choices 1, 2, … in order, or None when there was only one."""
        return [self.others[i].message() for i in sorted(self.others)] or None

    def message(self) -> dict[str, Any]:
        msg: dict[str, Any] = {"role": self.role, "content": "".join(self.content) or None}
        if self.tool_calls:
            msg["tool_calls"] = [self.tool_calls[i] for i in sorted(self.tool_calls)]
        return msg


_FIELDS = (b"data", b"event", b"id", b"retry")


def _is_sse_line(line: bytes) -> bool:
    """Blank, a comment, a bare field name or `name: value` (unknown names are SSE too, and
    llama.cpp sends `error: {...}`); not a stray text line such as an HTML error page."""
    line = line.rstrip(b"\r")
    return not line or b":" in line or line in _FIELDS
