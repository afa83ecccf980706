"""In-kernel efficiency: what is left after clock, waves and the roofline, broken down with evidence.

The value is the residual (achieved kernel TFLOP/s over the ceiling the other factors leave); the evidence says
where inside the kernel the time went: tensor-pipe activity, the top warp-stall reasons, achieved vs theoretical
occupancy and its limiter, shared memory per CTA against the device limit (and how many pipeline stages of the
kernel's tile fit), registers. ``cause`` names the most likely sub-cause.
"""

from __future__ import annotations

import math
from typing import TYPE_CHECKING, Any

from tracekit import naming

from . import Ceiling, Factor, Rule, factor
from .occupancy import ctas_per_sm, limits_from_ncu, theoretical_occupancy_pct
from .tiles import parse_tile

if TYPE_CHECKING:
    from tracekit.analyzers.gemm import CaseEvidence

_STALL_PREFIXES = ("smsp__average_warps_issue_stalled_", "smsp__pcsamp_warps_issue_stalled_")
_NOT_STALLS = ("selected", "not_selected")
STALL_MEANING = {
    "long_scoreboard": "waiting on global / L2 memory loads",
    "barrier": "waiting at CTA barriers",
    "wait": "fixed-latency dependencies",
    "short_scoreboard": "waiting on shared memory / MUFU results",
    "mio_throttle": "the shared-memory (MIO) queue is full",
    "math_pipe_throttle": "the math pipe is busy",
    "gmma": "waiting on wgmma (warpgroup MMA) results",
    "lg_throttle": "the global load/store queue is full",
    "no_instruction": "instruction cache misses",
    "imc_miss": "constant cache misses",
    "branch_resolving": "branch resolution",
    "membar": "memory barriers",
    "sleeping": "sleeping warps (warp-specialised producers)",
    "dispatch_stall": "dispatch stalls",
    "drain": "draining memory stores at exit",
    "tex_throttle": "the texture queue is full",
    "misc": "miscellaneous",
}
TENSOR_BUSY = 85.0
"""Tensor pipe active (% of active cycles) at or above which the kernel counts as near the pipe's limit."""
LOW_OCCUPANCY_PCT = 12.5
"""Theoretical occupancy at or below this (8 of 64 warps or fewer) leaves too few warps to hide latency, unless the
kernel is warp-specialised (wgmma/TMA producer-consumer kernels such as cuBLAS nvjet run 1 CTA of 12 warps)."""


def top_stalls(case: CaseEvidence, n: int = 3) -> list[tuple[str, float, str]]:
    """The ``n`` largest warp-stall reasons (name, warps per issue or samples, metric)."""
    found: dict[str, tuple[float, str]] = {}
    for prefix in _STALL_PREFIXES:
        for metric, value in (case.ncu.metrics if case.ncu else {}).items():
            if not metric.startswith(prefix) or value is None:
                continue
            reason = metric.removeprefix(prefix).split("_per_")[0].split(".")[0]
            if reason in _NOT_STALLS or reason.endswith("_not_issued"):
                continue
            if reason not in found or prefix == _STALL_PREFIXES[0]:
                found[reason] = (float(value), metric)
        if found:
            break
    ranked = sorted(found.items(), key=lambda kv: -kv[1][0])[:n]
    return [(k, v, m) for k, (v, m) in ranked]


def _stage_fit(case: CaseEvidence) -> dict[str, Any]:
    """Shared memory per CTA against the limit, and the stages of the kernel's tile (from its name) that fit.
    Where the name's stages of the modelled stage size exceed the shared memory the kernel was launched with, the
    model does not describe the kernel: the stage size and how many fit are unknown (``stage_model`` says so)."""
    dev = case.device
    tile = parse_tile(case.kernel.name)
    out: dict[str, Any] = {}
    limit = (case.ncu.row if case.ncu else {}).get("smem_per_block_limit_bytes") or (
        dev.smem_per_block_optin_bytes if dev else None
    )
    if case.kernel.smem_bytes:
        out["smem_per_block_bytes"] = case.kernel.smem_bytes
    if limit:
        out["smem_per_block_limit_bytes"] = limit
    if tile is None:
        return out
    out["tile"] = f"{tile.tm}x{tile.tn}x{tile.tk}" if tile.tk else f"{tile.tm}x{tile.tn}"
    if tile.stages:
        out["stages"] = tile.stages
    if tile.mma_ctas > 1:
        out["mma_ctas"] = tile.mma_ctas  # a 2-CTA MMA: each CTA holds half the B tile
    # the shape's element types, else the rate class the kernel runs (an FP8 nvjet `qqtst` without a shape
    # holds 1-byte tiles, not 2-byte ones)
    fallback = naming.CLASS_BITS.get(case.dtype_class or "", 16)
    bytes_a = naming.DTYPE_BITS.get(case.dtype_a or "", fallback) / 8
    bytes_b = naming.DTYPE_BITS.get(case.dtype_b or case.dtype_a or "", fallback) / 8
    per_stage = tile.stage_bytes(bytes_a, bytes_b)
    used = case.kernel.smem_bytes
    if per_stage and tile.stages and used and tile.stages * per_stage > used:
        # the name's stages of this stage size do not fit the shared memory the kernel was launched with: the
        # model of what a stage holds does not describe this kernel, so how many would fit is unknown
        out["stage_model"] = (
            f"unknown: {tile.stages} stages of {per_stage / 1024:.3g} KiB ({tile.stages * per_stage:,.0f} B) exceed "
            f"the kernel's {used:,} B of shared memory per CTA; Nsight Compute's source view or the kernel's "
            "source says what a stage holds"
        )
        return out
    if per_stage and limit:
        out["stage_bytes"] = int(per_stage)
        if tile.stages and used:
            # what the kernel holds beside its stages (epilogue, barriers, a 2-CTA pair's exchange: 8-17 KiB on
            # the B200's nvjet kernels) stays whatever the stage count: only the rest of the limit takes stages
            other = int(used - tile.stages * per_stage)
            out["non_stage_smem_bytes"] = other
            out["stages_that_fit"] = max(0, int((limit - other) // per_stage))
        else:
            # without the kernel's stages or shared memory its other use is unknown: a bound, said as one
            out["stages_that_fit"] = int(limit // per_stage)
            out["stages_that_fit_is_bound"] = True
    return out


def _warp_specialised(case: CaseEvidence) -> bool:
    name = (case.kernel.name or "").lower()
    return name.startswith("nvjet") or "warpspecialized" in name or "sm90_xmma" in name or "tma" in name


def kernel(case: CaseEvidence, value: float, *, memory_bound: bool = False) -> Factor:
    """The in-kernel factor with its breakdown (``value`` is the residual the explainer computed)."""
    ev: dict[str, Any] = {}
    row = case.ncu.row if case.ncu else {}
    simt = case.counted is not None and case.counted.simt  # FP32 SIMT math: the tensor pipe is not its limit
    tensor_active = None if simt else row.get("tensor_pipe_pct")
    tensor_elapsed = (
        None if simt else case.metric("sm__pipe_tensor_cycles_active.avg.pct_of_peak_sustained_elapsed")
    )
    if tensor_active is not None:
        ev["tensor_pipe_active_pct"] = round(float(tensor_active), 1)
        ev["tensor_pipe_metric"] = row.get("tensor_pipe_metric")
    if tensor_elapsed is not None:
        ev["tensor_pipe_elapsed_pct"] = round(tensor_elapsed, 1)
    stalls = top_stalls(case)
    if stalls:
        ev["top_stalls"] = {name: round(v, 2) for name, v, _ in stalls}
        ev["stall_metric"] = (
            stalls[0][2].split(stalls[0][0])[0] + "<reason>" + stalls[0][2].split(stalls[0][0])[1]
        )
    theo = theoretical_occupancy_pct(case)
    ach = row.get("achieved_occupancy_pct")
    est = (
        case.kernel.est_occupancy_pct if ach is None else None
    )  # measured by Nsight Compute wins over an estimate
    per_sm, limiter = ctas_per_sm(case)
    small = grid_bound(case) if limiter else None  # the grid, not the limiter, bounds resident CTAs
    if small:
        ev["grid_bounds_occupancy"] = True
    if theo is not None:
        ev["theoretical_occupancy_pct"] = round(theo, 2)
    if ach is not None:
        ev["achieved_occupancy_pct"] = round(float(ach), 2)
    if est is not None:
        # the PyTorch profiler's, from the launch configuration
        ev["est_occupancy_pct"] = round(float(est), 2)
        if case.kernel.blocks_per_sm is not None:
            ev["blocks_per_sm"] = round(float(case.kernel.blocks_per_sm), 3)
    if per_sm is not None and limiter:
        ev["ctas_per_sm"] = per_sm
        ev["occupancy_limiter"] = limiter
        lim = limits_from_ncu(case)
        if lim:
            ev["occupancy_limits"] = lim
        first = limiter.split(" and ")[0]
        if first == "shared_mem" and case.kernel.smem_bytes:
            ev["occupancy_limited_by"] = f"shared memory: {case.kernel.smem_bytes / 1024:.0f} KB per block"
        elif first == "registers" and case.kernel.registers:
            ev["occupancy_limited_by"] = f"registers: {case.kernel.registers} per thread"
        elif first in ("warps", "blocks") and case.kernel.block:
            ev["occupancy_limited_by"] = f"block size: {case.kernel.block} threads per block"
    if case.kernel.registers:
        ev["registers_per_thread"] = case.kernel.registers
    ev.update(_stage_fit(case))
    dram = row.get("dram_throughput_pct")
    if dram is None:
        dram = case.metric("gpu__dram_throughput.avg.pct_of_peak_sustained_elapsed")
    sm = row.get("compute_throughput_pct")
    if dram is not None:
        ev["dram_throughput_pct"] = round(float(dram), 2)
    if sm is not None:
        ev["sm_throughput_pct"] = round(float(sm), 2)

    parts: list[str] = []
    if stalled(case):
        parts.append(
            f"SM throughput was {float(sm):.2g}% and DRAM throughput {float(dram):.2g}% of peak: the kernel waits"  # type: ignore[arg-type]
        )
    elif "dram_throughput_pct" in ev and memory_bound:
        parts.append(f"DRAM throughput was {ev['dram_throughput_pct']:.0f}% of its peak")
    if tensor_active is not None:
        parts.append(f"the tensor pipe was busy {float(tensor_active):.0f}% of active cycles")
    if stalls:
        name, v, _ = stalls[0]
        parts.append(f"the top stall is {name} ({STALL_MEANING.get(name, name)}, {v:.1f})")
    if theo is not None:
        if ach is not None:
            occ = f"occupancy {float(ach):.0f}% of a {theo:.0f}% theoretical"
        elif est is not None:
            occ = f"occupancy {float(est):.0f}% (estimated by the PyTorch profiler) of a {theo:.0f}% theoretical"
        else:
            occ = f"theoretical occupancy {theo:.0f}%"
        if limiter and small:
            occ += (
                f" ({per_sm} CTA/SM by {limiter.replace('shared_mem', 'shared memory')}, but {small[0]} CTAs "
                f"for {small[1]} slots: the grid bounds it)"
            )
        elif limiter:
            occ += f" ({per_sm} CTA/SM, limited by {limiter.replace('shared_mem', 'shared memory')})"
        parts.append(occ)
    elif est is not None:
        parts.append(f"occupancy {float(est):.0f}% (estimated by the PyTorch profiler)")
    if "stages_that_fit" in ev and not memory_bound and "shared_mem" in (limiter or "") and not small:
        # how many pipeline stages the shared memory holds matters where it limits occupancy (evidence always)
        limit_kib = f"{ev['smem_per_block_limit_bytes'] / 1024:.0f} KiB"
        used = ev.get("smem_per_block_bytes")
        parts.append(
            (
                f"{used / 1024:.0f} KiB of {limit_kib} shared memory per CTA"
                if used
                else f"shared memory per CTA unknown (the profile does not say; the limit is {limit_kib})"
            )
            + f"; {'at most ' if ev.get('stages_that_fit_is_bound') else ''}{ev['stages_that_fit']} stages of a "
            f"{ev['tile']} tile fit" + (f" (the kernel uses {ev['stages']})" if "stages" in ev else "")
        )

    cause, remedy = _cause(case, ev, theo, limiter, tensor_active, stalls, memory_bound)
    lead = (
        f"Inside the kernel it reached {100 * value:.0f}% of the ceiling the other factors leave"
        if not memory_bound
        else f"It moved data at {100 * value:.0f}% of the bandwidth roofline"
    )
    sentence = (
        lead + (": " + "; ".join(parts) if parts else " (no Nsight Compute profile to break this down)") + "."
    )
    return factor("in-kernel", value, sentence, ev, remedy, cause)


SHORT_KERNEL_NS = 5_000.0
"""A GEMM kernel whose median call takes less than this (5 us) is launch- and latency-bound before anything else:
its CTAs' ramp-up, the pipeline's fill and drain and the tail take most of its time, so low SM and DRAM throughput
say it is short, not that its warps wait on something (a 3 us fp32 SIMT bmm of a decoder's rotary embedding)."""
SHORT_REMEDY = (
    "A kernel this short is launch- and latency-bound: do more work per launch (batch the small GEMMs into one "
    "grouped or batched GEMM, fuse it with its neighbours) and cut the launch overhead around it (a CUDA graph, "
    "torch.compile); tuning the kernel itself gains little."
)


def short_kernel_ns(case: CaseEvidence) -> float | None:
    """The median call's GEMM kernel time where it is below :data:`SHORT_KERNEL_NS` (else None): the timeline's
    median, else Nsight Compute's duration of the profiled launch."""
    t = case.timing.gemm_ns.median
    if t is None and case.ncu is not None:
        t = case.ncu.row.get("duration_ns")
    return float(t) if t is not None and 0 < t < SHORT_KERNEL_NS else None


def short_sentence(case: CaseEvidence, ns: float) -> str:
    """What a short kernel's verdict says: its duration, and its throughputs where Nsight Compute measured them."""
    from tracekit.numbers import duration

    row = case.ncu.row if case.ncu else {}
    sm, dram = row.get("compute_throughput_pct"), row.get("dram_throughput_pct")
    said = (
        f" (SM throughput {float(sm):.2g}% and DRAM {float(dram):.2g}% of peak: too short to fill the GPU)"
        if sm is not None and dram is not None
        else ""
    )
    return f"launch- and latency-bound: a {duration(ns)} kernel{said}"


def _cause(
    case: CaseEvidence,
    ev: dict[str, Any],
    theo: float | None,
    limiter: str | None,
    tensor_active: float | None,
    stalls: list[tuple[str, float, str]],
    memory_bound: bool,
) -> tuple[str, str]:
    if stalled(case) and short_kernel_ns(case) is not None:
        return ("short kernel: launch- and latency-bound", SHORT_REMEDY)
    if stalled(case):
        names = ", ".join(f"{n} ({STALL_MEANING.get(n, n)})" for n, _, _ in stalls)
        return (
            "stalled",
            f"Its warps wait: the top stall reasons are {names}."
            if stalls
            else "Capture the WarpStateStats section (`tracekit capture --ncu` does) to see what its warps wait on.",
        )
    low_occupancy = theo is not None and limiter and theo <= LOW_OCCUPANCY_PCT and not _warp_specialised(case)
    small = grid_bound(case) if low_occupancy else None
    if low_occupancy and latency_bound(case):
        if small:  # every CTA is resident at once: the limiter never binds, the grid holds occupancy low
            return _small_grid_cause(case, limiter, *small)  # type: ignore[arg-type]
        return _occupancy_cause(ev, limiter)  # type: ignore[arg-type]
    if memory_bound:
        units, slots, sms = _grid_fill(case)
        if units is not None and slots and units < slots:
            # SMs without a CTA only where the grid is smaller than the SM count; above it every SM holds one
            # and the slots left empty are fewer loads in flight per SM, not idle SMs
            said = (
                f"{units} CTAs for {slots} CTA slots leave SMs without loads to issue"
                if not sms or units < sms
                else f"{units} CTAs for {slots} CTA slots ({sms} SMs) leave each SM fewer CTAs, so fewer loads in "
                "flight, than it could hold"
            )
            return ("memory bandwidth not saturated", f"{said}: {more_ctas(case)}.")
        return (
            "memory bandwidth not saturated",
            "Its CTAs fill the GPU, yet DRAM runs below its peak: keep more bytes in flight per SM (wider or "
            "asynchronous loads, TMA, more stages); check coalescing and the L2 hit rate.",
        )
    if low_occupancy and case.ncu is None and small:
        return (
            "unexplained without a profile",
            f"{small[0]} CTAs for {small[1]} CTA slots: the grid, not "
            f"{limiter.replace('shared_mem', 'shared memory')}, bounds occupancy; whether that costs time "  # type: ignore[union-attr]
            "needs Nsight Compute's throughputs: profile the GEMM with `tracekit capture --ncu`.",
        )
    if low_occupancy and case.ncu is None:
        return (
            "unexplained without a profile",
            f"Occupancy is capped by {limiter.replace('shared_mem', 'shared memory')} (from the launch "  # type: ignore[union-attr]
            "configuration), but without Nsight Compute's throughputs it cannot be told whether that costs time: "
            "profile the GEMM with `tracekit capture --ncu`.",
        )
    if tensor_active is not None and tensor_active >= TENSOR_BUSY:
        return (
            "near the tensor-pipe limit",
            "The tensor pipe is nearly saturated while the kernel runs; what is left is prologue / epilogue and "
            "pipeline fill. A larger K per tile, a persistent kernel with overlapped epilogue, or FP8 raises it.",
        )
    if stalls:
        name = stalls[0][0]
        hint = {
            "long_scoreboard": "loads are not hidden: more pipeline stages (if shared memory allows), TMA, or "
            "a better L2 hit rate (tile rasterization / swizzle).",
            "barrier": "CTA-wide barriers serialise producer and consumer: warp-specialised pipelines with "
            "mbarriers avoid them.",
            "mio_throttle": "shared-memory traffic saturates: wider (128-bit) or ldmatrix loads, fewer bank "
            "conflicts.",
            "short_scoreboard": "shared-memory latency: more independent MMAs between loads.",
            "gmma": "the kernel waits on wgmma: deeper MMA pipelining (more stages / warpgroups).",
        }.get(name, "see the stall breakdown in Nsight Compute's WarpStateStats section.")
        return (
            f"warps stalled on {name}",
            f"Warps mostly stall on {name} ({STALL_MEANING.get(name, name)}): {hint}",
        )
    if not case.ncu:
        return (
            "unexplained without a profile",
            "Profile the GEMM with `tracekit capture --ncu` to break this factor down (tensor pipe, stalls, "
            "occupancy).",
        )
    if theo is not None and limiter and latency_bound(case) and not _warp_specialised(case):
        # ncu measured the throughputs and the occupancy, not what the warps wait on (no WarpStateStats): the
        # kernel waits, and its occupancy is what hides waiting
        return _latency_cause(case, ev, theo, limiter)
    return ("kernel inefficiency", "Compare against a better-tuned backend for this shape.")


def _latency_cause(case: CaseEvidence, ev: dict[str, Any], theo: float, limiter: str) -> tuple[str, str]:
    """The cause of a latency-bound kernel whose profile has no stall reasons: the occupancy that hides (or does
    not hide) its waiting, with its limiter and the achieved occupancy where measured."""
    row = case.ncu.row if case.ncu else {}
    sm, dram = float(row.get("compute_throughput_pct") or 0.0), float(row.get("dram_throughput_pct") or 0.0)
    ach = row.get("achieved_occupancy_pct")
    said = f", {float(ach):.0f}% achieved" if ach is not None else ""
    res = limiter.replace("shared_mem", "shared memory").replace(" and ", " / ")
    waits = f"Neither the SMs ({sm:.0f}% of peak) nor DRAM ({dram:.0f}%) are near their limit: the warps wait"
    learn = "the WarpStateStats section (`tracekit capture --ncu` captures it) names what they wait on."
    occupancy = f"{theo:.0f}% theoretical occupancy{said} ({ev.get('ctas_per_sm')} CTA/SM, limited by {res})"
    if theo > FEW_WARPS_PCT:
        return (
            "latency-bound",
            f"{waits} with {occupancy}, so not for want of warps: give each warp more independent work (more "
            f"outputs per thread, loads issued ahead of use); {learn}",
        )
    return (
        f"latency-bound at {theo:.0f}% occupancy (limited by {res})",
        f"{waits}, and {occupancy} leaves few to hide it. Raise occupancy (fewer registers per thread: "
        "__launch_bounds__ / maxrregcount; less shared memory per CTA) or give each warp more independent work; "
        + learn,
    )


STALLED_PCT = 5.0
"""SM and DRAM throughput both at or below this (% of peak): the kernel is stalled, waiting (on a dependency, a
barrier, a lock, the host), not limited by any unit or by occupancy."""
FEW_WARPS_PCT = 35.0
"""Theoretical occupancy at or below this (about a third of the warp slots) counts as few warps to hide a
latency-bound kernel's waiting, where the profile names no stall reason."""
BUSY_PCT = 80.0
"""A unit at or above this throughput (% of peak) bounds the kernel: Nsight Compute's own SOL threshold. Below it
on both SM and DRAM the kernel is latency-bound."""


def stalled(case: CaseEvidence) -> bool:
    """SM and DRAM throughput both a few percent or less (Nsight Compute's Speed Of Light)."""
    row = case.ncu.row if case.ncu else {}
    sm, dram = row.get("compute_throughput_pct"), row.get("dram_throughput_pct")
    return sm is not None and dram is not None and sm <= STALLED_PCT and dram <= STALLED_PCT


def latency_bound(case: CaseEvidence) -> bool:
    """Neither the SMs nor DRAM near their peak (both below :data:`BUSY_PCT`), by Nsight Compute's Speed Of
    Light; False where the profile does not say."""
    row = case.ncu.row if case.ncu else {}
    sm, dram = row.get("compute_throughput_pct"), row.get("dram_throughput_pct")
    return sm is not None and dram is not None and sm < BUSY_PCT and dram < BUSY_PCT


def _grid_fill(case: CaseEvidence) -> tuple[int | None, int | None, int]:
    """(CTAs launched, CTAs the GPU holds at once, SMs) where known (0 SMs where unknown)."""
    from .waves import slots

    total, ev = slots(case)
    return case.kernel.grid, total, int(ev.get("sm_count") or 0)


def grid_bound(case: CaseEvidence) -> tuple[int, int, int] | None:
    """(CTAs launched, CTA slots, SMs) where the grid launches fewer CTAs than the GPU holds at once (SMs x the
    CTAs per SM the occupancy limiter allows): every CTA is resident from the start, so the per-SM limiter never
    binds and the grid, not the limiter, sets the occupancy; None otherwise or where unknown."""
    grid, total, sms = _grid_fill(case)
    if grid is None or not total or grid >= total:
        return None
    return int(grid), int(total), sms


TINY_DIM = 16
"""M or N at or below this: a GEMV-style kernel (one output row / column per warp) beats a tiled GEMM."""


def more_ctas(case: CaseEvidence) -> str:
    """How to launch more CTAs, fitted to what the case shows: a kernel that already splits K (a split-K reduce
    follows it, or its name says so) needs a larger split or stream-K, not "split-K"; a GEMV-style kernel only
    where M or N is tiny."""
    t = case.timing
    name = (case.kernel.name or "").lower()
    if t.splitk_ns_total > 0 or "splitk" in name:
        share = (
            f" (its reduce {100 * t.splitk_ns_total / t.gemm_ns_total:.0f}% of the GEMM time)"
            if t.splitk_ns_total > 0 and t.gemm_ns_total > 0
            else ""
        )
        return f"it already splits K{share}: a larger split, or stream-K"
    tiny = [f"{d}={v}" for d, v in (("M", case.m), ("N", case.n)) if v is not None and v <= TINY_DIM]
    return "use more CTAs (split-K, stream-K, smaller tiles)" + (
        f", or a GEMV-style kernel for {' '.join(tiny)}" if tiny else ""
    )


def _small_grid_cause(case: CaseEvidence, limiter: str, units: int, slots: int, sms: int) -> tuple[str, str]:
    per_sm = f"{units / sms:.2g} CTA per SM on average" if sms else "few CTAs per SM"
    return (
        "too few CTAs to fill the GPU",
        f"{units} CTAs for {slots} CTA slots ({sms} SMs): every CTA is resident at once, so the "
        f"{limiter.replace('shared_mem', 'shared memory').replace(' and ', ' / ')} limit never binds; the grid "
        f"leaves {per_sm} and too few warps hide latency: {more_ctas(case)}.",
    )


def _occupancy_cause(ev: dict[str, Any], limiter: str) -> tuple[str, str]:
    res = limiter.split(" and ")[0]
    if res == "shared_mem":
        fit = ev.get("smem_per_block_bytes")
        return (
            "occupancy limited by shared memory",
            f"Each CTA takes {fit / 1024:.0f} KiB of shared memory, so only {ev.get('ctas_per_sm')} CTA fits per "
            "SM and too few warps hide latency: fewer pipeline stages, a smaller K tile, or more warps per CTA."
            if fit
            else "Shared memory per CTA limits CTAs per SM: fewer stages or a smaller tile.",
        )
    if res == "registers":
        return (
            "occupancy limited by registers",
            "Registers per thread limit CTAs per SM and too few warps hide latency: cap them (__launch_bounds__, "
            "maxrregcount) or use a smaller per-thread tile.",
        )
    return ("low occupancy", f"Occupancy is limited by {limiter}: launch more warps per CTA.")


def stages_fit(smem_limit_bytes: int, tile: str, dtype_bits: float = 16) -> int:
    """How many pipeline stages of a ``"128x128x64"`` tile fit in ``smem_limit_bytes`` (helper for reports)."""
    tm, tn, tk = (int(x) for x in tile.split("x"))
    return math.floor(smem_limit_bytes / (tk * (tm + tn) * dtype_bits / 8))


def _run(case: CaseEvidence, ceiling: Ceiling | None) -> Factor | None:
    """The residual: the kernel's rate over the ceiling the kernel's rules leave, at most 1."""
    if ceiling is None:
        return None
    residual = ceiling.residual if ceiling.residual is not None else ceiling.kernel_rate / ceiling.tflops
    return kernel(case, min(residual, 1.0), memory_bound=ceiling.memory_bound)


RULE = Rule(
    name="kernel",
    factor="in-kernel",
    reads=("ncu", "kernel", "flops", "device", "timing"),
    acts_on="residual",
    needs_rate=True,
    run=_run,
    cause="in-kernel efficiency: the rest, with tensor-pipe, stall, occupancy and shared-memory evidence",
)
