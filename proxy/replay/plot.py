"""`ctxproxy replay --plot FILE.png`: tokens sent per turn for the full history and each
configuration, firings marked, the window as a line (matplotlib, the `plot` extra)."""

from __future__ import annotations

from pathlib import Path

from proxy.replay.runner import Replayed


class PlotUnavailable(Exception):
    """matplotlib is not installed; the message says how to get it."""


def draw(replays: list[Replayed], path: Path) -> None:
    """One panel for one session (the first replayed, when there are several)."""
    try:
        import matplotlib

        matplotlib.use("Agg")  # a file, never a window
        import matplotlib.pyplot as plt
    except ImportError as exc:
        raise PlotUnavailable(
            f"--plot needs matplotlib ({exc}): pip install 'ctxproxy[plot]'"
        ) from None
    fig, ax = plt.subplots(figsize=(10, 5), dpi=100)
    first = replays[0]
    numbers = [t.number for t in first.turns]
    ax.plot(numbers, [t.original for t in first.turns], color="0.55", label="full history")
    for r, color in zip(replays, ("tab:blue", "tab:orange", "tab:green"), strict=False):
        sent = [t.sent if t.error is None else float("nan") for t in r.turns]
        ax.plot(numbers, sent, color=color, label=f"sent: {r.config.name}")
        fired = [t for t in r.turns if t.fired]
        ax.scatter(
            [t.number for t in fired], [t.sent for t in fired], color=color, marker="v", zorder=3
        )
        if r.config.window:
            ax.axhline(r.config.window, color=color, linestyle="--", linewidth=1)
            ax.annotate(
                f"window {r.config.window:,}",
                (numbers[0] if numbers else 1, r.config.window),
                textcoords="offset points",
                xytext=(0, 4),
                color=color,
                fontsize=8,
            )
    ax.set_xlabel("turn")
    ax.set_ylabel("prompt tokens")
    ax.set_title(f"{first.session.kind} {first.session.name}: tokens sent per turn (▼ firing)")
    ax.set_ylim(bottom=0)
    ax.legend(loc="lower right")
    ax.grid(alpha=0.3)
    fig.tight_layout()
    fig.savefig(path)
    plt.close(fig)
