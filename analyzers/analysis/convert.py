"""Today's case model to the typed one: a :class:`~tracekit.analyzers.gemm.GemmCase` and its
:class:`~tracekit.analyzers.explain.Waterfall` become one :class:`~.model.Case`.

This is the seam between how cases are found and explained (analyzers/gemm, analyzers/rules, analyzers/explain)
and what every view renders. Until the case model aggregates calls itself, a GemmCase holds per-call times of its
median instance and a launch count: the totals here are those per-call times x calls, the per-call distributions
have only their median (p10 / p90 where a measurement recorded them), and ``calls_without_kernel`` is 0.
"""

from __future__ import annotations

import hashlib
import math
import re
from typing import Any

from tracekit.devices import DeviceSpec

from .model import (
    AuxKernel,
    Case,
    DeviceInfo,
    Dist,
    Factor,
    FlopsInfo,
    KernelRef,
    NcuEvidence,
    NcuRule,
    PeakInfo,
    RateClass,
    Shape,
    Timing,
    Verdict,
)

NO_LOSS = 0.995
"""A factor at or above this value costs nothing worth naming: no remedy, never the verdict."""

_ORIGIN = {
    "measurement": "measurement",
    "range": "timeline",
    "ncu": "ncu",
    "ncu-kernel": "ncu",
    "kernel": "kernel",
}
_ROLES = (
    ("splitk-reduce", re.compile(r"split_?k|splitk|reduce", re.IGNORECASE)),
    ("quantize", re.compile(r"quant|fp8|fp4|amax|scale|cvt", re.IGNORECASE)),
    ("activation", re.compile(r"silu|gelu|relu|swiglu|act_and_mul|sigmoid|tanh", re.IGNORECASE)),
    ("layout", re.compile(r"swizzle|transpose|permute|layout|copy|contiguous|pad", re.IGNORECASE)),
)
_NCU_SKIP = {
    "ncu_id",
    "range_index",
    "action_index",
    "rank",
    "grid_x",
    "grid_y",
    "grid_z",
    "block_x",
    "block_y",
}


def aux_role(name: str | None) -> str:
    """The role of an auxiliary kernel by its name: quantize | splitk-reduce | activation | layout | other."""
    for role, pattern in _ROLES:
        if name and pattern.search(name):
            return role
    return "other"


def case_id(*key: Any) -> str:
    """A short stable id: the first 12 hex digits of the SHA-1 of the key's text."""
    return hashlib.sha1(repr(key).encode()).hexdigest()[:12]


def _finite(value: Any) -> float | None:
    if value is None:
        return None
    try:
        v = float(value)
    except (TypeError, ValueError):
        return None
    return v if math.isfinite(v) else None


def _text(value: Any) -> str | None:
    """A string or None, never an empty string."""
    if value is None:
        return None
    text = str(value).strip()
    return text or None


def device_info(
    spec: DeviceSpec | None, name: str | None = None, source: str | None = None
) -> DeviceInfo | None:
    """A catalog device (or only a name the files gave) as :class:`DeviceInfo`."""
    if spec is None:
        return DeviceInfo(name=_text(name), source="unknown") if _text(name) else None
    return DeviceInfo(
        key=spec.key,
        name=spec.name,
        compute_capability=spec.compute_capability,
        sm_count=spec.sm_count,
        boost_clock_hz=spec.boost_clock_hz,
        memory_bandwidth_bytes_per_s=spec.memory_bandwidth_bytes_per_s,
        source=source or spec.provenance,
    )


def _timing_source(gc: Any) -> str:
    detail = gc.time_source or ""
    if gc.origin == "measurement" and not detail.startswith("timeline"):
        return f"measurement:{gc.timing or 'events'}"
    if gc.origin in ("ncu", "ncu-kernel") or detail.startswith("Nsight Compute"):
        return "ncu-replay"
    return "timeline"


def _timing(gc: Any, measurement: dict[str, Any] | None) -> Timing:
    calls = max(int(gc.launches or 0), 0) if gc.main_ns else 0
    gemm, aux, gap = gc.main_ns, gc.aux_ns or 0.0, gc.gap_ns or 0.0
    span = gemm + aux + gap if gemm else None
    p10 = p90 = None
    if measurement is not None and _timing_source(gc).startswith("measurement"):
        p10 = _finite(measurement.get("time_us_p10"))
        p90 = _finite(measurement.get("time_us_p90"))
        p10, p90 = (p10 * 1e3 if p10 is not None else None), (p90 * 1e3 if p90 is not None else None)
    extra = aux + gap
    return Timing(
        calls=calls,
        launches=int(gc.launches or 0),
        gemm_ns_total=(gemm or 0.0) * calls,
        aux_ns_total=aux * calls,
        gap_ns_total=gap * calls,
        span_ns_total=(span or 0.0) * calls,
        gemm_ns=Dist(median=_finite(gemm), p10=p10, p90=p90),
        aux_ns=Dist(median=aux if gemm else None),
        gap_ns=Dist(median=gap if gemm else None),
        span_ns=Dist(
            median=_finite(span),
            p10=p10 + extra if p10 is not None else None,
            p90=p90 + extra if p90 is not None else None,
        ),
        achieved_tflops=_finite(gc.achieved_tflops),
        kernel_tflops=_finite(gc.kernel_tflops),
        achieved_estimate=_text(gc.achieved_estimate),
        source=_timing_source(gc),
        source_detail=_text(gc.time_source),
    )


def _shape(gc: Any) -> Shape | None:
    if not gc.shape_known:
        return None
    if gc.origin == "measurement":
        source = "measurement"
    elif gc.user_range:
        source = "profiler"
    else:
        source = "range name"
    return Shape(
        m=int(gc.m),
        n=int(gc.n),
        k=int(gc.k),
        batch=gc.batch,
        dtype_a=_text(gc.dtype_a),
        dtype_b=_text(gc.dtype_b),
        dtype_out=_text(gc.dtype_out),
        scale=_text(gc.scale),
        source=source,
    )


def _ncu(gc: Any) -> NcuEvidence | None:
    if not (gc.ncu or gc.ncu_metrics or gc.ncu_rules):
        return None
    metrics: dict[str, float] = {}
    for key, value in (gc.ncu or {}).items():
        if key in _NCU_SKIP or isinstance(value, bool):
            continue
        v = _finite(value) if isinstance(value, int | float) else None
        if v is not None:
            metrics[key] = v
    for key, value in (gc.ncu_metrics or {}).items():
        v = _finite(value)
        if v is not None:
            metrics[key] = v
    rules: dict[tuple[Any, ...], NcuRule] = {}
    for r in gc.ncu_rules or []:  # one entry per distinct finding (each profiled launch repeats them)
        rule = NcuRule(
            rule=_text(r.get("rule")),
            kind=_text(r.get("kind")),
            title=_text(r.get("title")),
            message=_text(r.get("message")),
            speedup_pct=_finite(r.get("speedup_pct")),
        )
        key = (rule.rule, rule.title, rule.message)
        if key not in rules or (rule.speedup_pct or 0) > (rules[key].speedup_pct or 0):
            rules[key] = rule
    row = gc.ncu or {}
    return NcuEvidence(
        kernels=max(1, int(gc.launches or 0)) if gc.origin in ("ncu", "ncu-kernel") else (1 if row else 0),
        ncu_id=gc.ncu_id,
        metrics=metrics,
        sm_clock_hz=_finite(row.get("sm_clock_hz")),
        clock_control=_text(row.get("clock_control")),
        rules=list(rules.values()),
        borrowed_from=_text(gc.ncu_borrowed_from),
    )


def _factor(f: Any, span_total: float) -> Factor:
    value = float(f.value)
    gain = _finite(f.gain_pct) if value > 0 else None
    lost = span_total * (1.0 - value) if span_total and value < 1.0 else 0.0
    return Factor(
        name=f.name,
        value=value,
        sentence=_text(f.sentence) or f.name,
        cause=_text(f.cause),
        remedy=_text(f.remedy) if value < NO_LOSS else None,
        evidence=_jsonable(f.evidence),
        gain_pct=gain,
        lost_ns_total=lost,
    )


def _jsonable(value: Any) -> Any:
    """Evidence as plain JSON values: non-finite numbers become None, tuples lists, other objects their text."""
    if isinstance(value, dict):
        return {str(k): _jsonable(v) for k, v in value.items()}
    if isinstance(value, list | tuple | set):
        return [_jsonable(v) for v in value]
    if isinstance(value, bool) or value is None or isinstance(value, str | int):
        return value
    if isinstance(value, float):
        return value if math.isfinite(value) else None
    return str(value)


def missing(gc: Any, peak: float | None) -> tuple[str, str] | None:
    """What the case lacks to be explained and how to learn it (reason, what to capture or pass); None when it
    lacks nothing."""
    if not gc.flops:
        return (
            "no GEMM shape or FLOP count",
            "capture with `tracekit capture --ncu` (its counters count the FLOPs), or record shapes (the PyTorch "
            "profiler's record_shapes=True, or tracekit's own ranges)",
        )
    if peak is None:
        return (
            f"no {gc.dtype_class or 'tensor'} peak known for this GPU",
            "name the GPU with --device NAME (tracekit explain --help lists the catalog)",
        )
    if not gc.main_ns:
        return (
            "no kernel time",
            "capture a timeline (`tracekit capture --nsys`) or profile with `tracekit capture --ncu`",
        )
    return None


def capture_hint(gc: Any, peak: float | None) -> str | None:
    """What to capture (or pass) to learn what the case is missing, None when nothing is."""
    lack = missing(gc, peak)
    return lack[1] if lack else None


def _verdict(gc: Any, wf: Any, factors: list[Factor], peak: float | None) -> Verdict:
    v = wf.verdict
    if v is not None:
        blamed = next((f for f in factors if f.name == v.name), None)
        return Verdict(
            kind="explained",
            factor=v.name,
            cause=_text(v.cause),
            value=float(v.value),
            sentence=_text(v.sentence) or v.name,
            remedy=_text(v.remedy),
            gain_pct=_finite(v.gain_pct),
            lost_ns_total=blamed.lost_ns_total if blamed else None,
        )
    lack = missing(gc, peak)
    if lack is not None or not factors:
        return Verdict(
            kind="cannot-explain",
            sentence=lack[0] if lack else "no factor could be measured",
            capture_hint=lack[1] if lack else None,
        )
    pct = gc.achieved_tflops / peak * 100 if gc.achieved_tflops and peak else None
    at = f"at {min(pct, 100.0):.0f}% of peak: " if pct is not None else ""
    return Verdict(kind="no-loss", sentence=f"{at}no factor loses more than {100 * (1 - NO_LOSS):.1f}%")


def case_from_gemm(
    gc: Any,
    wf: Any,
    *,
    measurement: dict[str, Any] | None = None,
    device_source: str | None = None,
) -> Case:
    """One GemmCase and its Waterfall as a :class:`Case` (see the module docstring for what is approximated).

    ``measurement`` is the case's ``measurements`` row (its p10 / p90 repeats), ``device_source`` names where the
    device came from when it was not the files (``--device``)."""
    timing = _timing(gc, measurement)
    peak_value = _finite(wf.peak_tflops)
    dtype_class = gc.dtype_class
    peak = None
    if peak_value is not None:
        ach = _finite(gc.achieved_tflops)
        cal = _finite(gc.calibrated_tflops)
        peak = PeakInfo(
            tflops=peak_value,
            source=gc.device.peak_source(dtype_class) if gc.device else "datasheet",
            dtype_class=dtype_class,
            calibrated_tflops=cal,
            pct_of_calibrated=100.0 * ach / cal if ach and cal else None,
            memory_roof_tflops=_finite(gc.memory_roof_tflops),
            roofline_bound=gc.bound,
        )
    ach = _finite(gc.achieved_tflops)
    pct = min(100.0, 100.0 * ach / peak_value) if ach and peak_value else None
    factors = [_factor(f, timing.span_ns_total) for f in wf.factors]
    counted = gc.counted
    flops_per_call = _finite(gc.flops)
    parents = [p for p in [_text(gc.context)] if p]
    range_name = _text(gc.range_name) or (
        _text(gc.name) if gc.origin in ("range", "measurement", "ncu") else None
    )
    kernel = KernelRef(
        name=_text(gc.main_kernel),
        kernel_class="gemm" if gc.main_kernel else None,
        grid=gc.grid_size,
        block=gc.block_size,
        registers=gc.registers_per_thread,
        smem_bytes=gc.smem_per_block_bytes,
    )
    aux_names = [n for n in (gc.aux_kernels or []) if _text(n)]
    aux = [
        AuxKernel(
            name=n,
            role=aux_role(n),
            time_ns_total=timing.aux_ns_total if len(aux_names) == 1 else None,
            per_call_ns=gc.aux_ns if len(aux_names) == 1 else None,
        )
        for n in aux_names
    ]
    shape = _shape(gc)
    key = (
        gc.origin,
        gc.name,
        gc.context,
        gc.main_kernel,
        gc.grid_size,
        gc.block_size,
        gc.m,
        gc.n,
        gc.k,
        gc.dtype_a,
        gc.batch,
        gc.backend,
    )
    return Case(
        id=case_id(*key),
        name=_text(gc.name) or _text(gc.main_kernel) or "GEMM",
        origin=_ORIGIN.get(gc.origin, gc.origin),
        range=range_name,
        parents=parents,
        position=None,
        backend=_text(gc.backend),
        op=_text(gc.op),
        kernel=kernel,
        shape=shape,
        flops=FlopsInfo(
            per_call=flops_per_call,
            total=flops_per_call * timing.calls if flops_per_call is not None and timing.calls else None,
            source=gc.flops_source,
            counted_per_call=_finite(counted.flops) if counted else None,
            counters=list(counted.counter_names) if counted else [],
            bytes_min=_finite(gc.bytes_moved),
            bytes_source=_text(gc.bytes_source),
            note=_text(counted.dtype_note) if counted else None,
        ),
        rate=RateClass(
            dtype_class=dtype_class,
            source=gc.dtype_source,
            note=_text(counted.dtype_note) if counted else None,
        ),
        timing=timing,
        aux=aux,
        ncu=_ncu(gc),
        device=device_info(gc.device, gc.device_name, device_source),
        peak=peak,
        pct_of_peak=pct,
        sm_clock_hz=_finite(gc.sm_clock_hz),
        clock_source=_text(gc.clock_source),
        power_w=_finite(gc.power_w),
        power_limit_w=_finite(gc.power_limit_w),
        factors=factors,
        complete=wf.complete if peak_value is not None and ach is not None else None,
        verdict=_verdict(gc, wf, factors, peak_value),
        notes=[n for n in (_text(x) for x in wf.notes) if n],
    )
