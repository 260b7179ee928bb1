"""fill: after a deep firing, the room left below the budget (less the headroom a continuing
session needs) goes back to the most useful of what was forgotten.

First the ledger of the user's own words gets all that room, so it carries every forgotten
user message whole before it shortens any. When it does, and room is still left, the newest
forgotten steps come back whole, newest first, as long as each fits: the outputs nearest the
kept tail are what the next call most likely needs. Then outputs a pass folded come back as
sent, newest first, each that fits. The marker is placed again each time, so
it names only what is still left out. Each candidate is checked as the final gate checks the
view (pairs, roles, the latest turn), so a fill never makes a view invalid. A pure function of
the view, the lineage and the level: the same input gives the same bytes.
"""

from __future__ import annotations

from dataclasses import replace

from strategies import forget, invariants
from strategies.context import Context, InvariantError
from strategies.ledger import HEADING
from strategies.lineage import Lineage
from strategies.messages import Message, iterations, text_of

LABEL = "fill"
SHORT = " shortened or left out for room"  # the ledger's note when it left something out
ROUNDS = 6  # a shortened ledger's tries at the room its estimate left unused
MIN_GAP = 16  # tokens: less unused room than this is not worth another try
TOGETHER = 3  # steps at most brought back at once where fewer would clash


def refill(view: list[Message], ctx: Context, level: int) -> list[Message]:
    """`view` filled up to `level` tokens (never past it) with what was forgotten."""
    lineage = ctx.lineage
    if lineage is None or ctx.usage(view) >= level:
        return view
    if lineage.forgotten:
        view = _unforget(view, ctx, level, lineage)
    return _unfold(view, ctx, level, lineage)


def _unforget(view: list[Message], ctx: Context, level: int, lineage: Lineage) -> list[Message]:
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
        candidate = _with_raw(best, back, lineage)
        if lineage.forgotten:
            candidate = forget.remark(candidate, wide)
        if ctx.usage(candidate) > level:
            lineage.forgotten.update(back)
            break
        checked = _checked(lineage, candidate, level, ctx)
        if checked is None or not _ledger_whole(checked, lineage):
            if len(set(iters[i] for i in back)) < TOGETHER:
                continue
            lineage.forgotten.update(back)
            break
        best, back = checked, []
    return best


def _unfold(view: list[Message], ctx: Context, level: int, lineage: Lineage) -> list[Message]:
    """Outputs and messages a pass folded or truncated back as sent, newest first, each while
    it fits `level` whole (the newest are what the next call most likely reads)."""
    out = list(view)
    for k in range(len(out) - 1, -1, -1):
        label = lineage.label(out[k])
        if label is None or label == forget.LABEL or lineage.is_synthetic(out[k]):
            continue
        candidate = [*out[:k], lineage.origin(out[k]), *out[k + 1 :]]
        if ctx.usage(candidate) > level:
            continue
        checked = _checked(lineage, candidate, level, ctx)
        out = checked if checked is not None else out
    return out


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
        invariants.check_valid(lineage.raw, view)
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
