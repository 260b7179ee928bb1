"""How each agent CLI runs headless and offline against ctxproxy: its config, env and commands."""

from __future__ import annotations

import json
import os
import subprocess
import sys
import time
from dataclasses import dataclass, field
from pathlib import Path

from proxy.settings import Settings
from proxy.testing.coder import AGAIN, TASK, Coder

TIMEOUT = 240  # seconds per CLI run; a scripted task takes a few


@dataclass
class Agent:
    """One CLI set up in a scratch HOME: the command for the task and for its continuation."""

    name: str
    env: dict[str, str]
    first: list[str]
    again: list[str] | None  # None: the CLI has no way to continue a conversation headless
    files: dict[Path, str] = field(default_factory=dict)  # config files to write first

    def prepare(self) -> None:
        for path, text in self.files.items():
            path.parent.mkdir(parents=True, exist_ok=True)
            path.write_text(text)


@dataclass
class Scene:
    """One test's world: the scratch repo, a scratch HOME, the coder and ctxproxy's URL."""

    repo: Path
    home: Path
    coder: Coder
    proxy: str = ""
    settings: Settings | None = None  # ctxproxy's, once started


@dataclass(frozen=True)
class Ran:
    code: int
    out: str
    err: str
    seconds: float


def run(agent: Agent, cmd: list[str], repo: Path) -> Ran:
    start = time.monotonic()
    done = subprocess.run(
        cmd,
        cwd=repo,
        env=agent.env,
        capture_output=True,
        text=True,
        timeout=TIMEOUT,
        stdin=subprocess.DEVNULL,
    )
    return Ran(done.returncode, done.stdout, done.stderr, time.monotonic() - start)


def base_env(home: Path, extra_path: list[Path]) -> dict[str, str]:
    """A scratch HOME, no telemetry or updates, and this venv's python (with pytest) first."""
    home.mkdir(parents=True, exist_ok=True)
    path = [str(p) for p in extra_path] + [str(Path(sys.executable).parent)]
    keep = {k: v for k, v in os.environ.items() if k in ("LANG", "LC_ALL", "TERM", "TMPDIR")}
    return {
        **keep,
        "HOME": str(home),
        "PATH": os.pathsep.join([*path, os.environ.get("PATH", "/usr/bin:/bin")]),
        "XDG_CONFIG_HOME": str(home / ".config"),
        "XDG_DATA_HOME": str(home / ".local" / "share"),
        "XDG_CACHE_HOME": str(home / ".cache"),
        "XDG_STATE_HOME": str(home / ".local" / "state"),
        "NO_COLOR": "1",
        "CI": "1",
        "DO_NOT_TRACK": "1",
        "PYTEST_DISABLE_PLUGIN_AUTOLOAD": "1",  # the scratch repo needs no plugin: fast start
    }


def claude(bin_dir: Path, home: Path, proxy: str, model: str | None) -> Agent:
    env = base_env(home, [bin_dir]) | {
        "ANTHROPIC_BASE_URL": proxy,
        "ANTHROPIC_API_KEY": "dummy",
        "DISABLE_TELEMETRY": "1",
        "DISABLE_AUTOUPDATER": "1",
        "DISABLE_ERROR_REPORTING": "1",
        "CLAUDE_CODE_DISABLE_NONESSENTIAL_TRAFFIC": "1",
        "IS_SANDBOX": "1",  # lets --dangerously-skip-permissions run as root in CI
    }
    flags = ["--output-format", "stream-json", "--verbose", "--dangerously-skip-permissions"]
    flags += ["--model", model] if model else []
    cli = str(bin_dir / "claude")
    return Agent("claude", env, [cli, "-p", TASK, *flags], [cli, "-p", AGAIN, "--continue", *flags])


def codex(bin_dir: Path, home: Path, proxy: str, model: str) -> Agent:
    config = (
        f'model = "{model}"\nmodel_provider = "ctxproxy"\n\n[model_providers.ctxproxy]\n'
        f'name = "ctxproxy"\nbase_url = "{proxy}/v1"\nwire_api = "responses"\n'
        'env_key = "CTXPROXY_KEY"\n'
    )
    env = base_env(home, [bin_dir]) | {"CTXPROXY_KEY": "dummy", "CODEX_HOME": str(home / ".codex")}
    flags = ["--dangerously-bypass-approvals-and-sandbox", "--skip-git-repo-check", "--json"]
    cli = str(bin_dir / "codex")
    return Agent(
        "codex",
        env,
        [cli, "exec", *flags, TASK],
        [cli, "exec", *flags, "resume", "--last", AGAIN],
        {home / ".codex" / "config.toml": config},
    )


def opencode(
    bin_dir: Path, home: Path, proxy: str, model: str, window: int, own_compaction: bool
) -> Agent:
    limit = {"context": window, "output": 4096}
    provider = {
        "npm": "@ai-sdk/openai-compatible",
        "name": "ctxproxy",
        "options": {"baseURL": f"{proxy}/v1", "apiKey": "dummy"},
        "models": {model: {"name": model, "tool_call": True, "limit": limit}},
    }
    config = {
        "$schema": "https://opencode.ai/config.json",
        "provider": {"ctxproxy": provider},
        "model": f"ctxproxy/{model}",
        "autoupdate": False,
        "share": "disabled",
    }
    env = base_env(home, [bin_dir]) | {
        f"OPENCODE_DISABLE_{what}": "true"
        for what in ("AUTOUPDATE", "MODELS_FETCH", "SHARE", "LSP_DOWNLOAD", "DEFAULT_PLUGINS")
    }
    if not own_compaction:
        env |= {"OPENCODE_DISABLE_AUTOCOMPACT": "true", "OPENCODE_DISABLE_PRUNE": "true"}
    cli = str(bin_dir / "opencode")
    flags = ["--format", "json"]
    path = home / ".config" / "opencode" / "opencode.json"
    return Agent(
        "opencode",
        env,
        [cli, "run", *flags, TASK],
        [cli, "run", "--continue", *flags, AGAIN],
        {path: json.dumps(config, indent=2)},
    )


def qwen(bin_dir: Path, home: Path, proxy: str, model: str, max_output: int | None) -> Agent:
    settings = {"privacy": {"usageStatisticsEnabled": False}, "telemetry": {"enabled": False}}
    env = base_env(home, [bin_dir]) | {
        "OPENAI_BASE_URL": f"{proxy}/v1",
        "OPENAI_API_KEY": "dummy",
        "OPENAI_MODEL": model,
    }
    if max_output:
        env["QWEN_CODE_MAX_OUTPUT_TOKENS"] = str(max_output)
    cli = str(bin_dir / "qwen")
    flags = ["--auth-type", "openai", "--yolo", "-o", "stream-json"]
    return Agent(
        "qwen",
        env,
        [cli, *flags, TASK],
        [cli, *flags, "-c", AGAIN],
        {home / ".qwen" / "settings.json": json.dumps(settings, indent=2)},
    )


def aider(executable: Path, home: Path, proxy: str, model: str, files: list[str]) -> Agent:
    flags = [
        "--model",
        f"openai/{model}",
        "--openai-api-base",
        f"{proxy}/v1",
        "--openai-api-key",
        "dummy",
        "--yes-always",
        "--no-git",
        "--analytics-disable",
        "--no-check-update",
        "--no-show-model-warnings",
        "--no-pretty",
        "--edit-format",
        "diff",
        "--auto-test",
        "--test-cmd",
        "python3 -m pytest -q",
    ]
    env = base_env(home, []) | {"AIDER_CHECK_UPDATE": "false"}
    # A small chat-history budget, as for a small window: the continuation's reloaded history
    # is summarised by aider's own side requests, which must stay in the session.
    cli = [str(executable), *flags, "--max-chat-history-tokens", "64"]
    # aider continues by reloading its chat history file, which it summarises when too long.
    again = [*cli, "--restore-chat-history", "--message", AGAIN, *files]
    return Agent("aider", env, [*cli, "--message", TASK, *files], again)
