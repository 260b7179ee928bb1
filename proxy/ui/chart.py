"""The session chart's geometry: tokens per turn as SVG polylines, compaction markers, axes."""

from __future__ import annotations

import hashlib
import math
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field

from proxy.store import ExchangeSummary

WIDTH, HEIGHT = 960, 340
LEFT, RIGHT, TOP, BOTTOM = 64, 16, 16, 44
LOG_WHEN = 5.0  # auto scale: log once the original outgrows everything else this many times
# One colour per strategy, the same on every page; a strategy not listed gets one by its name.
STRATEGY_COLORS = {
    "traceback": "#d9480f",
    "tiered": "#7048e8",
    "fold": "#0c8599",
    "sliding_window": "#e67700",
    "evidence": "#c2255c",
    "none": "#495057",
}
PALETTE = ["#2b8a3e", "#1864ab", "#862e9c", "#a61e4d", "#5c940d", "#0b7285", "#e8590c"]
FAILED_COLOR = "#c92a2a"
CAUSE_COLORS = {"firing": "#e8590c", "client": "#1864ab", "evicted": "#862e9c"}
LABEL_FONT_PX = 11
LABEL_CHAR_PX = 6.8  # an upper bound for the label font's average glyph width
LABEL_LANES = 3  # rows of labels along the top; a label that fits no row is left to the legend
LANE_PX = 15
LABEL_GAP = 8


def strategy_color(strategy: str) -> str:
    if strategy in STRATEGY_COLORS:
        return STRATEGY_COLORS[strategy]
    digest = hashlib.sha256(strategy.encode()).digest()
    return PALETTE[digest[0] % len(PALETTE)]


@dataclass(frozen=True)
class Series:
    name: str
    css: str
    points: str  # "x,y x,y …" for <polyline points>


@dataclass(frozen=True)
class Label:
    text: str
    x: float
    y: float
    anchor: str  # SVG text-anchor: start, or end near the right edge


@dataclass(frozen=True)
class Marker:
    seq: int
    x: float
    y: float
    phases: list[str]
    color: str
    label: Label | None  # where the phases change, if a row along the top has room


@dataclass(frozen=True)
class Failure:
    seq: int
    x: float
    y: float
    title: str


@dataclass(frozen=True)
class Break:
    """A turn that found less of its prompt cached than an unchanged view would have."""

    seq: int
    x: float
    y: float
    cause: str
    color: str
    title: str


@dataclass(frozen=True)
class Tick:
    at: float
    label: str


@dataclass(frozen=True)
class Chart:
    width: int
    height: int
    scale: str  # linear or log
    series: list[Series]
    markers: list[Marker]
    x_ticks: list[Tick]
    y_ticks: list[Tick]
    legend: list[tuple[str, str]] = field(default_factory=list)  # strategy, color
    failures: list[Failure] = field(default_factory=list)
    breaks: list[Break] = field(default_factory=list)
    plot: tuple[float, float, float, float] = (LEFT, TOP, WIDTH - RIGHT, HEIGHT - BOTTOM)


def build(turns: Sequence[ExchangeSummary], scale: str | None = None) -> Chart | None:
    """None without turns. `scale` forces linear or log; by default it is picked from the data.
    A failed request is a cross, not a point of the compiled line: it sent nothing or got no
    answer; a refused one sits at the tokens it needed."""
    if not turns:
        return None
    failed = [t.status is not None and t.status >= 400 for t in turns]
    values: dict[str, list[int | None]] = {
        "original": [t.tokens_original for t in turns],
        "compiled": [None if f else t.tokens_compiled for t, f in zip(turns, failed, strict=True)],
        "budget": [t.budget for t in turns],
        "window": [t.window for t in turns],
        # The prompt cache as the upstream saw it (proxy/exchange/cache.py), and compaction's
        # saving so far net of the cache its firings lost.
        "cached": [t.cached_tokens for t in turns],
        "expected": [t.cache_expected for t in turns],
        "net saved": _net_saved(turns, failed),
    }
    shown = [v for k, vs in values.items() if k != "net saved" for v in vs if v] + [
        t.tokens_compiled for t, f in zip(turns, failed, strict=True) if f and t.tokens_compiled
    ]
    top = max(shown, default=0) or 1
    # The log scale is for an original far above what was sent; the saving follows the original.
    beside = (v or 0 for k, vs in values.items() if k not in ("original", "net saved") for v in vs)
    rest = max(beside, default=0) or 1
    if scale not in ("linear", "log"):
        scale = "log" if top > LOG_WHEN * rest else "linear"
    floor = _log_floor(min(shown, default=1))
    y = _y_scale(scale, top, floor)
    x = _x_scale(len(turns))
    series = [
        Series(
            name,
            name.replace(" ", "-"),
            " ".join(f"{x(i):.1f},{y(v):.1f}" for i, v in enumerate(vs) if v is not None),
        )
        for name, vs in values.items()
        if any(vs)
    ]
    markers, legend = _markers(turns, x, y)
    failures = [
        Failure(t.seq, x(i), y(t.tokens_compiled or t.tokens_original), _failure_title(t))
        for i, (t, f) in enumerate(zip(turns, failed, strict=True))
        if f
    ]
    breaks = [
        Break(
            t.seq,
            x(i),
            y(t.cached_tokens if t.cached_tokens is not None else t.cache_expected),
            t.cache_cause,
            CAUSE_COLORS.get(t.cache_cause, FAILED_COLOR),
            f"request {t.seq}: cache lost {t.cache_lost or 0:,} tokens ({t.cache_cause})",
        )
        for i, t in enumerate(turns)
        if t.cache_cause
    ]
    return Chart(
        WIDTH,
        HEIGHT,
        scale,
        series,
        markers,
        _x_ticks(turns, x),
        _y_ticks(scale, top, floor, y),
        legend,
        failures,
        breaks,
    )


def _net_saved(turns: Sequence[ExchangeSummary], failed: list[bool]) -> list[int | None]:
    """Each turn's prompt tokens saved less the cache its firing lost, at 0 where the loss
    outweighs the saving (the session's total is in the summary above the chart); None
    where the turn failed or no turn so far has saved anything."""
    out: list[int | None] = []
    for t, f in zip(turns, failed, strict=True):
        lost = (t.cache_lost or 0) if t.cache_cause == "firing" else 0
        net = t.tokens_original - t.tokens_compiled - lost
        out.append(None if f or not any(out) and net <= 0 else max(net, 0))
    return out


def _failure_title(t: ExchangeSummary) -> str:
    if t.error_code == "context_length_exceeded":
        return (
            f"request {t.seq}: refused, needs {t.tokens_compiled:,} tokens, "
            f"budget {t.budget or 0:,}"
        )
    return f"request {t.seq}: failed, HTTP {t.status} ({t.error_code or 'error'})"


def _markers(
    turns: Sequence[ExchangeSummary],
    x: Callable[[int], float],
    y: Callable[[int | None], float],
) -> tuple[list[Marker], list[tuple[str, str]]]:
    """A marker where compaction fired; a label where the phases change, placed in the first
    row along the top where it overlaps no other label and stays inside the plot."""
    markers: list[Marker] = []
    legend: dict[str, str] = {}
    lanes = [float("-inf")] * LABEL_LANES  # where each row's last label ends
    previous: list[str] | None = None
    for i, t in enumerate(turns):
        if not t.phases:
            continue
        for p in t.phases:
            strategy = p.split(":")[0]
            legend.setdefault(strategy, strategy_color(strategy))
        label = None
        if t.phases != previous:
            label = _place(", ".join(t.phases), x(i), lanes)
        color = strategy_color(t.phases[0].split(":")[0])
        markers.append(Marker(t.seq, x(i), y(t.tokens_compiled), t.phases, color, label))
        previous = t.phases
    return markers, sorted(legend.items())


def _place(text: str, at: float, lanes: list[float]) -> Label | None:
    width = len(text) * LABEL_CHAR_PX
    right = WIDTH - RIGHT
    start, anchor = at + 4, "start"
    if start + width > right:  # near the right edge: the label ends at its marker instead
        start, anchor = at - 4 - width, "end"
    if start < LEFT:
        return None
    for lane, end in enumerate(lanes):
        if start >= end + LABEL_GAP:
            lanes[lane] = start + width
            y = TOP + LABEL_FONT_PX + lane * LANE_PX
            return Label(text, start if anchor == "start" else start + width, y, anchor)
    return None


def _x_scale(n: int) -> Callable[[int], float]:
    span = WIDTH - LEFT - RIGHT
    step = span / max(n - 1, 1)
    return lambda i: LEFT + (i * step if n > 1 else span / 2)


def _log_floor(smallest: int) -> int:
    """The log axis starts at the power of ten below the smallest value, not at 1: the height
    goes to where the data is."""
    return 10 ** int(math.floor(math.log10(max(smallest, 1))))


def _y_scale(scale: str, top: int, floor: int = 1) -> Callable[[int | None], float]:
    span = HEIGHT - TOP - BOTTOM - LABEL_LANES * LANE_PX  # the labels' rows stay clear
    bottom = HEIGHT - BOTTOM
    if scale == "log":
        lo = math.log10(floor)
        hi = max(math.log10(max(top, 10)) + 0.05, lo + 1)
        return lambda v: bottom - span * (math.log10(max(v or floor, floor)) - lo) / (hi - lo)
    hi = top * 1.05
    return lambda v: bottom - span * (v or 0) / hi


def _x_ticks(turns: Sequence[ExchangeSummary], x: Callable[[int], float]) -> list[Tick]:
    every = max(1, math.ceil(len(turns) / 12))
    return [Tick(x(i), str(t.seq)) for i, t in enumerate(turns) if i % every == 0]


def _y_ticks(scale: str, top: int, floor: int, y: Callable[[int | None], float]) -> list[Tick]:
    if scale == "log":
        steps = []
        decade = floor
        while decade <= top * 1.05:
            steps += [m * decade for m in (1, 2, 5) if m * decade <= top * 1.05]
            decade *= 10
        if len([v for v in steps if str(v).startswith("1")]) >= 3:  # many decades: 10ⁿ only
            steps = [v for v in steps if str(v).startswith("1")]
        return [Tick(y(v), _short(v)) for v in steps]
    step = _nice_step(top / 5)
    return [Tick(y(v), _short(v)) for v in range(0, int(top * 1.05) + 1, step)]


def _nice_step(raw: float) -> int:
    magnitude = 10 ** max(int(math.log10(max(raw, 1))), 0)
    for m in (1, 2, 5, 10):
        if raw <= m * magnitude:
            return int(m * magnitude)
    return int(10 * magnitude)


def _short(v: int) -> str:
    if v >= 1_000_000:
        return f"{v / 1_000_000:g}M"
    if v >= 1000:
        return f"{v / 1000:g}k"
    return str(v)
