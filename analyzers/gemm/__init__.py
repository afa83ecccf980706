"""Per-GEMM metrics: FLOPs, minimum bytes, time of the GEMM's own kernels, TFLOP/s, % of peak, roofline bound.

A GEMM comes from one of three places, in this order of preference for a given range name:

1. a ``measurements`` row (``tracekit bench gemm``: CUDA-graph timing with the NVML sample beside it);
2. a tracekit ``gemm`` range on a timeline (``ranges`` joined to its ``kernels``): instances of the same name
   under the same parent range are one GEMM; kernels of its descendant ``aux`` ranges, and kernels whose names
   say quantize / split-K reduce / swizzle, are auxiliary and timed apart; so are the kernels of ``aux`` ranges
   outside any GEMM range that name the same M and K and the same backend or its family (a quantize step
   launched before the GEMM, as ``tracekit bench gemm`` and instrumented quantize functions do), counted once per GEMM launch at their median
   kernel time per instance; idle time between its kernels (and between consecutive instances, when no other
   kernel ran there) is its launch gap. Times are those of the median instance, so one cold first launch does
   not set them. When a measurement of the same range was timed with CUDA events (under
   a profiler, where host overhead enters every launch's time), the timeline's kernel times replace it: the GPU's
   own record of main, auxiliary and idle time is the better evidence; CUDA-graph measurements keep theirs;
3. Nsight Compute rows (``ncu``): grouped by their NVTX range when it names a GEMM (tracekit's names or the
   older ``gemm/<dtype>/M=..,N=..,K=..``), else every profiled kernel on its own.

The user's own ranges (no tracekit name: code tracekit never saw) are cases too, on a timeline, in Nsight
Compute rows, or both (joined on the range name): the innermost user NVTX / record_function range that holds a
GEMM-like kernel (tensor math > 0 by ncu's counters, a kernel named like a GEMM, or any kernel of a range named
like one: ``sgemm_smem`` around ``simt_kernel``). Its main kernel is the GEMM-like one; every other kernel in it
(and in user sub-ranges) is auxiliary. A range with only other kernels is no case; a range holding GEMM ranges,
or more than ``MAX_GEMMS_PER_CASE`` distinct GEMM kernels, is context; a profiler's per-op range (``aten::addmm,
seq = 7``) is a case only with the shape or FLOPs the profiler recorded, else transparent to the user's range
around it. Instances of one range name are one case (median instance); a range holding a loop of GEMM launches
is timed per launch. GEMM kernels of a foreign capture in no case are explained by kernel name.

Without a shape, FLOPs and dtype come from Nsight Compute's counters (:mod:`.flops`; ``flops_source`` /
``dtype_source`` say which), else from the profiler's own count (a ``flops`` column on the range); DRAM bytes the
kernel moved stand in for the shape's minimum bytes on the roofline.

Ncu rows for a range also found on a timeline (or in measurements) are attached as evidence (clock, grid,
occupancy, stalls) rather than counted twice. Everything is kept in :class:`GemmCase` objects (a few hundred at
most); :func:`gemm_frame` turns them into the ``gemms`` frame.

The package by concern: ``case`` (the case model), ``names`` (range names, dtypes, bytes, kernel classes),
``ncu_evidence`` (Nsight Compute rows and the device), ``user_ranges`` (the user's own ranges),
``timeline`` (timeline cases), ``build`` (all together, and the frame). Every public name is importable from here.
"""

from __future__ import annotations

from .build import build_cases, calibrated_peak, gemm_frame
from .case import LAUNCH_GAP_MAX_NS, GemmCase, context_key, settle_rate
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
from .user_ranges import MAX_GEMMS_PER_CASE, is_op_range, range_key

__all__ = [
    "LAUNCH_GAP_MAX_NS",
    "MAX_GEMMS_PER_CASE",
    "GemmCase",
    "aux_key",
    "build_cases",
    "calibrated_peak",
    "classify_kernel",
    "context_key",
    "device_from_frames",
    "dtype_class",
    "gemm_frame",
    "is_gemm_kernel",
    "is_op_range",
    "min_bytes",
    "name_rate_class",
    "parse_gemm_name",
    "range_key",
    "settle_rate",
]
