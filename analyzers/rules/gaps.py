"""Launch gaps: the GPU idle between a GEMM's kernels and between its consecutive launches."""

from __future__ import annotations

from typing import TYPE_CHECKING

from . import Factor

if TYPE_CHECKING:
    from tracekit.analyzers.gemm import GemmCase


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
    sentence = (
        f"The GPU sat idle {case.gap_ns / 1e3:.1f} us per launch against {busy / 1e3:.1f} us of kernel time "
        f"({100 * (1 - value):.0f}% of the span): the host does not launch fast enough."
    )
    remedy = (
        "Launch-bound: capture the loop in a CUDA graph (torch.cuda.graphs / torch.compile mode='reduce-overhead'), "
        "batch the small GEMMs into one (grouped / batched GEMM), or overlap them on streams"
    )
    return Factor("launch gaps", value, sentence, ev, remedy + f" (+{(1 / value - 1) * 100:.0f}%).")
