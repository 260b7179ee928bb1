"""`ctxproxy mcp`: a client on the official MCP SDK, over stdio, lists, searches and reads."""

from __future__ import annotations

import json
import sys
from contextlib import AsyncExitStack
from pathlib import Path

import httpx
import pytest
from fastapi.testclient import TestClient

from proxy.app import create_app
from proxy.settings import Settings

pytest.importorskip("mcp")
from mcp import ClientSession, StdioServerParameters  # noqa: E402
from mcp.client.stdio import stdio_client  # noqa: E402

CTXPROXY = str(Path(sys.executable).with_name("ctxproxy"))
SECRET_LINE = "DATABASE_URL=postgres://app@db.internal:5433/orders"


def seed(tmp_path: Path, keys: list[str] | None = None) -> Path:
    """Two sessions through the real app (a scripted upstream answers), one per key if keyed."""
    db = tmp_path / "db.sqlite"

    def upstream(request: httpx.Request) -> httpx.Response:
        answer = {"role": "assistant", "content": "Read it; the port is 5433."}
        return httpx.Response(200, json={"choices": [{"index": 0, "message": answer}]})

    settings = Settings(
        database_url=f"sqlite:///{db}",
        upstreams=[{"name": "local", "base_url": "http://up.test/v1", "context_window": 8192}],
        api_keys=keys or [],
        admin_key="admin-key" if keys else None,
    )
    app = create_app(settings, transport=httpx.MockTransport(upstream))
    config = tmp_path / "config.yaml"
    config.write_text(json.dumps(settings.model_dump(mode="json")))
    with TestClient(app, base_url="http://localhost") as client:
        for i, (session, key) in enumerate([("orders", "key-a"), ("billing", "key-b")]):
            call = {
                "id": f"c{i}",
                "type": "function",
                "function": {"name": "read", "arguments": "{}"},
            }
            messages = [
                {"role": "user", "content": f"Find the database settings of {session}."},
                {"role": "assistant", "content": None, "tool_calls": [call]},
                {"role": "tool", "tool_call_id": f"c{i}", "content": f"# .env\n{SECRET_LINE}\n"},
            ]
            headers = {"x-session-id": session}
            if keys:
                headers["authorization"] = f"Bearer {key}"
            r = client.post(
                "/v1/chat/completions", json={"model": "m", "messages": messages}, headers=headers
            )
            assert r.status_code == 200, r.text
    return config


class Client:
    """One `ctxproxy mcp` process and an MCP session with it, for several calls."""

    def __init__(self, config: Path, key: str | None = None) -> None:
        env = {"CTXPROXY_KEY": key} if key else {}
        self.params = StdioServerParameters(
            command=CTXPROXY, args=["mcp", "--config", str(config)], env=env
        )
        self.stack = AsyncExitStack()

    async def __aenter__(self) -> Client:
        read, write = await self.stack.enter_async_context(stdio_client(self.params))
        self.session = await self.stack.enter_async_context(ClientSession(read, write))
        await self.session.initialize()
        names = {t.name for t in (await self.session.list_tools()).tools}
        assert names >= {"list_sessions", "search_session", "read_exchange", "read_message"}
        return self

    async def __aexit__(self, *exc: object) -> None:
        await self.stack.aclose()

    async def call(self, tool: str, **arguments: object) -> tuple[bool, str]:
        result = await self.session.call_tool(tool, arguments)
        text = "".join(getattr(part, "text", "") for part in result.content)
        return bool(result.is_error), text


async def test_lists_searches_and_reads_a_stored_session(tmp_path: Path) -> None:
    config = seed(tmp_path)
    async with Client(config) as mcp:
        await _lists_searches_and_reads(mcp)


async def _lists_searches_and_reads(mcp: Client) -> None:
    error, listed = await mcp.call("list_sessions")
    assert not error and {s["id"] for s in json.loads(listed)["data"]} == {"orders", "billing"}
    error, found = await mcp.call("search_session", session_id="orders", query="DATABASE_URL")
    assert not error and SECRET_LINE in found
    error, exchange = await mcp.call("read_exchange", session_id="orders", seq=1)
    detail = json.loads(exchange)
    assert not error and detail["exchange"]["seq"] == 1
    assert detail["request"]["messages"][0]["content"] == "Find the database settings of orders."
    tool_hash = detail["compiled_hashes"][2]
    error, message = await mcp.call("read_message", ref=f"/messages/{tool_hash[:16]}")
    assert not error and json.loads(message)["message"]["content"] == f"# .env\n{SECRET_LINE}\n"
    error, missing = await mcp.call("read_exchange", session_id="nope", seq=1)
    assert error and "No session" in missing


async def test_a_client_key_sees_only_its_own_sessions(tmp_path: Path) -> None:
    config = seed(tmp_path, keys=["key-a", "key-b"])
    async with Client(config, "key-a") as mcp:
        error, listed = await mcp.call("list_sessions")
        ids = [s["id"] for s in json.loads(listed)["data"]]
        assert not error and len(ids) == 1 and ids[0].endswith(":orders")
    async with Client(config, "key-b") as mcp:
        error, text = await mcp.call("search_session", session_id=ids[0], query="DATABASE")
        assert error and SECRET_LINE not in text and "No session" in text
    async with Client(config, "admin-key") as mcp:
        error, admin = await mcp.call("list_sessions")
        assert not error and len(json.loads(admin)["data"]) == 2
