"""The vocabulary every strategy shares: messages, iterations, events, context and the registry."""

from __future__ import annotations

import dataclasses
import hashlib
import json
import re
from collections.abc import Callable, Iterable, Sequence
from dataclasses import dataclass
from functools import partial
from typing import Any, Protocol, TypeVar

import orjson

from strategies.options import KEEP_RECENT, StrategyOptions

# An OpenAI chat message as the client sent it; keys we do not know are kept untouched.
Message = dict[str, Any]

PROMPT_ROLES = frozenset({"system", "developer"})


_CANONICAL = json.JSONEncoder(sort_keys=True, separators=(",", ":"), ensure_ascii=False)


def canonical_json(msg: Any) -> str:
    """The one serialisation that content addressing (store, markers) relies on."""
    return _CANONICAL.encode(msg)


def message_hash(msg: Message) -> str:
    return hashlib.sha256(canonical_bytes(msg)).hexdigest()


def canonical_bytes(msg: Any) -> bytes:
    """canonical_json(msg) as UTF-8, made by orjson when that gives the same bytes: strings,
    64-bit integers, booleans and nulls, which it writes as the standard encoder does (floats
    it may write in another form, so they take the standard encoder)."""
    if orjson_exact(msg):
        try:
            return orjson.dumps(msg, option=orjson.OPT_SORT_KEYS)
        except orjson.JSONEncodeError:  # a lone surrogate
            pass
    # surrogatepass: JSON may carry a lone surrogate ("\ud800"), which strict UTF-8 rejects
    return canonical_json(msg).encode("utf-8", "surrogatepass")


_I64_MIN, _U64_MAX = -(2**63), 2**64 - 1
_ORJSON_DEPTH = 200


def orjson_exact(value: Any, depth: int = 0) -> bool:
    kind = type(value)
    if kind is str or kind is bool or value is None:
        return True
    if depth > _ORJSON_DEPTH:  # orjson refuses deeper nesting; the standard encoder decides
        return False
    if kind is dict:
        return all(type(k) is str and orjson_exact(v, depth + 1) for k, v in value.items())
    if kind is list:
        return all(orjson_exact(v, depth + 1) for v in value)
    if kind is int:
        return _I64_MIN <= value <= _U64_MAX
    return False


def content_key(msg: Message) -> str:
    """A digest equal for equal messages, for caches inside one process.

    Where orjson writes the message exactly (nearly always), its sorted-keys JSON hashed;
    otherwise string values are hashed as raw UTF-8 instead of being JSON-escaped first.
    Values are tagged and length-prefixed, so two different messages collide only if sha256
    does; the two forms never meet (a "j" prefix on the first).
    """
    if type(msg) is dict and orjson_exact(msg):
        try:
            return "j" + hashlib.sha256(orjson.dumps(msg, option=orjson.OPT_SORT_KEYS)).hexdigest()
        except orjson.JSONEncodeError:
            pass
    digest = hashlib.sha256()
    for key in sorted(msg):
        value = msg[key]
        tag = b"s" if isinstance(value, str) else b"j"
        text = value if isinstance(value, str) else canonical_json(value)
        data = text.encode("utf-8", "surrogatepass")
        name = key.encode("utf-8", "surrogatepass")
        digest.update(b"%d:%d:%s:" % (len(name), len(data), tag))
        digest.update(name)
        digest.update(data)
    return digest.hexdigest()


def original_ref(msg: Message) -> str:
    """How a marker names the raw message, so a reader can fetch it from the store."""
    return f"/messages/{message_hash(msg)[:16]}"


def recall_ref(msg: Message) -> str:
    """What a placeholder ends with: the original's ref, and the tool that gets it back."""
    return f"ctxproxy_recall original: {original_ref(msg)}"


# --- message helpers ---------------------------------------------------------------------


def text_of(msg: Message) -> str | None:
    """The message's text: a string, the joined text parts of a list, or None if not all text."""
    content = msg.get("content")
    if isinstance(content, str):
        return content
    if isinstance(content, list) and all(_is_text_part(p) for p in content):
        return "\n".join(p["text"] for p in content)
    return None


def _is_text_part(part: Any) -> bool:
    return (
        isinstance(part, dict) and part.get("type") == "text" and isinstance(part.get("text"), str)
    )


def content_size(msg: Message) -> int:
    """Characters a strategy can remove: text content plus tool-call arguments."""
    text = text_of(msg) or ""
    args = sum(len(c.get("function", {}).get("arguments") or "") for c in tool_calls(msg))
    return len(text) + args


def tool_calls(msg: Message) -> list[dict[str, Any]]:
    calls = msg.get("tool_calls") if msg.get("role") == "assistant" else None
    return [c for c in calls if isinstance(c, dict)] if isinstance(calls, list) else []


def with_content(msg: Message, content: str) -> Message:
    """A copy with new content; every other key (tool_call_id, name, unknown keys) kept."""
    return {**msg, "content": content}


def tool_names(messages: Iterable[Message]) -> dict[str, str]:
    """tool_call_id -> function name, from the assistant calls in the history."""
    names: dict[str, str] = {}
    for msg in messages:
        for call in tool_calls(msg):
            fn = call.get("function")
            if isinstance(call.get("id"), str) and isinstance(fn, dict):
                names[call["id"]] = str(fn.get("name", "?"))
    return names


# --- iterations ----------------------------------------------------------------------------


def iterations(messages: Sequence[Message]) -> list[int]:
    """Iteration number per message.

    An iteration is a user message, or an assistant message with the tool results that answer
    it. Prompt messages before the first iteration get -1; later ones join the current one.
    """
    current, out = -1, []
    for msg in messages:
        if msg.get("role") in ("user", "assistant"):
            current += 1
        out.append(current)
    return out


def protected_indexes(
    messages: Sequence[Message], iters: Sequence[int], *, latest_user: bool = True
) -> set[int]:
    """Messages no strategy may change: prompts, the first user message (the task), the final
    turn, and (unless `latest_user` is False) the latest user message."""
    keep = {i for i, m in enumerate(messages) if m.get("role") in PROMPT_ROLES}
    users = [i for i, m in enumerate(messages) if m.get("role") == "user"]
    keep.update(users[:1] + (users[-1:] if latest_user else []))
    if iters:
        last = iters[-1]
        keep.update(i for i, it in enumerate(iters) if it == last)
    return keep


def old_indexes(
    messages: Sequence[Message], keep_recent: int, roles: Iterable[str] = ("tool", "assistant")
) -> list[int]:
    """Indexes a strategy may compact, oldest first: outside the keep window and unprotected.
    A latest user message the agent has moved on from (outside the keep window) may fold."""
    iters = iterations(messages)
    protected = protected_indexes(messages, iters, latest_user=False)
    cutoff = (iters[-1] if iters else 0) - keep_recent
    wanted = frozenset(roles)
    return [
        i
        for i, it in enumerate(iters)
        if it <= cutoff and i not in protected and messages[i].get("role") in wanted
    ]


# --- events --------------------------------------------------------------------------------


@dataclass(frozen=True)
class CompactionEvent:
    strategy: str
    phase: int | None
    iterations: list[int]
    tokens_before: int
    tokens_after: int
    chars_removed: int
    reason: str
    # True for the passes of earlier turns that this view carries over; False for what fired now.
    replayed: bool = False
    passes: int = 1  # how many firings a carried-over event stands for

    def to_dict(self) -> dict[str, Any]:
        return dataclasses.asdict(self)

    @property
    def label(self) -> str:
        return self.strategy if self.phase is None else f"{self.strategy}:{self.phase}"


# --- lineage: which raw message a compiled one stands for -----------------------------------


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
        self._iteration: dict[int, int] = {}
        self._forms: dict[tuple[int, str], Message | None] = {}
        self._index: dict[int, int] = {}
        self._synthetic: set[int] = set()
        self.forgotten: set[int] = set()  # raw indexes no longer in the view
        for i, (msg, it) in enumerate(zip(raw, iterations(raw), strict=True)):
            self._iteration[id(msg)] = it
            self._index[id(msg)] = i

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


Opts = TypeVar("Opts", bound=StrategyOptions)


# --- context and protocol ------------------------------------------------------------------


# Pressure levels. The pipeline raises the level while the view stays over the target (up to
# NO_KEEP_WINDOW), then, from FORGET_ANY on, only while it stays over the budget.
ALL_PHASES = 1  # every phase of every strategy may run
NO_KEEP_WINDOW = 2  # the keep window shrinks to the latest turn; the working set may fold
FORGET_ANY = 3  # the working set and the user's messages may be forgotten too
LAST_RESORT = 4  # the latest turn's outputs, the task and the latest user message are cut


@dataclass(frozen=True)
class Context:
    """What a strategy may know: token figures, how to count, its own options.

    `count` gives one message's raw token count (cached by the caller); `measure` turns a raw
    sum into the estimate the budget is written in (reply priming, calibration).
    """

    budget: int
    target: int
    count: Callable[[Message], int]
    measure: Callable[[int], int] = lambda raw: raw
    options: StrategyOptions | None = None  # the running strategy's own
    # One of the levels below, raised by the pipeline only while the view stays over its goal.
    pressure: int = 0
    lineage: Lineage | None = None
    fixed: int = 0  # tokens of the fixed part (prompts, task) within the budget

    def room(self) -> int:
        """The part of the budget that compaction can change: the budget less the fixed part."""
        return max(self.budget - self.fixed, 0)

    def usage(self, messages: Iterable[Message]) -> int:
        return self.measure(sum(self.count(m) for m in messages))

    def opts(self, kind: type[Opts]) -> Opts:
        """The running strategy's options, or `kind`'s defaults when it was given none."""
        return self.options if isinstance(self.options, kind) else kind()

    def keep_recent(self) -> int:
        keep = getattr(self.options, "keep_recent", KEEP_RECENT)
        return 0 if self.pressure >= NO_KEEP_WINDOW else keep


StrategyResult = tuple[list[Message], list[CompactionEvent]]


class Strategy(Protocol):
    def __call__(self, messages: list[Message], ctx: Context) -> StrategyResult: ...


class OverBudget(Exception):
    """Even the smallest form the pipeline can make does not fit the budget.

    `largest` names the biggest message left in that form: (position in the history, role,
    tokens), so the client can be told what to shorten."""

    def __init__(self, needed: int, budget: int, largest: tuple[int, str, int] | None = None):
        super().__init__(f"needs {needed} tokens, budget {budget}")
        self.needed, self.budget, self.largest = needed, budget, largest


class InvariantError(AssertionError):
    """Compaction produced an invalid request: a bug in a strategy, never the client's fault."""


# --- registry ------------------------------------------------------------------------------

STRATEGIES: dict[str, Strategy] = {}


def register(name: str) -> Callable[[Strategy], Strategy]:
    def deco(fn: Strategy) -> Strategy:
        STRATEGIES[name] = fn
        return fn

    return deco


def unregister(name: str) -> None:
    STRATEGIES.pop(name, None)


def get(name: str) -> Strategy:
    try:
        return STRATEGIES[name]
    except KeyError:
        known = ", ".join(sorted(STRATEGIES))
        raise KeyError(f"unknown compaction strategy {name!r} (known: {known})") from None


# --- the loop every compacting strategy shares ------------------------------------------------

# (current form, raw original) -> a smaller replacement, or None to leave the message alone.
Transform = Callable[[Message, Message], "Message | None"]

_MARKER = re.compile(
    r"^\[(?:… [\d,]+ (?:similar )?lines? elided …|Truncated — [\d,]+ chars removed[^\]]*"
    r"|Output of tool '.*' (?:folded|elided): .*|Assistant text folded: .*)\]$",
    re.MULTILINE,
)


MARKER = "[ctxproxy: "  # how a forget marker begins


def looks_compacted(msg: Message) -> bool:
    """A marker in the content: used only when no lineage says what the raw message was."""
    text = text_of(msg)
    return bool(text and _MARKER.search(text))


MIN_GAIN = 0.9  # a new form must cut at least a tenth of the message's tokens
# How far a pass reduces a message: a pass leaves alone what an equal or deeper pass made.
# A forget marker (merged into a kept message or standing alone) is left to `forget` alone.
DEPTH = {"cut": 1, "traceback": 1, "tiered:1": 1, "fold": 2, "tiered:2": 2, "tiered:3": 3}
DEPTH["forget"] = 9


def compact_until(
    messages: list[Message],
    ctx: Context,
    candidates: Iterable[int],
    transform: Transform,
    *,
    strategy: str,
    phase: int | None = None,
    reason: str,
) -> StrategyResult:
    """Replace candidates (oldest first) by their smaller forms until the view meets the target.

    One event for the whole pass, none when nothing shrank. The input list is not modified.
    """
    out = list(messages)
    raw = [ctx.count(m) for m in out]
    total = sum(raw)
    before = ctx.measure(total)
    lineage = ctx.lineage or Lineage(messages)
    label = strategy if phase is None else f"{strategy}:{phase}"
    iters = iterations(out)
    touched: set[int] = set()
    removed = 0
    for i in candidates:
        if ctx.measure(total) <= ctx.target:
            break
        cur = out[i]
        done = lineage.label(cur)
        if done is not None and DEPTH.get(done, 0) >= DEPTH.get(label, 0) > 0 or done == label:
            continue
        if ctx.lineage is None and looks_compacted(cur):
            continue  # never re-truncate: the marker's counts would drift
        origin = lineage.origin(cur)
        new = lineage.form(origin, label, partial(transform, cur, origin))
        if new is None or (n := ctx.count(new)) > MIN_GAIN * raw[i]:
            continue  # a marginal gain is not worth changing a message the prefix cache holds
        lineage.derive(new, cur, label)
        removed += content_size(out[i]) - content_size(new)
        total += n - raw[i]
        raw[i], out[i] = n, new
        touched.add(lineage.iteration(new, iters[i]))
    if not touched:
        return list(messages), []
    after = ctx.measure(total)
    event = CompactionEvent(strategy, phase, sorted(touched), before, after, removed, reason)
    return out, [event]
