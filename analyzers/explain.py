"""The plateau explainer: a waterfall of multiplicative factors from the datasheet peak to the achieved TFLOP/s.

For a compute-bound GEMM::

    achieved = peak x clock x waves x memory x in-kernel x aux x gaps

``clock`` (SM clock / the clock the peak is quoted at), ``waves`` (last-wave fill and tile padding) and
``memory`` (roofline: ``intensity x bandwidth`` over what the first two leave) are computed from evidence;
``in-kernel`` is the residual ``kernel TFLOP/s / ceiling``, broken down with tensor-pipe, stall, occupancy and
shared-memory evidence; ``aux`` (``main / (main + aux)``) and ``gaps`` (``busy / (busy + idle)``) take the
kernel's own rate down to the range's. The product therefore equals the achieved figure exactly, except where a
measured clock or wave estimate is pessimistic enough that the residual would exceed 1: then the clock factor,
then the wave factor, is raised just enough (and says so in its evidence).

A GEMM that is memory-bound at its clock (``intensity x bandwidth`` below ``peak x clock``) gets no clock or wave
factor (neither sets its ceiling): ``achieved = peak x memory x in-kernel x aux x gaps``, and ``in-kernel`` is then
its fraction of the bandwidth roofline.

The factor with the largest loss is the verdict. Nsight Compute's own findings (``ncu_rules``) ride along
beside the waterfall, never instead of it.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

import polars as pl

from tracekit.devices import DeviceSpec, peak_note

from .gemm import GemmCase, build_cases, gemm_frame, settle_rate
from .rules import Factor
from .rules.aux import aux
from .rules.clock import clock
from .rules.gaps import gaps
from .rules.kernel import kernel
from .rules.memory import memory, memory_by_throughput
from .rules.tiles import parse_tile
from .rules.waves import waves

__all__ = ["Waterfall", "explain", "explain_case", "gemm_summary"]


@dataclass
class Waterfall:
    """One GEMM's explanation."""

    case: GemmCase
    peak_tflops: float | None
    achieved_tflops: float | None
    factors: list[Factor] = field(default_factory=list)
    notes: list[str] = field(default_factory=list)

    @property
    def product_tflops(self) -> float | None:
        if self.peak_tflops is None:
            return None
        value = self.peak_tflops
        for f in self.factors:
            value *= f.value
        return value

    @property
    def complete(self) -> bool:
        """True when the factors account for the whole gap (peak x product == achieved within 1%)."""
        p, a = self.product_tflops, self.achieved_tflops
        return p is not None and a is not None and a > 0 and abs(p / a - 1) <= 0.01

    @property
    def verdict(self) -> Factor | None:
        """The factor with the largest loss (None when nothing is lost or nothing is known)."""
        losing = [f for f in self.factors if f.value < 0.995 and f.evidence.get("blamed") is not False]
        return min(losing, key=lambda f: f.value) if losing else None

    @property
    def ncu_rules(self) -> list[dict[str, Any]]:
        return [
            {k: r.get(k) for k in ("rule", "kind", "title", "speedup_pct", "message")}
            for r in self.case.ncu_rules
        ]

    def to_dict(self) -> dict[str, Any]:
        c = self.case
        v = self.verdict
        peak = self.peak_tflops
        ach = self.achieved_tflops
        return {
            "range": c.name,
            "context": c.context,
            "origin": c.origin,
            "backend": c.backend,
            "m": c.m,
            "n": c.n,
            "k": c.k,
            "dtype_class": c.dtype_class,
            "dtype_source": c.dtype_source,
            "flops": c.flops,
            "flops_source": c.flops_source,
            "counted_flops": c.counted.flops if c.counted else None,
            "counters": c.counted.counter_names if c.counted else [],
            "counted_dtype_note": c.counted.dtype_note if c.counted else None,
            "device": c.device.name if c.device else c.device_name,
            "main_kernel": c.main_kernel,
            "aux_kernels": c.aux_kernels,
            "launches": c.launches,
            "time_source": c.time_source,
            "main_time_ns": c.main_ns,
            "aux_time_ns": c.aux_ns,
            "gap_time_ns": c.gap_ns,
            "achieved_tflops": ach,
            "achieved_estimate": c.achieved_estimate,
            "kernel_tflops": c.kernel_tflops,
            "peak_tflops": peak,
            "peak_source": c.device.peak_source(c.dtype_class) if c.device and peak else None,
            "calibrated_tflops": c.calibrated_tflops,
            "pct_of_peak": 100.0 * ach / peak if ach and peak else None,
            "pct_of_calibrated": 100.0 * ach / c.calibrated_tflops if ach and c.calibrated_tflops else None,
            "roofline_bound": c.bound,
            "factors": [f.to_dict() for f in self.factors],
            "product_tflops": self.product_tflops,
            "complete": self.complete,
            "verdict": (
                {
                    "factor": v.name,
                    "cause": v.cause,
                    "value": v.value,
                    "sentence": v.sentence,
                    "remedy": v.remedy,
                    "gain_pct": v.gain_pct,
                }
                if v
                else None
            ),
            "ncu_rules": self.ncu_rules,
            "notes": self.notes,
        }


def _absorb(residual: float, factors: list[Factor | None]) -> float:
    """Raise pessimistic factors (in order) until the residual is at most 1; returns the new residual. A raised
    factor says so in its sentence: its own estimate (``0.30 waves``) no longer matches its value, and the kernel
    ran faster than the estimate allows."""
    for f in factors:
        if residual <= 1.0 or f is None:
            continue
        new = min(1.0, f.value * residual)
        residual *= f.value / new
        f.evidence["adjusted_from"] = round(f.value, 4)
        f.evidence["adjusted_because"] = "achieved throughput is higher than this factor allows"
        f.sentence = (
            f.sentence.rstrip(".")
            + f"; but the kernel ran faster than this estimate allows ({f.value:.3f}), so it is not the limit here:"
            + f" the factor is raised to {new:.3f}."
        )
        f.value = new
    return residual


def explain_case(case: GemmCase) -> Waterfall:
    """The waterfall of one GEMM (see the module docstring for the arithmetic)."""
    settle_rate(case)
    peak = case.peak_tflops
    kernel_rate = case.kernel_tflops
    wf = Waterfall(case, peak, case.achieved_tflops)
    wf.notes.extend(n for n in (case.rate()[2], case.peak_note) if n)
    if case.achieved_estimate:
        wf.notes.append(
            f"achieved TFLOP/s estimated ({case.achieved_estimate}): the profile has no GEMM shape"
        )
    if case.ncu_borrowed_from:
        wf.notes.append(
            f"Nsight Compute evidence from the same kernel and grid profiled in range {case.ncu_borrowed_from!r}: "
            "this range's own launches were not profiled"
        )
    f_aux, f_gaps = aux(case), gaps(case)
    if peak is None or kernel_rate is None:
        if case.peak_unknown:
            wf.notes.append(case.peak_unknown)
        elif peak is None:
            wf.notes.append(peak_note(case.device, case.device_name, case.dtype_class))
        if kernel_rate is None:
            wf.notes.append("no GEMM shape or FLOP count: achieved TFLOP/s unknown")
        occupancy_note = _occupancy_note(case)
        if occupancy_note:
            wf.notes.append(occupancy_note)
        f_clock = clock(case)
        f_sol = memory_by_throughput(case)
        if f_sol is not None:
            wf.notes.append("memory-bound by Nsight Compute's throughputs: waves do not set its ceiling")
            wf.factors = [f for f in (f_sol, f_aux, f_gaps) if f is not None]
            return wf
        f_wave = waves(case)
        wf.factors = [f for f in (f_clock, f_wave, f_aux, f_gaps) if f is not None]
        return wf

    f_clock = clock(case)
    clock_v = f_clock.value if f_clock else 1.0
    roof = case.memory_roof_tflops
    # no FLOP count (an estimated rate): Nsight Compute's Speed Of Light places it on the roofline instead
    f_sol = memory_by_throughput(case) if not case.flops else None
    memory_bound = (roof is not None and roof < peak * clock_v) or f_sol is not None
    if memory_bound:
        f_mem = memory(case, peak) if f_sol is None else _sol_memory(f_sol, kernel_rate, peak)
        ceiling = peak * (f_mem.value if f_mem else 1.0)
        residual = kernel_rate / ceiling
        residual = _absorb(residual, [f_mem])
        parts: list[Factor | None] = [f_mem]
        skipped = []
        if f_clock is not None:
            skipped.append(f"SM clock {case.sm_clock_hz / 1e6:.0f} MHz")  # type: ignore[operator]
        f_wave = waves(case)
        if f_wave is not None:
            skipped.append(f"waves {f_wave.evidence.get('waves')}")
        if skipped:
            wf.notes.append("memory-bound: " + ", ".join(skipped) + " do not set its ceiling")
    else:
        f_wave = waves(case)
        ceiling = peak * clock_v * (f_wave.value if f_wave else 1.0)
        f_mem = memory(case, ceiling)
        if f_mem is not None and f_mem.value >= 1.0:
            f_mem = None
        ceiling *= f_mem.value if f_mem else 1.0
        residual = _absorb(kernel_rate / ceiling, [f_clock, f_wave, f_mem])
        parts = [f_clock, f_wave, f_mem]
        if f_clock is None:
            wf.notes.append("SM clock not measured: any clock loss is inside the in-kernel factor")
    if residual > 1.0:
        wf.notes.append(f"achieved exceeds the {peak:.0f} TFLOP/s peak by {100 * (residual - 1):.0f}%")
    f_kernel = kernel(case, residual, memory_bound=memory_bound)
    wf.factors = [f for f in (*parts, f_kernel, f_aux, f_gaps) if f is not None]
    _padding_evidence(wf, f_wave)
    return wf


def _sol_memory(f_sol: Factor, kernel_rate: float, peak: float) -> Factor:
    """The memory factor of a memory-bound kernel with no FLOP count: DRAM ran at ``d`` of its peak, so the
    bandwidth roof it was on allows ``rate / d``; the factor is that roof over the peak, and the in-kernel
    factor that follows is ``d`` (how close to the bandwidth roof the kernel ran)."""
    dram = f_sol.evidence["dram_throughput_pct"] / 100.0
    roof = kernel_rate / dram if dram > 0 else peak
    f_sol.value = min(1.0, roof / peak)
    f_sol.evidence["memory_roof_tflops"] = round(roof, 1)
    f_sol.sentence = f_sol.sentence.rstrip(".") + f"; at that bandwidth it would reach {roof:.0f} TFLOP/s."
    return f_sol


def _occupancy_note(case: GemmCase) -> str | None:
    """Without a rate there is no in-kernel factor; a launch configuration that caps occupancy (computed from the
    timeline's block size, registers and shared memory) is still worth saying."""
    from .rules.kernel import LOW_OCCUPANCY_PCT, _warp_specialised
    from .rules.occupancy import ctas_per_sm, theoretical_occupancy_pct

    theo = theoretical_occupancy_pct(case)
    per_sm, limiter = ctas_per_sm(case)
    if theo is None or not limiter or theo > LOW_OCCUPANCY_PCT or _warp_specialised(case):
        return None
    first = limiter.split(" and ")[0]
    what = {
        "shared_mem": f"shared memory: {case.smem_per_block_bytes / 1024:.0f} KB per block"
        if case.smem_per_block_bytes
        else "shared memory (per block: unknown)",
        "registers": f"registers: {case.registers_per_thread} per thread",
    }.get(first, f"{first}: {case.block_size} threads per block")
    est = case.est_occupancy_pct
    said = f", {est:.0f}% as estimated by the PyTorch profiler" if est is not None else ""
    return (
        f"occupancy capped at {theo:.1f}% ({per_sm} CTA/SM){said}, limited by {what}; with no FLOP count its "
        "cost is not measured (profile with `tracekit capture --ncu`)"
    )


PADDING_NOTE_RATIO = 1.02
"""Counted FLOPs above 2*M*N*K by more than this are reported as tile padding waste."""


def _padding_evidence(wf: Waterfall, f_wave: Factor | None) -> None:
    """Where the shape and Nsight Compute's counters are both known, executed math beyond 2*M*N*K is the tiles'
    padding: attached to the waves / tiles factor (or a note when there is none)."""
    case = wf.case
    ratio = case.padding_ratio
    if ratio is None or ratio < PADDING_NOTE_RATIO:
        return
    tile = f_wave.evidence.get("tile") if f_wave is not None else None
    if tile is None and (parsed := parse_tile(case.main_kernel)) is not None:
        tile = f"{parsed.tm}x{parsed.tn}"
    text = f"executed {ratio:.1f}x the useful FLOPs (counted {case.counted.flops:.3g} vs 2*M*N*K {case.flops:.3g})"  # type: ignore[union-attr]
    if tile:
        text += f": M={case.m}, N={case.n} on {tile} tiles"
    if f_wave is not None and f_wave in wf.factors:
        f_wave.evidence["counted_flops"] = case.counted.flops  # type: ignore[union-attr]
        f_wave.evidence["executed_over_useful"] = round(ratio, 3)
        f_wave.evidence["padding"] = text
        f_wave.sentence = f_wave.sentence.rstrip(".") + f"; the tensor cores {text}."
    else:
        wf.notes.append(f"tile padding: the tensor cores {text}")


def _matches(case: GemmCase, pattern: str | None) -> bool:
    if not pattern:
        return True
    p = pattern.lower()
    return any(p in (s or "").lower() for s in (case.name, case.context, case.main_kernel, case.backend))


def explain(
    frames: dict[str, pl.DataFrame],
    *,
    calibration: dict[str, Any] | None = None,
    gemm_filter: str | None = None,
    environment: dict[str, Any] | None = None,
    device: DeviceSpec | None = None,
) -> list[Waterfall]:
    """Waterfalls for every GEMM of a run (those whose range, context, kernel or backend contain
    ``gemm_filter``); ``device`` overrides the GPU the files name (``--device``)."""
    cases = build_cases(frames, calibration=calibration, environment=environment, device=device)
    return [explain_case(c) for c in cases if _matches(c, gemm_filter)]


def gemm_summary(
    frames: dict[str, pl.DataFrame],
    *,
    calibration: dict[str, Any] | None = None,
    environment: dict[str, Any] | None = None,
    device: DeviceSpec | None = None,
) -> pl.DataFrame:
    """The ``gemms`` frame: one row per GEMM with pct_of_peak and its verdict."""
    cases = build_cases(frames, calibration=calibration, environment=environment, device=device)
    verdicts = {}
    for i, c in enumerate(cases):
        v = explain_case(c).verdict
        verdicts[i] = (v.name + (f": {v.cause}" if v.cause else "") if v else None, v.gain_pct if v else None)
    return gemm_frame(cases, verdicts)
