"""What `ctxproxy` tells a newcomer: help, version, the start-up report, a port already in use."""

from __future__ import annotations

import re
import socket
import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest
from starlette.applications import Starlette
from starlette.responses import JSONResponse
from starlette.routing import Route

from proxy.cli import commands as cli
from proxy.testing.servers import ServerThread, free_port

CTXPROXY = str(Path(sys.executable).with_name("ctxproxy"))


def help_of(*command: str, capsys: pytest.CaptureFixture[str]) -> str:
    with pytest.raises(SystemExit) as done:
        cli.main([*command, "--help"])
    assert done.value.code == 0
    return capsys.readouterr().out


def options(text: str) -> dict[str, str]:
    """Each option of a help text with its description (wrapped lines joined)."""
    found: dict[str, str] = {}
    current = None
    for line in text.split("options:", 1)[1].splitlines():
        m = re.match(r"  (-[-\w]+(?:, --[-\w]+)?)(?: [A-Z_]+)?(?:\s{2,}(.*))?$", line)
        if m:
            current = m.group(1).split(", ")[-1]
            found[current] = m.group(2) or ""
        elif current and line.startswith(" " * 10):
            found[current] += " " + line.strip()
    return found


@pytest.mark.parametrize(
    ("command", "says", "defaults"),
    [
        ((), "compacts it to fit the model's context window", {"--config": "built-in defaults"}),
        (
            ("serve",),
            "Run the proxy",
            {
                "--config": "./config.yaml",
                "--host": "(default: listen.host in the config, 127.0.0.1)",
                "--port": "(default: listen.port in the config, 8080)",
                "--workers": "(default: 1)",
            },
        ),
        (("migrate",), "upgrade it to the newest schema", {"--config": "$CTXPROXY_CONFIG"}),
        (("sessions",), "tokens saved", {"--limit": "(default: 50)", "--config": "./config"}),
    ],
)
def test_every_command_says_what_it_does_and_shows_options_with_defaults(
    command: tuple[str, ...],
    says: str,
    defaults: dict[str, str],
    capsys: pytest.CaptureFixture[str],
) -> None:
    text = help_of(*command, capsys=capsys)
    assert says in " ".join(text.split())
    described = options(text)
    assert all(described.values()), described  # no option without a description
    for option, default in defaults.items():
        assert default in " ".join(described[option].split()), (option, described[option])
    if not command:
        assert {"serve", "migrate", "sessions"} <= set(re.findall(r"^    (\w+)", text, re.M))
        assert "--version" in described


def test_version() -> None:
    out = subprocess.run([CTXPROXY, "--version"], capture_output=True, text=True, timeout=60)
    assert out.returncode == 0
    assert re.fullmatch(r"ctxproxy \d+\.\d+\.\d+\S*\n", out.stdout)


def llama_like(n_ctx: int) -> Starlette:
    """What `serve` asks a llama.cpp server at start: its models and its /props."""

    async def models(request: Any) -> JSONResponse:
        return JSONResponse({"data": [{"id": "smollm2", "object": "model"}]})

    async def props(request: Any) -> JSONResponse:
        return JSONResponse({"default_generation_settings": {"n_ctx": n_ctx}})

    return Starlette(routes=[Route("/v1/models", models), Route("/props", props)])


def test_start_up_says_where_it_listens_the_database_and_each_upstream(
    tmp_path: Path,
    upstream_url: str,
    monkeypatch: pytest.MonkeyPatch,
    capsys: pytest.CaptureFixture[str],
) -> None:
    dead = f"http://127.0.0.1:{free_port()}/v1"
    with ServerThread(llama_like(4096)) as llama:
        cfg = tmp_path / "config.yaml"
        cfg.write_text(
            f"database_url: sqlite:///{tmp_path / 'new.db'}\n"
            "listen: {host: 127.0.0.1, port: 8080}\n"
            "upstreams:\n"
            f"  - {{name: gpu, kind: llamacpp, base_url: '{llama.url}/v1'}}\n"
            f"  - {{name: scripted, base_url: '{upstream_url}', context_window: 8000}}\n"
            f"  - {{name: down, kind: vllm, base_url: '{dead}'}}\n"
        )
        started: list[dict[str, Any]] = []
        monkeypatch.setattr("uvicorn.run", lambda app, **kw: started.append(kw))
        port = free_port()
        assert cli.main(["serve", "--config", str(cfg), "--port", str(port)]) == 0
    assert started and started[0]["port"] == port
    lines = capsys.readouterr().err.splitlines()
    assert lines[0] == f"ctxproxy {cli.version()} starting"
    assert lines[1] == f"  database   {tmp_path / 'new.db'} (created)"
    assert lines[2] == (
        f"  upstream   gpu (llamacpp) at {llama.url}/v1: answered (models: smollm2); "
        "window 4,096 tokens (discovered)"
    )
    assert lines[3] == (
        f"  upstream   scripted (openai) at {upstream_url}: answered (models: echo, tools); "
        "window 8,000 tokens (configured)"
    )
    assert lines[4] == (
        f"  upstream   down (vllm) at {dead}: NOT ANSWERING (ConnectError: connection refused); "
        "window unknown (to be discovered once it answers)"
    )
    base = f"http://127.0.0.1:{port}"
    assert lines[5].startswith(f"  listening  {base}: OpenAI API at {base}/v1, ")
    assert f"session viewer at {base}/ui/" in lines[5] and "/healthz" in lines[5]
    assert len(lines) == 6

    # The second start finds the database as it left it.
    assert cli.main(["serve", "--config", str(cfg), "--port", str(port)]) == 0
    assert capsys.readouterr().err.splitlines()[1].endswith("new.db (up to date)")


def test_port_in_use_fails_before_the_database_is_touched(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    cfg = tmp_path / "config.yaml"
    cfg.write_text(f"database_url: sqlite:///{tmp_path / 'never.db'}\n")
    with socket.socket() as busy:
        busy.bind(("127.0.0.1", 0))
        busy.listen()
        port = busy.getsockname()[1]
        assert cli.main(["serve", "--config", str(cfg), "--port", str(port)]) == 1
    err = capsys.readouterr().err
    assert f"port {port} on 127.0.0.1 is already in use" in err and "--port" in err
    assert not (tmp_path / "never.db").exists()


def test_a_database_that_cannot_be_opened_is_one_plain_line(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    cfg = tmp_path / "config.yaml"
    cfg.write_text(f"database_url: sqlite:///{tmp_path / 'missing' / 'x.db'}\n")
    assert cli.main(["serve", "--config", str(cfg), "--port", str(free_port())]) == 1
    err = capsys.readouterr().err
    assert f"the database's folder {tmp_path / 'missing'} does not exist" in err
    assert "Traceback" not in err
    assert cli.main(["migrate", "--config", str(cfg)]) == 1
    assert "does not exist" in capsys.readouterr().err


def test_a_postgresql_url_without_its_driver_says_what_to_install(
    tmp_path: Path, capsys: pytest.CaptureFixture[str], monkeypatch: pytest.MonkeyPatch
) -> None:
    # None in sys.modules makes `import psycopg` fail as it does where the extra is not installed.
    for name in [m for m in sys.modules if m == "psycopg" or m.startswith("psycopg.")]:
        monkeypatch.delitem(sys.modules, name)
    monkeypatch.setitem(sys.modules, "psycopg", None)
    cfg = tmp_path / "config.yaml"
    cfg.write_text("database_url: postgresql+psycopg://u@127.0.0.1:1/none\n")
    for command in (["serve", "--port", str(free_port())], ["migrate"], ["sessions"]):
        assert cli.main([*command, "--config", str(cfg)]) == 1
        err = capsys.readouterr().err
        assert "Traceback" not in err
        [line] = [x for x in err.splitlines() if x.startswith("ctxproxy: ")]
        assert "pip install 'ctxproxy[postgres]'" in line and "psycopg" in line
