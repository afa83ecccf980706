"""Range nesting and the kernel-to-range join, in polars (vectorised; millions of rows).

Two steps, both pure functions over frames:

``nest_ranges``
    Fills ``parent_id`` and ``depth`` for per-thread ranges (NVTX push/pop and record_function annotations,
    grouped by source, pid, tid) and for GPU-side annotations (grouped by source, device, tid=stream). Push/pop
    ranges nest properly on their thread, so depth is the number of ranges open at a range's start (a sweep over
    +1/-1 events) and the parent is the latest range one level up that started before it (an as-of join).
    NVTX start/end ranges may overlap and cross threads: they keep null parent and depth.

``assign_ranges``
    Gives each kernel the innermost range open on the thread that launched it, at the moment of the launch call
    (``launch_tid``, ``launch_start_ns``, from the runtime API record with the same process and correlation id).
    The latest range started before the launch either contains it (then it is the innermost) or ended before it;
    in that case the innermost containing range is one of its ancestors, so we walk up parents until one contains
    the launch. Kernels with no launch record fall back to time containment on the GPU: the innermost
    ``gpu_annotation`` on the same device and stream containing the kernel's start.
"""

from __future__ import annotations

import polars as pl

_THREAD_KINDS = ("push_pop", "annotation")
_MAX_DEPTH = 256


def _nest_group(ranges: pl.DataFrame, keys: list[str]) -> pl.DataFrame:
    """parent_id and depth for properly nested ranges within each group of ``keys``."""
    if ranges.height == 0:
        return ranges.select(
            "range_id", pl.lit(None, pl.Int64).alias("parent_id"), pl.lit(None, pl.Int32).alias("depth")
        )
    big = pl.lit(2**62, dtype=pl.Int64)
    base = ranges.select(*keys, "range_id", "start_ns", pl.col("end_ns").fill_null(big).alias("end_ns"))
    # Events: ends sort before starts at the same instant (a range ending when another begins is its sibling);
    # among starts at the same instant the longer (outer) one first.
    starts = base.select(
        *keys,
        "range_id",
        pl.col("start_ns").alias("t"),
        pl.lit(1, pl.Int8).alias("order"),
        (-pl.col("end_ns")).alias("tie"),
        pl.lit(1, pl.Int32).alias("delta"),
    )
    ends = base.select(
        *keys,
        "range_id",
        pl.col("end_ns").alias("t"),
        pl.lit(0, pl.Int8).alias("order"),
        pl.col("start_ns").alias("tie").neg(),
        pl.lit(-1, pl.Int32).alias("delta"),
    )
    events = (
        pl.concat([starts, ends])
        .sort([*keys, "t", "order", "tie"])
        .with_columns(pl.col("delta").cum_sum().over(keys).alias("open"))
    )
    depth = events.filter(pl.col("delta") == 1).select(
        "range_id", (pl.col("open") - 1).cast(pl.Int32).alias("depth")
    )
    nested = base.join(depth, on="range_id", how="left")
    # Parent: latest range at depth-1 in the same group that started at or before this one.
    left = nested.with_columns((pl.col("depth") - 1).alias("pdepth")).sort("start_ns")
    right = nested.select(
        *keys,
        pl.col("depth").alias("pdepth"),
        pl.col("range_id").alias("parent_id"),
        pl.col("start_ns").alias("pstart"),
        pl.col("end_ns").alias("pend"),
    ).sort("pstart")
    joined = left.join_asof(
        right,
        left_on="start_ns",
        right_on="pstart",
        by=[*keys, "pdepth"],
        strategy="backward",
        check_sortedness=False,
    )
    # Proper nesting means the latest range one level up that started no later than this one contains it.
    joined = joined.with_columns(
        pl.when(pl.col("depth") > 0).then(pl.col("parent_id")).otherwise(None).alias("parent_id")
    )
    return joined.select("range_id", "parent_id", "depth")


def nest_ranges(ranges: pl.DataFrame) -> pl.DataFrame:
    """Return ``ranges`` with ``parent_id`` and ``depth`` filled where nesting is defined."""
    if ranges.height == 0:
        return ranges
    thread = ranges.filter(pl.col("kind").is_in(_THREAD_KINDS))
    gpu = ranges.filter(pl.col("kind") == "gpu_annotation")
    parts = []
    if thread.height:
        parts.append(
            _nest_group(
                thread.with_columns(pl.col("pid").fill_null(-1), pl.col("tid").fill_null(-1)),
                ["source", "pid", "tid"],
            )
        )
    if gpu.height:
        parts.append(
            _nest_group(
                gpu.with_columns(pl.col("device").fill_null(-1), pl.col("tid").fill_null(-1)),
                ["source", "device", "tid"],
            )
        )
    if not parts:
        return ranges
    found = pl.concat(parts)
    out = ranges.drop("parent_id", "depth").join(found, on="range_id", how="left")
    return out.select(ranges.columns)


def _innermost(points: pl.DataFrame, ranges: pl.DataFrame, keys: list[str], t: str) -> pl.DataFrame:
    """For rows of ``points`` (point_id, keys, t) the innermost range of ``ranges`` (same keys) containing t."""
    big = 2**62
    r = ranges.select(
        *keys,
        "range_id",
        "parent_id",
        pl.col("start_ns").alias("rstart"),
        pl.col("end_ns").fill_null(big).alias("rend"),
    )
    cand = (
        points.sort(t)
        .join_asof(
            r.sort("rstart"),
            left_on=t,
            right_on="rstart",
            by=keys,
            strategy="backward",
            check_sortedness=False,
        )
        .select("point_id", t, "range_id", "parent_id", "rend")
    )
    spans = r.select("range_id", pl.col("parent_id").alias("p_parent"), pl.col("rend").alias("p_end"))
    done = [
        cand.filter(pl.col("range_id").is_null() | (pl.col("rend") >= pl.col(t))).select(
            "point_id", "range_id"
        )
    ]
    todo = cand.filter(pl.col("range_id").is_not_null() & (pl.col("rend") < pl.col(t)))
    for _ in range(_MAX_DEPTH):
        if todo.height == 0:
            break
        step = todo.select("point_id", t, pl.col("parent_id").alias("range_id")).join(
            spans, on="range_id", how="left"
        )
        step = step.rename({"p_parent": "parent_id", "p_end": "rend"})
        done.append(
            step.filter(pl.col("range_id").is_null() | (pl.col("rend") >= pl.col(t))).select(
                "point_id", "range_id"
            )
        )
        todo = step.filter(pl.col("range_id").is_not_null() & (pl.col("rend") < pl.col(t)))
    return pl.concat(done)


def assign_ranges(kernels: pl.DataFrame, ranges: pl.DataFrame) -> pl.DataFrame:
    """Return ``kernels`` with ``range_id`` set to the innermost enclosing range (null where none)."""
    if kernels.height == 0 or ranges.height == 0:
        return kernels.with_columns(pl.lit(None, pl.Int64).alias("range_id"))
    if ranges["parent_id"].null_count() == ranges.height and ranges["depth"].null_count() == ranges.height:
        ranges = nest_ranges(ranges)
    pts = kernels.with_row_index("point_id")
    found = []
    thread_ranges = ranges.filter(pl.col("kind").is_in(_THREAD_KINDS))
    linked = pts.filter(pl.col("launch_tid").is_not_null() & pl.col("launch_start_ns").is_not_null())
    if linked.height and thread_ranges.height:
        found.append(
            _innermost(
                linked.select(
                    "point_id", "source", "pid", pl.col("launch_tid").alias("tid"), "launch_start_ns"
                ),
                thread_ranges,
                ["source", "pid", "tid"],
                "launch_start_ns",
            )
        )
    gpu_ranges = ranges.filter(pl.col("kind") == "gpu_annotation")
    already = pl.concat(found).filter(pl.col("range_id").is_not_null())["point_id"] if found else None
    rest = pts if already is None else pts.filter(~pl.col("point_id").is_in(already.implode()))
    if rest.height and gpu_ranges.height:
        found.append(
            _innermost(
                rest.select("point_id", "source", "device", pl.col("stream").alias("tid"), "start_ns"),
                gpu_ranges,
                ["source", "device", "tid"],
                "start_ns",
            )
        )
    if not found:
        return kernels.with_columns(pl.lit(None, pl.Int64).alias("range_id"))
    result = pl.concat(found).filter(pl.col("range_id").is_not_null()).unique("point_id", keep="first")
    out = pts.drop("range_id").join(result, on="point_id", how="left").sort("point_id")
    return out.select(kernels.columns)
