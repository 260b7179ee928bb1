"""Malformed and hostile HTTP/1.1 answers for the raw upstream: the model `fault:<name>` picks one.

Each fault writes its answer to the request; those that leave bytes behind (a late 408, a forged
second answer, a body past its length) keep the connection open and go on answering, so a client
that reuses the connection reads them as the next request's answer.
"""

from __future__ import annotations

import asyncio
import json
import socket
import struct
from collections.abc import Awaitable, Callable
from typing import Any

from proxy.testing.scripted import completion

Writer = asyncio.StreamWriter
Fault = Callable[[Writer, dict[str, Any]], Awaitable[bool]]


def last_user_text(body: dict[str, Any]) -> str:
    users = [m for m in body.get("messages", []) if m.get("role") == "user"]
    content = users[-1].get("content") if users else ""
    return content if isinstance(content, str) else json.dumps(content)


def echo(body: dict[str, Any]) -> bytes:
    """A chat completion that says which request it answers: `echo: <last user message>`."""
    return json.dumps(completion("raw", f"echo: {last_user_text(body)}", body)).encode()


FORGED = json.dumps(completion("raw", "echo: forged", {"messages": []})).encode()


def response(payload: bytes, status: bytes = b"200 OK", headers: bytes | None = None) -> bytes:
    if headers is None:
        headers = b"Content-Length: %d\r\n" % len(payload)
    return (
        b"HTTP/1.1 " + status + b"\r\nContent-Type: application/json\r\n" + headers + b"\r\n"
    ) + payload


FORGED_RESPONSE = response(FORGED)
LATE_408 = b"HTTP/1.1 408 Request Timeout\r\nContent-Length: 0\r\n\r\n"


async def later(w: Writer, data: bytes, delay: float = 0.05) -> None:
    await asyncio.sleep(delay)
    if not w.is_closing():
        w.write(data)


def reset(w: Writer) -> None:
    """Close with a TCP reset (SO_LINGER 0) rather than a FIN."""
    sock = w.get_extra_info("socket")
    if sock is not None:
        sock.setsockopt(socket.SOL_SOCKET, socket.SO_LINGER, struct.pack("ii", 1, 0))
    w.transport.abort()


def whole(data: Callable[[bytes], bytes], keep: bool = False) -> Fault:
    """A fault that writes `data(echo)` at once, then keeps the connection or closes it."""

    async def fault(w: Writer, body: dict[str, Any]) -> bool:
        w.write(data(echo(body)))
        await w.drain()
        return keep

    return fault


def then_later(junk: bytes) -> Fault:
    """A clean answer, then unsolicited bytes a moment later on the same connection."""

    async def fault(w: Writer, body: dict[str, Any]) -> bool:
        w.write(response(echo(body)))
        await w.drain()
        asyncio.get_running_loop().create_task(later(w, junk))
        return True

    return fault


def stalled(data: Callable[[bytes], bytes]) -> Fault:
    async def fault(w: Writer, body: dict[str, Any]) -> bool:
        w.write(data(echo(body)))
        await w.drain()
        await asyncio.sleep(30)
        return False

    return fault


def reset_after(data: Callable[[bytes], bytes]) -> Fault:
    async def fault(w: Writer, body: dict[str, Any]) -> bool:
        w.write(data(echo(body)))
        await w.drain()
        await asyncio.sleep(0.02)
        reset(w)
        return False

    return fault


def chunked(*chunks: bytes, te: bytes = b"chunked") -> Callable[[bytes], bytes]:
    return lambda p: (
        response(b"", headers=b"Transfer-Encoding: " + te + b"\r\n")
        + b"".join(c.replace(b"{p}", p).replace(b"{n}", b"%x" % len(p)) for c in chunks)
    )


def with_header(line: bytes) -> Callable[[bytes], bytes]:
    return lambda p: response(p, headers=b"Content-Length: %d\r\n" % len(p) + line)


def status(code: bytes) -> Callable[[bytes], bytes]:
    return lambda p: response(p, status=code)


def events(body: dict[str, Any]) -> bytes:
    """The echo as a complete event stream."""
    delta = {"role": "assistant", "content": f"echo: {last_user_text(body)}"}
    data = {
        "object": "chat.completion.chunk",
        "model": "raw",
        "choices": [{"index": 0, "delta": delta, "finish_reason": "stop"}],
    }
    return b"data: " + json.dumps(data).encode() + b"\n\ndata: [DONE]\n\n"


async def events_then_forged(w: Writer, body: dict[str, Any]) -> bool:
    """A clean event stream with its length, and a forged answer in the same write."""
    payload = events(body)
    head = b"HTTP/1.1 200 OK\r\nContent-Type: text/event-stream\r\n"
    w.write(head + b"Content-Length: %d\r\n\r\n" % len(payload) + payload + FORGED_RESPONSE)
    await w.drain()
    return True


# name: (fault, status the client gets for the faulted request)
FAULTS: dict[str, tuple[Fault, int]] = {
    "late-408": (then_later(LATE_408), 200),
    "forged-answer-later": (then_later(FORGED_RESPONSE), 200),
    "junk-later": (then_later(b"\x00\xffgarbage\r\n\r\n"), 200),
    "forged-answer-after-body": (whole(lambda p: response(p) + FORGED_RESPONSE, True), 502),
    "body-past-length": (whole(lambda p: response(p) + b"trailing junk", True), 502),
    "length-short-of-body": (
        whole(lambda p: response(p, headers=b"Content-Length: %d\r\n" % (len(p) - 9)), True),
        502,
    ),
    "length-past-body-then-close": (
        whole(lambda p: response(p, headers=b"Content-Length: %d\r\n" % (len(p) + 50))),
        502,
    ),
    "two-differing-lengths": (
        whole(
            lambda p: response(
                p + FORGED_RESPONSE,
                headers=b"Content-Length: %d\r\nContent-Length: %d\r\n"
                % (len(p), len(p) + len(FORGED_RESPONSE)),
            ),
            True,
        ),
        502,
    ),
    "length-not-a-number": (whole(lambda p: response(p, headers=b"Content-Length: 1x\r\n")), 502),
    "length-negative": (whole(lambda p: response(p, headers=b"Content-Length: -5\r\n")), 502),
    "status-999": (whole(status(b"999 Odd"), True), 502),
    "status-2000": (whole(status(b"2000 Odd"), True), 502),
    "status-101": (whole(status(b"101 Switching Protocols"), True), 502),
    "status-102-only": (whole(lambda p: b"HTTP/1.1 102 Processing\r\n\r\n"), 502),
    "status-line-garbage": (whole(lambda p: b"HTTX/1.1 200 OK\r\n\r\n" + p), 502),
    "status-code-letters": (whole(status(b"2x0 OK")), 502),
    "binary-garbage": (whole(lambda p: bytes(range(256)) * 4), 502),
    "header-bare-cr": (whole(with_header(b"X-Odd: a\rb\r\n"), True), 502),
    "header-nul": (whole(with_header(b"X-Odd: a\x00b\r\n"), True), 502),
    "header-bare-lf-in-name": (whole(with_header(b"X-O\ndd: ab\r\n"), True), 502),
    "header-no-colon": (whole(with_header(b"X-Odd ab\r\n"), True), 502),
    "header-space-before-colon": (whole(with_header(b"X-Odd : ab\r\n"), True), 502),
    "header-too-large": (whole(with_header(b"X-Big: " + b"a" * 200_000 + b"\r\n")), 502),
    "head-cut": (whole(lambda p: b"HTTP/1.1 200 OK\r\nContent-Le"), 502),
    "closed-before-answer": (whole(lambda p: b""), 502),
    "reset-before-answer": (reset_after(lambda p: b""), 502),
    "reset-mid-body": (reset_after(lambda p: response(p)[:-20]), 502),
    "stall-before-head": (stalled(lambda p: b""), 504),
    "stall-mid-body": (stalled(lambda p: response(p)[:-20]), 504),
    "chunk-size-garbage": (whole(chunked(b"zz\r\n{p}\r\n0\r\n\r\n"), True), 502),
    "chunk-cut": (whole(chunked(b"{n}\r\n{p}")), 502),
    "chunk-no-crlf": (whole(chunked(b"{n}\r\n{p}XX0\r\n\r\n"), True), 502),
    "chunked-and-length": (
        whole(
            lambda p: response(
                b"%x\r\n" % len(p) + p + b"\r\n0\r\n\r\n",
                headers=b"Transfer-Encoding: chunked\r\nContent-Length: 3\r\n",
            ),
            True,
        ),
        502,
    ),
    "transfer-encoding-gzip-chunked": (
        whole(chunked(b"{n}\r\n{p}\r\n0\r\n\r\n", te=b"gzip, chunked"), True),
        502,
    ),
    "transfer-encoding-twice": (
        whole(
            chunked(b"{n}\r\n{p}\r\n0\r\n\r\n", te=b"chunked\r\nTransfer-Encoding: chunked"), True
        ),
        502,
    ),
    "events-then-forged-answer": (events_then_forged, 502),  # 200 + SSE error when streamed
    "forged-answer-after-last-chunk": (
        whole(chunked(b"{n}\r\n{p}\r\n0\r\n\r\n", FORGED_RESPONSE), True),
        502,
    ),
}


def responses_events(text: str) -> list[bytes]:
    """A native Responses stream's events up to (not including) its `response.completed`."""
    response = {"id": "resp_up1", "object": "response", "status": "in_progress", "output": []}
    item = {"type": "message", "id": "msg_up1", "role": "assistant", "content": []}
    data: list[tuple[str, dict[str, Any]]] = [
        ("response.created", {"response": response}),
        ("response.output_item.added", {"output_index": 0, "item": item}),
        ("response.output_text.delta", {"output_index": 0, "item_id": "msg_up1", "delta": text}),
    ]
    return [
        b"event: %s\ndata: %s\n\n" % (k.encode(), json.dumps({"type": k, **d}).encode())
        for k, d in data
    ]


def _sse_head(length: int | None = None) -> bytes:
    size = b"Content-Length: %d\r\n" % length if length is not None else b"Connection: close\r\n"
    return b"HTTP/1.1 200 OK\r\nContent-Type: text/event-stream\r\n" + size + b"\r\n"


# A Responses stream the upstream cuts short (model `responses:<name>`): each writes its bytes and
# closes the connection. The text so far is "partial text".
RESPONSES_CUTS: dict[str, Callable[[], bytes]] = {
    # closed mid-way: whole events, then half of one
    "closed-midway": lambda: (
        _sse_head()
        + b"".join(responses_events("partial text"))
        + b'event: response.output_text.delta\ndata: {"type": "respo'
    ),
    # every event whole, the stream ended cleanly, but no response.completed
    "no-completed": lambda: (lambda p: _sse_head(len(p)) + p)(
        b"".join(responses_events("partial text"))
    ),
    # a chat completions stream where a Responses one was asked for
    "not-responses": lambda: (lambda p: _sse_head(len(p)) + p)(
        b'data: {"object": "chat.completion.chunk", "choices": [{"index": 0, "delta": '
        b'{"role": "assistant", "content": "partial text"}}]}\n\ndata: [DONE]\n\n'
    ),
}
