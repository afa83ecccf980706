"""Files of one GPU whose kernels lie far apart in time.

A device's span runs from its first kernel to its last. When its kernels come from several files (two captures
of one program imported together, or a PyTorch profiler trace and an Nsight Systems export of one process, whose
clocks differ), the time between the files counts as idle, and a step can read "1,716,423,318,608 ms: idle 100%".
The span is right for the timestamps given, but it measures the gap between files, not the GPU: the breakdown
says so in a note instead of leaving the number unexplained.
"""

from __future__ import annotations

import polars as pl

from tracekit.numbers import duration

from .table import gpu_label

__all__ = ["FAR_APART_NS", "far_apart_notes"]

FAR_APART_NS = 60_000_000_000
"""Files of one device count as far apart when the time between them exceeds a minute and ten times the time
their own kernels span: a gap no step of a model explains."""


def far_apart_notes(kernels: pl.DataFrame | None) -> list[str]:
    """One note per device (rank, device) whose kernels come from files whose times lie far apart
    (:data:`FAR_APART_NS`), naming the two files around the widest gap."""
    needed = {"source", "rank", "device", "start_ns", "end_ns"}
    if kernels is None or kernels.height == 0 or not needed <= set(kernels.columns):
        return []
    per = (
        kernels.filter(pl.col("start_ns").is_not_null() & pl.col("end_ns").is_not_null())
        .group_by("rank", "device", "source")
        .agg(pl.col("start_ns").min().alias("a"), pl.col("end_ns").max().alias("b"))
        .sort("rank", "device", "a", nulls_last=True)
    )
    notes = []
    for (rank, device), g in per.group_by("rank", "device", maintain_order=True):
        if g.height < 2:
            continue
        rows = g.rows(named=True)
        own = sum(r["b"] - r["a"] for r in rows)
        widest, pair, last = 0, ("", ""), rows[0]
        for r in rows[1:]:
            gap = r["a"] - last["b"]
            if gap > widest:
                widest, pair = gap, (last["source"], r["source"])
            if r["b"] > last["b"]:
                last = r
        if widest > max(FAR_APART_NS, 10 * own):
            notes.append(
                f"GPU {gpu_label(rank, device)}: its kernels come from {len(rows)} files, and {pair[0]} and {pair[1]} lie "
                f"{_long(widest)} apart (their kernels span {duration(own)} in all): the span counts that time "
                "as idle. Separate captures, or files whose clocks differ (a PyTorch profiler trace and an Nsight "
                "Systems export of one process), read better as separate runs (`tracekit import` each on its own)."
            )
    return notes


def _long(ns: int) -> str:
    """A gap in days or hours where it is that long, else as :func:`duration` writes it."""
    if ns >= 2 * 86_400e9:
        return f"{ns / 86_400e9:,.1f} days"
    if ns >= 2 * 3_600e9:
        return f"{ns / 3_600e9:,.1f} hours"
    return duration(ns)
