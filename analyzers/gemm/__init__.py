"""GEMM cases: one GEMM as the user ran it, with its evidence (issue 26).

A case is keyed by where it ran and what ran: the innermost user range (index suffixes such as emit_nvtx's
``seq`` / ``op_id``, ``ProfilerStep#12`` or ``step i=7`` folded), the GEMM kernel's signature (name, grid, block)
and the shape where known; the ranges around it are listed, not part of the key. Its calls are aggregated:
count, totals, per-call median and p10 / p90. Cases come from

1. ``measurements`` rows (``tracekit bench gemm``: CUDA-graph or CUDA-event timing with the NVML sample beside it);
2. a timeline (:mod:`.timeline`, :mod:`.calls`): tracekit ``gemm`` ranges (each instance one call; the calls of
   one range name under one enclosing range are a case), and everything else: each GEMM kernel launch (or the
   profiler's operator range around it, or a range carrying a recorded shape) is a call, keyed as above. A range
   holding several GEMMs gives one case per distinct GEMM (``serve/decode #1``, ``#2`` in order of first launch);
   each call owns its split-K reduce, the quantize before it and the activation after it (:mod:`.roles`: by
   launch order within the range instance, on one stream). When a measurement of the same range was timed with
   CUDA events (under a profiler, where host overhead enters every launch's time), the timeline's calls replace
   it; CUDA-graph measurements keep theirs;
3. Nsight Compute rows (:mod:`.ncu_evidence`): tracekit's range names, the user's ranges (one case per distinct
   GEMM kernel signature in a range, profiled launches as calls), else every profiled kernel signature on its own.
   Rows of a case also found on a timeline are attached to it as evidence (clock, occupancy, stalls, counted
   FLOPs) rather than counted twice.

Per call: GEMM time (the GEMM kernel and its split-K reduce), auxiliary time, and the gap (idle GPU time inside
the call, plus the idle time since the previous call of its case when nothing ran between). achieved = sum of
FLOPs / sum of call spans; kernel rate = sum of FLOPs / sum of GEMM time. Calls without their GEMM kernel are left
out of every number and counted (:class:`~tracekit.analyzers.analysis.model.Timing`).

Without a shape, FLOPs and dtype come from Nsight Compute's counters (:mod:`..flops`), else from the profiler's own
count (a ``flops`` column on the range); DRAM bytes the kernel moved stand in for the shape's minimum bytes on the
roofline. GEMM kernels of a foreign capture without Nsight Compute rows that sit in no range are cases named by
kernel.

The package by concern: ``parts`` (the Analysis model's shape, kernel and timing, built from rows; ncu evidence,
clock), ``case`` (:class:`~.case.CaseEvidence`, a case's frozen evidence, and its derived numbers), ``names`` (range names, dtypes, bytes, kernel classes), ``ranges`` (where each range sits), ``roles``
(which call owns an auxiliary kernel), ``calls`` (calls and their aggregation), ``timeline`` (timeline cases),
``ncu_evidence`` (Nsight Compute rows and the device), ``build`` (all together, and the frame).
"""

from __future__ import annotations

from ..analysis.model import Shape
from .build import build_cases, calibrated_peak
from .case import LAUNCH_GAP_MAX_NS, CaseEvidence, case_id, context_key, is_step, settle_rate
from .case import _gemm_key as _gemm_key  # used by tests
from .names import _serves as _serves  # used by tests
from .names import (
    aux_key,
    classify_kernel,
    dtype_class,
    is_gemm_kernel,
    min_bytes,
    name_rate_class,
    parse_gemm_name,
)
from .ncu_evidence import device_from_frames
from .parts import (
    Clock,
    NcuPart,
    call,
    filled,
    kernel_ref,
    retimed,
    shape_bytes_min,
    shape_text,
    spread,
    timing,
    timing_from_calls,
    timing_repeated,
)
from .timeline import fold_range, kernel_label
from .user_ranges import is_op_range, range_key

__all__ = [
    "LAUNCH_GAP_MAX_NS",
    "CaseEvidence",
    "Clock",
    "NcuPart",
    "Shape",
    "aux_key",
    "build_cases",
    "calibrated_peak",
    "call",
    "case_id",
    "classify_kernel",
    "context_key",
    "device_from_frames",
    "dtype_class",
    "filled",
    "fold_range",
    "is_gemm_kernel",
    "is_op_range",
    "is_step",
    "kernel_label",
    "kernel_ref",
    "min_bytes",
    "name_rate_class",
    "parse_gemm_name",
    "range_key",
    "retimed",
    "settle_rate",
    "shape_bytes_min",
    "shape_text",
    "spread",
    "timing",
    "timing_from_calls",
    "timing_repeated",
]
