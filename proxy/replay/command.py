"""`ctxproxy replay` and `ctxproxy export`: their options, and the run from SOURCE to report."""

from __future__ import annotations

import argparse
import json
import sys
from collections.abc import Callable
from pathlib import Path
from typing import TYPE_CHECKING, Any

import yaml

from proxy.settings import ConfigError, Settings, load_settings

if TYPE_CHECKING:  # the command line loads the compile path only when it replays
    from proxy.replay.runner import Config, Replayed
    from proxy.replay.session import Session

Say = Callable[[str], None]


def add_replay(command: Callable[[str, str, str], argparse.ArgumentParser]) -> None:
    p = command(
        "replay",
        "replay sessions offline through the compile path: what compaction would have done",
        "Replay a stored session (its id), a Claude Code transcript or project folder, a Codex "
        "rollout or folder, or an OpenAI-chat JSONL file (one request body per line) turn by "
        "turn through the compile path that serves live requests, no model called; print per "
        "session the tokens sent against the full history's, the turns that would have "
        "overflowed, the firings, the expected prefix reuse and what the last view left out.",
    )
    p.add_argument("source", metavar="SOURCE", help="a session id, a .jsonl file or a folder")
    p.add_argument(
        "--window",
        type=int,
        metavar="N",
        help="the context window in tokens (default: the stored session's, else the configured "
        "upstream's context_window for the session's model)",
    )
    p.add_argument(
        "--fixed-tokens",
        type=int,
        default=0,
        metavar="N",
        help="tokens the live requests carried that the transcript lacks (the system prompt, "
        "tool definitions), counted in every turn; the report says when they are missing",
    )
    p.add_argument("--vs", metavar="OTHER.yaml", help="a second configuration, side by side")
    p.add_argument(
        "--set",
        action="append",
        default=[],
        metavar="KEY=VALUE",
        dest="changes",
        help="replay also with this change (repeatable): a compaction key (trigger=0.8, "
        "pipeline=[fold,forget]), a dotted key (recall.enabled=false) or window=N",
    )
    p.add_argument("--per-turn", action="store_true", help="a table of every turn too")
    p.add_argument("--json", action="store_true", help="JSON on stdout, for scripts")
    p.add_argument("--plot", metavar="FILE.png", help="draw tokens sent per turn (matplotlib)")
    p.add_argument(
        "--record",
        action="store_true",
        help="write each replay into the configured database as a session `replay:NAME`, "
        "shown in the viewer marked as a replay and left out of the live totals",
    )


def add_export(command: Callable[[str, str, str], argparse.ArgumentParser]) -> None:
    p = command(
        "export",
        "write a stored session as OpenAI-chat JSONL",
        "Write a stored session's requests as OpenAI-chat JSONL, one request body per line: "
        "the raw history each carried, or (--views) the view that went upstream. "
        "`ctxproxy replay FILE` reads it back.",
    )
    p.add_argument("session_id", metavar="SESSION", help="the stored session's id")
    p.add_argument("--views", action="store_true", help="the views sent, not the raw history")
    p.add_argument("-o", "--output", metavar="FILE", help="write here (default: stdout)")


def run_replay(settings: Settings, args: argparse.Namespace, say: Say) -> int:
    from proxy.replay.session import SourceError

    try:
        return _replay(settings, args, say)
    except (SourceError, ConfigError) as exc:
        print(f"ctxproxy: {exc}", file=sys.stderr)
        return 2


def _replay(settings: Settings, args: argparse.Namespace, say: Say) -> int:
    from proxy.compile.tokens import TokenCounter
    from proxy.replay import report
    from proxy.replay.runner import replay
    from proxy.replay.sources import find

    sources = find(args.source, settings)
    others = _others(settings, args)
    counter = TokenCounter(image_tokens=settings.compaction.image_tokens)
    results: list[list[Replayed]] = []
    progress = _Progress(len(sources), sys.stderr) if len(sources) > 1 else None
    for source in sources:
        for session in source.load():
            if not session.turns:
                continue
            configs = [_config(name, s, w, args, session) for name, s, w in others]
            results.append([replay(session, c, counter) for c in configs])
        if progress:
            progress.step(source.name)
    if progress:
        progress.done()
    if not results:
        print("ctxproxy: no session with a request in it", file=sys.stderr)
        return 1
    if args.json:
        print(json.dumps(report.as_json(results, args.per_turn), indent=1))
    else:
        print(report.text(results, args.per_turn))
    if args.record:
        _record(settings, results, say)
    if args.plot:
        return _plot(results, Path(args.plot), say)
    return 0


def _record(settings: Settings, results: list[list[Replayed]], say: Say) -> None:
    from proxy.replay.record import record
    from proxy.store import Store

    store = Store(settings.database_url)
    try:
        store.upgrade()
        for replays in results:
            for r in replays:
                say(f"recorded: session {record(store, r, named=len(replays) > 1)}")
    finally:
        store.close()


def _others(settings: Settings, args: argparse.Namespace) -> list[tuple[str, Settings, int | None]]:
    """(name, settings, window) of each configuration to replay under: the configured one,
    then --vs's or the --set changes'."""
    out = [("this config", settings, args.window)]
    if args.vs:
        out.append((Path(args.vs).name, load_settings(args.vs), args.window))
    if args.changes:
        base = out[-1][1] if args.vs else settings
        changed, window = _changed(base, args.changes, args.window)
        out.append((" ".join(args.changes), changed, window))
    return out


def _changed(
    settings: Settings, changes: list[str], window: int | None
) -> tuple[Settings, int | None]:
    data = settings.model_dump()
    for change in changes:
        key, sep, text = change.partition("=")
        if not sep or not key:
            raise ConfigError(f"--set {change!r}: give KEY=VALUE")
        value = yaml.safe_load(text)
        if key == "window":
            if not isinstance(value, int) or value <= 0:
                raise ConfigError(f"--set {change!r}: the window is a positive number of tokens")
            window = value
            continue
        path = key.split(".")
        if path[0] not in data:
            path = ["compaction", *path]
        _put(data, path, value, change)
    try:
        return Settings.model_validate(data), window
    except ValueError as exc:
        raise ConfigError(f"--set: {exc}") from None


def _put(data: dict[str, Any], path: list[str], value: Any, change: str) -> None:
    here = data
    for part in path[:-1]:
        if not isinstance(here.get(part), dict):
            raise ConfigError(f"--set {change!r}: no such key {'.'.join(path)}")
        here = here[part]
    if path[-1] not in here:
        raise ConfigError(f"--set {change!r}: no such key {'.'.join(path)}")
    here[path[-1]] = value


def _config(
    name: str, settings: Settings, window: int | None, args: argparse.Namespace, session: Session
) -> Config:
    from proxy.replay.runner import Config

    model = next((t.body.get("model") for t in session.turns if t.body.get("model")), "*")
    upstream = settings.upstream_for(str(model))
    live = next((t.window for t in reversed(session.turns) if t.window), None)
    window = window or live or (upstream.context_window if upstream else None)
    if window is None:
        raise ConfigError(
            f"{session.name}: no window known (the upstream for {model!r} has no "
            "context_window): give --window N"
        )
    tools = upstream.tools if upstream else True
    return Config(name, settings, window, args.fixed_tokens, tools)


def _plot(results: list[list[Replayed]], path: Path, say: Say) -> int:
    from proxy.replay.plot import PlotUnavailable, draw

    try:
        draw(results[0], path)
    except PlotUnavailable as exc:
        print(f"ctxproxy: {exc}", file=sys.stderr)
        return 2
    say(f"plot: {path}")
    return 0


class _Progress:
    """A one-line progress bar on stderr for a folder of sessions."""

    WIDTH = 30

    def __init__(self, total: int, out: Any) -> None:
        self.total, self.done_count, self.out = total, 0, out

    def step(self, name: str) -> None:
        self.done_count += 1
        filled = self.WIDTH * self.done_count // self.total
        bar = "#" * filled + "." * (self.WIDTH - filled)
        shown = Path(name).name[:40]
        self.out.write(f"\rreplaying [{bar}] {self.done_count}/{self.total} {shown:40}")
        self.out.flush()

    def done(self) -> None:
        self.out.write("\n")
        self.out.flush()


def run_export(settings: Settings, args: argparse.Namespace) -> int:
    from proxy.replay.stored import export_lines
    from proxy.store import Store

    store = Store(settings.database_url)
    try:
        lines = export_lines(store, args.session_id, args.views)
        if lines is None:
            print(f"ctxproxy: no session '{args.session_id}'", file=sys.stderr)
            return 1
        out = open(args.output, "w") if args.output else sys.stdout  # noqa: SIM115
        try:
            n = 0
            for body in lines:
                out.write(json.dumps(body, ensure_ascii=False) + "\n")
                n += 1
        finally:
            if args.output:
                out.close()
        print(f"ctxproxy: {n} requests written", file=sys.stderr)
        return 0
    finally:
        store.close()
