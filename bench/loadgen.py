"""The load generator: raw HTTP/1.1 over keep-alive connections, a few microseconds a request,
so that what is measured is the proxies and not the client."""

from __future__ import annotations

import asyncio
import json
import time
from dataclasses import dataclass, field
from typing import Any

from bench.spawn import Server


class Conn:
    """One keep-alive HTTP/1.1 connection sending pre-built requests."""

    def __init__(self, port: int):
        self.port = port
        self.reader: asyncio.StreamReader | None = None
        self.writer: asyncio.StreamWriter | None = None
        self.headers: dict[bytes, bytes] = {}  # the last answer's, lower-cased

    async def _open(self) -> None:
        self.reader, self.writer = await asyncio.open_connection(
            "127.0.0.1", self.port, limit=1 << 24
        )

    async def close(self) -> None:
        if self.writer is not None:
            self.writer.close()
            try:
                await self.writer.wait_closed()
            except OSError:
                pass
            self.reader = self.writer = None

    async def send(self, request: bytes) -> tuple[int, float, float, bytes]:
        """(status, seconds to the first body byte, seconds to the end, body)."""
        if self.writer is None:
            await self._open()
        assert self.reader is not None and self.writer is not None
        t0 = time.perf_counter()
        self.writer.write(request)
        head = await self.reader.readuntil(b"\r\n\r\n")
        status = int(head.split(b" ", 2)[1])
        headers = {}
        for line in head.split(b"\r\n")[1:]:
            if b":" in line:
                k, v = line.split(b":", 1)
                headers[k.strip().lower()] = v.strip().lower()
        first = None
        parts: list[bytes] = []
        if b"content-length" in headers:
            body = await self.reader.readexactly(int(headers[b"content-length"]))
            first = time.perf_counter()
            parts.append(body)
        elif headers.get(b"transfer-encoding") == b"chunked":
            while True:
                size = int((await self.reader.readuntil(b"\r\n")).split(b";")[0], 16)
                if size == 0:
                    await self.reader.readuntil(b"\r\n")
                    break
                data = await self.reader.readexactly(size + 2)
                first = first or time.perf_counter()
                parts.append(data[:-2])
        else:
            data = await self.reader.read()
            first = time.perf_counter()
            parts.append(data)
            await self.close()
        end = time.perf_counter()
        self.headers = headers
        if headers.get(b"connection") == b"close":
            await self.close()
        return status, (first or end) - t0, end - t0, b"".join(parts)


def http_request(port: int, path: str, body: dict[str, Any], headers: dict[str, str]) -> bytes:
    data = json.dumps(body).encode()
    lines = [
        f"POST {path} HTTP/1.1",
        f"Host: 127.0.0.1:{port}",
        "Content-Type: application/json",
        "Accept: */*",
        f"Content-Length: {len(data)}",
        *(f"{k}: {v}" for k, v in headers.items()),
    ]
    return ("\r\n".join(lines) + "\r\n\r\n").encode() + data


@dataclass
class Target:
    """Where requests go: the upstream itself (direct) or a proxy in front of it."""

    name: str
    server: Server
    headers: dict[str, str] = field(default_factory=dict)
    path: str = "/v1/chat/completions"

    def request(self, body: dict[str, Any]) -> bytes:
        return http_request(self.server.port, self.path, body, self.headers)


class BenchError(RuntimeError):
    pass


async def sequential(
    port: int, request: bytes, n: int, budget_s: float
) -> list[tuple[float, float]]:
    """n requests one after another (fewer if budget_s runs out): (first byte, total) seconds."""
    conn, out = Conn(port), []
    stop = time.perf_counter() + budget_s
    try:
        for _ in range(n):
            status, first, total, body = await conn.send(request)
            if status != 200:
                raise BenchError(f"HTTP {status}: {body[:300]!r}")
            out.append((first, total))
            if time.perf_counter() > stop and len(out) >= 3:
                break
    finally:
        await conn.close()
    return out


async def throughput(port: int, request: bytes, concurrency: int, seconds: float) -> float:
    """Completed requests per second with `concurrency` clients, each on its own connection."""
    done = 0
    errors: list[str] = []
    stop = time.perf_counter() + seconds

    async def worker() -> None:
        nonlocal done
        conn = Conn(port)
        try:
            while time.perf_counter() < stop:
                status, _, _, body = await conn.send(request)
                if status != 200:
                    errors.append(f"HTTP {status}: {body[:200]!r}")
                    return
                done += 1
        finally:
            await conn.close()

    start = time.perf_counter()
    await asyncio.gather(*(worker() for _ in range(concurrency)))
    elapsed = time.perf_counter() - start
    if errors:
        raise BenchError(errors[0])
    return done / elapsed
