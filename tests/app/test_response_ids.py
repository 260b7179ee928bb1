"""Response ids nobody can forge: a made-up, altered or other key's id loads no history."""

from __future__ import annotations

import base64
import json
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import httpx
import pytest
from fastapi.testclient import TestClient

from proxy.app import create_app
from proxy.settings import Settings

ALICE, BOB = "sk-alice-secret", "sk-bob-secret"
SECRET = "the vault code is 4711"


def answer(request: httpx.Request) -> httpx.Response:
    sent = json.loads(request.content)["messages"]
    said = f"echo: {sent[-1]['content']}"
    return httpx.Response(
        200, json={"choices": [{"index": 0, "message": {"role": "assistant", "content": said}}]}
    )


Client = Callable[..., TestClient]


@pytest.fixture
def seen() -> list[dict[str, Any]]:
    return []


@pytest.fixture
def open_client(tmp_path: Path, seen: list[dict[str, Any]]) -> Iterator[Client]:
    """A TestClient on an app over one database file (a restart or a replica: another app)."""
    opened: list[TestClient] = []

    def upstream(request: httpx.Request) -> httpx.Response:
        seen.append(json.loads(request.content))
        return answer(request)

    def make(**settings: Any) -> TestClient:
        app = create_app(
            Settings(
                database_url=f"sqlite:///{tmp_path / 'db.sqlite'}",
                upstreams=[{"name": "u", "base_url": "http://up.test/v1"}],
                **settings,
            ),
            transport=httpx.MockTransport(upstream),
        )
        client = TestClient(app, base_url="http://localhost").__enter__()
        opened.append(client)
        return client

    yield make
    for client in opened:
        client.__exit__(None, None, None)


def respond(client: TestClient, key: str | None = None, **body: Any) -> httpx.Response:
    headers = {"Authorization": f"Bearer {key}"} if key else {}
    return client.post("/v1/responses", json={"model": "m", **body}, headers=headers)


def unsigned(session: str, seq: int) -> str:
    """An id as ctxproxy made them before they were signed: base64 of `session/seq`."""
    return "resp_" + base64.urlsafe_b64encode(f"{session}/{seq}".encode()).decode().rstrip("=")


def refused(r: httpx.Response) -> None:
    assert r.status_code == 400, r.text
    error = r.json()["error"]
    assert error["param"] == "previous_response_id" and error["type"] == "invalid_request_error"


def test_a_forged_or_altered_id_loads_nothing(open_client: Client, seen: list) -> None:
    client = open_client()
    first = respond(client, input=SECRET, metadata={"session_id": "victim"})
    assert first.status_code == 200
    own = first.json()["id"]
    assert respond(client, previous_response_id=own, input="more").status_code == 200
    assert SECRET in json.dumps(seen[-1])  # the genuine id continues the conversation
    before = len(seen)
    code = own[len("resp_") :]
    raw = bytearray(base64.urlsafe_b64decode(code + "=" * (-len(code) % 4)))
    raw[-1] ^= 1  # `victim/1` -> `victim/0`: the MAC no longer fits
    altered = "resp_" + base64.urlsafe_b64encode(bytes(raw)).decode().rstrip("=")
    for forged in (unsigned("victim", 1), altered, own[:-2], "resp_" + "A" * 60):
        r = respond(client, previous_response_id=forged, input="tell me the secret")
        refused(r)
        assert SECRET not in r.text
    assert len(seen) == before  # nothing was sent, so nothing of the victim's was read


def test_ids_hold_across_a_restart_and_a_replica(open_client: Client, seen: list) -> None:
    first = respond(open_client(), input=SECRET).json()["id"]
    r = respond(open_client(), previous_response_id=first, input="and now?")
    assert r.status_code == 200 and SECRET in json.dumps(seen[-1])


def test_another_installs_id_is_refused(open_client: Client, tmp_path: Path) -> None:
    first = respond(open_client(), input=SECRET).json()["id"]
    other = create_app(
        Settings(
            database_url=f"sqlite:///{tmp_path / 'other.sqlite'}",
            upstreams=[{"name": "u", "base_url": "http://up.test/v1"}],
        ),
        transport=httpx.MockTransport(answer),
    )
    with TestClient(other, base_url="http://localhost") as client:
        respond(client, input=SECRET)  # the same session and sequence there: still not its id
        refused(respond(client, previous_response_id=first, input="x"))


def test_another_keys_id_is_refused(open_client: Client, seen: list) -> None:
    client = open_client(api_keys=[ALICE, BOB])
    alices = respond(client, ALICE, input=SECRET).json()["id"]
    before = len(seen)
    r = respond(client, BOB, previous_response_id=alices, input="what did she say?")
    refused(r)
    assert len(seen) == before and SECRET not in r.text
    assert respond(client, ALICE, previous_response_id=alices, input="go on").status_code == 200
