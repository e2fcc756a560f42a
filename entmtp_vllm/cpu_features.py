"""The CPU's feature flags, as Linux lists them: what the front door and the CPU kernels check."""

from __future__ import annotations

from pathlib import Path


def cpu_flags(path: Path = Path("/proc/cpuinfo")) -> set[str]:
    """The CPU's feature flags (empty when unreadable)."""
    try:
        for line in path.read_text().splitlines():
            if line.startswith("flags"):
                return set(line.split(":", 1)[1].split())
    except OSError:
        pass
    return set()
