"""The session chart's geometry: tokens per turn as SVG polylines, compaction markers, axes."""

from __future__ import annotations

import math
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field

from proxy.store import ExchangeSummary

WIDTH, HEIGHT = 960, 340
LEFT, RIGHT, TOP, BOTTOM = 64, 16, 16, 44
LOG_WHEN = 5.0  # auto scale: log once the original outgrows everything else this many times
PALETTE = ["#d9480f", "#7048e8", "#0c8599", "#e67700", "#c2255c", "#2b8a3e", "#495057"]


@dataclass(frozen=True)
class Series:
    name: str
    css: str
    points: str  # "x,y x,y …" for <polyline points>


@dataclass(frozen=True)
class Marker:
    seq: int
    x: float
    y: float
    phases: list[str]
    color: str
    label: str | None  # drawn when the phases differ from the previous marker's


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
    legend: list[tuple[str, str]] = field(default_factory=list)  # phase, color
    plot: tuple[float, float, float, float] = (LEFT, TOP, WIDTH - RIGHT, HEIGHT - BOTTOM)


def build(turns: Sequence[ExchangeSummary], scale: str | None = None) -> Chart | None:
    """None without turns. `scale` forces linear or log; by default it is picked from the data."""
    if not turns:
        return None
    values: dict[str, list[int | None]] = {
        "original": [t.tokens_original for t in turns],
        "compiled": [t.tokens_compiled for t in turns],
        "budget": [t.budget for t in turns],
        "window": [t.window for t in turns],
    }
    top = max((v or 0 for vs in values.values() for v in vs), default=0) or 1
    rest = max((v or 0 for k, vs in values.items() if k != "original" for v in vs), default=0) or 1
    if scale not in ("linear", "log"):
        scale = "log" if top > LOG_WHEN * rest else "linear"
    y = _y_scale(scale, top)
    x = _x_scale(len(turns))
    series = [
        Series(name, name, " ".join(f"{x(i):.1f},{y(v):.1f}" for i, v in enumerate(vs) if v))
        for name, vs in values.items()
        if any(vs)
    ]
    colors: dict[str, str] = {}
    markers: list[Marker] = []
    previous: list[str] | None = None
    for i, t in enumerate(turns):
        if not t.phases:
            continue
        for p in t.phases:
            colors.setdefault(p, PALETTE[len(colors) % len(PALETTE)])
        label = ", ".join(t.phases) if t.phases != previous else None
        markers.append(
            Marker(t.seq, x(i), y(t.tokens_compiled), t.phases, colors[t.phases[0]], label)
        )
        previous = t.phases
    return Chart(
        WIDTH,
        HEIGHT,
        scale,
        series,
        markers,
        _x_ticks(turns, x),
        _y_ticks(scale, top, y),
        list(colors.items()),
    )


def _x_scale(n: int) -> Callable[[int], float]:
    span = WIDTH - LEFT - RIGHT
    step = span / max(n - 1, 1)
    return lambda i: LEFT + (i * step if n > 1 else span / 2)


def _y_scale(scale: str, top: int) -> Callable[[int | None], float]:
    span = HEIGHT - TOP - BOTTOM
    if scale == "log":
        hi = math.log10(max(top, 10)) * 1.05
        return lambda v: HEIGHT - BOTTOM - span * math.log10(max(v or 1, 1)) / hi
    hi = top * 1.08
    return lambda v: HEIGHT - BOTTOM - span * (v or 0) / hi


def _x_ticks(turns: Sequence[ExchangeSummary], x: Callable[[int], float]) -> list[Tick]:
    every = max(1, math.ceil(len(turns) / 12))
    return [Tick(x(i), str(t.seq)) for i, t in enumerate(turns) if i % every == 0]


def _y_ticks(scale: str, top: int, y: Callable[[int | None], float]) -> list[Tick]:
    if scale == "log":
        steps = [10**e for e in range(0, len(str(max(top, 1))) + 1) if 10**e <= top * 1.05]
        return [Tick(y(v), _short(v)) for v in steps]
    step = _nice_step(top / 5)
    return [Tick(y(v), _short(v)) for v in range(0, int(top * 1.08) + 1, step)]


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
