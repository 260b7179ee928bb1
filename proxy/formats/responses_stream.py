"""OpenAI Responses streams: a chat-completions stream translated into Responses events, and a
native Responses stream read as it passes so the answer can be recorded."""

from __future__ import annotations

import json
import uuid
from collections.abc import AsyncIterator
from typing import Any

from proxy.errors import ProxyError
from proxy.formats import responses, toolnames
from proxy.formats.events import ChatTranslation, Reader, event, loads
from proxy.formats.groups import Conversion
from proxy.formats.reasoning import reasoning_item, reasoning_of


def error_event(exc: ProxyError) -> bytes:
    data = {"type": "error", "code": exc.code, "message": exc.message, "param": exc.param}
    return event("error", {**data, "sequence_number": 0})


async def translate(
    chat: AsyncIterator[bytes], model: str, estimate: int, conversion: Conversion
) -> AsyncIterator[bytes]:
    """Responses events for the chat stream `chat` (as proxy/exchange/relay.py yields it,
    recorded there)."""
    translation = _Translation(responses.skeleton(conversion, model, "in_progress"))
    translation.names = toolnames.names_of(conversion.raw.get("tools"))
    async for piece in translation.translate(chat):
        yield piece


class _Translation(ChatTranslation):
    def __init__(self, response: dict[str, Any]) -> None:
        self.response = response
        self.seq = 0
        self.items: list[dict[str, Any]] = []
        self.open: str | None = None  # "reasoning", "text", or "tool:<n>" (chat's call index n)
        self.finish: str | None = None
        self.usage: dict[str, Any] | None = None
        self.ended = False
        self.names = toolnames.Names()  # chat names back to the client's tools
        self.custom: dict[int, str] = {}  # a custom tool call's arguments, by output index

    def emit(self, kind: str, **data: Any) -> bytes:
        self.seq += 1
        return event(kind, {"type": kind, "sequence_number": self.seq, **data})

    def start(self) -> bytes:
        return self.emit("response.created", response=self.response) + self.emit(
            "response.in_progress", response=self.response
        )

    def choice(self, choice: dict[str, Any]) -> bytes:
        self.finish = choice.get("finish_reason") or self.finish
        delta, out = choice.get("delta") or {}, b""
        if thought := reasoning_of(delta):
            out += self._reasoning(thought)
        if isinstance(delta.get("content"), str) and delta["content"]:
            if self.open != "text":
                out += self._add("text", _message_item())
                part = {"type": "output_text", "text": "", "annotations": []}
                out += self._at("response.content_part.added", content_index=0, part=part)
            self.items[-1]["content"][0]["text"] += delta["content"]
            out += self._at(
                "response.output_text.delta", content_index=0, delta=delta["content"], logprobs=[]
            )
        for call in delta.get("tool_calls") or []:
            out += self._tool(call)
        return out

    def _reasoning(self, text: str) -> bytes:
        out = b""
        if self.open != "reasoning":
            out += self._add("reasoning", reasoning_item("", "in_progress"))
        part = self.items[-1]["content"][0]
        part["text"] += text
        return out + self._at("response.reasoning_text.delta", content_index=0, delta=text)

    def _tool(self, call: dict[str, Any]) -> bytes:
        out, fn = b"", call.get("function") or {}
        name = f"tool:{call.get('index', 0)}"
        if self.open != name:
            chat = {"id": call.get("id") or "call_" + uuid.uuid4().hex[:24], "function": fn}
            item = toolnames.call_item(chat, self.names, "fc_" + uuid.uuid4().hex[:24])
            item.update(arguments="", status="in_progress")
            if item["type"] == "custom_tool_call":
                item = {k: v for k, v in item.items() if k != "arguments"}
                self.custom[len(self.items)] = ""
            out += self._add(name, item)
        if fn.get("arguments") and len(self.items) - 1 in self.custom:
            self.custom[len(self.items) - 1] += fn["arguments"]  # free text once whole
        elif fn.get("arguments"):
            self.items[-1]["arguments"] += fn["arguments"]
            out += self._at("response.function_call_arguments.delta", delta=fn["arguments"])
        return out

    def _at(self, kind: str, **data: Any) -> bytes:
        item = self.items[-1]
        return self.emit(kind, item_id=item["id"], output_index=len(self.items) - 1, **data)

    def _add(self, name: str, item: dict[str, Any]) -> bytes:
        out = self._close()
        self.items.append(item)
        self.open = name
        return out + self.emit(
            "response.output_item.added", output_index=len(self.items) - 1, item=dict(item)
        )

    def _close(self) -> bytes:
        if self.open is None:
            return b""
        item, out = self.items[-1], b""
        if item["type"] == "message":
            part = item["content"][0]
            out += self._at("response.output_text.done", content_index=0, text=part["text"])
            out += self._at("response.content_part.done", content_index=0, part=part)
        elif item["type"] == "reasoning":
            text = item["content"][0]["text"]
            out += self._at("response.reasoning_text.done", content_index=0, text=text)
        elif item["type"] == "custom_tool_call":
            item["input"] = toolnames.custom_input(self.custom[len(self.items) - 1])
            out += self._at("response.custom_tool_call_input.delta", delta=item["input"])
            out += self._at("response.custom_tool_call_input.done", input=item["input"])
        else:
            out += self._at("response.function_call_arguments.done", arguments=item["arguments"])
        item["status"] = "completed"
        self.open = None
        index = len(self.items) - 1
        return out + self.emit("response.output_item.done", output_index=index, item=item)

    def end(self) -> bytes:
        self.ended = True
        out = self._close()
        final = responses.finished(self.response, self.finish, self.usage, self.items)
        kind = "response.completed" if final["status"] == "completed" else "response.incomplete"
        return out + self.emit(kind, response=final)

    def fail(self, err: dict[str, Any]) -> bytes:
        self.ended = True
        message = str(err.get("message", err))
        out = self.emit("error", code=err.get("code"), message=message, param=err.get("param"))
        failed = {
            **self.response,
            "status": "failed",
            "output": self.items,
            "error": {"code": str(err.get("code") or "server_error"), "message": message},
        }
        return out + self.emit("response.failed", response=failed)


def _message_item() -> dict[str, Any]:
    return {
        "type": "message",
        "id": "msg_" + uuid.uuid4().hex[:24],
        "status": "in_progress",
        "role": "assistant",
        "content": [{"type": "output_text", "text": "", "annotations": []}],
    }


class Assembled:
    """A native Responses stream's answer, for the audit record: its final response event, or
    the text streamed so far when the stream ended without one."""

    def __init__(self) -> None:
        self.reader = Reader()
        self.final: dict[str, Any] = {}
        self.text: list[str] = []  # output_text deltas, for an answer cut before its end
        self.done = False
        self.error: dict[str, Any] | None = None
        self.our_id = ""  # the id the answer gets instead of the upstream's, when set
        self.theirs = ""

    @property
    def usage(self) -> dict[str, Any] | None:
        return responses.usage_to_openai(self.final.get("usage"))

    def renamed(self, chunk: bytes) -> bytes:
        if not (self.our_id and self.theirs):
            return chunk
        return chunk.replace(json.dumps(self.theirs).encode(), json.dumps(self.our_id).encode())

    def feed(self, chunk: bytes) -> None:
        for _, data in self.reader.feed(chunk):
            ev = loads(data) or {}
            kind = ev.get("type")
            if kind == "response.created" and isinstance(ev.get("response"), dict):
                self.theirs = str(ev["response"].get("id") or "")
            elif kind == "response.output_text.delta" and isinstance(ev.get("delta"), str):
                self.text.append(ev["delta"])
            if kind in ("response.completed", "response.incomplete", "response.failed"):
                self.final = ev.get("response") or {}
                self.done = True
                if kind == "response.failed":
                    self.error = self.final.get("error") or {"message": "response failed"}
            elif kind == "error":
                self.error = {k: ev.get(k) for k in ("code", "message", "param")}

    def message(self) -> dict[str, Any]:
        """The answer as recorded; never raises: the record is written as the stream ends."""
        if self.final.get("output"):
            try:
                return responses.neutral_answer(self.final)
            except ProxyError:  # an output item ctxproxy cannot read: keep its text
                pass
        return {"role": "assistant", "content": "".join(self.text)}
