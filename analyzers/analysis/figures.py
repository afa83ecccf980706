"""The per-call figures of a case, defined once and labelled the same in every view (docs/ANALYSIS.md, "Per-call
figures").

A case's calls have two per-call figures, and they differ whenever calls differ (a call with an activation kernel
and one without, a clock change): the **median call**, one real call (the call whose span is the median one,
``Timing.median_call``) with its own GEMM, auxiliary and gap parts, so its parts add up to its span; and the
**mean per call**, the totals divided by the calls (what the time in calls and the losses are made of). A view
prints either under its label, never a bare "per call", and never a median of each part (the parts of different
calls do not add up to any call).
"""

from __future__ import annotations

from .model import CallParts, Timing

__all__ = ["MEAN_PER_CALL", "MEDIAN_CALL", "call_value", "mean_per_call", "median_call", "median_call_text"]

MEDIAN_CALL = "median call"
"""The label of one real call's figures: the call whose span is the median (``Timing.median_call``)."""
MEAN_PER_CALL = "mean per call"
"""The label of a total divided by the calls."""


def median_call(t: Timing) -> CallParts | None:
    """The median call's parts (None for a case without calls). A case built without the call itself (none
    today) falls back to the median span alone, with no parts beside it."""
    if t.median_call is not None:
        return t.median_call
    if t.span_ns.median is None:
        return None
    return CallParts(gemm_ns=t.span_ns.median, span_ns=t.span_ns.median)


def mean_per_call(t: Timing) -> CallParts | None:
    """The totals divided by the calls (None without calls)."""
    if not t.calls:
        return None
    n = t.calls
    return CallParts(
        gemm_ns=t.gemm_ns_total / n,
        aux_ns=t.aux_ns_total / n,
        gap_ns=t.gap_ns_total / n,
        span_ns=t.span_ns_total / n,
    )


def call_value(ns: float, scale: float) -> str:
    """A per-call time in the unit of ``scale`` (1e3: µs, 1e6: ms): whole from 100 of the unit on, one decimal
    from 1, two significant figures below (``407``, ``89.2``, ``0.77``; a 0.8 µs part of a 1.4 ms call is
    ``0.0008``, not ``0.0``)."""
    v = ns / scale
    if v >= 100:
        return f"{v:,.0f}"
    return f"{v:,.1f}" if v >= 1 or v == 0 else f"{v:.2g}"


def median_call_text(t: Timing) -> str | None:
    """``median call 89.2 = GEMM 84.7 + aux 0.8 + gap 3.8 µs`` (parts with no time left out; ``median call
    5.1 µs`` when the GEMM is the whole call); None without calls. Every text view prints this line."""
    mid = median_call(t)
    if mid is None or not t.calls:
        return None
    span = mid.span_ns
    unit, scale = ("ms", 1e6) if span >= 1e6 else ("µs", 1e3)
    parts = [f"GEMM {call_value(mid.gemm_ns, scale)}"]
    if mid.aux_ns:
        parts.append(f"aux {call_value(mid.aux_ns, scale)}")
    if mid.gap_ns:
        parts.append(f"gap {call_value(mid.gap_ns, scale)}")
    if len(parts) == 1:
        return f"{MEDIAN_CALL} {call_value(span, scale)} {unit}"
    return f"{MEDIAN_CALL} {call_value(span, scale)} = {' + '.join(parts)} {unit}"
