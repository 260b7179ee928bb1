"""What a SOURCE names: a transcript file, a folder of them, or a stored session's id."""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path

from proxy.replay import chat, claude, codex, stored
from proxy.replay.session import Session, SourceError
from proxy.settings import Settings

Reader = Callable[[Path], list[Session]]


@dataclass(frozen=True)
class Source:
    """One file or stored session, read only when its turn comes (a folder may hold hundreds)."""

    name: str
    load: Callable[[], list[Session]]


def reader_of(path: Path) -> Reader | None:
    """The importer for a file, by what its first lines hold (never by its name alone)."""
    if claude.is_transcript(path):
        return claude.read
    if codex.is_rollout(path):
        return codex.read
    if chat.is_chat(path):
        return chat.read
    return None


def find(source: str, settings: Settings) -> list[Source]:
    path = Path(source).expanduser()
    if path.is_file():
        read = reader_of(path)
        if read is None:
            raise SourceError(
                f"{path}: neither a Claude Code transcript, a Codex rollout nor OpenAI-chat JSONL"
            )
        return [Source(str(path), _loader(read, path))]
    if path.is_dir():
        found = [
            Source(str(p), _loader(read, p))
            for p in sorted(path.rglob("*.jsonl"))
            if (read := reader_of(p)) is not None
        ]
        if not found:
            raise SourceError(f"{path}: no transcript, rollout or chat JSONL file in it")
        return found
    return [_stored(source, settings)]


def _loader(read: Reader, path: Path) -> Callable[[], list[Session]]:
    return lambda: read(path)


def _stored(session_id: str, settings: Settings) -> Source:
    from proxy.store import Store

    store = Store(settings.database_url)
    db_file = store.sqlite_path()
    if (db_file is not None and not db_file.exists()) or store.needs_upgrade():
        store.close()
        raise SourceError(f"{session_id}: no such file or folder, and no usable database")
    if store.get_session(session_id) is None:
        store.close()
        raise SourceError(f"{session_id}: no such file or folder, nor a stored session")

    def load() -> list[Session]:
        try:
            return stored.read(store, session_id)
        finally:
            store.close()

    return Source(f"session {session_id}", load)
