"""The step breakdown: GPU time by kernel class, idle and communication overlap, per device for the whole run and
per range name (docs/BREAKDOWN.md).

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
  included); a window ends where the next instance of its name begins; the name's slice sums its instances'
  windows.

:func:`breakdown` is self-contained: frames in, a typed :class:`Breakdown` out (the Analysis' ``StepBreakdown``:
``msgspec.to_builtins`` for JSON).
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

import polars as pl

from tracekit.records import RunRecord

from ..taxonomy.frames import classify_frames
from .intervals import window_stats
from .model import IDLE, Breakdown, ClassShare, Slice
from .sources import far_apart_notes
from .windows import Extents, fold_range_name, instance_windows, range_extents

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
    "breakdown_and",
    "fold_range_name",
    "memops_recorded",
]

CLASS_ORDER: tuple[str, ...] = (
    "gemm",
    "attention",
    "convolution",
    "softmax",
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
    """The rows the breakdown counts: timeline kernels (with their ``kernel_class``) and memcpy / memset
    operations (class ``memory``) with a start and an end: rank, device, stream, start_ns, end_ns, range_id,
    cls."""
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
    known = set(CLASS_ORDER)  # a class the order does not know (a newer table) counts as other
    return (
        pl.concat(rows, how="vertical")
        .filter(pl.col("start_ns").is_not_null() & (pl.col("end_ns") >= pl.col("start_ns")))
        .with_columns(
            pl.when(pl.col("cls").is_in(list(known))).then("cls").otherwise(pl.lit("other")).alias("cls")
        )
    )


# --- per window statistics --------------------------------------------------------------------------------------
def _windows(
    rows: pl.DataFrame, ranges: pl.DataFrame | None, limit: int | None, extents: Extents | None = None
) -> tuple[pl.DataFrame, int]:
    """Every window to break down: each device's span (``key`` null), then the instance windows of the ``limit``
    range names with the longest GPU windows (all with None): ``key``, rank, device, ``w0``, ``w1``; and how many
    range names hold GPU work. ``extents``: :func:`.windows.range_extents` of these rows and ranges, where known."""
    spans = rows.group_by(_KEYS).agg(pl.col("start_ns").min().alias("w0"), pl.col("end_ns").max().alias("w1"))
    spans = spans.sort(
        _KEYS, nulls_last=True
    )  # group_by's order is the hash's: devices in rank order, every run
    spans = spans.select(pl.lit(None, pl.String).alias("key"), *_KEYS, "w0", "w1")
    if ranges is None or ranges.height == 0:
        return spans, 0
    inst = instance_windows(rows, ranges, extents)
    if inst.height == 0:
        return spans, 0
    totals = (
        inst.group_by("key")
        .agg((pl.col("w1") - pl.col("w0")).sum().alias("_len"))
        .sort(["_len", "key"], descending=[True, False])
    )
    kept = totals["key"] if limit is None else totals["key"].head(limit)
    order = {k: i for i, k in enumerate(kept.to_list())}
    inst = inst.filter(pl.col("key").is_in(kept.implode())).select("key", *_KEYS, "w0", "w1")
    inst = inst.with_columns(pl.col("key").replace_strict(order, return_dtype=pl.Int64).alias("_o"))
    inst = inst.sort("_o", *_KEYS, "w0", nulls_last=True).drop("_o")
    return pl.concat([spans.sort(_KEYS, nulls_last=True), inst], how="vertical"), totals.height


def _stats(
    rows: pl.DataFrame, windows: pl.DataFrame, order: Sequence[str]
) -> tuple[pl.DataFrame, pl.DataFrame]:
    """:func:`.intervals.window_stats` for every window, device by device: (totals, classes), both keyed by
    ``win`` (the window's row in ``windows``)."""
    compute = [c for c in order if c not in COMPUTE_EXCLUDED]
    windows = windows.with_row_index("win").with_columns(pl.col("win").cast(pl.Int64))
    totals, classes = [], []
    for (rank, device), win in windows.partition_by(_KEYS, as_dict=True, maintain_order=True).items():
        mine = rows.filter(pl.col("rank").eq_missing(rank) & pl.col("device").eq_missing(device))
        t, c = window_stats(mine, win, order, compute, "communication")
        ids = win["win"]
        totals.append(t.with_columns(ids.gather(t["win"])))
        classes.append(c.with_columns(ids.gather(c["win"])))
    return pl.concat(totals), pl.concat(classes)


def _slice(
    w: dict[str, Any], total: dict[str, Any], classes: list[dict[str, Any]], order: Sequence[str]
) -> Slice:
    """One :class:`Slice` from a window's (or a range name's summed) numbers."""
    span = int(w["span_ns"])
    busy = int(total["busy_ns"])

    def pct(v: int) -> float:
        return 100.0 * v / span if span else 0.0

    rank = {c: i for i, c in enumerate(order)}
    shares = [
        ClassShare(
            cls=str(r["cls"]),
            time_ns=int(r["time_ns"]),
            pct=pct(int(r["time_ns"])),
            kernels=int(r["kernels"]),
            union_ns=int(r["union_ns"]),
        )
        for r in sorted(classes, key=lambda r: rank[str(r["cls"])])
    ]
    idle = max(span - busy, 0)
    shares.append(ClassShare(cls=IDLE, time_ns=idle, pct=pct(idle), kernels=0, union_ns=idle))
    comm = int(total["communication_ns"])
    overlap = int(total["compute_ns"]) + comm - int(total["both_ns"])
    return Slice(
        rank=w["rank"],
        device=w["device"],
        span_ns=span,
        busy_ns=busy,
        idle_ns=idle,
        compute_ns=int(total["compute_ns"]),
        communication_ns=comm,
        overlap_ns=overlap,
        overlap_pct=100.0 * overlap / comm if comm else None,
        kernels=int(total["kernels"]),
        classes=tuple(shares),
        range=w.get("key"),
        instances=w.get("instances"),
    )


def _range_slices(
    inst: pl.DataFrame, totals: pl.DataFrame, classes: pl.DataFrame, order: Sequence[str]
) -> list[Slice]:
    """The range slices of the instance windows ``inst`` (``win``, ``key``, rank, device, ``w0``, ``w1``):
    instances summed per name and device, from :func:`_stats`' ``totals`` and ``classes``."""
    if inst.height == 0:
        return []
    keys = ["key", *_KEYS]
    sums = ["busy_ns", "compute_ns", "communication_ns", "both_ns", "kernels"]
    per_name = (
        inst.join(totals, on="win")
        .group_by(keys, maintain_order=True)
        .agg(
            (pl.col("w1") - pl.col("w0")).sum().alias("span_ns"),
            *[pl.col(c).sum() for c in sums],
            pl.len().alias("instances"),
        )
    )
    name_classes = (
        classes.join(inst.select("win", *keys), on="win")
        .group_by(*keys, "cls")
        .agg(pl.col("time_ns").sum(), pl.col("union_ns").sum(), pl.col("kernels").sum())
    )
    grouped: dict[tuple[Any, ...], list[dict[str, Any]]] = {}
    for r in name_classes.iter_rows(named=True):
        grouped.setdefault((r["key"], r["rank"], r["device"]), []).append(r)
    return [
        _slice(g, g, grouped.get((g["key"], g["rank"], g["device"]), []), order)
        for g in per_name.iter_rows(named=True)
    ]


def _slices(
    rows: pl.DataFrame,
    ranges: pl.DataFrame | None,
    order: Sequence[str],
    limit: int | None,
    also: pl.DataFrame | None = None,
) -> tuple[list[Slice], list[Slice], int, list[Slice]]:
    """The device slices, the range slices (instances summed per name and device), the number of range names
    with GPU work, and the range slices of every name of ``also`` (a second ranges frame over the same rows: the
    step windows, analyzers/breakdown/steps.py). Both sets of windows go through one :func:`_stats`, so each
    device's interval covers are built once; ``also`` must hold the ids and parents of ``ranges`` in the same order
    (only its names differ), so the ranges' extents are found once too."""
    extents = None
    if ranges is not None and ranges.height and also is not None and also.height:
        extents = range_extents(rows, ranges)  # the same ids and parents: one upward pass for both namings
    windows, names = _windows(rows, ranges, limit, extents)
    n = windows.height
    if also is not None:
        extra, _ = _windows(rows, also, None, extents)
        windows = pl.concat([windows, extra.filter(pl.col("key").is_not_null())], how="vertical")
    totals, classes = _stats(rows, windows, order)
    windows = windows.with_row_index("win").with_columns(pl.col("win").cast(pl.Int64))
    # a device's own kernel count is every row, also those of zero length at the span's edges
    counts = rows.group_by(*_KEYS, "cls").agg(pl.len().alias("_n"))
    devices = windows.filter(pl.col("key").is_null())
    dev_classes = (
        classes.join(devices.select("win", *_KEYS), on="win")
        .join(counts, on=[*_KEYS, "cls"], nulls_equal=True)
        .with_columns(pl.col("_n").alias("kernels"))
    )
    dev_totals = totals.join(devices.select("win", *_KEYS), on="win").join(
        rows.group_by(_KEYS).agg(pl.len().alias("_n")), on=_KEYS, nulls_equal=True
    )
    dev_totals = dev_totals.with_columns(pl.col("_n").alias("kernels"))
    by_win: dict[int, list[dict[str, Any]]] = {}
    for r in dev_classes.iter_rows(named=True):
        by_win.setdefault(r["win"], []).append(r)
    total_of = {r["win"]: r for r in dev_totals.iter_rows(named=True)}
    out_devices = [
        _slice(
            {**w, "span_ns": w["w1"] - w["w0"], "key": None},
            total_of[w["win"]],
            by_win.get(w["win"], []),
            order,
        )
        for w in devices.iter_rows(named=True)
    ]
    inst = windows.filter(pl.col("key").is_not_null())
    mine, theirs = inst.filter(pl.col("win") < n), inst.filter(pl.col("win") >= n)
    if theirs.height:  # each set's rows only, so the joins see what they saw when the sets were apart
        extra_totals = totals.filter(pl.col("win") >= n)
        extra_classes = classes.filter(pl.col("win") >= n)
        totals, classes = totals.filter(pl.col("win") < n), classes.filter(pl.col("win") < n)
        also_slices = _range_slices(theirs, extra_totals, extra_classes, order)
    else:
        also_slices = []
    return out_devices, _range_slices(mine, totals, classes, order), names, also_slices


def memops_recorded(record: RunRecord | None) -> bool:
    """Whether a run's frames hold its memcpy / memset rows: False for a run imported before the memops frame
    existed (its manifest's ``frames.rows`` does not name it), whose frames are migrated on read without them."""
    rows = record.frames.rows if record is not None and record.frames is not None else None
    return rows is None or "memops" in rows


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
    return breakdown_and(
        frames, order=order, range_limit=range_limit, with_ranges=with_ranges, memops=memops
    )[0]


def breakdown_and(
    frames: dict[str, pl.DataFrame],
    *,
    also: pl.DataFrame | None = None,
    order: Sequence[str] = CLASS_ORDER,
    range_limit: int | None = RANGE_LIMIT,
    with_ranges: bool = True,
    memops: bool = True,
) -> tuple[Breakdown, list[Slice]]:
    """:func:`breakdown`, and the slices of every range name of ``also`` (a second ranges frame of the same run,
    every name kept: the step windows of analyzers/breakdown/steps.py), from the same interval covers."""
    kernels = frames.get("kernels")
    if kernels is not None and "kernel_class" not in kernels.columns:
        frames = classify_frames(frames)
    rows = activity(frames)
    notes = []
    if not memops:
        notes.append(
            "this run was imported before tracekit kept memcpy / memset: their time counts as idle here; "
            "`tracekit import --rebuild RUN` reads them"
        )
    if rows.height == 0:
        return Breakdown(order=tuple(order), notes=notes), []
    ranges = frames.get("ranges") if with_ranges else None
    devices, by_range, total, also_slices = _slices(rows, ranges, order, range_limit, also)
    notes += far_apart_notes(frames.get("kernels"))
    return (
        Breakdown(devices=devices, ranges=by_range, ranges_total=total, order=tuple(order), notes=notes),
        also_slices,
    )
