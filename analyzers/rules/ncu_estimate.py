"""In-kernel loss as Nsight Compute estimates it, for a case with no FLOP count: where its report shows the kernel
held by its occupancy (a limiter, low occupancy, latency-bound) and estimated a speed-up for its stalls or
occupancy (the CPIStall and occupancy rules of its default sections), the in-kernel factor takes that estimate, with the same breakdown as the rated one (occupancy and its limiter,
achieved occupancy, the top stalls). Without a FLOP count there is no rate to take a residual of; ncu's own
estimate is measured evidence (the SIMT SGEMM capped at one CTA per SM by 202 KB of shared memory: "Long
Scoreboard Stalls, est. speed-up ~49%"). The estimate is held to the tensor pipe's headroom
(:func:`pipe_headroom_pct`): ncu's TheoreticalOccupancy rule says 88% for any kernel at one CTA per SM, a
tensor-core GEMM that keeps its pipe busy by design included."""

from __future__ import annotations

import re
from typing import TYPE_CHECKING, Any

from . import Ceiling, Factor, Rule, factor
from .kernel import kernel

if TYPE_CHECKING:
    from tracekit.analyzers.gemm import CaseEvidence

ESTIMATING_RULES = ("CPIStall", "AchievedOccupancy", "TheoreticalOccupancy", "Occupancy")
"""Nsight Compute's rules whose estimated speed-up is a loss inside the kernel: warp stalls and occupancy."""
MOST_PCT = 99.0
"""An estimate above this is taken as this: a factor of 0 would leave nothing."""
TENSOR_PIPE_KEY = "tensor_pipe_pct"
"""Nsight Compute's tensor-pipe activity (% of the cycles the report's metric counts; its column in the ncu row)."""


def pipe_headroom_pct(case: CaseEvidence) -> float | None:
    """The most of its time (in %) a tensor-core kernel can lose inside itself: no change of occupancy runs the
    tensor pipe past 100% of the cycles the kernel's waves fill, so the kernel keeps at least the pipe's busy
    share of that time. The pipe's activity is taken over the waves' filled time (the
    measured waves factor's idle SMs are not the kernel's own loss): a Triton GEMM of 133 tiles on 132 SMs runs
    its pipe 39% of the elapsed cycles and 77% of the filled ones, as its one-wave control does (ncu's
    TheoreticalOccupancy rule says 88% for both, from 1 CTA/SM alone). None for a SIMT kernel or where ncu did
    not measure the pipe."""
    from .waves import waves

    if case.counted is not None and case.counted.simt:
        return None
    busy = (case.ncu.row if case.ncu else {}).get(TENSOR_PIPE_KEY)
    if busy is None:
        return None
    wave = waves(case)
    filled = wave.value if wave is not None and wave.value > 0 else 1.0
    return max(0.0, 100.0 - min(100.0, float(busy) / filled))


def _estimate(case: CaseEvidence) -> dict[str, Any] | None:
    """The stall or occupancy finding with the largest estimated speed-up, None where there is none."""
    rules = case.ncu.rules if case.ncu is not None else []
    found = [r for r in rules if r.get("rule") in ESTIMATING_RULES and (r.get("speedup_pct") or 0) > 0]
    return max(found, key=lambda r: float(r["speedup_pct"])) if found else None


def occupancy_bound(case: CaseEvidence) -> bool:
    """Whether Nsight Compute shows the kernel held by its occupancy: a limiter (shared memory, registers, block
    size) caps it at :data:`~.kernel.LOW_OCCUPANCY_PCT` or less, it is not a warp-specialised kernel (those run
    one CTA of a few warps by design), and it is latency-bound (neither SMs nor DRAM near their peak). Only
    there is ncu's estimated speed-up of its stalls taken as a loss: on a busy kernel it is a local estimate (an
    nvjet GEMM near its peak gets "81%")."""
    from .kernel import LOW_OCCUPANCY_PCT, _warp_specialised, latency_bound
    from .occupancy import ctas_per_sm, theoretical_occupancy_pct

    theo = theoretical_occupancy_pct(case)
    _, limiter = ctas_per_sm(case)
    return (
        theo is not None
        and theo <= LOW_OCCUPANCY_PCT
        and bool(limiter)
        and not _warp_specialised(case)
        and latency_bound(case)
    )


def ncu_estimate(case: CaseEvidence) -> Factor | None:
    """``1 - speed-up`` of Nsight Compute's largest stall or occupancy estimate, for a kernel its occupancy
    holds (:func:`occupancy_bound`), at most the tensor pipe's headroom (:func:`pipe_headroom_pct`); None
    otherwise."""
    top = _estimate(case)
    if top is None or not occupancy_bound(case):
        return None
    headroom = pipe_headroom_pct(case)
    pct = min(float(top["speedup_pct"]), MOST_PCT, MOST_PCT if headroom is None else headroom)
    if pct <= 0:
        return None
    value = 1.0 - pct / 100.0
    base = kernel(case, value)
    rule = str(top["rule"])
    title = str(top.get("title") or re.sub(r"(?<!^)(?=[A-Z])", " ", rule).lower())
    what = base.sentence.split(": ", 1)[1] if ": " in base.sentence else ""
    said = float(top["speedup_pct"])
    capped = pct < min(said, MOST_PCT)
    cap = (
        f", but its tensor pipe's headroom over the time its waves fill allows at most {pct:.0f}%"
        if capped
        else ""
    )
    sentence = (
        f"Nsight Compute's {rule} rule estimates the kernel {min(said, MOST_PCT):.0f}% faster ({title}){cap}: its "
        "estimate of the loss inside the kernel, with no FLOP count to rate it"
        + (f"; {what}" if what else ".")
    )
    ev = {**base.evidence, "ncu_rule": top["rule"], "ncu_title": title, "ncu_speedup_pct": round(pct, 1)}
    if capped:
        ev["ncu_rule_speedup_pct"] = round(said, 1)
    return factor("in-kernel", value, sentence, ev, base.remedy, base.cause)


def _run(case: CaseEvidence, ceiling: Ceiling | None) -> Factor | None:
    """Only for a case with no rate (``ceiling`` None): with one, the residual rule measures the in-kernel loss."""
    return ncu_estimate(case) if ceiling is None else None


RULE = Rule(
    name="ncu_estimate",
    factor="in-kernel",
    reads=("ncu", "kernel", "device"),
    acts_on="kernel",
    needs_rate=False,
    run=_run,
    cause="with no FLOP count: Nsight Compute's estimated speed-up of the kernel's stalls or occupancy",
)
