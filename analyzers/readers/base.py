"""What every reader returns, and helpers shared by the readers."""

from __future__ import annotations

from collections.abc import Callable, Iterator
from contextlib import contextmanager
from contextvars import ContextVar
from dataclasses import dataclass, field
from pathlib import Path

import polars as pl

from tracekit.frames import SPECS, FrameSpec


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


ReadProgress = Callable[[int, int], None]
"""Called by a reader as it goes: bytes of the file's text read so far, and the text's size (an estimate for a
compressed file, exact at the end)."""
_PROGRESS: ContextVar[ReadProgress | None] = ContextVar("tracekit_read_progress", default=None)


@contextmanager
def reporting_progress(fn: ReadProgress) -> Iterator[None]:
    """Readers called within this block report their progress to ``fn`` (those that read in steps: Kineto)."""
    token = _PROGRESS.set(fn)
    try:
        yield
    finally:
        _PROGRESS.reset(token)


def read_progress() -> ReadProgress | None:
    """The progress callback of the enclosing ``reporting_progress`` block, if any."""
    return _PROGRESS.get()


def source_name(path: Path) -> str:
    return path.name


def _fits(values: list[object], dtype: pl.DataType) -> tuple[pl.Series, int]:
    """``values`` as a Series of ``dtype``; a value that does not fit (out of range, not a number) becomes null."""
    series = pl.Series(values, dtype=dtype, strict=False)
    return series, series.null_count() - sum(v is None for v in values)


def fit_rows(rows: list[dict], spec: FrameSpec) -> tuple[pl.DataFrame, int]:
    """``rows`` (dicts keyed by column) as a frame of ``spec`` and the number of values that did not fit.

    A damaged report holds values no real one does (a grid of 5,460,000,000 blocks, a cell of ``1e999``): each
    becomes null and is counted, so the reader keeps the rest of the file and marks it partial instead of
    failing on one value. Columns no row has are left out (``spec.conform`` adds them as nulls)."""
    if not rows:
        return spec.empty(), 0
    schema = spec.schema
    columns, bad = {}, 0
    for name in schema.names():
        if any(name in r for r in rows):
            columns[name], n = _fits([r.get(name) for r in rows], schema[name])
            bad += n
    return pl.DataFrame(columns), bad


def fit_frame(df: pl.DataFrame, spec: FrameSpec) -> tuple[pl.DataFrame, int]:
    """``df`` conformed to ``spec`` and the number of values that did not fit their column's type (now null).

    ``spec.conform`` casts strictly and raises on one out-of-range value; this is for readers of damaged files
    (an INTEGER column set to 2**63 - 1, text in a number column), which keep the rest and say how much was lost."""
    if df.width == 0:
        return spec.empty(), 0
    # only the columns of another type: a cast to the column's own type changes nothing, but rewriting a column
    # of a frame read in parts joined them (0.1-0.27 s of the 5M-range nsys frame, whose types all fit)
    casts = {
        c.name: pl.col(c.name).cast(c.dtype, strict=False)
        for c in spec.columns
        if c.name in df.columns and df.schema[c.name] != c.dtype
    }
    cast = df.with_columns(**casts) if casts else df
    bad = sum(cast[name].null_count() - df[name].null_count() for name in casts)
    return spec.conform(cast), bad
