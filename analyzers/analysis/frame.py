"""The cases of an analysis as one flat polars DataFrame (:meth:`Analysis.cases_frame`, docs/ANALYSIS.md)."""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

import polars as pl

from .figures import median_call
from .model import Case

CASES_SCHEMA: dict[str, Any] = {
    "rank": pl.Int64,  # order by time in calls, 1 = largest
    "id": pl.String,
    "name": pl.String,
    "origin": pl.String,
    "range": pl.String,
    "parent": pl.String,
    "position": pl.Int64,
    "backend": pl.String,
    "op": pl.String,
    "kernel": pl.String,
    "kernel_class": pl.String,
    "grid": pl.Int64,
    "block": pl.Int64,
    "registers": pl.Int64,
    "smem_bytes": pl.Int64,
    "m": pl.Int64,
    "n": pl.Int64,
    "k": pl.Int64,
    "batch": pl.Int64,
    "dtype_a": pl.String,
    "dtype_b": pl.String,
    "dtype_out": pl.String,
    "dtype_class": pl.String,
    "rate_source": pl.String,
    "flops_per_call": pl.Float64,
    "flops_total": pl.Float64,
    "flops_source": pl.String,
    "calls": pl.Int64,
    "calls_without_kernel": pl.Int64,
    "launches": pl.Int64,
    "gemm_ns_total": pl.Float64,
    "aux_ns_total": pl.Float64,
    "gap_ns_total": pl.Float64,
    "span_ns_total": pl.Float64,
    "gemm_ns_median": pl.Float64,
    "aux_ns_median": pl.Float64,
    "gap_ns_median": pl.Float64,
    "span_ns_median": pl.Float64,
    "span_ns_p10": pl.Float64,
    "span_ns_p90": pl.Float64,
    "median_call_ns": pl.Float64,  # the median call (figures.py): its span and parts
    "median_call_gemm_ns": pl.Float64,
    "median_call_aux_ns": pl.Float64,
    "median_call_gap_ns": pl.Float64,
    "achieved_tflops": pl.Float64,
    "kernel_tflops": pl.Float64,
    "timing_source": pl.String,
    "device": pl.String,
    "peak_tflops": pl.Float64,
    "peak_source": pl.String,
    "calibrated_tflops": pl.Float64,
    "pct_of_peak": pl.Float64,
    "sm_clock_hz": pl.Float64,
    "verdict_kind": pl.String,
    "verdict": pl.String,
    "verdict_lost_ns_total": pl.Float64,
    "verdict_gain_pct": pl.Float64,
    "remedy": pl.String,
    "capture_hint": pl.String,
}
"""Columns of :func:`cases_frame`, in order (units in the names: ns, TFLOP/s, Hz, bytes)."""


def case_row(rank: int, c: Case) -> dict[str, Any]:
    """One case as a flat row of :data:`CASES_SCHEMA`."""
    s, t, v = c.shape, c.timing, c.verdict
    mid = median_call(t)
    verdict = None
    if v.factor:
        verdict = v.factor + (f": {v.cause}" if v.cause else "")
    elif v.kind != "explained":
        verdict = v.kind
    return {
        "rank": rank,
        "id": c.id,
        "name": c.name,
        "origin": c.origin,
        "range": c.range,
        "parent": c.parents[-1] if c.parents else None,
        "position": c.position,
        "backend": c.backend,
        "op": c.op,
        "kernel": c.kernel.name,
        "kernel_class": c.kernel.kernel_class,
        "grid": c.kernel.grid,
        "block": c.kernel.block,
        "registers": c.kernel.registers,
        "smem_bytes": c.kernel.smem_bytes,
        "m": s.m if s else None,
        "n": s.n if s else None,
        "k": s.k if s else None,
        "batch": s.batch if s else None,
        "dtype_a": s.dtype_a if s else None,
        "dtype_b": s.dtype_b if s else None,
        "dtype_out": s.dtype_out if s else None,
        "dtype_class": c.rate.dtype_class,
        "rate_source": c.rate.source,
        "flops_per_call": c.flops.per_call,
        "flops_total": c.flops.total,
        "flops_source": c.flops.source,
        "calls": t.calls,
        "calls_without_kernel": t.calls_without_kernel,
        "launches": t.launches,
        "gemm_ns_total": t.gemm_ns_total,
        "aux_ns_total": t.aux_ns_total,
        "gap_ns_total": t.gap_ns_total,
        "span_ns_total": t.span_ns_total,
        "gemm_ns_median": t.gemm_ns.median,
        "aux_ns_median": t.aux_ns.median,
        "gap_ns_median": t.gap_ns.median,
        "span_ns_median": t.span_ns.median,
        "span_ns_p10": t.span_ns.p10,
        "span_ns_p90": t.span_ns.p90,
        "median_call_ns": mid.span_ns if mid else None,
        "median_call_gemm_ns": mid.gemm_ns if mid else None,
        "median_call_aux_ns": mid.aux_ns if mid else None,
        "median_call_gap_ns": mid.gap_ns if mid else None,
        "achieved_tflops": t.achieved_tflops,
        "kernel_tflops": t.kernel_tflops,
        "timing_source": t.source,
        "device": c.device.name if c.device else None,
        "peak_tflops": c.peak.tflops if c.peak else None,
        "peak_source": c.peak.source if c.peak else None,
        "calibrated_tflops": c.peak.calibrated_tflops if c.peak else None,
        "pct_of_peak": c.pct_of_peak,
        "sm_clock_hz": c.sm_clock_hz,
        "verdict_kind": v.kind,
        "verdict": verdict,
        "verdict_lost_ns_total": v.lost_ns_total,
        "verdict_gain_pct": v.gain_pct,
        "remedy": v.remedy,
        "capture_hint": v.capture_hint,
    }


def cases_frame(cases: Sequence[Case]) -> pl.DataFrame:
    """One row per case in the analysis' order (time in calls, largest first); columns :data:`CASES_SCHEMA`."""
    rows = [case_row(i, c) for i, c in enumerate(cases, start=1)]
    return pl.DataFrame(rows, schema=CASES_SCHEMA) if rows else pl.DataFrame(schema=CASES_SCHEMA)
