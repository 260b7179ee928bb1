"""Server-sent events for the converters: reading them as they pass, writing them, and the
assembly of an answer for the audit record while a native stream is relayed."""

from __future__ import annotations

import json
from collections.abc import AsyncIterator
from typing import Any, Protocol


def event(name: str, data: dict[str, Any]) -> bytes:
    return f"event: {name}\ndata: {json.dumps(data)}\n\n".encode()


class Reader:
    """Feed bytes; get back the (event name, data) of each event that ended."""

    def __init__(self) -> None:
        self._buffer = b""

    def feed(self, chunk: bytes) -> list[tuple[str | None, str]]:
        self._buffer += chunk.replace(b"\r\n", b"\n")
        *whole, self._buffer = self._buffer.split(b"\n\n")
        return [parsed for block in whole if (parsed := _parse(block)) is not None]

    def close(self) -> list[tuple[str | None, str]]:
        rest, self._buffer = self._buffer, b""
        parsed = _parse(rest)
        return [parsed] if parsed is not None else []


def _parse(block: bytes) -> tuple[str | None, str] | None:
    name, data = None, []
    for line in block.decode(errors="replace").split("\n"):
        field, _, value = line.partition(":")
        value = value[1:] if value.startswith(" ") else value
        if field == "event":
            name = value
        elif field == "data":
            data.append(value)
    return (name, "\n".join(data)) if data else None


def loads(data: str) -> dict[str, Any] | None:
    try:
        value = json.loads(data)
    except ValueError:
        return None
    return value if isinstance(value, dict) else None


class ChatTranslation:
    """A chat-completions stream read event by event and written as another API's events:
    subclasses say how it starts, what choice 0's deltas become, how it ends or fails."""

    ended = False
    usage: dict[str, Any] | None = None

    async def translate(self, chat: AsyncIterator[bytes]) -> AsyncIterator[bytes]:
        reader = Reader()
        yield self.start()
        async for chunk in chat:
            for _, data in reader.feed(chunk):
                if piece := self.data(data):
                    yield piece
        for _, data in reader.close():
            if piece := self.data(data):
                yield piece
        if not self.ended:
            yield self.end()

    def data(self, data: str) -> bytes:
        if self.ended:
            return b""
        if data.strip() == "[DONE]":
            return self.end()
        chunk = loads(data) or {}
        if isinstance(chunk.get("error"), dict):
            return self.fail(chunk["error"])
        if isinstance(chunk.get("usage"), dict):
            self.usage = chunk["usage"]
        return b"".join(
            self.choice(c)
            for c in chunk.get("choices") or []
            if isinstance(c, dict) and c.get("index", 0) == 0
        )

    def start(self) -> bytes:
        raise NotImplementedError

    def choice(self, choice: dict[str, Any]) -> bytes:
        raise NotImplementedError

    def end(self) -> bytes:
        raise NotImplementedError

    def fail(self, err: dict[str, Any]) -> bytes:
        raise NotImplementedError


class Assembler(Protocol):
    our_id: str  # the answer's id in ctxproxy's scheme, where the API's ids are ours
    done: bool
    error: dict[str, Any] | None

    @property
    def usage(self) -> dict[str, Any] | None: ...  # read only: the native events count it

    def feed(self, chunk: bytes) -> None: ...
    def message(self) -> dict[str, Any]: ...
    def renamed(self, chunk: bytes) -> bytes: ...
