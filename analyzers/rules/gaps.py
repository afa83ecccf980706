"""Launch gaps: the GPU idle between a GEMM's kernels and between its consecutive launches."""

from __future__ import annotations

from typing import TYPE_CHECKING

from . import Factor

if TYPE_CHECKING:
    from tracekit.analyzers.gemm import GemmCase

GAPS_MATTER_SHARE = 0.10
"""Idle time below this share of the range's span is reported but not blamed on the host: a tight loop of
launches always leaves a few microseconds between kernels."""


def gaps(case: GemmCase) -> Factor | None:
    """``busy / (busy + idle)``; None when the timeline shows no idle time (or there is no timeline)."""
    if not case.main_ns or not case.gap_ns:
        return None
    busy = case.main_ns + case.aux_ns
    value = busy / (busy + case.gap_ns)
    ev = {
        "busy_ns_per_launch": busy,
        "idle_ns_per_launch": case.gap_ns,
        "launches": case.launches,
    }
    share = 1 - value
    if share < GAPS_MATTER_SHARE:
        sentence = (
            f"The GPU sat idle {case.gap_ns / 1e3:.1f} us per launch against {busy / 1e3:.1f} us of kernel time "
            f"({100 * share:.0f}% of the span): too little to blame the host."
        )
        return Factor("launch gaps", value, sentence, {**ev, "blamed": False}, None)
    sentence = (
        f"The GPU sat idle {case.gap_ns / 1e3:.1f} us per launch against {busy / 1e3:.1f} us of kernel time "
        f"({100 * share:.0f}% of the span): the host does not launch fast enough."
    )
    remedy = (
        "Launch-bound: capture the loop in a CUDA graph (torch.cuda.graphs / torch.compile mode='reduce-overhead'), "
        "batch the small GEMMs into one (grouped / batched GEMM), move host work out of the loop, or overlap "
        "them on streams"
    )
    return Factor("launch gaps", value, sentence, ev, remedy + f" (+{(1 / value - 1) * 100:.0f}%).")
