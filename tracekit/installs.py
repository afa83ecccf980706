"""Where NVIDIA's tools are installed: version folders (``/opt/nvidia/nsight-compute/2025.3.1``), newest first.
Shared by the collectors (finding ncu and nsys) and the analyzers (finding Nsight Compute's report reader)."""

from __future__ import annotations

import re
from collections.abc import Iterable
from pathlib import Path


def version_key(path: Path) -> tuple[int, ...]:
    """Sort key for folders named like ``2025.3.1``: numeric parts, so 2025.10 sorts after 2025.9."""
    return tuple(int(p) for p in re.findall(r"\d+", path.name)) or (-1,)


def newest_first(paths: Iterable[Path]) -> list[Path]:
    """``paths`` ordered by the version in their names, newest first."""
    return sorted(paths, key=version_key, reverse=True)


def versioned_dirs(parent: Path) -> list[Path]:
    """Version folders under ``parent``, newest first."""
    if not parent.is_dir():
        return []
    return newest_first(p for p in parent.iterdir() if p.is_dir())
