"""Peak and current RSS of a process tree."""

from __future__ import annotations

from pathlib import Path


def _tree(pid: int) -> list[int]:
    import psutil

    try:
        p = psutil.Process(pid)
        return [pid] + [c.pid for c in p.children(recursive=True)]
    except psutil.Error:
        return []


def reset_peak_rss(pid: int) -> None:
    """Reset the kernel's high-water mark (VmHWM) of the process tree."""
    for p in _tree(pid):
        try:
            Path(f"/proc/{p}/clear_refs").write_text("5")
        except OSError:
            pass


def peak_rss_mb(pid: int) -> float:
    """Sum of VmHWM over the process tree, MiB."""
    total = 0
    for p in _tree(pid):
        try:
            for line in Path(f"/proc/{p}/status").read_text().splitlines():
                if line.startswith("VmHWM:"):
                    total += int(line.split()[1])
        except OSError:
            pass
    return total / 1024
