"""traceback: long tool outputs keep their error evidence verbatim, the rest becomes markers."""

from __future__ import annotations

from strategies.compact import compact_until
from strategies.context import FORGET_ANY, LAST_RESORT, Context, StrategyResult
from strategies.elide import elide
from strategies.messages import (
    Message,
    iterations,
    old_indexes,
    recall_ref,
    text_of,
    tool_names,
    with_content,
)
from strategies.options import ForgetOptions, TracebackOptions
from strategies.reads import live_reads
from strategies.registry import register
from strategies.working_set import first_steps

HEAD_CHARS, TAIL_CHARS = 600, 300


def elided(msg: Message, name: str, *, min_chars: int, head: int, tail: int) -> Message | None:
    """The message with its output elided, or None if it is short or would not shrink."""
    text = text_of(msg)
    if msg.get("role") not in ("tool", "user") or text is None or len(text) < min_chars:
        return None
    result = elide(text, head, tail)
    if result is None:
        return None
    body, kept, total = result
    if kept == 0:
        # No whole line could stay (one huge line, e.g. a JSON dump): keep its ends instead.
        cut = len(text) - HEAD_CHARS - TAIL_CHARS
        body = f"{text[:HEAD_CHARS]}[… {cut:,} chars elided …]{text[-TAIL_CHARS:]}"
    what = "User message" if msg.get("role") == "user" else f"Output of tool '{name}'"
    header = (
        f"[{what} elided: kept {kept:,} of {total:,} lines "
        f"({len(text):,} chars in full); {recall_ref(msg)}]"
    )
    return with_content(msg, f"{header}\n{body}")


def last_resort_indexes(messages: list[Message]) -> list[int]:
    """The latest turn's tool outputs, the task and the latest user message, oldest first."""
    iters = iterations(messages)
    users = [i for i, m in enumerate(messages) if m.get("role") == "user"]
    latest = [
        i for i, m in enumerate(messages) if m.get("role") == "tool" and iters[i] == iters[-1]
    ]
    return sorted(set(users[:1] + users[-1:] + latest))


@register("traceback")
def traceback(messages: list[Message], ctx: Context) -> StrategyResult:
    names = tool_names(messages)
    o = ctx.opts(TracebackOptions)

    def transform(current: Message, raw: Message) -> Message | None:
        name = names.get(raw.get("tool_call_id", ""), "?")
        return elided(raw, name, min_chars=o.min_chars, head=o.head_lines, tail=o.tail_lines)

    # The newest read of a file being edited stays verbatim (an edit copies from it), and so
    # do the first steps `forget` keeps (verbatim or not at all).
    spared = set(live_reads(messages, ctx)) if ctx.pressure < LAST_RESORT else set()
    if ctx.pressure < FORGET_ANY:
        spared |= first_steps(messages, ctx, ForgetOptions().keep_first)
    old = old_indexes(messages, ctx.keep_recent(), roles=("tool",))
    candidates = [i for i in old if i not in spared]
    if ctx.pressure >= LAST_RESORT:
        # Last resort before an overflow: the latest tool outputs, the task and the latest user
        # message too, evidence kept verbatim.
        candidates += last_resort_indexes(messages)
    return compact_until(
        messages,
        ctx,
        candidates,
        transform,
        strategy="traceback",
        reason="long tool outputs reduced to error evidence, head and tail",
    )
