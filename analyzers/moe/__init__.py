"""Mixture-of-experts analysis: per expert the effective M, time, TFLOP/s and roofline position; per grouped launch
its FLOP-weighted efficiency, tile padding waste, hot expert and verdict; and the what-if, the rows per expert
(batch size or expert-parallel degree) that would reach a given share of peak, read off a measured curve.

Where launches come from (in this order for a range name):

1. ``moe`` rows (``tracekit bench moe``, frame ``moe``): the launch time, the per-expert counts and, for the loop
   backends, each expert's measured time;
2. ``moe`` ranges on a timeline (``instrument()`` or the benchmark under ``tracekit capture --nsys``): instances of
   one name are one launch, their GEMM kernels its time (other kernels in the range, e.g. the grouped GEMM's
   argument setup, are aux), the routing sidecar (frame ``moe_routing``) the counts of each instance. A timeline
   range with the same name as a benchmark row lends it its kernel name (and so its tile size) instead.

Per-expert time. A grouped launch is one kernel whose CTAs each compute one ``tile_m x tile_n`` output tile of one
expert, all with the same K loop; so its time is attributed to experts in proportion to their tiles,
``ceil(m_e / tile_m) x ceil(N / tile_n)``. That is the model; it says an expert with 1 row costs as much as one
with ``tile_m`` rows, which is what padding does. Loop backends time every expert's GEMM on its own: their
per-expert times are measured, not attributed. The tile comes from the kernel name when a timeline has it
(``cute::C<64>, cute::C<128>, ...`` / ``Shape<_64,_128,_128>`` / ``64x128x128``), else from the backend's dispatch
rule (recorded by the benchmark), else 128 x 128 is assumed (and said).

Roofline per expert: the expert's weights are read once per launch however few rows it has, so
``bytes_e = N x K x width(B) + m_e x K x width(A) + m_e x N x width(C)`` (+ scales) and an expert at small M sits
far left of the ridge: memory-bound.

The frames built here are documented in tracekit/frames.py (``moe_launches``, ``moe_experts``, ``moe_whatif``).

The package by concern: ``launches`` (where launches come from), ``experts`` (per expert and launch),
``what_if`` (the what-if), ``analysis`` (all together), ``views`` (plain data for the views). Every public
name is importable from here.
"""

from __future__ import annotations

from .analysis import MoeAnalysis, analyze_moe, moe_json
from .launches import (
    ASSUMED_TILE,
    DEFAULT_EP_BATCH,
    DEFAULT_TARGETS,
    DOMINATES_RATIO,
    FUSED_OPS,
    SKEW_RATIO,
    MoeLaunch,
    launch_cases,
    tile_from_kernel,
)
from .views import PER_EXPERT_NOTE, expert_histogram, focus_launch
from .what_if import whatif

__all__ = [
    "ASSUMED_TILE",
    "DEFAULT_EP_BATCH",
    "DEFAULT_TARGETS",
    "DOMINATES_RATIO",
    "FUSED_OPS",
    "PER_EXPERT_NOTE",
    "SKEW_RATIO",
    "MoeAnalysis",
    "MoeLaunch",
    "analyze_moe",
    "expert_histogram",
    "focus_launch",
    "launch_cases",
    "moe_json",
    "tile_from_kernel",
    "whatif",
]
