"""Range instances on the GPU: each range name folded to its key (index suffixes dropped), and each instance's GPU
window per device (first start to last end of the rows launched inside it, nested ranges included)."""

from __future__ import annotations

import re
from dataclasses import dataclass

import numpy as np
import polars as pl

from ..gemm.case import context_key
from ..gemm.ranges import _positions
from ..gemm.user_ranges import range_key

__all__ = ["MAX_DEPTH", "fold_range_name", "instance_windows"]

MAX_DEPTH = 256
"""Ancestors followed per range at most (a damaged file's parent links could loop)."""

_INDEX_FIELD = re.compile(
    r"\s*[,;]?\s*\b(?:i|idx|index|it|iter|iteration|step|micro_?batch|mb)\s*[=:]\s*\d+\b", re.I
)
"""``i=7``, ``step=3``, ``iteration: 12``: a loop counter in a range name."""
_TRAILING_INDEX = re.compile(r"(?:\s*#\s*|\s+)\d+$")
"""``ProfilerStep#12``, ``decode 7``: a counter at the end of a name."""


def fold_range_name(name: str) -> str:
    """A range name without the counters that tell its instances apart, so that every instance of one step or
    loop body is one row: a profiler's per-op suffixes (``aten::addmm, seq = 7, op_id = 12`` -> ``aten::addmm``:
    analyzers/gemm/user_ranges.py ``range_key``), a step counter (``ProfilerStep#12`` -> ``ProfilerStep``,
    ``step i=7`` -> ``step``: analyzers/gemm/case.py ``context_key``), loop-index fields anywhere (``decode i=3
    tokens=16`` -> ``decode tokens=16``; only the keys i, idx, index, it, iter, iteration, step, microbatch, mb:
    shapes such as ``m=1024`` stay) and a trailing number (``layer 3``, ``decode #7``). A name that is only a
    counter stays whole."""
    base = range_key(name)
    base = context_key(base) or base
    folded = _TRAILING_INDEX.sub("", _INDEX_FIELD.sub("", base)).strip()
    return folded or name.strip() or name


def _keys(ranges: pl.DataFrame) -> pl.DataFrame:
    names = ranges["name"].drop_nulls().unique()
    return pl.DataFrame(
        {"name": names, "key": [fold_range_name(n) for n in names.to_list()]},
        schema={"name": pl.String, "key": pl.String},
    )


@dataclass(frozen=True)
class Extents:
    """What :func:`instance_windows` finds before it looks at a name: every range's id and parent row (``ids``,
    ``parent``: -1 at a root), and ``above``: every range at or above a range that holds rows, per (rank,
    device), with the window of the work below it (``_row``, rank, device, ``w0``, ``w1``). It depends on the
    ranges' ids and parents only, so two namings of one ranges frame share it."""

    ids: np.ndarray
    parent: np.ndarray
    above: pl.DataFrame


_EMPTY = pl.DataFrame(
    schema={
        "instance": pl.Int64,
        "key": pl.String,
        "rank": pl.Int32,
        "device": pl.Int32,
        "w0": pl.Int64,
        "w1": pl.Int64,
    }
)


def range_extents(rows: pl.DataFrame, ranges: pl.DataFrame) -> Extents | None:
    """The :class:`Extents` of ``ranges`` over ``rows``; None where no row is launched inside a range."""
    if ranges.height == 0 or rows.height == 0:
        return None
    held = (
        rows.filter(pl.col("range_id").is_not_null())
        .group_by("range_id", "rank", "device")
        .agg(pl.col("start_ns").min().alias("w0"), pl.col("end_ns").max().alias("w1"))
    )
    if held.height == 0:
        return None
    ids_col = ranges["range_id"].cast(pl.Int64)
    has_id = ids_col.is_not_null().to_numpy()
    ids = ids_col.fill_null(0).to_numpy()
    parents_col = ranges["parent_id"].cast(pl.Int64)
    parent = _positions(ids, parents_col.fill_null(0).to_numpy(), parents_col.is_not_null().to_numpy())
    parent = np.where(has_id[np.maximum(parent, 0)], parent, -1).astype(np.int32)
    # the held ranges as rows of ``ranges`` (a range_id no range has holds nothing)
    row_of = pl.DataFrame({"range_id": ids_col, "_row": np.arange(len(ids), dtype=np.int32)}).filter(
        pl.col("range_id").is_not_null()
    )
    cur = held.join(row_of, on="range_id").select("_row", "rank", "device", "w0", "w1")
    # every range at or above a held one (up to MAX_DEPTH steps), with the window of the work below it
    levels = [cur]
    for _ in range(MAX_DEPTH):
        up = parent[cur["_row"].to_numpy()]
        cur = (
            cur.with_columns(pl.Series("_row", up, dtype=pl.Int32))
            .filter(pl.col("_row") >= 0)
            .group_by("_row", "rank", "device")
            .agg(pl.col("w0").min(), pl.col("w1").max())
        )
        if cur.height == 0:
            break
        levels.append(cur)
    above = (
        pl.concat(levels, how="vertical")
        .group_by("_row", "rank", "device")
        .agg(pl.col("w0").min(), pl.col("w1").max())
    )
    return Extents(ids, parent, above)


def instance_windows(
    rows: pl.DataFrame, ranges: pl.DataFrame, extents: Extents | None = None
) -> pl.DataFrame:
    """The GPU window of every range instance that holds work: ``instance`` (its range_id), ``key`` (its folded
    name), ``rank``, ``device``, ``w0`` / ``w1`` (first start, last end of the rows launched inside it or in the
    ranges under it, on that device).

    An instance nested inside another of the same key (a ``forward`` inside a ``forward``) is not one of its own:
    its rows count for the outer instance; and a window ends where the next instance of its key on the device
    begins (step N's last kernels often run after step N+1's first ones: that time goes to step N+1), so no time
    is counted twice within a key.

    Computed upward from the ranges that hold rows, never over every (range, ancestor) pair of the run: each
    level's windows are merged per (parent, device) before the next step up (a few hundred thousand rows for 5M
    ranges, where the pairs were tens of millions), and only the ranges above some work are keyed and checked for
    an ancestor of their own key. ``extents`` (:func:`range_extents` of the same rows and of ranges with the same
    ids and parents in the same order: only the names may differ) skips the upward pass."""
    empty = _EMPTY
    if ranges.height == 0 or rows.height == 0:
        return empty
    if extents is None:
        extents = range_extents(rows, ranges)
    if extents is None:
        return empty
    ids, parent, above = extents.ids, extents.parent, extents.above
    # their keys (each distinct name folded once), as codes; an unnamed range is no instance
    cand = np.unique(above["_row"].to_numpy())
    named = pl.DataFrame({"_row": cand, "name": ranges["name"].gather(cand)})
    named = named.join(_keys(named), on="name", how="left")
    codes = named["key"].rank("dense").fill_null(0).cast(pl.Int64).to_numpy()  # 0: no name
    code_of = np.zeros(len(ids), dtype=np.int64)
    code_of[cand] = codes
    # nested: some range above it (itself excluded) has its key; the ranges above a candidate are candidates too
    keyed = cand[codes > 0]
    mine = code_of[keyed]
    nested = np.zeros(len(keyed), dtype=bool)
    live = np.arange(len(keyed))
    at = parent[keyed]
    for _ in range(MAX_DEPTH):
        going = at[live] >= 0
        live = live[going]
        if live.size == 0:
            break
        here = at[live]
        same = (code_of[here] == mine[live]) & (here != keyed[live])
        nested[live[same]] = True
        live = live[~same]
        at[live] = parent[at[live]]
    kept = keyed[~nested]
    outer = pl.DataFrame(
        {"_row": kept.astype(np.int32), "instance": ids[kept]},
        schema={"_row": pl.Int32, "instance": pl.Int64},
    ).join(named.select(pl.col("_row").cast(pl.Int32), "key"), on="_row")
    return (
        above.join(outer, on="_row")
        .sort("key", "rank", "device", "w0", "instance", nulls_last=True)
        .with_columns(
            pl.min_horizontal("w1", pl.col("w0").shift(-1).over("key", "rank", "device")).alias("w1")
        )
        .select(empty.columns)
    )
