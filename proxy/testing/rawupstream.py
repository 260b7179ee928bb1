"""A hand-written HTTP/1.1 upstream for faults a framework will not produce: bodies cut short,
answers stalled after their headers, a byte a second, headers no proxy should pass on.

The request body's `model` picks the behaviour (see ANSWERS; `fault:<name>` picks one of
proxy/testing/rawfaults.py's, `responses:<name>` one of its cut Responses streams, `raw-echo`
answers with the last user message); any other model gets a valid chat completion (an event
stream when the request asks for one).
"""

from __future__ import annotations

import asyncio
import json
import random
import select
import threading
from typing import Any

from proxy.testing.rawfaults import FAULTS, RESPONSES_CUTS, echo, response
from proxy.testing.scripted import chunk, completion, sse

OK = json.dumps(completion("m", "fine", {"messages": []})).encode()
_TWO = completion("m", "first", {"messages": []})
_TWO["choices"].append(
    {"index": 1, "finish_reason": "stop", "message": {"role": "assistant", "content": "second"}}
)
TWO = json.dumps(_TWO).encode()
TWO_EVENTS = (
    b"".join(
        sse(
            {
                **chunk("m", {"role": "assistant", "content": text}),
                "choices": [
                    {
                        "index": i,
                        "delta": {"role": "assistant", "content": text},
                        "finish_reason": None,
                    }
                ],
            }
        )
        for i, text in ((0, "first"), (1, "second"), (0, " one"), (1, " two"))
    )
    + b"data: [DONE]\n\n"
)


def head(status: int, ctype: str, length: int | None, extra: str = "") -> bytes:
    lines = [f"HTTP/1.1 {status} X", f"Content-Type: {ctype}"]
    lines.append(f"Content-Length: {length}" if length is not None else "Connection: close")
    return ("\r\n".join(lines) + "\r\n" + extra + "\r\n").encode()


class RawUpstream:
    def __init__(self, port: int = 0) -> None:
        self.loop = asyncio.new_event_loop()
        self.port = port
        self.connections = 0  # open right now
        self.requests: list[dict[str, Any]] = []
        self.strays = 0  # unsolicited copies written so far (models `stray-copy`, `spray`)
        # ...of which after the connection's next request had arrived: no client can tell that
        # copy from the answer to the request it has just sent (model `stray-stats` tells both)
        self.strays_after_next = 0
        self.late = threading.Event()  # set when a late copy or close (`close-later`) is done
        self._started = threading.Event()
        self.thread = threading.Thread(target=self._run, daemon=True)

    @property
    def url(self) -> str:
        return f"http://127.0.0.1:{self.port}/v1"

    def __enter__(self) -> RawUpstream:
        self.thread.start()
        assert self._started.wait(10)
        return self

    def __exit__(self, *exc: object) -> None:
        self.loop.call_soon_threadsafe(self.loop.stop)
        self.thread.join(timeout=5)

    def _run(self) -> None:
        asyncio.set_event_loop(self.loop)
        server = self.loop.run_until_complete(
            asyncio.start_server(self._serve, "127.0.0.1", self.port, backlog=1024)
        )
        self.port = server.sockets[0].getsockname()[1]
        self._started.set()
        self.loop.run_forever()
        server.close()
        tasks = asyncio.all_tasks(self.loop)
        for task in tasks:
            task.cancel()
        self.loop.run_until_complete(asyncio.gather(*tasks, return_exceptions=True))
        self.loop.close()

    async def _serve(self, reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        self.connections += 1
        writer.reader = reader  # type: ignore[attr-defined]
        try:
            while True:
                request_head = await reader.readuntil(b"\r\n\r\n")
                writer.served = getattr(writer, "served", 0) + 1  # type: ignore[attr-defined]
                length = 0
                for line in request_head.decode().split("\r\n"):
                    name, _, value = line.partition(":")
                    if name.lower() == "content-length":
                        length = int(value)
                body = json.loads(await reader.readexactly(length)) if length else {}
                self.requests.append(body)
                if not await self._answer(body, writer):
                    return
        except (asyncio.IncompleteReadError, ConnectionError, asyncio.CancelledError):
            pass
        finally:
            self.connections -= 1
            writer.close()

    async def _answer(self, body: dict[str, Any], w: asyncio.StreamWriter) -> bool:
        """Write one answer; False once the connection is to be dropped."""
        model, stream = body.get("model", ""), bool(body.get("stream"))
        if model.startswith("fault:"):
            return await FAULTS[model.removeprefix("fault:")][0](w, body)
        if model.startswith("responses:"):
            w.write(RESPONSES_CUTS[model.removeprefix("responses:")]())
            await w.drain()
            return False
        if model == "raw-echo":
            w.write(response(echo(body)))
        elif model == "close-later":  # a clean answer, then the idle connection closed
            w.write(response(echo(body)))
            asyncio.get_running_loop().call_later(0.01, self._close, w)
        elif model == "drop-next":  # the first request on a connection answered; the next read,
            if getattr(w, "served", 0) > 1:  # then the connection closed (its idle timeout ran
                return False  # out as the request came in)
            w.write(response(echo(body)))
        elif model in ("stray-copy", "spray"):
            # A clean answer, then (always, or half the time) an unsolicited copy of it on the
            # same keep-alive connection: whoever reads it next got someone else's answer.
            answer = response(echo(body))
            w.write(answer)
            if model == "stray-copy" or random.random() < 0.5:
                delay = 0.01 if model == "stray-copy" else random.uniform(0, 0.003)
                served = getattr(w, "served", 0)
                asyncio.get_running_loop().call_later(delay, self._stray, w, answer, served)
        elif model == "stray-stats":
            stats = json.dumps({"strays": self.strays, "after_next": self.strays_after_next})
            w.write(response(echo({"messages": [{"role": "user", "content": stats}]})))
        elif model == "cut-json":
            w.write(head(200, "application/json", 500) + OK[:20])
        elif model == "cut-error":
            w.write(head(500, "application/json", 500) + b'{"error": {"mess')
        elif model in ("stall-error", "stall-json"):
            w.write(head(500 if model == "stall-error" else 200, "application/json", 100))
            await w.drain()
            await asyncio.sleep(3600)
        elif model == "hang":
            await asyncio.sleep(3600)
        elif model == "trickle":  # a valid answer, one byte a second
            w.write(head(200, "application/json", len(OK)))
            for i in range(len(OK)):
                w.write(OK[i : i + 1])
                await w.drain()
                await asyncio.sleep(1)
            return True
        elif model == "comments":  # an event stream of keep-alive comments only, forever
            w.write(head(200, "text/event-stream", None))
            while True:
                w.write(b": ping\n\n")
                await w.drain()
                await asyncio.sleep(0.05)
        elif model == "no-done":  # a stream that ends cleanly but without [DONE]
            events = sse(chunk(model, {"role": "assistant", "content": "half"}))
            w.write(head(200, "text/event-stream", len(events)) + events)
        elif model == "two-choices":
            payload, ctype = (
                (TWO_EVENTS, "text/event-stream") if stream else (TWO, "application/json")
            )
            w.write(head(200, ctype, len(payload)) + payload)
        elif model in ANSWERS:
            status, ctype, payload, extra = ANSWERS[model]
            w.write(head(status, ctype, len(payload), extra) + payload)
        elif stream:
            events = sse(chunk(model, {"role": "assistant", "content": "fine"}))
            events += sse(chunk(model, {}, finish="stop")) + b"data: [DONE]\n\n"
            w.write(head(200, "text/event-stream", len(events)) + events)
        else:
            w.write(head(200, "application/json", len(OK)) + OK)
        await w.drain()
        return model not in ("cut-json", "cut-error")

    def _stray(self, w: asyncio.StreamWriter, answer: bytes, served: int) -> None:
        if not w.is_closing():
            w.write(answer)
            self.strays += 1
            self.strays_after_next += getattr(w, "served", 0) > served or next_arrived(w)
            self.late.set()

    def _close(self, w: asyncio.StreamWriter) -> None:
        w.close()
        self.late.set()


def next_arrived(w: asyncio.StreamWriter) -> bool:
    """Bytes of the connection's next request have reached us: read, or still on the socket."""
    sock = w.get_extra_info("socket")
    on_socket = sock is not None and bool(select.select([sock.fileno()], [], [], 0)[0])
    return on_socket or bool(getattr(w, "reader")._buffer)  # noqa: B009


LEAKY = (
    "Set-Cookie: session=upstream-secret; Path=/\r\nX-Internal-Token: upstream-secret\r\n"
    "Keep-Alive: timeout=5\r\nProxy-Authenticate: Basic\r\nX-Ctxproxy-Session: forged\r\n"
    "Retry-After: 3\r\nX-Request-Id: req-42\r\n"
)
ANSWERS: dict[str, tuple[int, str, bytes, str]] = {
    "html": (200, "text/html", b"<html><body>It works!</body></html>", ""),
    "array": (200, "application/json", b'[{"choices": []}]', ""),
    "wrong-shape": (200, "application/json", b'{"result": "fine"}', ""),
    "no-choices": (200, "application/json", b'{"object": "chat.completion", "choices": []}', ""),
    "json-to-stream": (200, "application/json", OK, ""),
    "leaky": (200, "application/json", OK, LEAKY),
}
