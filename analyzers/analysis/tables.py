"""The run's tables of the :class:`~.model.Analysis` (:class:`~.sections.RunTables`), grouped from the frames once,
when the Analysis is built: range names and kernel names by total time, and the Nsight Compute kernels (``show``
and the TUI render them; none of them reads the frames for these tables); and the measurements with wrong results
(:func:`wrong_results`, what ``compare`` reads)."""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

import polars as pl

from .sections import TABLE_ROWS, KernelRow, NcuKernelRow, RangeRow, RunTables, WrongResult

__all__ = ["kernel_rows", "ncu_kernel_rows", "range_rows", "run_tables", "wrong_results"]


def _frame(frames: Mapping[str, pl.DataFrame], name: str) -> pl.DataFrame | None:
    df = frames.get(name)
    return df if df is not None and df.height else None


def range_rows(
    frames: Mapping[str, pl.DataFrame], limit: int | None = TABLE_ROWS
) -> tuple[list[RangeRow], int]:
    """Ranges grouped by name, most total time first (the first ``limit``; None: all), and how many names there
    are: instances, total and median duration, and the kernels inside (counted in their innermost range)."""
    ranges = _frame(frames, "ranges")
    if ranges is None:
        return [], 0
    spans = ranges.lazy().select("name", "range_id", (pl.col("end_ns") - pl.col("start_ns")).alias("ns"))
    # counts and totals of every name first (cheap), then the median and the kernels only of the names kept: on
    # 5M ranges of 16k names the median of every name took three times the rest
    grouped = (
        spans.group_by("name")
        .agg(
            pl.len().alias("count"),
            pl.when(pl.col("ns").is_not_null().any()).then(pl.col("ns").sum()).alias("total_ns"),
        )
        .sort("total_ns", "name", descending=[True, False], nulls_last=True)
        .collect()
    )
    top = grouped if limit is None else grouped.head(limit)
    kept = spans
    if top.height < grouped.height:
        kept = kept.join(top.lazy().select("name"), on="name", how="semi", nulls_equal=True)
    kernels = _frame(frames, "kernels")
    if kernels is not None:  # each kernel in its innermost range
        inside = kernels.lazy().select("range_id").drop_nulls().group_by("range_id").len("nk")
        kept = kept.join(inside, on="range_id", how="left")
    else:
        kept = kept.with_columns(pl.lit(0, pl.UInt32).alias("nk"))
    rest = kept.group_by("name").agg(
        pl.col("ns").median().alias("median_ns"), pl.col("nk").fill_null(0).sum().alias("kernels")
    )
    top = (
        top.lazy()
        .join(rest, on="name", how="left", nulls_equal=True, maintain_order="left")
        .select("name", "count", "total_ns", "median_ns", "kernels")
        .collect()
    )
    rows = [RangeRow(**r) for r in top.iter_rows(named=True)]
    return rows, grouped.height


KERNEL_GROUP_SCHEMA: dict[str, Any] = {
    "name": pl.String,
    "launches": pl.UInt32,
    "total_ns": pl.Int64,
    "mean_ns": pl.Float64,
    "min_ns": pl.Int64,
    "max_ns": pl.Int64,
    "pct": pl.Float64,
}
"""The columns of :func:`group_kernels` (and of :class:`KernelRow`)."""


def group_kernels(kernels: pl.DataFrame) -> pl.DataFrame:
    """Kernels (any frame with ``name`` and ``duration_ns``: the timeline's, Nsight Compute's) grouped by name,
    most total time first, then by name: launches, total, mean, min and max duration and the share of every
    kernel's time (:data:`KERNEL_GROUP_SCHEMA`). The one grouping behind the Analysis' kernel table and the TUI's
    grouped view."""
    if kernels.height == 0:
        return pl.DataFrame(schema=KERNEL_GROUP_SCHEMA)
    return (
        kernels.lazy()
        .select("name", "duration_ns")
        .group_by("name")
        .agg(
            pl.len().alias("launches"),
            pl.col("duration_ns").sum().alias("total_ns"),
            pl.col("duration_ns").mean().alias("mean_ns"),
            pl.col("duration_ns").min().alias("min_ns"),
            pl.col("duration_ns").max().alias("max_ns"),
        )
        .with_columns(
            (pl.col("total_ns") / pl.max_horizontal(pl.col("total_ns").sum(), 1) * 100.0).alias("pct")
        )
        .sort("total_ns", "name", descending=[True, False], nulls_last=True)
        .collect()
    )


def kernel_rows(
    frames: Mapping[str, pl.DataFrame], limit: int | None = TABLE_ROWS
) -> tuple[list[KernelRow], int]:
    """Timeline kernels grouped by name, most total time first (the first ``limit``; None: all), and how many
    names there are: launches, total, mean, min and max duration and the share of every kernel's time."""
    kernels = _frame(frames, "kernels")
    if kernels is None:
        return [], 0
    grouped = group_kernels(kernels)
    top = grouped if limit is None else grouped.head(limit)
    return [KernelRow(**r) for r in top.iter_rows(named=True)], grouped.height


_NCU_COLUMNS = tuple(NcuKernelRow.__struct_fields__)


def ncu_kernel_rows(frames: Mapping[str, pl.DataFrame]) -> list[NcuKernelRow]:
    """Every kernel Nsight Compute profiled, in the report's order, with the columns ``show`` prints."""
    ncu = _frame(frames, "ncu")
    if ncu is None:
        return []
    have = [c for c in _NCU_COLUMNS if c in ncu.columns]
    return [NcuKernelRow(**r) for r in ncu.select(have).iter_rows(named=True)]


def run_tables(frames: Mapping[str, pl.DataFrame], limit: int | None = TABLE_ROWS) -> RunTables:
    """The run's tables (:class:`~.sections.RunTables`), each of range and kernel names cut to ``limit`` rows
    (None: every name)."""
    ranges, ranges_total = range_rows(frames, limit)
    kernels, kernels_total = kernel_rows(frames, limit)
    return RunTables(
        ranges=ranges,
        ranges_total=ranges_total,
        kernels=kernels,
        kernels_total=kernels_total,
        ncu_kernels=ncu_kernel_rows(frames),
    )


_WRONG_FIELDS = tuple(WrongResult.__struct_fields__)


def wrong_results(frames: Mapping[str, pl.DataFrame]) -> list[WrongResult]:
    """The measurements whose status is ``wrong``, in the order measured."""
    meas = _frame(frames, "measurements")
    if meas is None or "status" not in meas.columns:
        return []
    have = [c for c in _WRONG_FIELDS if c in meas.columns]
    wrong = meas.filter(pl.col("status") == "wrong").select(have)
    return [WrongResult(**r) for r in wrong.iter_rows(named=True)]
