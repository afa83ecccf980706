"""The step breakdown: GPU time by kernel class, idle and communication overlap, per device for the whole run and
per range name (docs/KERNELS.md, "Step breakdown").

Definitions (all on one device: a (rank, device) pair; times in ns):

- the rows are the run's timeline kernels with their ``kernel_class`` and, where the run recorded them, its
  memcpy / memset operations (class ``memory``);
- ``span``: first start to last end of the device's rows; ``busy``: the union of their intervals (time at least
  one row ran, on any stream); ``idle`` = span - busy;
- time by class: an instant where rows of several classes run at once (on different streams) belongs to the
  first of them in :data:`CLASS_ORDER`: the compute classes first (GEMM, attention, ... other), then
  communication, then memory. The classes' times and idle then sum to the span, and the compute classes together
  are the union of compute kernels: HolisticTraceAnalysis's "compute" (its "non-compute" is communication and
  memcpy / memset time not hidden under compute). Each class's own union (``union_ns``) is kept beside it;
- communication overlap: the time communication and compute kernels ran together, as a share of the
  communication union (HolisticTraceAnalysis's ``get_comm_comp_overlap``);
- a range name (index suffixes folded: :func:`fold_range_name`): each instance's GPU window on a device runs
  from the first start to the last end of the rows launched inside it (its nested ranges included); inside the
  window every row of the device counts, clipped to the window (communication launched from another thread
  included), and the name's slice sums its instances' windows.

:func:`breakdown` is self-contained: frames in, a typed :class:`Breakdown` out (``to_dict`` for JSON).
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

import polars as pl

from ..taxonomy import CLASSES
from ..taxonomy.frames import classify_frames
from .intervals import exclusive_times, union_ns
from .model import IDLE, Breakdown, ClassShare, Slice
from .windows import fold_range_name, instance_windows

__all__ = [
    "CLASS_ORDER",
    "COMPUTE_EXCLUDED",
    "IDLE",
    "RANGE_LIMIT",
    "Breakdown",
    "ClassShare",
    "Slice",
    "activity",
    "breakdown",
    "fold_range_name",
    "memops_recorded",
]

CLASS_ORDER: tuple[str, ...] = (
    "gemm",
    "attention",
    "normalization",
    "activation",
    "quantize",
    "splitk-reduce",
    "reduction",
    "layout",
    "rng",
    "elementwise",
    "other",
    "communication",
    "memory",
)
"""The priority order: an instant where several classes run goes to the first. Compute before communication
before memory (what runs hidden under compute is not what the step waits for); among compute classes the
GEMM-like ones first."""
COMPUTE_EXCLUDED = frozenset({"communication", "memory"})
"""Classes that are not compute (HolisticTraceAnalysis's communication and memory kernel types)."""
assert set(CLASS_ORDER) == set(CLASSES), "CLASS_ORDER must order every class of the taxonomy"
RANGE_LIMIT = 20
"""Range names kept by default, the longest (sum of GPU windows) first."""

_KEYS = ["rank", "device"]
_ROW_SCHEMA = {
    "rank": pl.Int32,
    "device": pl.Int32,
    "stream": pl.Int64,
    "start_ns": pl.Int64,
    "end_ns": pl.Int64,
    "range_id": pl.Int64,
    "cls": pl.String,
}


def activity(frames: dict[str, pl.DataFrame]) -> pl.DataFrame:
    """The rows the breakdown counts: timeline kernels (with their ``kernel_class``) and memcpy / memset operations (class
    ``memory``) with a start and an end: rank, device, stream, start_ns, end_ns, range_id, cls."""
    parts = []
    kernels = frames.get("kernels")
    if kernels is not None and kernels.height:
        parts.append(kernels.with_columns(pl.col("kernel_class").fill_null("other").alias("cls")))
    memops = frames.get("memops")
    if memops is not None and memops.height:
        parts.append(memops.with_columns(pl.lit("memory").alias("cls")))
    rows = [
        p.select(
            [
                pl.col(c).cast(t) if c in p.columns else pl.lit(None, t).alias(c)
                for c, t in _ROW_SCHEMA.items()
            ]
        )
        for p in parts
    ]
    if not rows:
        return pl.DataFrame(schema=_ROW_SCHEMA)
    known = set(CLASS_ORDER)
    return (
        pl.concat(rows, how="vertical")
        .filter(pl.col("start_ns").is_not_null() & (pl.col("end_ns") >= pl.col("start_ns")))
        .with_columns(
            pl.when(pl.col("cls").is_in(list(known))).then("cls").otherwise(pl.lit("other")).alias("cls")
        )
    )


# --- per group statistics ---------------------------------------------------------------------------------------
def _stats(rows: pl.DataFrame, keys: list[str], order: Sequence[str]) -> tuple[pl.DataFrame, pl.DataFrame]:
    """Per ``keys`` group: (groups: keys, busy_ns, compute_ns, communication_ns, both_ns, kernels; classes: keys,
    cls, time_ns, union_ns, kernels)."""
    compute = ~pl.col("cls").is_in(list(COMPUTE_EXCLUDED))
    comm = pl.col("cls") == "communication"
    groups = rows.group_by(keys).agg(pl.len().alias("kernels"))
    for name, sel in (
        ("busy_ns", rows),
        ("compute_ns", rows.filter(compute)),
        ("communication_ns", rows.filter(comm)),
        ("both_ns", rows.filter(compute | comm)),
    ):
        groups = groups.join(union_ns(sel, keys, name), on=keys, how="left", nulls_equal=True)
    groups = groups.with_columns(pl.exclude(*keys, "kernels").fill_null(0))
    per_class = (
        rows.group_by(*keys, "cls")
        .agg(pl.len().alias("kernels"))
        .join(union_ns(rows, [*keys, "cls"]), on=[*keys, "cls"], how="left", nulls_equal=True)
        .join(exclusive_times(rows, keys, order), on=[*keys, "cls"], how="left", nulls_equal=True)
        .with_columns(pl.col("time_ns").fill_null(0))
    )
    return groups, per_class


def _slices(
    groups: pl.DataFrame, per_class: pl.DataFrame, keys: list[str], order: Sequence[str]
) -> list[Slice]:
    """One :class:`Slice` per row of ``groups`` (which also holds ``span_ns``, and for ranges ``key`` and
    ``instances``)."""
    rank = {c: i for i, c in enumerate(order)}
    by_group: dict[tuple[object, ...], list[dict[str, object]]] = {}
    for r in per_class.iter_rows(named=True):
        by_group.setdefault(tuple(r[k] for k in keys), []).append(r)
    out = []
    for g in groups.iter_rows(named=True):
        span = int(g["span_ns"])
        busy = int(g["busy_ns"])

        def pct(v: int, span: int = span) -> float:
            return 100.0 * v / span if span else 0.0

        rows = sorted(by_group.get(tuple(g[k] for k in keys), []), key=lambda r: rank[str(r["cls"])])
        shares = [
            ClassShare(
                str(r["cls"]),
                int(r["time_ns"]),
                pct(int(r["time_ns"])),
                int(r["kernels"]),
                int(r["union_ns"]),
            )  # type: ignore[call-overload]
            for r in rows
        ]
        idle = max(span - busy, 0)
        shares.append(ClassShare(IDLE, idle, pct(idle), 0, idle))
        comm = int(g["communication_ns"])
        overlap = int(g["compute_ns"]) + comm - int(g["both_ns"])
        out.append(
            Slice(
                rank=g["rank"],
                device=g["device"],
                span_ns=span,
                busy_ns=busy,
                idle_ns=idle,
                compute_ns=int(g["compute_ns"]),
                communication_ns=comm,
                overlap_ns=overlap,
                overlap_pct=100.0 * overlap / comm if comm else None,
                kernels=int(g["kernels"]),
                classes=tuple(shares),
                range=g.get("key"),  # type: ignore[arg-type]
                instances=g.get("instances"),  # type: ignore[arg-type]
            )
        )
    return out


# --- the whole run and the ranges -------------------------------------------------------------------------------
def _device_slices(rows: pl.DataFrame, order: Sequence[str]) -> list[Slice]:
    groups, per_class = _stats(rows, _KEYS, order)
    spans = rows.group_by(_KEYS).agg(
        pl.col("start_ns").min().alias("start_ns"), pl.col("end_ns").max().alias("end_ns")
    )
    groups = groups.join(spans, on=_KEYS, nulls_equal=True).with_columns(
        (pl.col("end_ns") - pl.col("start_ns")).alias("span_ns")
    )
    return _slices(groups.sort(_KEYS, nulls_last=True), per_class, _KEYS, order)


def _clipped(rows: pl.DataFrame, windows: pl.DataFrame) -> pl.DataFrame:
    """Every row of a window's device that overlaps the window, clipped to it, with the window's columns."""
    parts = []
    for (rank, device), win in windows.partition_by(_KEYS, as_dict=True, maintain_order=True).items():
        on = rows.filter(
            (pl.col("rank").is_null() if rank is None else pl.col("rank") == rank)
            & (pl.col("device").is_null() if device is None else pl.col("device") == device)
        ).drop(_KEYS)
        if on.height == 0:
            continue
        hit = on.join_where(win, pl.col("start_ns") < pl.col("w1"), pl.col("end_ns") > pl.col("w0"))
        parts.append(
            hit.with_columns(
                pl.max_horizontal("start_ns", "w0").alias("start_ns"),
                pl.min_horizontal("end_ns", "w1").alias("end_ns"),
            )
        )
    if not parts:
        return pl.DataFrame()
    return pl.concat(parts, how="vertical")


def _range_slices(
    rows: pl.DataFrame, ranges: pl.DataFrame, order: Sequence[str], limit: int | None
) -> tuple[list[Slice], int]:
    windows = instance_windows(rows, ranges)
    if windows.height == 0:
        return [], 0
    windows = windows.with_columns((pl.col("w1") - pl.col("w0")).alias("_len"))
    totals = windows.group_by("key").agg(pl.col("_len").sum()).sort(["_len", "key"], descending=[True, False])
    kept = totals["key"] if limit is None else totals["key"].head(limit)
    windows = windows.filter(pl.col("key").is_in(kept.implode()))
    clipped = _clipped(rows, windows)
    if clipped.height == 0:
        return [], totals.height
    inst = ["instance", *_KEYS]
    groups, per_class = _stats(clipped, inst, order)
    sums = ["busy_ns", "compute_ns", "communication_ns", "both_ns", "kernels"]
    meta = windows.select(*inst, "key", pl.col("_len").alias("span_ns"))
    keys = ["key", *_KEYS]
    groups = (
        meta.join(groups, on=inst, how="left", nulls_equal=True)
        .group_by(keys)
        .agg(
            pl.col("span_ns").sum(),
            *[pl.col(c).fill_null(0).sum() for c in sums],
            pl.len().alias("instances"),
        )
    )
    per_class = (
        per_class.join(meta.select(*inst, "key"), on=inst, nulls_equal=True)
        .group_by(*keys, "cls")
        .agg(pl.col("time_ns").sum(), pl.col("union_ns").sum(), pl.col("kernels").sum())
    )
    rank = {k: i for i, k in enumerate(kept.to_list())}
    groups = groups.with_columns(pl.col("key").replace_strict(rank, return_dtype=pl.Int64).alias("_o")).sort(
        ["_o", *_KEYS], nulls_last=True
    )
    return _slices(groups, per_class, keys, order), totals.height


def memops_recorded(manifest: dict[str, Any] | None) -> bool:
    """Whether a run's frames hold its memcpy / memset rows: False for a run imported before the memops frame
    existed (its manifest's ``frames.rows`` does not name it), whose frames are migrated on read without them."""
    rows = ((manifest or {}).get("frames") or {}).get("rows")
    return not isinstance(rows, dict) or "memops" in rows


def breakdown(
    frames: dict[str, pl.DataFrame],
    *,
    order: Sequence[str] = CLASS_ORDER,
    range_limit: int | None = RANGE_LIMIT,
    with_ranges: bool = True,
    memops: bool = True,
) -> Breakdown:
    """GPU time by class, idle and communication overlap per device, and per range name for the ``range_limit``
    names with the longest GPU windows (None: all). ``frames`` needs ``kernels`` (classified here when it has no
    ``kernel_class``: analyzers/taxonomy) and, for the ranges, ``ranges``; ``memops`` adds memcpy / memset time
    where the run recorded it."""
    kernels = frames.get("kernels")
    if kernels is not None and "kernel_class" not in kernels.columns:
        frames = classify_frames(frames)
    rows = activity(frames)
    out = Breakdown(order=tuple(order))
    if not memops:
        out.notes.append(
            "this run was imported before tracekit kept memcpy / memset: their time counts as idle here; "
            "`tracekit import --rebuild RUN` reads them"
        )
    if rows.height == 0:
        return out
    out.devices = _device_slices(rows, order)
    ranges = frames.get("ranges")
    if with_ranges and ranges is not None and ranges.height:
        out.ranges, out.ranges_total = _range_slices(rows, ranges, order, range_limit)
    return out
