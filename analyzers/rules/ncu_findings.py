"""Nsight Compute's own findings as a measured loss of a case with a rate: the finding of its report with the
largest estimated speed-up (``rule_results``: the CPIStall, occupancy, instruction-mix and memory-access rules of its
default sections) is a factor of the kernel's ceiling, carved out of the in-kernel loss, so that the verdict can
name it with its cost in time where it is the largest loss, and the waterfall stays exact.

Which findings count:

- an estimate of the **whole kernel's** speed-up (``speedup_type`` global: FP32 non-fused instructions, an L2
  access pattern, thread divergence), except the launch configuration's (Tail Effect, Small Grid): the waves
  factor measures those from the grid, and counting them twice would claim the loss twice;
- a **local** estimate of the warp stalls (CPIStall) where the kernel is latency-bound (neither the SMs nor DRAM
  near their peak: the warps' waiting is what sets its time), and of the occupancy rules where the kernel's
  occupancy holds it (:func:`~.ncu_estimate.occupancy_bound`: a limiter caps it low, it is not warp-specialised,
  it is latency-bound). On a busy kernel a local estimate says how much faster one part could go, not the kernel
  (an nvjet GEMM near its peak gets "TheoreticalOccupancy, 81%").

The factor is ``1 - speed-up``, but never below the in-kernel loss measured from the kernel's rate (the kernel's
rate over the ceiling the rules before it leave): Nsight Compute estimates each finding on its own, and a finding
cannot cost more than the kernel lost. The in-kernel factor after it is what the finding does not explain, so the
factors still multiply to the achieved rate. A case without a rate takes Nsight Compute's estimate as its
in-kernel factor instead (:mod:`.ncu_estimate`).
"""

from __future__ import annotations

import re
from typing import TYPE_CHECKING, Any

from . import NO_LOSS, Ceiling, Factor, Rule, factor
from .kernel import STALL_MEANING, kernel, latency_bound
from .ncu_estimate import MOST_PCT, occupancy_bound

if TYPE_CHECKING:
    from tracekit.analyzers.gemm import CaseEvidence

FACTOR = "ncu finding"
"""The factor's name in the waterfall."""
WAVES_RULES = ("LaunchConfiguration",)
"""Findings the waves factor measures from the grid (Tail Effect, Small Grid): never counted twice."""
STALL_RULES = ("CPIStall",)
"""Local estimates of the warp stalls: counted where the kernel is latency-bound."""
OCCUPANCY_RULES = ("AchievedOccupancy", "TheoreticalOccupancy", "Occupancy")
"""Local estimates of occupancy: counted where the kernel's occupancy holds it."""


def counted(case: CaseEvidence) -> list[dict[str, Any]]:
    """The case's findings with an estimated speed-up that count as a loss of the whole kernel (module
    docstring), largest estimate first."""
    rules = case.ncu.rules if case.ncu is not None else []
    out = []
    for r in rules:
        name, pct = r.get("rule"), r.get("speedup_pct") or 0.0
        if not name or pct <= 0 or name in WAVES_RULES:
            continue
        if name in STALL_RULES:
            ok = latency_bound(case)
        elif name in OCCUPANCY_RULES:
            ok = occupancy_bound(case)
        else:
            ok = r.get("speedup_type") == "global"
        if ok:
            out.append(r)
    return sorted(out, key=lambda r: -float(r["speedup_pct"]))


def _words(rule: str) -> str:
    return re.sub(r"(?<!^)(?=[A-Z])", " ", rule).lower()


def _first_sentence(message: Any, limit: int = 240) -> str | None:
    """The first sentence of Nsight Compute's message (its advice), shortened; None without one."""
    if not message:
        return None
    text = " ".join(str(message).split())
    first = re.split(r"(?<=[.!?])\s", text, maxsplit=1)[0]
    return first if len(first) <= limit else first[: limit - 1].rstrip() + "…"


def ncu_finding(case: CaseEvidence, at: Ceiling) -> Factor | None:
    """The factor of the largest counted finding (:func:`counted`) for a case with a rate, at most the in-kernel
    loss left by the rules before it (``at``); None where there is no such finding or nothing is left to carve."""
    found = counted(case)
    left = at.kernel_rate / at.tflops if at.tflops > 0 else 1.0
    if not found or at.memory_bound or left >= NO_LOSS:
        return None
    top = found[0]
    rule, pct = str(top["rule"]), min(float(top["speedup_pct"]), MOST_PCT)
    title = str(top.get("title") or _words(rule))
    estimate = 1.0 - pct / 100.0
    value = max(estimate, left)
    base = kernel(
        case, value
    )  # the in-kernel breakdown: occupancy and its limiter, achieved occupancy, stalls
    ev: dict[str, Any] = {
        **base.evidence,
        "ncu_rule": rule,
        "ncu_title": title,
        "ncu_speedup_pct": round(pct, 1),
        "ncu_speedup_type": top.get("speedup_type"),
    }
    sentence = f"Nsight Compute's {rule} rule ({title}) estimates the kernel {pct:.0f}% faster without it"
    if value > estimate:
        ev["capped_to_in_kernel_loss"] = round(left, 4)
        sentence += (
            f"; the kernel lost only {100 * (1 - left):.0f}% of the ceiling the other factors leave, so the "
            "factor is that loss"
        )
    what = base.sentence.split(": ", 1)[1].rstrip(".") if ": " in base.sentence else ""
    if rule in OCCUPANCY_RULES:
        cause, remedy = base.cause, base.remedy
    elif rule in STALL_RULES:
        stall = title.removesuffix(" Stalls").lower().replace(" ", "_")
        meaning = STALL_MEANING.get(stall)
        cause = f"warps stalled on {stall}" + (f" ({meaning})" if meaning else "")
        remedy = base.remedy if base.cause and base.cause.startswith("warps stalled") else None
        remedy = remedy or f"Warps mostly stall on {stall}: {_first_sentence(top.get('message')) or title}"
    else:
        cause = title.lower()
        remedy = _first_sentence(top.get("message")) or f"See Nsight Compute's {rule} section."
    sentence += f": {what}." if what else "."
    return factor(FACTOR, value, sentence, ev, remedy, cause)


def _run(case: CaseEvidence, ceiling: Ceiling | None) -> Factor | None:
    """Only for a case with a rate (``ceiling`` set): without one, :mod:`.ncu_estimate` takes the estimate."""
    return ncu_finding(case, ceiling) if ceiling is not None else None


RULE = Rule(
    name="ncu_findings",
    factor=FACTOR,
    reads=("ncu", "kernel", "flops", "device"),
    acts_on="kernel",
    needs_rate=True,
    run=_run,
    cause="Nsight Compute's own finding with the largest estimated speed-up, within the in-kernel loss",
)
