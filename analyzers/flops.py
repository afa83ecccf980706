"""FLOPs and input type of a kernel from Nsight Compute's math counters: no GEMM shape needed.

Measured on an H200 (samples/h200-counter-probe: cuBLAS bf16 / fp8 / tf32 / fp32 GEMMs of known shape, each in
an NVTX range naming it):

- ``sm__ops_path_tensor_src_<type>[_dst_<type>].sum`` counts **FLOPs** (one multiply-add = 2): exactly
  ``2*M*N*K`` when the shape fits the kernel's tiles (bf16, fp8 and tf32 1024x2048x6144 -> 25,769,803,776), more
  when tiles are padded (tf32 M=16 on a 64-row tile: 4.0x; fp8 M=128: 1.031x). The ``_op_hgmma`` / ``_op_hmma`` /
  ``_op_utc*`` variants split the same count by instruction and ``_realtime`` / ``_sparsity_on|off`` are copies or
  subsets: only the plain ``src_`` counters are summed, so nothing is counted twice.
- SIMT FP32 (``sgemm``, ``sm80_xmma_gemm_f32f32``): ``smsp__sass_thread_inst_executed_op_ffma_pred_on.sum`` is
  ``M*N*K`` (plus a tiny epilogue), so FLOPs = ``2*ffma + fadd + fmul``. Used only when the tensor counters are
  absent or zero (a tensor-core kernel's FADDs are its accumulator promotion, not GEMM math).

Counter names differ per chip (gh100 ``src_fp8``; gb202 ``src_fp8_dst_fp32``, ``src_fp4_fp6_dst_fp16``; gb100
``src_fp4_fp6_fp8_dst_fp32``): they are parsed by pattern, never from a fixed list. A counter that covers several
types (``fp4_fp6_fp8``) takes the type the kernel name says when it is one of them, else the cheapest claim
consistent with the counter (the widest of its types: the lowest peak, so the % of peak is never overstated), and
says so in ``dtype_note``.
"""

from __future__ import annotations

import re
from collections.abc import Mapping
from dataclasses import dataclass, field

__all__ = ["CountedFlops", "counted_flops", "is_counter_metric"]

_TENSOR = re.compile(r"^sm__ops_path_tensor_src_(?P<src>[a-z0-9_]+?)(?:_dst_(?P<dst>[a-z0-9]+))?\.sum$")
_SKIP = re.compile(r"_realtime|_sparsity_(?:on|off)")
_CYCLES = "smsp__cycles_elapsed.avg"
_SIMT = {
    "ffma": "smsp__sass_thread_inst_executed_op_ffma_pred_on.sum",
    "fadd": "smsp__sass_thread_inst_executed_op_fadd_pred_on.sum",
    "fmul": "smsp__sass_thread_inst_executed_op_fmul_pred_on.sum",
}
_TYPE_CLASS = {
    "fp4": "fp4",
    "fp6": "fp6",
    "fp8": "fp8",
    "fp16": "fp16",
    "bf16": "bf16",
    "tf32": "tf32",
    "int8": "int8",
    "int4": "int4",
    "int1": "int1",
    "fp64": "fp64",
}
_WIDTH = {
    "int1": 1,
    "fp4": 4,
    "int4": 4,
    "fp6": 6,
    "fp8": 8,
    "int8": 8,
    "fp16": 16,
    "bf16": 16,
    "tf32": 19,
    "fp64": 64,
}
_NAME_SAYS = (
    (re.compile(r"e2m1|fp4|nvf4|mxf4", re.I), "fp4"),
    (re.compile(r"e3m2|e2m3|fp6", re.I), "fp6"),
    (re.compile(r"e4m3|e5m2|fp8|qgmma|qqtst|f8", re.I), "fp8"),
)

COUNTER_PREFIXES = ("sm__ops_path_tensor_src_", "smsp__sass_thread_inst_executed_op_f", _CYCLES)
"""Metric-name prefixes the FLOP count reads (for filters that keep only the metrics the analysis uses)."""


def is_counter_metric(metric: str) -> bool:
    """Whether ``metric`` is one of the math counters :func:`counted_flops` reads."""
    return bool(_TENSOR.match(metric) and not _SKIP.search(metric)) or metric in _SIMT.values()


@dataclass
class CountedFlops:
    """What the counters say one kernel launch executed.

    ``flops`` counts executed math, tile padding included; ``dtype_class`` is the tensor-core rate class (fp8,
    bf16, ... or fp32 for SIMT); ``counter_names`` the non-zero counters summed; ``simt`` True when the count came
    from FP32 FFMA/FADD/FMUL instructions; ``dtype_note`` says how a multi-type counter's class was chosen.

    For a case's calls (several launches) ``flops`` is None when no one count holds for every call: the profiled
    launches counted different math (several GEMMs sharing a kernel and grid), ``spread`` then gives the least and
    the most counted; the class still holds (the same counters).
    """

    flops: float | None
    dtype_class: str | None
    counter_names: list[str] = field(default_factory=list)
    simt: bool = False
    dtype_note: str | None = None
    spread: tuple[float, float] | None = None


def _classes(src: str) -> list[str]:
    return [_TYPE_CLASS[p] for p in src.split("_") if p in _TYPE_CLASS]


def counted_flops(metrics: Mapping[str, float | None], kernel_name: str | None = None) -> CountedFlops | None:
    """FLOPs and input class of one kernel launch from its ncu metrics (name -> value); None when the metrics
    hold no math counter or every counter is zero."""
    by_class: dict[str, float] = {}
    names: list[str] = []
    notes: list[str] = []
    seen_tensor = False
    for metric, value in metrics.items():
        m = _TENSOR.match(metric)
        if m is None or _SKIP.search(metric):
            continue
        seen_tensor = True
        if value is None or value <= 0:
            continue
        classes = _classes(m["src"])
        if not classes:
            continue
        cls = classes[0]
        if len(classes) > 1:
            said = [
                c for pattern, c in _NAME_SAYS if c in classes and kernel_name and pattern.search(kernel_name)
            ]
            if said:
                cls = said[0]
                notes.append(f"{metric} covers {'/'.join(classes)}: the kernel name says {cls}")
            else:
                cls = max(classes, key=lambda c: _WIDTH.get(c, 0))
                notes.append(
                    f"{metric} covers {'/'.join(classes)} and the kernel name does not say which: "
                    f"{cls} assumed (the lowest peak of the three, so % of peak is not overstated)"
                )
        by_class[cls] = by_class.get(cls, 0.0) + float(value)
        names.append(metric)
    if by_class:
        # several classes in one kernel (rare: a mixed kernel): the dominant one sets the peak
        cls = max(by_class, key=lambda c: by_class[c])
        return CountedFlops(sum(by_class.values()), cls, sorted(names), False, "; ".join(notes) or None)
    ffma = metrics.get(_SIMT["ffma"])
    if ffma is None:
        return _simt_from_rates(metrics)
    if ffma <= 0:
        return None
    fadd = metrics.get(_SIMT["fadd"]) or 0.0
    fmul = metrics.get(_SIMT["fmul"]) or 0.0
    simt_names = [_SIMT["ffma"]] + [_SIMT[k] for k, v in (("fadd", fadd), ("fmul", fmul)) if v]
    note = None if seen_tensor else "no tensor-op counters in the profile: FP32 SIMT math only"
    return CountedFlops(2.0 * ffma + fadd + fmul, "fp32", simt_names, True, note)


_TENSOR_ACTIVE = (
    "sm__pipe_tensor_cycles_active.avg.pct_of_peak_sustained_elapsed",
    "sm__pipe_tensor_op_hmma_cycles_active.avg.pct_of_peak_sustained_elapsed",
)
TENSOR_IDLE_PCT = 1.0
"""Tensor-pipe activity (% of peak, elapsed) at or below which a kernel did no tensor-core math worth rating: the
FP32 instruction count is its math (panjd123's ``ReferenceGemm_kernel``: 0.012%, a CUTLASS int8 GEMM of the same
report 11%)."""


def _simt_from_rates(metrics: Mapping[str, float | None]) -> CountedFlops | None:
    """FP32 SIMT FLOPs from the instruction rates (``...pred_on.sum.per_cycle_elapsed`` x
    ``smsp__cycles_elapsed.avg``: Nsight Compute's full set records the rates, not the sums) of a kernel whose
    tensor pipe stayed idle; None where it was busy or unsaid (the FFMAs of a tensor-core kernel's epilogue are not
    its math)."""
    tensor = next((metrics[m] for m in _TENSOR_ACTIVE if metrics.get(m) is not None), None)
    cycles = metrics.get(_CYCLES)
    rate = {k: metrics.get(f"{v}.per_cycle_elapsed") or 0.0 for k, v in _SIMT.items()}
    if tensor is None or tensor > TENSOR_IDLE_PCT or not cycles or rate["ffma"] <= 0:
        return None
    count = {k: round(r * cycles) for k, r in rate.items()}
    names = [f"{_SIMT[k]}.per_cycle_elapsed" for k in ("ffma", "fadd", "fmul") if count[k]] + [_CYCLES]
    note = (
        f"FP32 SIMT math: the tensor pipe was active {tensor:.2g}% of the time; FLOPs from the FFMA/FADD/FMUL "
        f"rates x {_CYCLES} ({count['ffma']:,} FFMA)"
    )
    return CountedFlops(2.0 * count["ffma"] + count["fadd"] + count["fmul"], "fp32", names, True, note)
