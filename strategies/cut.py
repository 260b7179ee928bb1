"""Room is used: a user message cut at the last resort gets back as much of its text as fits."""

from __future__ import annotations

from strategies.context import Context
from strategies.messages import Message, iterations, recall_ref, text_of, with_content

LABEL = "cut"
MIN_GAIN = 32  # tokens: less spare room than this is not worth a new form


def use_room(view: list[Message], ctx: Context, budget: int) -> list[Message]:
    """The latest user message, when it is the latest turn and a last-resort pass left it as
    a short form, becomes the longest head and tail of its text (a note with the recall ref
    between them) that keep the view within `budget`: a 2,048-token window should not send
    100 tokens of a long paste."""
    lineage = ctx.lineage
    if lineage is None:
        return view
    iters = iterations(view)
    # Only in the latest turn: once the agent has moved on, a paste that filled the room
    # would make every later turn fire.
    users = [k for k, m in enumerate(view) if m.get("role") == "user" and iters[k] == iters[-1]]
    out = list(view)
    for k in users[-1:]:
        cur = out[k]
        raw = lineage.origin(cur)
        text = text_of(raw)
        spare = budget - ctx.usage(out)
        if lineage.label(cur) in (None, LABEL) or text is None or spare < MIN_GAIN:
            continue
        best = _longest(out, k, raw, text, ctx, budget)
        if best is not None and ctx.count(best) > ctx.count(cur):
            out[k] = lineage.derive(best, cur, LABEL)
    return out


def _longest(
    view: list[Message], k: int, raw: Message, text: str, ctx: Context, budget: int
) -> Message | None:
    """Binary search on the head's length in characters: the longest form that fits."""
    rest = sum(ctx.count(m) for i, m in enumerate(view) if i != k)
    lo, hi, best = 0, len(text) * 3 // 4 - 1, None
    while lo <= hi:
        mid = (lo + hi) // 2
        form = head_form(raw, text, mid)
        if ctx.measure(rest + ctx.count(form)) <= budget:
            best, lo = form, mid + 1
        else:
            hi = mid - 1
    return best


def head_form(raw: Message, text: str, chars: int) -> Message:
    """Its first `chars` characters and its last chars // 3 (where a pasted log's verdict
    usually is), with a note between them saying how much was cut."""
    tail = chars // 3
    cut = len(text) - chars - tail
    note = f"[… {cut:,} more chars cut to fit the context window; {recall_ref(raw)}]"
    end = text[len(text) - tail :] if tail else ""
    return with_content(raw, f"{text[:chars]}\n{note}\n{end}")
