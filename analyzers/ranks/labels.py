"""Labelling at import (:func:`label_extract`): which rank each row of a file belongs to, from the file
itself, its name, or the processes of a whole-tree Nsight Systems export; and one rank's frames of a run."""

from __future__ import annotations

import re
from typing import Any

import polars as pl

from tracekit.frames import SPECS

from ..readers.base import Extract

RANKED_FRAMES = ("kernels", "memops", "ranges", "ncu", "devices")
"""Frames with a ``rank`` column (tracekit/frames.py); a multi-rank run writes them partitioned by rank."""

_RANK_IN_NAME = re.compile(r"(?:^|[._-])rank[-_=]?(\d{1,6})(?=[._-]|$)", re.IGNORECASE)


# --- labelling ------------------------------------------------------------------------------------------------------
def rank_from_name(name: str) -> int | None:
    """The rank a file's name carries (``nsys.rank3.sqlite``, ``x_rank-3.pt.trace.json.gz``), else None."""
    matches = _RANK_IN_NAME.findall(name)
    return int(matches[-1]) if matches else None


def _set_rank(df: pl.DataFrame, value: pl.Expr) -> pl.DataFrame:
    return df.with_columns(pl.coalesce(pl.col("rank"), value.cast(pl.Int32)).alias("rank"))


def _concurrent(procs: pl.DataFrame) -> bool:
    """Whether processes look like ranks of one job: they used different devices, or their kernels ran at the
    same time. Processes that ran one after another on one device are a single job's workers (``tracekit bench
    gemm`` runs each backend in a process of its own), not ranks."""
    if procs["device"].n_unique() > 1:
        return True
    spans = procs.select("first", "last").drop_nulls().sort("first")
    reach = None
    for first, last in spans.iter_rows():
        if reach is not None and first < reach:
            return True
        reach = last if reach is None else max(reach, last)
    return False


def label_extract(ex: Extract, file_name: str) -> dict[str, Any]:
    """Fill the ``rank`` column of one file's frames (see the module docstring); returns what to record about it
    in the run's ``sources``: ``rank_source`` (``file`` | ``file name`` | ``processes``) and ``ranks`` (each rank
    with the pid and device behind it), or an empty dict when the file holds no rank."""
    present = [n for n in RANKED_FRAMES if n in ex.frames and ex.frames[n].height]
    found: set[int] = set()
    for n in present:
        found |= set(ex.frames[n]["rank"].drop_nulls().unique().to_list())
    if found:
        return {"rank_source": "file", "ranks": [{"rank": r} for r in sorted(found)]}
    named = rank_from_name(file_name)
    if named is not None:
        for n in present:
            ex.frames[n] = _set_rank(ex.frames[n], pl.lit(named))
        return {"rank_source": "file name", "ranks": [{"rank": named}]}
    kernels = ex.frames.get("kernels")
    if ex.kind != "nsys" or kernels is None or kernels.height == 0:
        return {}
    procs = (
        kernels.filter(pl.col("pid").is_not_null())
        .group_by("pid")
        .agg(
            pl.col("device").min().alias("device"),
            pl.col("device").n_unique().alias("devices"),
            pl.col("start_ns").min().alias("first"),
            pl.col("end_ns").max().alias("last"),
        )
        .sort("device", "pid", nulls_last=True)
    )
    if procs.height < 2 or not _concurrent(procs):
        return {}
    mapping = procs.with_columns(pl.int_range(pl.len(), dtype=pl.Int32).alias("_rank"))
    by_pid = mapping.select("pid", "_rank")
    for n in ("kernels", "memops", "ranges"):
        df = ex.frames.get(n)
        if df is not None and df.height:
            joined = df.select("pid").join(by_pid, on="pid", how="left", maintain_order="left")["_rank"]
            ex.frames[n] = _set_rank(df, pl.lit(joined))
    devices = ex.frames.get("devices")
    shared = mapping.group_by("device").len().filter(pl.col("len") > 1)["device"].to_list()
    if devices is not None and devices.height:
        one = mapping.filter(~pl.col("device").is_in(shared)).select("device", "_rank")
        joined = devices.select("device").join(one, on="device", how="left", maintain_order="left")["_rank"]
        ex.frames["devices"] = _set_rank(devices, pl.lit(joined))
    ranks = [
        {"rank": r["_rank"], "pid": r["pid"], "device": r["device"]}
        | ({"devices": r["devices"]} if r["devices"] > 1 else {})
        for r in mapping.iter_rows(named=True)
    ]
    note = "processes that launched kernels, ordered by the lowest device each used, then pid"
    if shared:
        note += f" (devices {sorted(shared)} are shared by several processes: ranks there follow pid order)"
    return {"rank_source": "processes", "rank_note": note, "ranks": ranks}


def run_ranks(frames: dict[str, pl.DataFrame]) -> list[int]:
    """The distinct ranks in a run's frames (empty for a single-process run)."""
    found: set[int] = set()
    for n in RANKED_FRAMES:
        df = frames.get(n)
        if df is not None and df.height and "rank" in df.columns:
            found |= set(df["rank"].drop_nulls().unique().to_list())
    return sorted(found)


def rank_frames(frames: dict[str, pl.DataFrame], rank: int) -> dict[str, pl.DataFrame]:
    """The frames of one rank: its kernels, ranges, ncu rows (with their metrics and rules) and devices. Tracekit's
    own measurements and failures carry no rank and are left out."""
    out = dict(frames)
    for n in RANKED_FRAMES:
        if n in frames:
            out[n] = frames[n].filter(pl.col("rank") == rank)
    if "ncu" in out:
        ids = out["ncu"]["ncu_id"].implode()
        for n in ("ncu_metrics", "ncu_rules"):
            if n in frames:
                out[n] = frames[n].filter(pl.col("ncu_id").is_in(ids))
    for n in ("measurements", "failures", "gemms"):
        if n in out:
            out[n] = SPECS[n].empty()
    return out
