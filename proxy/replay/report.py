"""What a replay found, per session: the figures of each configuration, side by side where
there are two (differences marked), as text or as JSON for scripts."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

from proxy.replay.runner import Replayed
from strategies.evidence import bears_failure
from strategies.messages import canonical_bytes, original_ref, text_of

SHOWN_LOST = 5  # lost user statements named in a text report (JSON has them all)


@dataclass(frozen=True)
class Kept:
    """One message the last view should hold: whether it does, and its ref in the store."""

    what: str
    kept: bool
    ref: str
    turn: int | None = None  # where in the history (the message's index)


@dataclass(frozen=True)
class Figures:
    turns: int
    sent: int
    original: int  # every turn's full history, refused ones too
    saved: int  # over the turns answered: a refused turn saved nothing
    overflowed: list[int]  # turns whose full history would not have fit
    firings: list[tuple[int, list[str]]]
    reuse: int  # tokens expected cached, over all turns
    uncached_view: int
    uncached_full: int
    refused: list[int]
    same_as_live: tuple[int, int] | None  # (turns whose view equals the live one, compared)
    statements: list[Kept]
    failure: Kept | None


def figures(r: Replayed) -> Figures:
    turns = r.turns
    done = [t for t in turns if t.error is None]
    compared = [t for t in turns if t.same_as_live is not None]
    last = done[-1] if done else None
    history = r.session.turns[last.number - 1].body["messages"] if last else []
    return Figures(
        len(turns),
        sum(t.sent for t in done),
        sum(t.original for t in turns),
        sum(t.original - t.sent for t in done),
        [t.number for t in turns if t.overflows],
        [(t.number, t.fired) for t in turns if t.fired],
        sum(t.reuse for t in done),
        sum(t.sent - t.reuse for t in done),
        sum(t.original - t.full_reuse for t in done),
        [t.number for t in turns if t.error is not None],
        (sum(1 for t in compared if t.same_as_live), len(compared)) if compared else None,
        _statements(history, last.view) if last else [],
        _failure(history, last.view) if last else None,
    )


class _View:
    """What a view holds, to ask whether a history's message is in it whole: as it came, or
    its full text within a message of the same role (a marker may follow a kept message)."""

    def __init__(self, view: list[dict[str, Any]]) -> None:
        self.exact = {canonical_bytes(m) for m in view}
        self.texts = [(m.get("role"), text_of(m) or "") for m in view]

    def holds(self, m: dict[str, Any]) -> bool:
        if canonical_bytes(m) in self.exact:
            return True
        text = text_of(m)
        if not text:
            return False
        return any(r == m.get("role") and text in t for r, t in self.texts)


def _statements(history: list[dict[str, Any]], view: list[dict[str, Any]]) -> list[Kept]:
    """The user's own words (not tool output) and whether the view holds each whole."""
    held = _View(view)
    out = []
    for i, m in enumerate(history):
        if m.get("role") == "user":
            text = (text_of(m) or "").strip().replace("\n", " ")
            out.append(Kept(text[:60], held.holds(m), original_ref(m), i))
    return out


def _failure(history: list[dict[str, Any]], view: list[dict[str, Any]]) -> Kept | None:
    """The newest tool output that holds a failure (a traceback, a failing test) and whether
    the view holds it whole."""
    for i in range(len(history) - 1, -1, -1):
        m = history[i]
        text = text_of(m) if m.get("role") == "tool" else None
        if text and bears_failure(text):
            first = next((line for line in text.splitlines() if line.strip()), "")
            return Kept(first.strip()[:60], _View(view).holds(m), original_ref(m), i)
    return None


# -- text ----------------------------------------------------------------------------------


def text(sessions: list[list[Replayed]], per_turn: bool) -> str:
    return "\n\n".join(_session_text(rs, per_turn) for rs in sessions)


def _session_text(rs: list[Replayed], per_turn: bool) -> str:
    s = rs[0].session
    lines = [f"{s.kind} {s.name}: {len(s.turns)} turns"]
    lines += [f"  ! lacks {what}: {_accounted(rs[0])}" for what in s.lacks]
    lines += [f"  ! {b}" for b in s.broken]
    if s.skipped:
        skipped = ", ".join(f"{k} x{n}" for k, n in sorted(s.skipped.items()))
        lines.append(f"  skipped entries of unknown type: {skipped}")
    lines += [f"  note: {n}" for n in s.notes]
    figs = [figures(r) for r in rs]
    rows = _rows(figs)
    head = ["", *(r.config.name for r in rs)]
    lines += _table([head, *rows], marked=len(rs) > 1)
    for r, f in zip(rs, figs, strict=True):
        lines += _lacking(r, f, len(rs) > 1)
        refused = next((t for t in r.turns if t.error), None)
        if refused is not None:
            lines.append(f"  {r.config.name}: turn {refused.number} refused: {refused.error}")
    if per_turn:
        for r in rs:
            lines += ["", f"  per turn, {r.config.name}:", *_turn_table(r)]
    return "\n".join(lines)


def _accounted(r: Replayed) -> str:
    fixed = r.config.fixed_tokens
    if fixed:
        return f"counted as {fixed:,} tokens in every turn (--fixed-tokens)"
    return "not counted: the figures below are low by its size; give --fixed-tokens N"


def _rows(figs: list[Figures]) -> list[list[str]]:
    def pct(part: int, whole: int) -> str:
        return f"{part / whole:.0%}" if whole else "-"

    def turns(numbers: list[int]) -> str:
        return _ranges(numbers) if numbers else "none"

    rows = [
        ("tokens sent", lambda f: f"{f.sent:,} of {f.original:,} ({pct(f.sent, f.original)})"),
        ("net tokens saved", lambda f: f"{f.saved:,}"),
        ("overflowed uncompacted", lambda f: f"{len(f.overflowed)} turns: {turns(f.overflowed)}"),
        ("firings", lambda f: f"{len(f.firings)} " + _firings(f.firings)),
        ("expected prefix reuse", lambda f: f"{f.reuse:,} tokens ({pct(f.reuse, f.sent)})"),
        ("cache misses (full)", lambda f: f"{f.uncached_view:,} ({f.uncached_full:,}) tokens"),
        ("refused", lambda f: turns(f.refused)),
        ("user statements kept", lambda f: _kept_count(f.statements)),
        ("newest failure", lambda f: _failure_text(f.failure)),
    ]
    out = [[name, *(show(f) for f in figs)] for name, show in rows]
    if any(f.same_as_live for f in figs):
        out.append(["same view as live", *(_live(f.same_as_live) for f in figs)])
    return out


def _live(pair: tuple[int, int] | None) -> str:
    return "-" if pair is None else f"{pair[0]} of {pair[1]} turns"


def _firings(found: list[tuple[int, list[str]]]) -> str:
    """The turns they fell on (the passes are in the per-turn table and the JSON)."""
    if not found:
        return "none"
    return ("at turn " if len(found) == 1 else "at turns ") + _ranges([n for n, _ in found])


def _kept_count(kept: list[Kept]) -> str:
    return f"{sum(k.kept for k in kept)} of {len(kept)}"


def _failure_text(k: Kept | None) -> str:
    if k is None:
        return "none in the history"
    return "kept" if k.kept else f"not kept ({k.ref})"


def _lacking(r: Replayed, f: Figures, named: bool) -> list[str]:
    lost = [k for k in f.statements if not k.kept]
    prefix = f"  {r.config.name}: " if named else "  "
    out = [f"{prefix}left out of the last view: {k.ref} {k.what!r}" for k in lost[:SHOWN_LOST]]
    if len(lost) > SHOWN_LOST:
        out.append(f"{prefix}… and {len(lost) - SHOWN_LOST} more user statements")
    return out


def _ranges(numbers: list[int]) -> str:
    parts: list[str] = []
    start = prev = numbers[0]
    for n in [*numbers[1:], None]:
        if n is not None and n == prev + 1:
            prev = n
            continue
        parts.append(str(start) if start == prev else f"{start}-{prev}")
        if n is not None:
            start = prev = n
    return ",".join(parts)


def _table(rows: list[list[str]], marked: bool) -> list[str]:
    widths = [max(len(r[i]) for r in rows) for i in range(len(rows[0]))]
    out = []
    for k, row in enumerate(rows):
        differs = marked and k > 0 and len(set(row[1:])) > 1
        cells = [c.ljust(w) for c, w in zip(row, widths, strict=True)]
        out.append(("* " if differs else "  ") + "  ".join(cells).rstrip())
    return out


def _turn_table(r: Replayed) -> list[str]:
    rows = [["turn", "from", "messages", "full", "sent", "budget", "reuse", "fired"]]
    for t in r.turns:
        fired = "refused" if t.error else "+".join(t.fired)
        budget = "-" if t.budget is None else f"{t.budget:,}"
        reuse = f"{t.reuse:,}"
        rows.append(
            [
                str(t.number),
                t.label,
                str(t.messages),
                f"{t.original:,}",
                f"{t.sent:,}",
                budget,
                reuse,
                fired + (" overflow" if t.overflows else ""),
            ]
        )
    return ["  " + line for line in _table(rows, marked=False)]


# -- JSON ----------------------------------------------------------------------------------


def as_json(sessions: list[list[Replayed]], per_turn: bool) -> list[dict[str, Any]]:
    return [_session_json(rs, per_turn) for rs in sessions]


def _session_json(rs: list[Replayed], per_turn: bool) -> dict[str, Any]:
    s = rs[0].session
    return {
        "session": s.name,
        "kind": s.kind,
        "turns": len(s.turns),
        "lacks": s.lacks,
        "broken": s.broken,
        "skipped": dict(sorted(s.skipped.items())),
        "notes": s.notes,
        "configs": [_config_json(r, per_turn) for r in rs],
    }


def _config_json(r: Replayed, per_turn: bool) -> dict[str, Any]:
    f = figures(r)
    out: dict[str, Any] = {
        "config": r.config.name,
        "window": r.config.window,
        "fixed_tokens": r.config.fixed_tokens,
        "tokens_sent": f.sent,
        "tokens_full": f.original,
        "tokens_saved": f.saved,
        "overflowed_turns": f.overflowed,
        "firings": [{"turn": n, "passes": labels} for n, labels in f.firings],
        "expected_reuse": f.reuse,
        "uncached": f.uncached_view,
        "uncached_full": f.uncached_full,
        "refused_turns": f.refused,
        "user_statements": [k.__dict__ for k in f.statements],
        "newest_failure": None if f.failure is None else f.failure.__dict__,
        "same_as_live": None if f.same_as_live is None else list(f.same_as_live),
    }
    if per_turn:
        out["per_turn"] = [{k: v for k, v in t.__dict__.items() if k != "view"} for t in r.turns]
    return out
