"""The summary of a run that ``tracekit show`` prints: device(s), counts, measured GEMMs and failures, a
projection of the run's Analysis (its per-range and per-kernel tables included); the command only renders."""

from __future__ import annotations

from typing import Any

import polars as pl

from tracekit.records import RunRecord, gpu_of
from tracekit.run import Run

from .analysis.model import VerdictKind

_CRASH_FIELDS = (
    "dtype_a",
    "dtype_b",
    "dtype_out",
    "range",
    "caller",
    "signal",
    "python_stack",
    "stderr_tail",
)
"""Failure columns a crashed program's record fills (collectors/crash.py), shown in ``show --json``."""


def devices(frames: dict[str, pl.DataFrame], run: Run | None = None) -> list[dict[str, Any]]:
    """Distinct GPUs seen in the run: from device tables, ncu reports and the capture's environment."""
    seen: dict[tuple[Any, ...], dict[str, Any]] = {}

    def add(name: Any, cc: Any, sms: Any) -> None:
        if name is None and cc is None:
            return
        key = (name, cc)
        current = seen.get(key)
        if current is None:
            seen[key] = {"name": name, "compute_capability": cc, "sm_count": sms}
        elif current["sm_count"] is None and sms is not None:
            current["sm_count"] = sms

    for row in frames["devices"].select("name", "compute_capability", "sm_count").unique().iter_rows():
        add(*row)
    for row in frames["ncu"].select("device_name", "compute_capability", "sm_count").unique().iter_rows():
        add(*row)
    for row in frames["failures"].select("device_name", "compute_capability").unique().iter_rows():
        add(row[0], row[1], None)
    gpu = gpu_of(run.record.environment if run else None)
    if gpu.name:
        add(gpu.name, gpu.compute_capability, gpu.sm_count)
    # The same GPU can appear with and without a name in different files; prefer fully named entries.
    out = sorted(seen.values(), key=lambda d: (str(d["name"]), str(d["compute_capability"])))
    named = [d for d in out if d["name"]]
    return named or out


def crash_evidence(failure: dict[str, Any]) -> list[tuple[str, str]]:
    """A crash's evidence (capture's ``crashed`` / ``timeout`` records) as (label, text) pairs, for the report and
    the TUI alike: the signal, the GEMM call in flight and where it was made, the Python stack (when it is not
    the traceback already shown) and the program's last stderr lines. Texts are raw: each view escapes them."""
    out: list[tuple[str, str]] = []
    if failure.get("signal"):
        out.append(("signal", str(failure["signal"])))
    if failure.get("range") or failure.get("caller"):
        call = str(failure.get("range") or "?")
        if failure.get("dtype_a"):
            call += f" dtypes {failure['dtype_a']}/{failure.get('dtype_b')}->{failure.get('dtype_out')}"
        if failure.get("caller"):
            call += f" called at {failure['caller']}"
        out.append(("GEMM call in flight", call))
    stack = failure.get("python_stack")
    if stack and stack != failure.get("traceback"):
        out.append(("Python stack", str(stack).rstrip()))
    if failure.get("stderr_tail"):
        out.append(("the program's last stderr lines", str(failure["stderr_tail"]).rstrip()))
    return out


def case_row(case: Any) -> dict[str, Any]:
    """One case of the Analysis as a GEMM row of ``show --json`` (docs/ANALYSIS.md, "show --json"): the same
    numbers as the case, labelled. ``time_us`` is the median call's span (GEMM + aux + gap) and ``gemm_time_us``
    its GEMM time (analyzers/analysis/figures.py), ``gpu_time_us`` the sum of call spans; ``achieved_tflops`` = sum FLOPs / sum call spans, ``kernel_tflops`` = sum FLOPs / sum GEMM
    time."""
    from .analysis.figures import median_call

    t, s, v = case.timing, case.shape, case.verdict
    mid = median_call(t)

    def us(ns: float | None) -> float | None:
        return ns / 1e3 if ns is not None else None

    verdict = (
        v.factor + (f": {v.cause}" if v.cause else "")
        if v.factor
        else (None if v.kind == VerdictKind.NO_LOSS else str(v.kind))
    )
    return {
        "id": case.id,
        "name": case.name,
        "range": case.range,
        "parents": list(case.parents),
        "origin": case.origin,
        "backend": case.backend,
        "op": case.op,
        "m": s.m if s else None,
        "n": s.n if s else None,
        "k": s.k if s else None,
        "dtype": (s.dtype_a if s and s.dtype_a else None) or case.rate.dtype_class,
        "dtype_class": case.rate.dtype_class,
        "dtype_source": case.rate.source,
        "flops_source": case.flops.source,
        "main_kernel": case.kernel.name,
        "calls": t.calls,
        "launches": t.launches,
        "time_us": us(mid.span_ns if mid else None),
        "gemm_time_us": us(mid.gemm_ns if mid else None),
        "gpu_time_us": us(t.span_ns_total),
        "achieved_tflops": t.achieved_tflops,
        "kernel_tflops": t.kernel_tflops,
        "timing_source": t.source,
        "peak_tflops": case.peak.tflops if case.peak else None,
        "pct_of_peak": case.pct_of_peak,
        "sm_clock_hz": case.sm_clock_hz,
        "verdict": verdict,
        "verdict_kind": v.kind,
        # the same quantities under Analysis.cases_frame()'s names (docs/ANALYSIS.md), so that code written
        # against one reads the other; the keys above stay for the scripts written against them
        "dtype_a": s.dtype_a if s else None,
        "dtype_b": s.dtype_b if s else None,
        "dtype_out": s.dtype_out if s else None,
        "rate_source": case.rate.source,
        "kernel": case.kernel.name,
        "span_ns_median": t.span_ns.median,
        "gemm_ns_median": t.gemm_ns.median,
        "span_ns_total": t.span_ns_total,
        "aux_kernels": [
            {"name": a.name, "kernel_class": a.kernel_class, "per_call_us": us(a.per_call_ns)}
            for a in case.aux
        ],
        "fusion": [
            {
                "op": f.op,
                "kernels": list(f.kernels),
                "kernel_class": f.kernel_class,
                "side": f.side,
                "per_call_us": us(f.per_call_ns),
                "time_us": us(f.time_ns_total),
            }
            for f in case.fusion
        ],
    }


def summary(run: Run, frames: dict[str, pl.DataFrame] | None = None, analysis: Any = None) -> dict[str, Any]:
    """The JSON object of ``tracekit show --json``: the run's counts, frames-level facts and a projection of its
    Analysis (``gemms``: :func:`case_row` per case, largest GPU time first; ``summary``; ``failures``; ``moe``;
    ``ranks``; ``breakdown``: the step breakdown, the range names with the longest GPU windows unless the Analysis
    was built with ``breakdown="all"``; ``tables``: the Analysis' run tables). ``analysis`` is the run's Analysis,
    loaded here (from ``frames`` when given) when not given."""
    import msgspec

    if analysis is None:
        from .analysis import load_analysis

        analysis = load_analysis(run, frames=frames if isinstance(frames, dict) else None)
    from tracekit.frames import SCHEMA_VERSION

    devs = [
        {"name": d.name, "compute_capability": d.compute_capability, "sm_count": d.sm_count}
        for d in analysis.devices
    ]
    # the Analysis' failures (a crash's evidence fields too), projected; grouped by the Analysis' one rule
    wanted = ("backend", "op", "m", "n", "k", "kind", "error_type", "message", "traceback", *_CRASH_FIELDS)
    info = analysis.run
    record = run.record
    out: dict[str, Any] = {
        "schema_version": SCHEMA_VERSION,
        "analysis_schema_version": analysis.schema_version,
        "run": {
            # a bundle is named by its zip, never by the cache folder it is unpacked in (docs/TUI.md)
            "path": str(
                record.bundle.opened_from if record.bundle and record.bundle.opened_from else run.path
            ),
            "status": run.status,
            "partial": bool(record.partial),
            "incomplete_reason": record.incomplete_reason,
            "created": record.created,
            "command": record.command,
            "ncu_pass": ncu_pass(record),
        },
        "kernel_count": info.kernel_count,
        "range_count": info.range_count,
        "ncu_kernel_count": info.ncu_kernel_count,
        "summary": msgspec.to_builtins(analysis.summary),
        "gemms": [case_row(c) for c in analysis.cases],
        "failures": [{k: getattr(f, k) for k in wanted} for f in analysis.failures],
        "failure_groups": [msgspec.to_builtins(g) for g in analysis.failure_groups],
        "sources": [
            {"path": s.path, "kind": s.kind, "status": s.status, "message": s.message} for s in record.sources
        ],
    }
    if analysis.breakdown is not None:
        out["breakdown"] = msgspec.to_builtins(analysis.breakdown)
    if analysis.tables is not None:
        out["tables"] = msgspec.to_builtins(analysis.tables)
    if analysis.moe is not None:
        moe = msgspec.to_builtins(analysis.moe)
        out["moe"] = {"launches": moe["launches"], "whatif": moe["whatif"]}
    if len(devs) > 1:
        out["devices"] = devs
        out["device"] = None
    else:
        out["device"] = devs[0] if devs else {"name": None, "compute_capability": None, "sm_count": None}
    if analysis.ranks is not None:
        out["ranks"] = [msgspec.to_builtins(r) for r in analysis.ranks.ranks]
        out["straggler"] = {"rank": analysis.ranks.straggler, "reasons": analysis.ranks.reasons}
        out["rank_notes"] = list(analysis.ranks.notes)
    return out


def ncu_pass(record: RunRecord) -> dict[str, Any] | None:
    """What the capture's ncu pass profiled (run.json ``capture.passes[].ncu``): ``bound`` (what it was told to
    profile), ``profiled`` (kernels, from ncu's own lines), ``kernels`` (launches profiled per kernel name) and,
    with ``--ncu-budget``, ``budget`` (``spent``, ``spent_at_s``, ``stopped_by``, ``not_profiled``, ...). None
    for a run without one (an import, or a capture from before it was recorded)."""
    found = [p.ncu for p in record.capture.passes or [] if isinstance(p.ncu, dict)]
    return found[-1] if found else None
