""":func:`analyze_ranks`: the cross-rank analysis of a run of two or more ranks, all together in a
:class:`RankAnalysis`."""

from __future__ import annotations

import json
from dataclasses import dataclass, field
from typing import Any

import polars as pl

from tracekit.records import Environment

from .gemms import _GEMM_SCHEMA, _case_rows, _kernel_rows, _spread
from .kernels import _collectives, _mean_skew, _role_sums, _roles, _steps
from .labels import run_ranks
from .straggler import _straggler


# --- all together ------------------------------------------------------------------------------------------------------
@dataclass
class RankAnalysis:
    """The cross-rank view of a run with two or more ranks (see the module docstring).

    ``ranks``: rank, pid, device, gpu, kernels, busy_ns, gemm_ns, comm_ns, other_ns, compute_ns (busy - comm),
    span_ns (first kernel start to last end), idle_ns (span - busy: the GPU waiting for the host), gemm_pct / comm_pct (of busy), steps, last_arrivals (collectives
    this rank arrived at last), straggler. ``gemms``: gemm (range label or kernel name), origin, rank, launches,
    main_kernel, time_ns (per launch), tflops, pct_of_peak, sm_clock_hz, verdict. ``gemm_spread``: see
    :func:`_spread`. ``steps``: rank, step, name, start_ns, end_ns, duration_ns, kernels, gemm_ns, comm_ns,
    other_ns, compute_ns. ``collectives``: see :func:`_collectives`."""

    ranks: pl.DataFrame
    gemms: pl.DataFrame
    gemm_spread: pl.DataFrame
    steps: pl.DataFrame
    collectives: pl.DataFrame
    straggler: int | None
    reasons: list[str] = field(default_factory=list)
    notes: list[str] = field(default_factory=list)

    def to_dict(self) -> dict[str, Any]:
        """JSON-able form (``tracekit report --format json``'s ``ranks``)."""

        def records(df: pl.DataFrame) -> list[dict[str, Any]]:
            return json.loads(df.write_json()) if df.height else []

        return {
            "ranks": records(self.ranks),
            "straggler": self.straggler,
            "reasons": self.reasons,
            "gemm_spread": records(self.gemm_spread),
            "gemms": records(self.gemms),
            "steps": records(self.steps),
            "collectives": {
                "count": int(self.collectives.select("name", "index").n_unique())
                if self.collectives.height
                else 0,
                "mean_skew_ns": _mean_skew(self.collectives),
            },
            "notes": self.notes,
        }


def analyze_ranks(
    frames: dict[str, pl.DataFrame],
    *,
    environment: Environment | dict[str, Any] | None = None,
    calibration: dict[str, Any] | None = None,
) -> RankAnalysis | None:
    """The cross-rank analysis of a run; None when the run holds fewer than two ranks."""
    ranks = run_ranks(frames)
    if len(ranks) < 2:
        return None
    notes: list[str] = []
    k = _roles(frames)
    sources = k["source"].n_unique() if k.height else 0
    one_clock = sources == 1
    if not one_clock and k.height:
        notes.append(
            "ranks come from separate files: their clocks are not assumed to agree, so collective arrival skew "
            "is not measured (the shortest-wait signal is)"
        )
    steps = _steps(k, frames["ranges"]) if k.height else pl.DataFrame()
    coll, cnotes = _collectives(k, one_clock)
    notes += cnotes
    rows, wfs = _case_rows(frames, ranks, environment, calibration)
    if not rows:
        rows = _kernel_rows(k)
    if rows and all(r["origin"] == "kernel" for r in rows):  # by name: from here or from the explainer
        notes.append(
            "no tracekit GEMM ranges or Nsight Compute rows: GEMMs compared by kernel name, timeline only "
            "(capture with 'tracekit capture --ranks --nsys --ncu' for each rank's waterfall)"
        )
    gemms = (
        pl.DataFrame(rows, schema=_GEMM_SCHEMA).sort("gemm", "rank")
        if rows
        else pl.DataFrame(schema=_GEMM_SCHEMA)
    )
    spread = _spread(gemms, wfs)

    per = _role_sums(k.sort("rank"), ["rank"]) if k.height else pl.DataFrame(schema={"rank": pl.Int32})
    spans = k.group_by("rank").agg(
        (pl.col("end_ns").max() - pl.col("start_ns").min()).alias("span_ns"),
        pl.col("pid").unique().sort().first().alias("pid"),
        pl.col("device").unique().sort().first().alias("device"),
        pl.col("device").n_unique().alias("_ndev"),
    )
    table = pl.DataFrame({"rank": pl.Series(ranks, dtype=pl.Int32)})
    table = table.join(spans, on="rank", how="left").join(per, on="rank", how="left")
    devices = frames["devices"].filter(pl.col("rank").is_not_null()).unique("rank", keep="first")
    table = table.join(devices.select("rank", pl.col("name").alias("gpu")), on="rank", how="left")
    ncu_counts = frames["ncu"].filter(pl.col("rank").is_not_null()).group_by("rank").len("ncu_kernels")
    table = table.join(ncu_counts, on="rank", how="left")
    if steps.height:
        table = table.join(steps.group_by("rank").len("steps"), on="rank", how="left")
    else:
        table = table.with_columns(pl.lit(None, pl.UInt32).alias("steps"))
    arrivals = (
        coll.filter(pl.col("last_arrival")).group_by("rank").len("last_arrivals")
        if coll.height
        else pl.DataFrame(schema={"rank": pl.Int32, "last_arrivals": pl.UInt32})
    )
    table = table.join(arrivals, on="rank", how="left")
    for c in ("kernels", "busy_ns", "gemm_ns", "comm_ns", "other_ns"):
        if c not in table.columns:
            table = table.with_columns(pl.lit(None, pl.Int64).alias(c))
    table = table.with_columns(
        pl.when(pl.col("_ndev") > 1).then(None).otherwise(pl.col("device")).alias("device"),
        (pl.col("busy_ns") - pl.col("comm_ns")).alias("compute_ns"),
        (pl.col("span_ns") - pl.col("busy_ns")).clip(lower_bound=0).alias("idle_ns"),
        (100.0 * pl.col("gemm_ns") / pl.col("busy_ns")).alias("gemm_pct"),
        (100.0 * pl.col("comm_ns") / pl.col("busy_ns")).alias("comm_pct"),
        pl.col("ncu_kernels").fill_null(0),
        pl.col("last_arrivals").fill_null(0),
    )
    notes += _copies_in_idle(table, frames.get("memops"))
    straggler, reasons = _straggler(table, steps, spread, coll)
    is_slow = pl.col("rank") == straggler if straggler is not None else pl.lit(False)
    table = table.with_columns(is_slow.alias("straggler"))
    cols = [
        "rank", "pid", "device", "gpu", "kernels", "busy_ns", "gemm_ns", "comm_ns", "other_ns", "compute_ns",
        "span_ns", "idle_ns", "gemm_pct", "comm_pct", "steps", "last_arrivals", "ncu_kernels", "straggler",
    ]  # fmt: skip
    return RankAnalysis(
        ranks=table.select(cols).sort("rank"),
        gemms=gemms,
        gemm_spread=spread,
        steps=steps,
        collectives=coll,
        straggler=straggler,
        reasons=reasons,
        notes=notes,
    )


def _copies_in_idle(table: pl.DataFrame, memops: pl.DataFrame | None) -> list[str]:
    """A note where a rank's idle (its kernels' span less their time) holds memory copies or sets worth naming
    (1% of its span or more): the rank table counts only kernels, while the step breakdown counts copies as
    ``memory``, so the two idle figures of one GPU differ by them (nsys-ai's h100_2gpu_1s: 920 ms of pageable
    host-to-device copies on each GPU, 97.7% idle in the table, 0.7% in the breakdown)."""
    if memops is None or memops.height == 0 or "rank" not in memops.columns:
        return []
    spans = table.select("rank", "span_ns").drop_nulls()
    per = (
        memops.filter(pl.col("rank").is_not_null())
        .group_by("rank")
        .agg((pl.col("end_ns") - pl.col("start_ns")).clip(lower_bound=0).sum().alias("copy_ns"))
        .join(spans, on="rank", how="inner")
        .filter(pl.col("copy_ns") >= 0.01 * pl.col("span_ns"))
        .sort("rank")
    )
    if per.height == 0:
        return []
    each = ", ".join(f"rank {r}: {c / 1e6:,.1f} ms" for r, c in per.select("rank", "copy_ns").iter_rows())
    return [
        f"idle here is time with no kernel running, memory copies and sets included ({each}); the step "
        "breakdown counts those as memory"
    ]
