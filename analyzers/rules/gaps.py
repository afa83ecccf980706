"""Launch gaps: the GPU idle between a GEMM's kernels and between its consecutive launches."""

from __future__ import annotations

from typing import TYPE_CHECKING

from tracekit.numbers import duration

from . import Factor, Rule, factor

if TYPE_CHECKING:
    from tracekit.analyzers.gemm import CaseEvidence

GAPS_MATTER_SHARE = 0.10
"""Idle time below this share of the range's span is reported but not blamed on the host: a tight loop of
launches always leaves a few microseconds between kernels."""


FEW_CALLS_MIN = 5
FEW_CALLS_SHARE = 0.25
"""Idle counts as "a few long waits" rather than per-launch overhead where the median call's gap times the calls
is under this share of all the idle (with at least :data:`FEW_CALLS_MIN` calls): on the H200 capture sample's
bf16 M=4096 GEMM, 40 calls with a median gap of 1.2 us hold 775 us of idle."""


GRAPH_REMEDY = (
    "Fewer kernels per call: fuse the call's auxiliary kernels (the quantize's steps, the activation) into the "
    "GEMM or into their neighbours (torch.compile fuses pointwise chains): every kernel boundary in a graph costs "
    "the GPU a dependency wait. Programmatic dependent launch lets a kernel start while the one before finishes."
)
FEW_CALLS_REMEDY = (
    "Profile more calls, after a few warm-up calls (the first call of a GEMM creates the library's handle and "
    "workspace and loads its kernel): with many calls the gaps rule tells slow launching from a few long waits."
)


def _in_graph(case: CaseEvidence, value: float, where: str, ev: dict) -> Factor:
    """The idle of calls replayed from a CUDA graph: one ``cudaGraphLaunch`` launched every kernel, so the gaps
    are the GPU's own latency from one graph node to the next, not a host that launches too slowly (the H100
    serve sample's decode: 0.3 to 0.7 us between kernels of one replay)."""
    t = case.timing
    ev = {**ev, "graph_replay": True}
    boundaries = sum(u.count or 0 for u in case.aux) / t.calls if t.calls else 0.0
    each = ""
    if boundaries >= 1:
        ev["kernel_boundaries_per_call"] = boundaries
        ev["idle_ns_per_boundary"] = t.gap_ns_total / (t.calls * boundaries)
        each = (
            f" ({boundaries:.0f} kernel boundaries per call, {duration(ev['idle_ns_per_boundary'])} each on "
            "average)"
        )
    sentence = (
        f"{where}, between kernels of a CUDA graph replay: one graph launch started them all, so the idle is the "
        f"GPU's own latency from one kernel to the next{each}, not a host that launches too slowly."
    )
    return factor("launch gaps", value, sentence, ev, GRAPH_REMEDY)


def _too_few_calls(case: CaseEvidence, value: float, where: str, ev: dict) -> Factor:
    """Idle over fewer than :data:`FEW_CALLS_MIN` calls: slow launching, a synchronisation and a first call's
    library setup look alike, so the sentence says what the timeline shows (how much one call holds) and how to
    learn the cause (h200-instrument-torchprof: 499 of its 573 us of idle are one gap of 3 calls)."""
    t = case.timing
    ev = {**ev, "too_few_calls": True}
    held = ""
    if t.calls > 1 and t.gap_max_ns:
        ev["idle_ns_max_call"] = t.gap_max_ns
        held = f"; one call holds {duration(t.gap_max_ns)} of it"
    calls = "one call" if t.calls == 1 else f"{t.calls} calls"
    sentence = (
        f"{where}{held}. With {calls} the cause cannot be told: a first call's library setup (handle, workspace, "
        "kernel load), a synchronisation or host work, and slow launching look alike."
    )
    return factor("launch gaps", value, sentence, ev, FEW_CALLS_REMEDY)


def gaps(case: CaseEvidence) -> Factor | None:
    """``busy / (busy + idle)`` over the case's calls; None when the timeline shows no idle time (or there is no
    timeline). Sums over calls, not a median: two calls with gaps of 0 and 33 us lost 33 us."""
    t = case.timing
    busy = t.gemm_ns_total + t.aux_ns_total
    idle = t.gap_ns_total
    if not t.gemm_ns_total or not idle:
        return None
    value = busy / (busy + idle)
    ev = {"busy_ns_total": busy, "idle_ns_total": idle, "calls": t.calls}
    if t.gap_ns.median is not None:
        ev["idle_ns_median"] = t.gap_ns.median
    share = 1 - value
    per = duration(idle)
    if t.calls > 1:
        per += f" over {t.calls} calls"
    where = f"The GPU sat idle {per} against {duration(busy)} of kernel time ({100 * share:.0f}% of the span)"
    if share < GAPS_MATTER_SHARE:
        return factor(
            "launch gaps", value, where + ": too little to blame the host.", {**ev, "blamed": False}, None
        )
    if case.graph_replay:
        return _in_graph(case, value, where, ev)
    if t.calls < FEW_CALLS_MIN:
        return _too_few_calls(case, value, where, ev)
    if (
        t.calls >= FEW_CALLS_MIN
        and t.gap_ns.median is not None
        and t.gap_ns.median * t.calls < FEW_CALLS_SHARE * idle
    ):
        # most calls follow their launch closely: the idle is a few long waits, not per-launch overhead
        ev["idle_in_few_calls"] = True
        sentence = (
            f"{where}, but most calls start right after the one before (median gap {duration(t.gap_ns.median)}): "
            "the idle is in a few calls, where the host stopped launching (a synchronisation, host work, a first "
            "call's setup)."
        )
        remedy = (
            "Find what the host does before the slow calls: a torch.cuda.synchronize(), .item() / .cpu() / "
            "print of a GPU tensor, an allocation or logging inside the loop; move it out of the loop, or "
            "capture the loop in a CUDA graph."
        )
        return factor("launch gaps", value, sentence, ev, remedy)
    remedy = (
        "Launch-bound: capture the loop in a CUDA graph (torch.cuda.graphs / torch.compile mode='reduce-overhead'), "
        "batch the small GEMMs into one (grouped / batched GEMM), move host work out of the loop, or overlap "
        "them on streams."
    )
    return factor("launch gaps", value, where + ": the host does not launch fast enough.", ev, remedy)


RULE = Rule(
    name="gaps",
    factor="launch gaps",
    reads=("timing",),
    acts_on="call",
    needs_rate=False,
    run=lambda case, _: gaps(case),
    cause="idle GPU time inside a call and between back-to-back calls (launch overhead)",
)
