"""Interval arithmetic on GPU activity rows, in polars: unions per group and the time each class owns under a
priority order.

A row is one kernel (or memcpy / memset) with ``start_ns`` / ``end_ns`` and a class; the groups are devices (the
whole run) or range instances (one window each). Every function here takes a frame with the group key columns
and returns one row per group: nothing loops over rows in Python.
"""

from __future__ import annotations

from collections.abc import Sequence

import polars as pl

__all__ = ["exclusive_times", "merged", "union_ns"]


def merged(rows: pl.DataFrame, keys: Sequence[str]) -> pl.DataFrame:
    """The union of the ``[start_ns, end_ns)`` intervals of ``rows`` per ``keys`` group, as disjoint intervals
    (``keys``, ``start_ns``, ``end_ns``). Intervals that touch or overlap become one."""
    keys = list(keys)
    if rows.height == 0:
        return rows.select(*keys, "start_ns", "end_ns")
    ordered = rows.select(*keys, "start_ns", "end_ns").sort(*keys, "start_ns", nulls_last=True)
    # a new interval starts where a row starts after every earlier row of its group has ended
    reach = pl.col("end_ns").cum_max().shift(1)
    if keys:
        reach = reach.over(keys)
    new = (pl.col("start_ns") > reach).fill_null(True).cast(pl.Int64).cum_sum()
    if keys:
        new = new.over(keys)
    return (
        ordered.with_columns(new.alias("_run"))
        .group_by(*keys, "_run")
        .agg(pl.col("start_ns").min(), pl.col("end_ns").max())
        .drop("_run")
    )


def union_ns(rows: pl.DataFrame, keys: Sequence[str], name: str = "union_ns") -> pl.DataFrame:
    """The length of the union of ``rows``' intervals per ``keys`` group (``keys``, ``name``), ns."""
    keys = list(keys)
    m = merged(rows, keys).with_columns((pl.col("end_ns") - pl.col("start_ns")).alias(name))
    if not keys:
        return m.select(pl.col(name).sum())
    return m.group_by(*keys).agg(pl.col(name).sum())


def exclusive_times(rows: pl.DataFrame, keys: Sequence[str], order: Sequence[str]) -> pl.DataFrame:
    """Per ``keys`` group (at least one key) and class, the time the class owns when every instant goes to the
    first class of ``order`` running then: ``keys``, ``cls``, ``time_ns`` (> 0; they sum to the group's busy time).

    Computed as differences of prefix unions: the time of the i-th class is the union of classes 0..i minus the
    union of classes 0..i-1. ``rows`` needs ``cls`` (every value in ``order``)."""
    keys = list(keys)
    rank = {c: i for i, c in enumerate(order)}
    present = sorted({c for c in rows["cls"].unique().to_list() if c is not None}, key=lambda c: rank[c])
    rows = rows.with_columns(pl.col("cls").replace_strict(rank, return_dtype=pl.Int32).alias("_p"))
    groups = rows.select(keys).unique()
    out: list[pl.DataFrame] = []
    before = groups.with_columns(pl.lit(0, pl.Int64).alias("_before"))
    for cls in present:
        prefix = union_ns(rows.filter(pl.col("_p") <= rank[cls]), keys, "_now")
        step = before.join(prefix, on=keys, how="left", nulls_equal=True).with_columns(
            pl.col("_now").fill_null(pl.col("_before"))
        )
        out.append(
            step.select(
                *keys, pl.lit(cls).alias("cls"), (pl.col("_now") - pl.col("_before")).alias("time_ns")
            )
        )
        before = step.select(*keys, pl.col("_now").alias("_before"))
    if not out:
        return pl.DataFrame(
            schema={**{k: rows.schema[k] for k in keys}, "cls": pl.String, "time_ns": pl.Int64}
        )
    return pl.concat(out, how="vertical").filter(pl.col("time_ns") > 0)
