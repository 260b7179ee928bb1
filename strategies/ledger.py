"""The ledger: the user's own words from forgotten turns, carried verbatim in the user's voice.

Only what the user wrote is carried as the user's. Output the user relayed inside a message (a
fenced block, a labelled paste such as `Output of ...:` or `Observation:`, a block of machine
lines) is carried as a pointer: what it was, its size and its recall ref, never its text.
Exact and near duplicates are carried once (the newest). Every forgotten user message is
carried while room allows; when it is short, the least informative leave first, judged by
generic features of the text: concrete values (numbers, paths, identifiers, quoted text),
modality (must, never, only, at most...), statements over questions, and novelty against
what the view already holds, per token. The text is a pure
function of the raw history, the forgotten set and the view's words: the same bytes each time.
"""

from __future__ import annotations

import math
import re
from collections.abc import Callable, Sequence
from dataclasses import dataclass

from strategies.excerpts import ELLIPSIS, excerpt, formula_words
from strategies.memo import text_cache
from strategies.messages import Message, recall_ref, text_of
from strategies.values import CONCRETE, information, words_of

HEADING = "The user's own words in those turns (verbatim, a message a line, oldest first):"
PARSED_CHARS = 20_000  # of a user message, at most, read for its words and relays

FENCE = re.compile(r"^\s*(`{3,}|~{3,})\s*([\w+.-]*)")
# A line that labels what follows as relayed output (aider, ReAct and pasted logs).
RELAY_LABEL = re.compile(
    r"^\s*(?:(?:here(?:'s| is| are) )?(?:the )?(?:output|result|results|observation|stdout|"
    r"stderr|log|logs|console|terminal|response|contents?)\b[^:\n]{0,100}:|observation\b)",
    re.IGNORECASE,
)
POINTER = "[relayed "  # how a relay pointer (ctxproxy's text, never cut) begins
NEAR = 0.85  # word-set overlap over which two messages with the same values are one


NEAR_COMPARED = 64  # later messages with the same values that an entry is compared with


@dataclass(frozen=True)
class Entry:
    index: int  # raw position of the user message
    text: str  # as carried: the user's words, relays as pointers
    words: frozenset[str]
    info: float  # how much it carries, before novelty
    values: tuple[str, ...] = ()  # its concrete values, sorted: near duplicates share them


def relay_pointer(what: str, body: Sequence[str], ref: str) -> str:
    text = "\n".join(body)
    return (
        f"{POINTER}{what}: {len(body):,} lines, {len(text):,} chars, not carried; "
        f'recall ref "{ref}"]'
    )


def _prose(line: str) -> bool:
    """A line written as a sentence rather than machine output."""
    s = line.strip()
    if not s or line[:2] in ("  ", "\t") or s[0] in "{}[]<>|#$>" or "  " in s:
        return False
    words = s.split()
    letters = sum(c.isalpha() or c.isspace() for c in s) / len(s)
    return len(words) >= 4 and letters >= 0.75


def _label(line: str) -> str:
    what = " ".join(line.strip().rstrip(":").split())
    return what if len(what) <= 60 else what[:59] + "…"


def user_form(text: str, ref: str) -> str:
    """A user message as carried: its own words whitespace-normalised, each relayed block
    replaced by a pointer."""
    lines = text[:PARSED_CHARS].split("\n")
    out: list[str] = []
    para: list[str] = []
    i = 0

    def flush() -> None:
        if len(para) >= 3 and sum(not _prose(p) for p in para) * 2 >= len(para):
            out.append(relay_pointer("pasted block", para, ref))
        else:
            out.extend(para)
        para.clear()

    while i < len(lines):
        line = lines[i]
        fence = FENCE.match(line)
        if fence:
            flush()
            close = next(
                (j for j in range(i + 1, len(lines)) if lines[j].strip().startswith(fence[1])),
                len(lines),
            )
            lang = f" {fence[2]}" if fence[2] else ""
            out.append(relay_pointer(f"fenced{lang} block", lines[i + 1 : close], ref))
            i = close + 1
            continue
        if RELAY_LABEL.match(line):
            flush()
            rest = [line.split(":", 1)[1]] if ":" in line else []
            body = [x for x in rest + lines[i + 1 :] if x.strip()]
            out.append(relay_pointer(_label(line.split(":", 1)[0]), body, ref))
            break
        if line.strip():
            para.append(line)
        else:
            flush()
        i += 1
    flush()
    if len(text) > PARSED_CHARS:
        out.append(relay_pointer("rest of the message", text[PARSED_CHARS:].split("\n"), ref))
    return " ".join(" ".join(out).split())


@text_cache()
def _entry_parts(text: str, ref: str) -> tuple[str, frozenset[str], float, tuple[str, ...]]:
    carried = user_form(text, ref)
    return (
        carried,
        words_of(carried),
        information(carried),
        tuple(sorted(CONCRETE.findall(carried))),
    )


def entries(raw: Sequence[Message], forgotten: Sequence[int]) -> list[Entry]:
    """One entry per forgotten user message with words in it, oldest first; an exact or near
    duplicate of a later one (the same values, nearly the same words) is left to the later.
    Linear in the messages: a near duplicate is looked for only among the NEAR_COMPARED later
    messages with the same values nearest to it, so thousands of forgotten turns cost little."""
    found: list[Entry] = []
    for i in sorted(forgotten):
        msg = raw[i]
        text = text_of(msg) if msg.get("role") == "user" else None
        if not text or not text.strip():
            continue
        found.append(Entry(i, *_entry_parts(text, recall_ref(msg))))
    later_texts: set[str] = set()
    later_alike: dict[tuple[str, ...], list[Entry]] = {}  # by values, the nearest last
    kept: list[Entry] = []
    for entry in reversed(found):
        alike = later_alike.setdefault(entry.values, [])
        if entry.text not in later_texts and not any(_near(entry, b) for b in alike):
            kept.append(entry)
        later_texts.add(entry.text)
        alike.append(entry)
        if len(alike) > NEAR_COMPARED:
            del alike[0]
    return kept[::-1]


def _near(a: Entry, b: Entry) -> bool:
    """Nearly the same words (the values were found the same)."""
    small, large = sorted((len(a.words), len(b.words)))
    if small < NEAR * large:  # the overlap is at most small / large
        return False
    union = len(a.words | b.words)
    return bool(union) and len(a.words & b.words) / union >= NEAR


def cap_tokens(budget: int, share: float) -> int:
    return int(budget * share)


@dataclass(frozen=True)
class Unit:
    entry: int  # position of its entry in the list
    n: int  # its place in the entry
    text: str  # a sentence, or a relay pointer
    words: frozenset[str]


def render(
    raw: Sequence[Message],
    forgotten: Sequence[int],
    cap: int,
    size: Callable[[str], int] = len,
    held: frozenset[str] = frozenset(),
) -> str:
    """The ledger within `cap` (in the units of `size`, summed line by line; "" when nothing
    is carried). Every message whole when all fit; else sentence by sentence, the least
    informative per unit of size leaving first, novelty judged against `held` (the words the
    view already holds) and against the other sentences. Sentences are chosen in their
    excerpt's size (strategies/excerpts.py: without the lead-ins and tails the user repeats),
    and the room left then brings the cut words back, the cheapest first. A shortened message
    shows "…" where words or sentences left; the heading says how many were shortened or
    left out."""
    all_entries = entries(raw, forgotten)
    if not all_entries or cap <= 0:
        return ""
    whole = [e.text for e in all_entries]
    if size(HEADING) + sum(size(t) + 1 for t in whole) <= cap:
        return _text(whole, 0)
    heading = size(HEADING + _note(len(all_entries)))
    units = [
        Unit(k, n, t, words_of(t))
        for k, e in enumerate(all_entries)
        for n, t in enumerate(sentences(e.text))
    ]
    value = _values(units, held)
    formula = formula_words([u.words for u in units])
    short = [u.text if u.text.startswith(POINTER) else excerpt(u.text, formula) for u in units]
    full = [size(u.text) + 1 for u in units]
    cost = [c if s == u.text else size(s) + 1 for c, s, u in zip(full, short, units, strict=True)]
    density = [value[i] / cost[i] ** 0.8 for i in range(len(units))]
    chosen: dict[int, str] = {}
    started: set[int] = set()
    room = cap - heading
    for i in sorted(range(len(units)), key=lambda i: (-density[i], -i)):
        extra = cost[i] + (0 if units[i].entry in started else 1)
        if extra <= room:
            chosen[i] = short[i]
            started.add(units[i].entry)
            room -= extra
    for i in sorted(chosen, key=lambda i: (full[i] - cost[i], -i)):
        if chosen[i] != units[i].text and full[i] - cost[i] <= room:
            chosen[i] = units[i].text
            room -= full[i] - cost[i]
    while chosen and _size(units, chosen, size) + heading > cap:
        del chosen[min(chosen, key=lambda i: (density[i], i))]
    lines = _lines(units, chosen)
    changed = len(all_entries) - sum(line in whole for line in lines)
    return _text(lines, changed) if lines else ""


SENTENCE = re.compile(r"(?<=[.!?;])\s+(?=\S)|(?<=\])\s+(?=\S)|\s+(?=\[relayed )")


WHOLE_POINTER = re.compile(r"(\[relayed [^\]\n]*\])")


def sentences(text: str) -> list[str]:
    """The sentences of a carried message; a relay pointer is one, whatever it holds."""
    out: list[str] = []
    for part in WHOLE_POINTER.split(text):
        split = [part] if part.startswith(POINTER) else SENTENCE.split(part)
        out += [x.strip() for x in split if x.strip()]
    return out


def _lines(units: list[Unit], chosen: dict[int, str]) -> list[str]:
    """Each message with a chosen sentence, as one line, each sentence as chosen (whole or
    its excerpt); "…" marks where words or sentences left, once however many left there."""
    by_entry: dict[int, list[tuple[Unit, str | None]]] = {}
    for i, u in enumerate(units):
        by_entry.setdefault(u.entry, []).append((u, chosen.get(i)))
    out = []
    for parts in by_entry.values():
        if not any(text for _, text in parts):
            continue
        kept: list[str] = []
        gap = False
        for u, text in parts:
            if text is None:
                gap = True
                continue
            if (gap or (not kept and u.n)) and not text.startswith(ELLIPSIS):
                text = f"{ELLIPSIS} {text}"
            if kept and kept[-1].endswith(ELLIPSIS) and text.startswith(ELLIPSIS):
                text = text[1:].lstrip()
            kept.append(text)
            gap = False
        line = " ".join(kept)
        out.append(line + f" {ELLIPSIS}" if gap and not line.endswith(ELLIPSIS) else line)
    return out


def _size(units: list[Unit], chosen: dict[int, str], size: Callable[[str], int]) -> int:
    return sum(size(line) + 1 for line in _lines(units, chosen))


def _values(units: list[Unit], held: frozenset[str]) -> dict[int, float]:
    """Information weighted by novelty: how rare a sentence's words are among the forgotten
    user words (a pattern repeated in many says little) and whether the view already holds
    them; a repeated sentence counts once (the latest). A tie goes to the newer."""
    df: dict[str, int] = {}
    for u in units:
        for w in u.words:
            df[w] = df.get(w, 0) + 1
    n = len(units)
    top = math.log1p(n)
    latest = {" ".join(u.text.lower().split()): i for i, u in enumerate(units)}
    out: dict[int, float] = {}
    for i, u in enumerate(units):
        if latest[" ".join(u.text.lower().split())] != i:
            out[i] = 0.0
            continue
        rare = [math.log1p(n / df[w]) / top for w in u.words if w not in held]
        novel = sum(rare) / len(u.words) if u.words else 0.0
        out[i] = information(u.text, held) * (0.4 + 0.6 * novel) + 1e-9 * math.log1p(i)
    return out


def _note(left: int) -> str:
    return f" ({left} shortened or left out for room, {ELLIPSIS} marks a cut; recall them by query)"


def _text(kept: list[str], left: int) -> str:
    return "\n".join([HEADING + (_note(left) if left else ""), *kept])
