"""The case model to the typed one: a :class:`~tracekit.analyzers.gemm.GemmCase` and its
:class:`~tracekit.analyzers.explain.Waterfall` become one :class:`~.model.Case`.

This is the seam between how cases are found and explained (analyzers/gemm, analyzers/rules, analyzers/explain)
and what every view renders. A GemmCase's parts map one to one: its :class:`~tracekit.analyzers.gemm.Timing`
(every call aggregated: totals, per-call median and p10 / p90, the median call, calls without their GEMM kernel)
is the Case's :class:`~.model.Timing`; its verdict is the explainer's (:func:`~tracekit.analyzers.explain.verdict_of`).
A factor's time lost (in the calls' time) and its speed-up if removed are the waterfall's
(:meth:`~tracekit.analyzers.explain.Waterfall.losses`): the time of the part of the call it acts on x (1 - value).
"""

from __future__ import annotations

from typing import Any

from tracekit.devices import DeviceSpec
from tracekit.numbers import finite as _finite

from .model import (
    AuxKernel,
    CallParts,
    Case,
    CasePlace,
    DeviceInfo,
    Dist,
    FlopsInfo,
    FusionCandidate,
    KernelRef,
    NcuEvidence,
    NcuRule,
    PeakInfo,
    RateClass,
    Shape,
    Timing,
)

_ORIGIN = {
    "measurement": "measurement",
    "range": "timeline",
    "ncu": "ncu",
    "ncu-kernel": "ncu",
    "kernel": "kernel",
}
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


def case_id(*key: Any) -> str:
    """A short stable id: the first 12 hex digits of the SHA-1 of the key's text."""
    from ..gemm import case_id as gemm_case_id

    return gemm_case_id(*key)


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


def _dist(s: Any) -> Dist:
    return Dist(median=_finite(s.median), p10=_finite(s.p10), p90=_finite(s.p90))


def _timing(gc: Any) -> Timing:
    t = gc.timing
    mid = t.median_call
    return Timing(
        calls=t.calls,
        calls_without_kernel=t.calls_without_kernel,
        launches=t.launches,
        gemm_ns_total=t.gemm_ns_total,
        aux_ns_total=t.aux_ns_total,
        gap_ns_total=t.gap_ns_total,
        span_ns_total=t.span_ns_total,
        gemm_ns=_dist(t.gemm),
        aux_ns=_dist(t.aux),
        gap_ns=_dist(t.gap),
        span_ns=_dist(t.span),
        achieved_tflops=_finite(gc.achieved_tflops),
        kernel_tflops=_finite(gc.kernel_tflops),
        achieved_estimate=_text(gc.achieved_estimate),
        source=t.source,
        source_detail=_text(t.detail),
        median_call=CallParts(gemm_ns=mid.gemm_ns, aux_ns=mid.aux_ns, gap_ns=mid.gap_ns, span_ns=mid.span_ns)
        if mid is not None
        else None,
        splitk_ns_total=t.splitk_ns_total,
        pauses=t.pauses,
        paused_ns_total=t.paused_ns_total,
    )


def _shape(gc: Any) -> Shape | None:
    s = gc.shape
    if s is None:
        return None
    return Shape(
        m=int(s.m),
        n=int(s.n),
        k=int(s.k),
        batch=s.batch,
        dtype_a=_text(s.dtype_a),
        dtype_b=_text(s.dtype_b),
        dtype_out=_text(s.dtype_out),
        scale=_text(s.scale),
        source=_text(s.source),
    )


def _kernel(k: Any) -> KernelRef:
    """A case's :class:`~tracekit.analyzers.gemm.KernelInfo` as a :class:`KernelRef` (a named kernel with no class
    is the case's main kernel: ``gemm``). The PyTorch profiler's blocks per SM and estimated occupancy are not
    copied: the in-kernel factor's evidence carries them where Nsight Compute measured no occupancy."""
    return KernelRef(
        name=_text(k.name),
        family=_text(k.family),
        kernel_class=_text(k.kernel_class) or ("gemm" if k.name else None),
        grid=k.grid,
        block=k.block,
        registers=k.registers,
        smem_bytes=k.smem_bytes,
    )


def _ncu(gc: Any) -> NcuEvidence | None:
    part = gc.ncu
    if part is None:
        return None
    metrics: dict[str, float] = {}
    for key, value in part.row.items():
        if key in _NCU_SKIP or isinstance(value, bool):
            continue
        v = _finite(value) if isinstance(value, int | float) else None
        if v is not None:
            metrics[key] = v
    for key, value in part.metrics.items():
        v = _finite(value)
        if v is not None:
            metrics[key] = v
    rules: dict[tuple[Any, ...], NcuRule] = {}
    for r in part.rules:  # one entry per distinct finding (each profiled launch repeats them)
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
    return NcuEvidence(
        kernels=part.kernels,
        ncu_id=part.ncu_id,
        metrics=metrics,
        sm_clock_hz=_finite(part.row.get("sm_clock_hz")),
        clock_control=_text(part.row.get("clock_control")),
        sections=part.sections,
        rules=list(rules.values()),
        borrowed_from=_text(part.borrowed_from),
    )


def case_from_gemm(gc: Any, wf: Any, *, device_source: str | None = None, **_: Any) -> Case:
    """One GemmCase and its Waterfall as a :class:`Case`. ``device_source`` names where the device came from
    when it was not the files (``--device``)."""
    from ..explain import verdict_of

    timing = _timing(gc)
    peak_value = _finite(wf.peak_tflops)
    dtype_class, rate_source, rate_note = gc.rate()
    ach = _finite(gc.achieved_tflops)
    peak = None
    if peak_value is not None:
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
    pct = min(100.0, 100.0 * ach / peak_value) if ach and peak_value else None
    factors = list(wf.factors)
    counted = gc.counted
    per_call = _finite(gc.flops)
    k = gc.kernel
    calls = max(gc.timing.calls, 1)
    aux = [
        AuxKernel(
            name=u.name,
            kernel_class=_text(u.kernel_class),
            role=u.role,
            time_ns_total=_finite(u.total_ns),
            per_call_ns=_finite(u.total_ns / calls),
            count=u.count,
        )
        for u in gc.timing.aux_kernels
        if _text(u.name)
    ]
    fusion = [
        FusionCandidate(
            op=_text(u.op),
            kernels=[n for n in (_text(x) for x in u.kernels) if n],
            kernel_class=u.kind,
            side="after" if u.after else "before",
            time_ns_total=u.total_ns,
            per_call_ns=_finite(u.total_ns / calls),
            count=u.count,
            remedy=_text(u.remedy),
        )
        for u in gc.timing.fusion
    ]
    return Case(
        fusion=fusion,
        id=gc.id,
        name=_text(gc.name) or _text(k.name) or "GEMM",
        origin=_ORIGIN.get(gc.origin, gc.origin),
        range=_text(gc.range),
        parents=[p for p in (_text(x) for x in gc.parents) if p],
        position=gc.position,
        place=CasePlace(nth=list(gc.place.nth), launches=gc.place.launches) if gc.place else None,
        backend=_text(gc.backend),
        op=_text(gc.op),
        kernel=_kernel(k),
        shape=_shape(gc),
        flops=FlopsInfo(
            per_call=per_call,
            total=per_call * gc.timing.calls if per_call is not None and gc.timing.calls else None,
            source=gc.flops_source,
            counted_per_call=_finite(counted.flops) if counted else None,
            counters=list(counted.counter_names) if counted else [],
            bytes_min=_finite(gc.bytes_moved),
            bytes_source=_text(gc.bytes_source),
            note=_text(gc.flops_note if counted and counted.spread else counted.dtype_note)
            if counted
            else None,
        ),
        rate=RateClass(dtype_class=dtype_class, source=rate_source, note=_text(rate_note)),
        timing=timing,
        aux=aux,
        ncu=_ncu(gc),
        device=device_info(gc.device, gc.device_name, device_source),
        peak=peak,
        pct_of_peak=pct,
        sm_clock_hz=_finite(gc.clock.sm_clock_hz),
        clock_source=_text(gc.clock.source),
        power_w=_finite(gc.clock.power_w),
        power_limit_w=_finite(gc.clock.power_limit_w),
        factors=factors,
        complete=wf.complete if peak_value is not None and ach is not None else None,
        verdict=verdict_of(wf),
        notes=list(dict.fromkeys(n for n in (_text(x) for x in wf.notes) if n)),
    )
