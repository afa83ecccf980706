"""Range instances on the GPU: each range name folded to its key (index suffixes dropped), and each instance's GPU
window per device (first start to last end of the rows launched inside it, nested ranges included)."""

from __future__ import annotations

import re

import polars as pl

from ..gemm.case import context_key
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


def _closure(ranges: pl.DataFrame) -> pl.DataFrame:
    """(``range_id``, ``anc``): every range with itself and each of its ancestors."""
    parents = ranges.select("range_id", "parent_id").filter(pl.col("parent_id").is_not_null())
    pairs = [ranges.select("range_id", pl.col("range_id").alias("anc"))]
    cur = parents.select("range_id", pl.col("parent_id").alias("anc"))
    for _ in range(MAX_DEPTH):
        if cur.height == 0:
            break
        pairs.append(cur)
        cur = cur.join(parents, left_on="anc", right_on="range_id", how="inner").select(
            "range_id", pl.col("parent_id").alias("anc")
        )
    return pl.concat(pairs, how="vertical").unique()


def instance_windows(rows: pl.DataFrame, ranges: pl.DataFrame) -> pl.DataFrame:
    """The GPU window of every range instance that holds work: ``instance`` (its range_id), ``key`` (its folded
    name), ``rank``, ``device``, ``w0`` / ``w1`` (first start, last end of the rows launched inside it or in the
    ranges under it, on that device).

    An instance nested inside another of the same key (a ``forward`` inside a ``forward``) is not one of its own:
    its rows count for the outer instance; and a window ends where the next instance of its key on the device
    begins (step N's last kernels often run after step N+1's first ones: that time goes to step N+1), so no time
    is counted twice within a key."""
    empty = pl.DataFrame(
        schema={
            "instance": pl.Int64,
            "key": pl.String,
            "rank": pl.Int32,
            "device": pl.Int32,
            "w0": pl.Int64,
            "w1": pl.Int64,
        }
    )
    if ranges.height == 0 or rows.height == 0:
        return empty
    held = (
        rows.filter(pl.col("range_id").is_not_null())
        .group_by("range_id", "rank", "device")
        .agg(pl.col("start_ns").min().alias("w0"), pl.col("end_ns").max().alias("w1"))
    )
    if held.height == 0:
        return empty
    named = ranges.select("range_id", "parent_id", "name").filter(pl.col("name").is_not_null())
    keyed = named.join(_keys(named), on="name", how="left").select("range_id", "key")
    closure = _closure(ranges.select("range_id", "parent_id"))
    with_keys = closure.join(keyed, on="range_id").join(
        keyed.rename({"range_id": "anc", "key": "anc_key"}), on="anc"
    )
    nested = with_keys.filter((pl.col("anc") != pl.col("range_id")) & (pl.col("key") == pl.col("anc_key")))
    outer = keyed.join(nested.select("range_id").unique(), on="range_id", how="anti")
    return (
        held.join(closure, on="range_id")
        .join(outer.rename({"range_id": "anc"}), on="anc")
        .group_by("anc", "key", "rank", "device")
        .agg(pl.col("w0").min(), pl.col("w1").max())
        .rename({"anc": "instance"})
        .sort("key", "rank", "device", "w0", "instance", nulls_last=True)
        .with_columns(
            pl.min_horizontal("w1", pl.col("w0").shift(-1).over("key", "rank", "device")).alias("w1")
        )
        .select(empty.columns)
    )
