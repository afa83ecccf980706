"""The same GEMM on every rank, side by side (each rank's own GEMM cases and waterfalls, else GEMM kernels
by name), and the factor that makes the slowest rank slower."""

from __future__ import annotations

from typing import Any

import polars as pl

from ..gemm import is_gemm_kernel
from .labels import rank_frames


# --- GEMMs per rank ------------------------------------------------------------------------------------------------------
def _case_rows(frames: dict[str, pl.DataFrame], ranks: list[int], environment: Any, calibration: Any):
    """Each rank's GEMM cases, explained (:func:`tracekit.analyzers.analysis.case_list` on the rank's frames: the
    one place cases are built); ``(rows, cases by (label, rank))``. A row's ``time_ns`` is the GEMM time per launch
    (GEMM kernel and split-K reduce: sum over the calls / launches), the same on every rank whatever the host
    did between launches. Profiled kernels outside GEMM ranges count only when named like a GEMM; several cases
    of one label on a rank (the same kernel profiled in several launches) are one row, its time the
    launch-weighted mean and its waterfall the most-launched case's."""
    from ..analysis import case_list

    rows: dict[tuple[str, int], dict[str, Any]] = {}
    wfs: dict[tuple[str, int], Any] = {}
    for r in ranks:
        for case in case_list(rank_frames(frames, r), calibration=calibration, environment=environment):
            if (
                case.origin == "ncu"
                and case.range is None
                and not is_gemm_kernel(case.kernel.name or case.name)
            ):
                continue
            key = (case.label, r)
            t = case.timing
            launches = max(t.launches, 1)
            per_launch = t.gemm_ns_total / t.launches if t.launches and t.gemm_ns_total else None
            row = rows.get(key)
            if row is not None:
                total = row["launches"] + launches
                for col, new in (("time_ns", per_launch), ("tflops", t.achieved_tflops)):
                    if row[col] is not None and new is not None:
                        row[col] = (row[col] * row["launches"] + new * launches) / total
                row["launches"] = total
                if launches <= row["_top"]:
                    continue
            v = case.verdict
            wfs[key] = case
            fresh = {
                "gemm": case.label,
                "origin": case.origin,
                "rank": r,
                "launches": launches,
                "main_kernel": case.kernel.name,
                "time_ns": per_launch,
                "tflops": t.achieved_tflops,
                "pct_of_peak": case.pct_of_peak,
                "sm_clock_hz": case.sm_clock_hz,
                "verdict": (v.factor + (f": {v.cause}" if v.cause else "")) if v.factor else None,
                "_top": launches,
            }
            if row is None:
                rows[key] = fresh
            else:  # the most-called case speaks for the row; the mean time stays the mean
                keep = {c: row[c] for c in ("launches", "time_ns", "tflops")}
                row.update(fresh)
                row.update(keep)
    return [{k: v for k, v in row.items() if k != "_top"} for row in rows.values()], wfs


def _kernel_rows(k: pl.DataFrame) -> list[dict[str, Any]]:
    """GEMM kernels by name per rank, for runs without GEMM ranges or Nsight Compute rows."""
    g = (
        k.filter(pl.col("role") == "gemm")
        .group_by("name", "rank")
        .agg(pl.len().alias("launches"), pl.col("duration_ns").mean().alias("time_ns"))
    )
    return [
        {
            "gemm": r["name"],
            "origin": "kernel",
            "rank": r["rank"],
            "launches": r["launches"],
            "main_kernel": r["name"],
            "time_ns": r["time_ns"],
            "tflops": None,
            "pct_of_peak": None,
            "sm_clock_hz": None,
            "verdict": None,
        }
        for r in g.iter_rows(named=True)
    ]


_GEMM_SCHEMA = {
    "gemm": pl.String,
    "origin": pl.String,
    "rank": pl.Int32,
    "launches": pl.Int64,
    "main_kernel": pl.String,
    "time_ns": pl.Float64,
    "tflops": pl.Float64,
    "pct_of_peak": pl.Float64,
    "sm_clock_hz": pl.Float64,
    "verdict": pl.String,
}


_COMPARED = {
    "achieved_occupancy_pct": "achieved occupancy %",
    "est_occupancy_pct": "occupancy % (estimated by the PyTorch profiler)",
    "tensor_pipe_pct": "tensor pipe %",
    "waves": "waves",
}
"""Evidence of a factor that :func:`_why` names when two ranks differ in it, with its label."""


def _why(key: str, slow: int, fast: int, wfs: dict[tuple[str, int], Any]) -> str | None:
    """Which waterfall factor the slowest rank loses more in than the fastest, in words."""
    a, b = wfs.get((key, slow)), wfs.get((key, fast))
    if a is None or b is None:
        return None
    fa = {f.name: f for f in a.factors}
    fb = {f.name: f for f in b.factors}
    worst = None
    for name in fa.keys() & fb.keys():
        ratio = fa[name].value / fb[name].value if fb[name].value > 0 else 1.0
        if worst is None or ratio < worst[1]:
            worst = (name, ratio)
    if worst is None or worst[1] > 0.995:
        return None
    name = worst[0]
    text = f"{name} factor {fa[name].value:.2f} on rank {slow} vs {fb[name].value:.2f} on rank {fast}"
    ea, eb = fa[name].evidence, fb[name].evidence
    details = []
    if ea.get("sm_clock_hz") and eb.get("sm_clock_hz"):
        details.append(f"SM clock {ea['sm_clock_hz'] / 1e6:.0f} vs {eb['sm_clock_hz'] / 1e6:.0f} MHz")
    if ea.get("power_w") and eb.get("power_w"):
        details.append(f"power {ea['power_w']:.0f} vs {eb['power_w']:.0f} W")
    for key_, label in _COMPARED.items():
        if ea.get(key_) is not None and eb.get(key_) is not None and ea[key_] != eb[key_]:
            details.append(f"{label} {ea[key_]:.3g} vs {eb[key_]:.3g}")
    cause = fa[name].cause
    return text + (f" ({cause})" if cause else "") + (": " + ", ".join(details) if details else "")


def _spread(gemms: pl.DataFrame, wfs: dict[tuple[str, int], Any]) -> pl.DataFrame:
    """One row per GEMM seen on two or more ranks: ``ranks``, ``min_ns`` / ``median_ns`` / ``max_ns`` (time per
    launch), ``spread_pct`` (max / min - 1, %), ``fastest_rank``, ``slowest_rank``, ``why``."""
    schema = {
        "gemm": pl.String,
        "origin": pl.String,
        "ranks": pl.UInt32,
        "min_ns": pl.Float64,
        "median_ns": pl.Float64,
        "max_ns": pl.Float64,
        "spread_pct": pl.Float64,
        "fastest_rank": pl.Int32,
        "slowest_rank": pl.Int32,
        "why": pl.String,
    }
    g = gemms.filter(pl.col("time_ns").is_not_null())
    if g.height == 0:
        return pl.DataFrame(schema=schema)
    agg = (
        g.sort("rank")
        .group_by("gemm", "origin", maintain_order=True)
        .agg(
            pl.col("rank").n_unique().cast(pl.UInt32).alias("ranks"),
            pl.col("time_ns").min().alias("min_ns"),
            pl.col("time_ns").median().alias("median_ns"),
            pl.col("time_ns").max().alias("max_ns"),
            pl.col("rank").sort_by("time_ns").first().alias("fastest_rank"),
            pl.col("rank").sort_by("time_ns").last().alias("slowest_rank"),
        )
        .filter(pl.col("ranks") >= 2)
        .with_columns(((pl.col("max_ns") / pl.col("min_ns") - 1) * 100).alias("spread_pct"))
    )
    whys = [
        _why(r["gemm"], r["slowest_rank"], r["fastest_rank"], wfs) if r["spread_pct"] > 0 else None
        for r in agg.iter_rows(named=True)
    ]
    agg = agg.with_columns(pl.Series("why", whys, dtype=pl.String))
    return agg.select(list(schema)).sort("spread_pct", descending=True, nulls_last=True)
