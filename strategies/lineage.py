"""Which raw message each compiled one stands for, and token counts memoized by identity."""

from __future__ import annotations

from collections.abc import Callable, Iterable, Sequence
from itertools import compress
from typing import TypeVar, cast

from strategies.messages import Message, iterations

T = TypeVar("T")


class Lineage:
    """Maps compiled messages back to the raw message and its iteration number.

    Compiled forms are always derived from the raw message, never from an earlier compiled
    form, so re-compacting cannot drift (a marker's count is always the raw size), and markers
    name the raw message that the store holds. Entries are keyed by id() and hold a reference,
    so the ids stay valid for the lifetime of one compile.
    """

    def __init__(self, raw: Sequence[Message]):
        self.raw = raw
        self._origin: dict[int, tuple[Message, Message, str]] = {}
        self._iterations: dict[int, int] | None = None  # made when first asked for
        self._forms: dict[tuple[int, str], Message | None] = {}
        self._ids: dict[int, int] | None = None  # made when first asked for
        self._synthetic: set[int] = set()
        self.forgotten: set[int] = set()  # raw indexes no longer in the view
        self._once: dict[str, object] = {}

    @property
    def _index(self) -> dict[int, int]:
        """Each raw message's position by identity (built at C speed; a turn that appends to
        its stored view and compacts nothing never asks)."""
        if self._ids is None:
            self._ids = dict(zip(map(id, self.raw), range(len(self.raw)), strict=True))
        return self._ids

    @property
    def _iteration(self) -> dict[int, int]:
        if self._iterations is None:
            self._iterations = dict(zip(map(id, self.raw), iterations(self.raw), strict=True))
        return self._iterations

    def origin(self, msg: Message) -> Message:
        entry = self._origin.get(id(msg))
        return entry[1] if entry else msg

    def index(self, msg: Message) -> int:
        """Position of the raw message this one stands for (for a marker: the first it hides)."""
        return self._index[id(self.origin(msg))]

    def synthesize(self, msg: Message, anchor: int, label: str) -> Message:
        """A message with no raw original (a forget marker), placed where raw `anchor` was."""
        self._origin[id(msg)] = (msg, msg, label)
        self._index[id(msg)] = anchor
        self._iteration[id(msg)] = self._iteration[id(self.raw[anchor])]
        self._synthetic.add(id(msg))
        return msg

    def is_synthetic(self, msg: Message) -> bool:
        return id(msg) in self._synthetic

    def forget(self, indexes: Iterable[int]) -> None:
        self.forgotten.update(indexes)

    def positions(self, view: Sequence[Message]) -> list[int | None]:
        """index(m) for each raw message of `view`, None for a compiled form."""
        ids = list(map(id, view))
        out: list[int | None] = list(map(self._index.get, ids))  # at C speed: forms are few
        for k in compress(range(len(ids)), map(self._origin.__contains__, ids)):
            out[k] = None
        return out

    def label(self, msg: Message) -> str | None:
        """Which strategy pass made this form, None for a raw message."""
        entry = self._origin.get(id(msg))
        return entry[2] if entry else None

    def derive(self, new: Message, old: Message, label: str) -> Message:
        self._origin[id(new)] = (new, self.origin(old), label)
        return new

    def form(self, raw: Message, label: str, make: Callable[[], Message | None]) -> Message | None:
        """A form is computed once per compile, however often the pipeline fires."""
        key = (id(raw), label)
        if key not in self._forms:
            self._forms[key] = make()
        return self._forms[key]

    def once(self, key: str, make: Callable[[], T]) -> T:
        """A value of the raw history computed once per compile (what a check reads of it)."""
        if key not in self._once:
            self._once[key] = make()
        return cast(T, self._once[key])

    def iteration(self, msg: Message, fallback: int) -> int:
        return self._iteration.get(id(self.origin(msg)), fallback)


def memoize(count: Callable[[Message], int]) -> Callable[[Message], int]:
    """Counts by object identity for one compile: the replay asks about the same dicts many
    times, and hashing a large message for a shared cache costs more than a dict lookup."""
    seen: dict[int, tuple[Message, int]] = {}

    def counted(msg: Message) -> int:
        hit = seen.get(id(msg))
        if hit is None:
            hit = seen[id(msg)] = (msg, count(msg))  # holding msg keeps its id unique
        return hit[1]

    return counted
