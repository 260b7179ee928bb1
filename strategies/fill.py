"""fill: after a deep firing, the room left below the budget (less the headroom a continuing
session needs) goes back to the most useful of what was forgotten.

Outputs of JSON records stand as tables first (every value in less room). Then the ledger of
the user's own words gets all that room, so it carries every forgotten user message whole
before it shortens any. When it does, and room is still left, the newest forgotten steps come
back, newest first: whole (records as tables) while each fits, and the one at the edge cut to
the room left, as a trim keeps the message it stops at, never at the ledger's cost; the outputs
nearest the kept tail are what the next call most likely needs. Then outputs a pass folded come
back as sent, newest first, each that fits, and the newest output back whole if it still fits.
The marker is placed again each time, so it names only what is still left out. Each candidate
is checked as the final gate checks the view (pairs, roles, the latest turn), so a fill never
makes a view invalid. A pure function of the view, the lineage and the level: the same input
gives the same bytes.
"""

from __future__ import annotations

from dataclasses import replace

from strategies import cut, dense, forget, invariants
from strategies.context import Context, InvariantError
from strategies.ledger import HEADING
from strategies.lineage import Lineage
from strategies.messages import Message, iterations, text_of, tool_names
from strategies.working_set import newest_output

LABEL = "fill"
SHORT = " shortened or left out for room"  # the ledger's note when it left something out
ROUNDS = 6  # a shortened ledger's tries at the room its estimate left unused
MIN_GAP = 16  # tokens: less unused room than this is not worth another try
TOGETHER = 3  # steps at most brought back at once where fewer would clash
MARKER_SLACKS = (16, 64, 256)  # tokens: a marker placed again may take a few more
FULL = 0.9  # a view filled to this share of its level leaves the newest output a table


def refill(view: list[Message], ctx: Context, level: int) -> list[Message]:
    """`view` filled up to `level` tokens (never past it) with what was forgotten."""
    lineage = ctx.lineage
    if lineage is None or ctx.usage(view) >= level:
        return view
    tables = _Tables(lineage)
    view = tables.outputs(view, ctx, level)
    if lineage.forgotten:
        view = _unforget(view, ctx, level, lineage, tables)
    view = _unfold(view, ctx, level, lineage, tables)
    return tables.newest_whole(view, ctx, level)


class _Tables:
    """The table form (strategies/dense.py) of each output of JSON records: every value in
    a third to a half of the tokens, so that more of them fit the room."""

    def __init__(self, lineage: Lineage):
        self.lineage = lineage
        self.names = tool_names(lineage.raw)

    def of(self, msg: Message) -> Message | None:
        """`msg` as a table (derived from its original), or None where it is not records."""
        raw = self.lineage.origin(msg)
        name = self.names.get(raw.get("tool_call_id", ""), "?")
        table = self.lineage.form(raw, dense.LABEL, lambda: dense.dense_output(raw, name))
        return None if table is None else self.lineage.derive(table, msg, dense.LABEL)

    def outputs(self, view: list[Message], ctx: Context, level: int) -> list[Message]:
        """Whole outputs, and the newest one where it stands cut, as tables where smaller:
        room for what is left out (the newest comes back whole last, if it still fits)."""
        newest = set(newest_output(view))
        out = list(view)
        for k, m in enumerate(view):
            label = self.lineage.label(m)
            if m.get("role") != "tool" or not (label is None or k in newest and label == cut.LABEL):
                continue
            table = self.of(m)
            if table is not None and ctx.count(table) < ctx.count(m):
                out[k] = table
        return _checked(self.lineage, out, level, ctx) or view

    def newest_whole(self, view: list[Message], ctx: Context, level: int) -> list[Message]:
        """The newest output, made a table to leave room, back as sent where it still fits
        (what the next step reads, as the tool gave it), else cut to fill the room where
        nothing else took it."""
        for k in newest_output(view):
            if self.lineage.label(view[k]) == dense.LABEL:
                candidate = [*view[:k], self.lineage.origin(view[k]), *view[k + 1 :]]
                whole = _checked(self.lineage, candidate, level, ctx)
                if whole is None and ctx.usage(view) < FULL * level:
                    whole = _cut_longer(view, k, ctx, level)
                view = whole or view
        return view

    def within(self, view: list[Message], indexes: list[int]) -> list[Message]:
        """`view` with the raw messages at `indexes` (brought back) as tables where they can."""
        back = {id(self.lineage.raw[i]) for i in indexes}
        return [(self.of(m) or m) if id(m) in back and m.get("role") == "tool" else m for m in view]


def _unforget(
    view: list[Message], ctx: Context, level: int, lineage: Lineage, tables: _Tables
) -> list[Message]:
    """The ledger given the room up to `level`, then the newest forgotten steps whole."""
    wide = replace(ctx, target=level)
    best = _checked(lineage, forget.remark(view, wide), level, ctx) or view
    if not _ledger_whole(best, lineage):
        return _ledger_to(best, ctx, level)
    iters = iterations(lineage.raw)
    back: list[int] = []  # forgotten steps to bring back together (one alone may clash)
    while lineage.forgotten:
        block = _newest_block(lineage, iters)
        lineage.forgotten.difference_update(block)
        back += block
        candidate = tables.within(_with_raw(best, back, lineage), back)
        if lineage.forgotten:
            candidate = forget.remark(candidate, wide)
        if ctx.usage(candidate) > level:
            lineage.forgotten.update(back)
            best = _cut_in(best, back, ctx, level, tables) or best
            break
        checked = _checked(lineage, candidate, level, ctx)
        if checked is not None and not _ledger_whole(checked, lineage):
            checked = _ledger_to(checked, ctx, level)  # the room its estimate left unused
        if checked is None or not _ledger_whole(checked, lineage):
            if len(set(iters[i] for i in back)) < TOGETHER:
                continue
            lineage.forgotten.update(back)
            break
        best, back = checked, []
    return best


def _unfold(
    view: list[Message], ctx: Context, level: int, lineage: Lineage, tables: _Tables
) -> list[Message]:
    """Outputs and messages a pass folded or truncated back as sent, newest first, each while
    it fits `level` (the newest are what the next call most likely reads): an older output of
    JSON records as a table, which keeps every value in less room, anything else whole."""
    out = list(view)
    newest = set(newest_output(out))
    for k in range(len(out) - 1, -1, -1):
        label = lineage.label(out[k])
        if label in (None, forget.LABEL, dense.LABEL) or lineage.is_synthetic(out[k]):
            continue
        table = None if k in newest else tables.of(out[k])
        form = table if table is not None else lineage.origin(out[k])
        checked = _checked(lineage, [*out[:k], form, *out[k + 1 :]], level, ctx)
        out = checked or _cut_longer(out, k, ctx, level) or out
    return out


def _cut_longer(view: list[Message], k: int, ctx: Context, level: int) -> list[Message] | None:
    """`view` with message `k` cut to the room left where that keeps more of it than its
    present form (as a trim keeps the head of the message it stops at), else None."""
    lineage = ctx.lineage
    assert lineage is not None
    if lineage.label(view[k]) == cut.LABEL:
        return None
    rest = sum(ctx.count(m) for i, m in enumerate(view) if i != k)
    form = cut.cut_to_fit(lineage.origin(view[k]), lineage.raw, rest, ctx, level)
    if form is None or ctx.count(form) <= ctx.count(view[k]) + cut.MIN_GAIN:
        return None
    candidate = [*view[:k], lineage.derive(form, view[k], cut.LABEL), *view[k + 1 :]]
    return _checked(lineage, candidate, level, ctx)


def _cut_in(
    view: list[Message], back: list[int], ctx: Context, level: int, tables: _Tables
) -> list[Message] | None:
    """`view` with the forgotten step at `back`, too big to come back whole, back with its
    largest output cut to the room the view leaves (head, tail, named lines, the original's
    ref), as a trim keeps the head of the message it stops at; the marker and its ledger keep
    the room they had. None where that does not fit."""
    lineage = tables.lineage
    lineage.forgotten.difference_update(back)
    candidate = tables.within(_with_raw(forget.unmarked(view, lineage), back, lineage), back)
    raws = {id(lineage.raw[i]) for i in back}
    outputs = [
        k
        for k, m in enumerate(candidate)
        if m.get("role") == "tool" and id(lineage.origin(m)) in raws
    ]
    if outputs:
        k = max(outputs, key=lambda k: ctx.count(candidate[k]))
        others = sum(ctx.count(lineage.raw[i]) for i in back)
        others -= ctx.count(lineage.raw[lineage.index(candidate[k])])
        for slack in MARKER_SLACKS:  # the ledger placed again may want a little more room
            found = _cut_at(candidate, k, ctx.usage(view) + others + slack, ctx, level)
            if found is not None:
                return found
        # Where no marker of the same size leaves it room: the marker placed first, as small
        # as what is still left out makes it, then the output cut to what it leaves.
        wide = replace(ctx, target=level)
        marked = forget.remark(candidate, wide) if lineage.forgotten else candidate
        at = next((j for j, m in enumerate(marked) if m is candidate[k]), None)
        if at is not None:
            rest = sum(ctx.count(m) for j, m in enumerate(marked) if j != at)
            found = _cut_at(marked, at, rest, ctx, level, remark=False)
            if found is not None:
                return found
    lineage.forgotten.update(back)
    return None


def _cut_at(
    view: list[Message],
    k: int,
    rest: int,
    ctx: Context,
    level: int,
    remark: bool = True,
) -> list[Message] | None:
    """`view` with message `k` cut to fit beside `rest` tokens (the marker placed again after
    it, with `remark`), if that fits `level` and the ledger still carries every forgotten user
    message whole."""
    lineage = ctx.lineage
    assert lineage is not None
    form = cut.cut_to_fit(lineage.origin(view[k]), lineage.raw, rest, ctx, level)
    if form is None:
        return None
    cutin = [*view[:k], lineage.derive(form, view[k], cut.LABEL), *view[k + 1 :]]
    if remark and lineage.forgotten:
        cutin = forget.remark(cutin, replace(ctx, target=level))
    checked = _checked(lineage, cutin, level, ctx)
    if checked is not None and _ledger_whole(checked, lineage):
        return checked
    return None


def _ledger_to(view: list[Message], ctx: Context, level: int) -> list[Message]:
    """A shortened ledger given what its line-by-line estimate left unused, while the view
    still fits: its lines are counted one by one, which counts a little over their join."""
    lineage = ctx.lineage
    assert lineage is not None
    target, step = level, level - ctx.usage(view)
    for _ in range(ROUNDS):
        if step < MIN_GAP:
            break
        wide = replace(ctx, target=target + step, budget=max(ctx.budget, target + step))
        candidate = _checked(lineage, forget.remark(view, wide), level, ctx)
        if candidate is None:  # over: a smaller step (sentences are chosen by value per token)
            step //= 2
            continue
        view, target, step = candidate, target + step, level - ctx.usage(candidate)
    return view


def _checked(lineage: Lineage, view: list[Message], level: int, ctx: Context) -> list | None:
    """`view` if it fits `level` and passes the final gate's validity checks, else None."""
    if ctx.usage(view) > level:
        return None
    try:
        lineage.once("gate", lambda: invariants.Gate(lineage.raw)).check(view)
    except InvariantError:
        return None
    return view


def _ledger_whole(view: list[Message], lineage: Lineage) -> bool:
    """Whether the marker's ledger carries every forgotten user message whole: a view whose
    marker lost its ledger for room while user messages are forgotten does not."""
    for m in view:
        text = text_of(m) or ""
        if HEADING in text:
            return SHORT not in text.split(HEADING, 1)[1].split("\n", 1)[0]
    return not any(_said(lineage.raw[i]) for i in lineage.forgotten)


def _said(msg: Message) -> bool:
    return msg.get("role") == "user" and bool((text_of(msg) or "").strip())


def _newest_block(lineage: Lineage, iters: list[int]) -> list[int]:
    """The raw indexes of the newest forgotten step (one iteration: a call with its results
    goes or comes back as one block)."""
    newest = iters[max(lineage.forgotten)]
    return sorted(i for i in lineage.forgotten if iters[i] == newest)


def _with_raw(view: list[Message], indexes: list[int], lineage: Lineage) -> list[Message]:
    """The view without its marker and with the raw messages at `indexes` back in raw order."""
    bare = forget.unmarked(view, lineage)
    back = [lineage.raw[i] for i in indexes]
    return sorted([*bare, *back], key=lineage.index)
