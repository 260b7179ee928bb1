"""A session branch's compaction decisions: which raw message stands in the view in which form.

The proxy stores a ViewState after every compile and hands it back on the branch's next turn,
so an old message keeps the exact form it was sent in until a later firing compacts it further,
and a restart, another worker or a resent request forwards the same bytes. Pure data: the store
encodes it, strategies never see the database.
"""

from __future__ import annotations

from collections.abc import Iterable, Sequence
from dataclasses import dataclass
from functools import cached_property
from itertools import compress, repeat
from operator import is_

from strategies.events import CompactionEvent
from strategies.lineage import Lineage
from strategies.messages import Message


@dataclass(frozen=True)
class Form:
    """A compiled message standing for raw message `index`; a standalone marker has
    `synthetic` set and stands for the forgotten messages (its index is the first of them)."""

    index: int
    label: str
    message: Message
    synthetic: bool = False


Item = int | Form  # a raw index kept as it came, or a compiled form


@dataclass(frozen=True)
class ViewState:
    covered: int  # the view stands for messages[:covered]
    items: tuple[Item, ...]
    forgotten: tuple[tuple[int, int], ...] = ()  # [start, stop) runs of raw indexes left out
    carried: tuple[CompactionEvent, ...] = ()  # the passes that shaped this view, merged
    view_tokens: int = 0  # raw (uncorrected) token count of the view's messages
    original_tokens: int = 0  # raw token count of messages[:covered]

    @classmethod
    def capture(
        cls,
        covered: int,
        view: Sequence[Message],
        lineage: Lineage,
        carried: Iterable[CompactionEvent],
        view_tokens: int,
        original_tokens: int,
    ) -> ViewState:
        found: list[Item | None] = list(lineage.positions(view))  # at C speed
        for k in compress(range(len(found)), map(is_, found, repeat(None))):  # forms are few
            found[k] = _form(view[k], lineage)
        return cls(
            covered,
            tuple(found),  # type: ignore[arg-type]
            runs(lineage.forgotten),
            tuple(carried),
            view_tokens,
            original_tokens,
        )

    @cached_property
    def forms(self) -> tuple[int, ...]:
        """Where the compiled forms are among `items` (few, however long the view)."""
        return tuple(compress(range(len(self.items)), map(isinstance, self.items, repeat(Form))))

    def extended(
        self,
        covered: int,
        carried: Iterable[CompactionEvent],
        view_tokens: int,
        original_tokens: int,
    ) -> ViewState:
        """This view restored with messages[self.covered:covered] appended as they came (a
        turn that compacted nothing): what `capture` makes of it, without a pass over it."""
        grown = ViewState(
            covered,
            self.items + tuple(range(self.covered, covered)),
            self.forgotten,  # runs as `capture` makes them: restored, they are the same
            tuple(carried),
            view_tokens,
            original_tokens,
        )
        grown.__dict__["forms"] = self.forms  # the appended items are raw indexes
        return grown

    def restore(self, messages: Sequence[Message], lineage: Lineage) -> list[Message]:
        """The view of messages[:covered], its forms registered in the lineage."""
        lineage.forget(i for a, b in self.forgotten for i in range(a, b))
        items, at = self.items, 0
        view: list[Message] = []
        raw = messages.__getitem__
        # Raw messages by runs at C speed, between the forms.
        for k in self.forms:
            view += map(raw, items[at:k])  # type: ignore[arg-type]
            item: Form = items[k]  # type: ignore[assignment]
            if item.synthetic:
                view.append(lineage.synthesize(item.message, item.index, item.label))
            else:
                view.append(lineage.derive(item.message, messages[item.index], item.label))
            at = k + 1
        view += map(raw, items[at:])  # type: ignore[arg-type]
        return view

    def fits(self, messages: Sequence[Message]) -> bool:
        """Whether this state can stand for a prefix of `messages` (indexes in range)."""
        return self.covered <= len(messages)


def _form(m: Message, lineage: Lineage) -> Item:
    label = lineage.label(m)
    assert label is not None, "a message of the view is raw or a form"
    return Form(lineage.index(m), label, m, lineage.is_synthetic(m))


def runs(indexes: Iterable[int]) -> tuple[tuple[int, int], ...]:
    out: list[list[int]] = []
    for i in sorted(set(indexes)):
        if out and out[-1][1] == i:
            out[-1][1] = i + 1
        else:
            out.append([i, i + 1])
    return tuple((a, b) for a, b in out)
