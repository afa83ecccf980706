"""Launch gaps: the GPU idle between a GEMM's kernels and between its consecutive launches."""

from __future__ import annotations

from typing import TYPE_CHECKING

from . import Factor, duration

if TYPE_CHECKING:
    from tracekit.analyzers.gemm import GemmCase

GAPS_MATTER_SHARE = 0.10
"""Idle time below this share of the range's span is reported but not blamed on the host: a tight loop of
launches always leaves a few microseconds between kernels."""


def gaps(case: GemmCase) -> Factor | None:
    """``busy / (busy + idle)`` over the case's calls; None when the timeline shows no idle time (or there is no
    timeline). Sums over calls, not a median: two calls with gaps of 0 and 33 us lost 33 us."""
    t = case.timing
    busy = t.gemm_ns_total + t.aux_ns_total
    idle = t.gap_ns_total
    if not t.gemm_ns_total or not idle:
        return None
    value = busy / (busy + idle)
    ev = {"busy_ns_total": busy, "idle_ns_total": idle, "calls": t.calls}
    if t.gap.median is not None:
        ev["idle_ns_median"] = t.gap.median
    share = 1 - value
    per = duration(idle)
    if t.calls > 1:
        per += f" over {t.calls} calls"
    where = f"The GPU sat idle {per} against {duration(busy)} of kernel time ({100 * share:.0f}% of the span)"
    if share < GAPS_MATTER_SHARE:
        return Factor(
            "launch gaps", value, where + ": too little to blame the host.", {**ev, "blamed": False}, None
        )
    remedy = (
        "Launch-bound: capture the loop in a CUDA graph (torch.cuda.graphs / torch.compile mode='reduce-overhead'), "
        "batch the small GEMMs into one (grouped / batched GEMM), move host work out of the loop, or overlap "
        "them on streams."
    )
    return Factor("launch gaps", value, where + ": the host does not launch fast enough.", ev, remedy)
