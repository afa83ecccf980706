"""What every reader returns, and helpers shared by the readers."""

from __future__ import annotations

from dataclasses import dataclass, field
from pathlib import Path

import polars as pl

from tracekit.frames import SPECS


@dataclass
class Extract:
    """Frames read from one raw file.

    ``frames`` maps frame names (``tracekit.frames.SPECS``) to frames already conformed to their schema. Ids
    (``kernel_id``, ``range_id``/``parent_id``, ``ncu_id``, ...) are local to this file, 0-based; the importer
    offsets them when a run holds several files. ``partial`` marks a file read only in part (e.g. a table that
    could not be read); ``warnings`` say what was skipped, in one line each.
    """

    kind: str
    source: str
    frames: dict[str, pl.DataFrame] = field(default_factory=dict)
    partial: bool = False
    warnings: list[str] = field(default_factory=list)

    def frame(self, name: str) -> pl.DataFrame:
        return self.frames.get(name, SPECS[name].empty())


def source_name(path: Path) -> str:
    return path.name
