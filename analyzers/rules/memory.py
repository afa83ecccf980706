"""Memory bound: the roofline says bytes / bandwidth, not FLOPs / peak, sets the ceiling."""

from __future__ import annotations

from typing import TYPE_CHECKING

from . import Ceiling, Factor, Rule, factor

if TYPE_CHECKING:
    from tracekit.analyzers.gemm import CaseEvidence


def memory(case: CaseEvidence, compute_ceiling_tflops: float) -> Factor | None:
    """``min(1, intensity x bandwidth / compute ceiling)``: the compute ceiling is the peak after the clock and
    wave factors (or the bare peak when the GEMM is memory-bound at any clock)."""
    dev = case.device
    roof = case.memory_roof_tflops
    ai = case.intensity
    if dev is None or roof is None or ai is None or compute_ceiling_tflops <= 0:
        return None
    value = min(1.0, roof / compute_ceiling_tflops)
    bw = dev.memory_bandwidth_bytes_per_s or 0.0
    ridge = dev.ridge_flops_per_byte(case.dtype_class or "")
    ev = {
        "flops": case.flops,
        "flops_source": case.flops_source,
        "min_bytes": case.bytes_min,
        "bytes_source": case.bytes_source,
        "intensity_flops_per_byte": round(ai, 2),
        "ridge_flops_per_byte": round(ridge, 1) if ridge else None,
        "memory_bandwidth_bytes_per_s": bw,
        "memory_roof_tflops": round(roof, 2),
    }
    if value >= 1.0:
        sentence = (
            f"Arithmetic intensity {ai:.0f} FLOP/B is above the ridge ({ridge:.0f} FLOP/B): memory does not "
            "set the ceiling."
            if ridge
            else "Memory does not set the ceiling."
        )
        return factor("memory", 1.0, sentence, ev, None)
    moved = case.bytes_moved or 0.0
    verb = "must move" if case.bytes_min else "moved (DRAM, measured)"
    sentence = (
        f"{ai:.1f} FLOP/B (ridge {ridge:.0f}): the {moved / 1e6:.1f} MB it {verb} at {bw / 1e12:.2f} TB/s cap it "
        f"at {roof:.0f} TFLOP/s."
    )
    remedy = (
        "Memory-bound by shape: batch more rows into M, fuse GEMMs that share the weight, use a narrower weight "
        "type (FP8 / FP4), or keep the weight resident in L2."
    )
    return factor("memory", value, sentence, ev, remedy)


SOL_MEMORY_PCT = 50.0
"""DRAM throughput (% of peak) at or above which a kernel with no FLOP count counts as memory-bound, when DRAM is
also busier than the SMs."""


def memory_by_throughput(case: CaseEvidence) -> Factor | None:
    """With no FLOP count: memory-bound when Nsight Compute's Speed Of Light shows DRAM throughput high and above
    the SMs' (``dram_throughput_pct >= 50`` and ``> compute_throughput_pct``). The value is the SMs' throughput
    fraction: what the memory bound leaves of the compute peak. None when not memory-bound or not profiled."""
    row = case.ncu.row if case.ncu else {}
    dram, sm = row.get("dram_throughput_pct"), row.get("compute_throughput_pct")
    if dram is None or sm is None or dram < SOL_MEMORY_PCT or dram <= sm:
        return None
    value = max(min(float(sm) / 100.0, 1.0), 1e-3)
    ev = {"dram_throughput_pct": round(float(dram), 1), "compute_throughput_pct": round(float(sm), 1)}
    sentence = (
        f"DRAM ran at {dram:.0f}% of its peak while the SMs reached {sm:.0f}% of theirs: the kernel waits on "
        "memory (no FLOP count in the profile to place it on the roofline)."
    )
    remedy = (
        "Memory-bound: batch more rows into M (or fuse GEMMs that share the weight), use a narrower weight type "
        "(FP8 / FP4), or keep the weight resident in L2. Profile with the tensor-op counters "
        "(`tracekit capture --ncu`) for the roofline."
    )
    return factor("memory", value, sentence, ev, remedy)


def _run(case: CaseEvidence, ceiling: Ceiling | None) -> Factor | None:
    """The memory factor below the compute ceiling the rules before it leave; none where memory does not lower
    it (the explainer places a memory-bound kernel on the roofline itself)."""
    if ceiling is None:
        return None
    f = memory(case, ceiling.tflops)
    return f if f is not None and f.value < 1.0 else None


RULE = Rule(
    name="memory",
    factor="memory",
    reads=("flops", "shape", "ncu", "device"),
    acts_on="kernel",
    needs_rate=True,
    run=_run,
    cause="roofline: bytes / bandwidth exceed FLOPs / compute peak",
)
