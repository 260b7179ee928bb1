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
from proxy.cli import mcpserver
from proxy.recall import refs
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


def seed_long(tmp_path: Path) -> tuple[Path, list[dict], dict]:
    """One session "gw" through /v1/compress: a long history of statements, which its view
    forgets; the stored exchange is several times the result limit."""
    db = tmp_path / "db.sqlite"
    settings = Settings(database_url=f"sqlite:///{db}", upstreams=[])
    config = tmp_path / "config.yaml"
    config.write_text(json.dumps(settings.model_dump(mode="json")))
    messages = [{"role": "system", "content": "You are a helpful assistant."}]
    for i in range(300):
        messages.append({"role": "user", "content": f"Item {i}: order #{1000 + i} " + "x" * 300})
        messages.append({"role": "assistant", "content": f"Noted {i}."})
    messages.append({"role": "user", "content": "What did order #1042 cost?"})
    app = create_app(settings, transport=httpx.MockTransport(lambda r: httpx.Response(500)))
    with TestClient(app, base_url="http://localhost") as client:
        body = {"messages": messages, "model": "m", "context_window": 8192}
        r = client.post("/v1/compress", json=body, headers={"x-session-id": "gw"})
        assert r.status_code == 200, r.text
    return config, messages, r.json()


async def test_read_message_gives_back_every_ref_a_view_names(tmp_path: Path) -> None:
    config, messages, out = seed_long(tmp_path)
    named = refs.named_in(json.dumps(out["messages"], ensure_ascii=False))
    span = next(r for r in named if r.startswith("history:"))
    first, last = refs.parse(span).first, refs.parse(span).last
    async with Client(config) as mcp:
        whole = await read_all(mcp, "read_message", ref=span, session_id="gw")
        one_error, one = await mcp.call("read_message", ref=f"history:{last}", session_id="gw")
        digest = json.loads(one)["messages"][0]["ref"]
        by_hash_error, by_hash = await mcp.call("read_message", ref=digest)
        no_session, said = await mcp.call("read_message", ref=span)
    assert not one_error and not by_hash_error
    got = json.loads(whole)["messages"]
    assert [m["position"] for m in got] == list(range(first, last + 1))
    assert [m["message"] for m in got] == messages[first : last + 1]
    assert json.loads(one)["message"] == json.loads(by_hash)["message"] == messages[last]
    assert no_session and "session" in said


async def test_results_and_errors_are_bounded_and_a_long_result_pages(tmp_path: Path) -> None:
    config, _, _ = seed_long(tmp_path)
    async with Client(config) as mcp:
        pages = await pages_of(mcp, "read_exchange", session_id="gw", seq=1)
        past = await mcp.call("read_exchange", session_id="gw", seq=1, page=len(pages) + 1)
        bad = [
            await mcp.call("read_exchange", session_id="s" * 2_000_000, seq=1),
            await mcp.call("read_message", ref="a" * 50_000),
            await mcp.call("read_message", ref="history:x", session_id="gw"),
            await mcp.call("list_sessions", offset=2**70),
            await mcp.call("list_sessions", limit=10**6),
            await mcp.call("read_exchange", session_id="gw", seq=0),
            await mcp.call("search_session", session_id="gw", query="q" * 5000),
        ]
    assert len(pages) >= 3
    assert all(len(p) <= mcpserver.RESULT_CHARS for p in pages)
    detail = json.loads(joined(pages))  # the pages make the whole answer
    assert detail["exchange"]["seq"] == 1 and len(detail["request"]["messages"]) == 602
    assert past[0] and "past the end" in past[1]
    for error, said in bad:
        assert error and len(said) < 2000, said[:300]
        assert "LIKE" not in said and "Error executing tool" in said
    assert "at most 200 characters" in bad[1][1] and "history:<n>" in bad[2][1]
    assert "less than or equal" in bad[3][1] and "less than or equal" in bad[4][1]


async def pages_of(mcp: Client, tool: str, **arguments: object) -> list[str]:
    """Every page of a tool's result, as its notes lead from one to the next."""
    pages: list[str] = []
    while not pages or "call again with page=" in pages[-1]:
        error, text = await mcp.call(tool, **arguments, page=len(pages) + 1)
        assert not error, text
        pages.append(text)
    return pages


def joined(pages: list[str]) -> str:
    if len(pages) == 1:
        return pages[0]
    return "".join(p[: p.rindex("\n[ctxproxy: page")] for p in pages)


async def read_all(mcp: Client, tool: str, **arguments: object) -> str:
    return joined(await pages_of(mcp, tool, **arguments))
