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
"""

from __future__ import annotations

import bisect
import json
import math
import re
import statistics
from dataclasses import dataclass, field
from typing import Any

import polars as pl

from tracekit import naming
from tracekit.devices import DeviceSpec, match_device
from tracekit.frames import SPECS

from .flops import COUNTER_PREFIXES, CountedFlops, counted_flops

_STEP = re.compile(r"(ProfilerStep)#\d+|(step)(?:\s+(?:i|step|iter|iteration|idx)=\d+)+", re.IGNORECASE)


def context_key(parent_name: str | None) -> str | None:
    """The enclosing range's name, without the counter when it is a training or serving step (``step i=7`` ->
    ``step``, ``ProfilerStep#12`` -> ``ProfilerStep``): one GEMM called in every step of a loop is one case, not
    one per step. Other names stay whole (a GEMM in ``layer i=3`` is its own case)."""
    if parent_name is None:
        return None
    m = _STEP.fullmatch(parent_name.strip())
    return (m.group(1) or m.group(2)) if m else parent_name


__all__ = [
    "LAUNCH_GAP_MAX_NS",
    "GemmCase",
    "build_cases",
    "classify_kernel",
    "device_from_frames",
    "dtype_class",
    "gemm_frame",
    "is_gemm_kernel",
    "min_bytes",
    "parse_gemm_name",
]

LAUNCH_GAP_MAX_NS = 1_000_000
"""Idle time between two consecutive launches of a GEMM counts as a launch gap only below this (1 ms): longer
pauses are deliberate (host work, sleeps, synchronisation), not launch overhead."""

_AUX_PATTERN = re.compile(
    r"splitkreduce|splitk_reduce|reduce_kernel|quantiz|_quant|cvt_|convert|swizzle|scale_|_scale|amax|"
    r"elementwise|fill_|copy|transpose|cast",
    re.IGNORECASE,
)
_GEMM_PATTERN = re.compile(
    r"gemm|nvjet|cutlass|xmma|wgmma|hmma|imma|matmul|_mm_|mm_kernel|sgemm|tensorop|gemv|bmm", re.IGNORECASE
)


@dataclass
class GemmCase:
    """One GEMM (a range name in its context, a measurement, or a profiled kernel) and all evidence about it.

    Times are per launch, in nanoseconds: ``main_ns`` the GEMM's own kernels, ``aux_ns`` auxiliary kernels in
    its range, ``gap_ns`` idle time between them and between consecutive launches.
    """

    origin: str  # measurement | range | ncu | ncu-kernel
    name: str
    context: str | None = None
    backend: str | None = None
    op: str | None = None
    m: int | None = None
    n: int | None = None
    k: int | None = None
    dtype_a: str | None = None
    dtype_b: str | None = None
    dtype_out: str | None = None
    batch: int | None = (
        None  # batched GEMMs (bmm, baddbmm, _grouped_mm): FLOPs and bytes are per batch x this
    )
    scale: str | None = None
    launches: int = 1
    time_source: str | None = None  # where main / aux / gap times came from (shown as evidence)
    timing: str | None = None  # a measurement's timing method: cuda-graph | events
    main_ns: float | None = None
    aux_ns: float = 0.0
    gap_ns: float = 0.0
    main_kernel: str | None = None
    aux_kernels: list[str] = field(default_factory=list)
    device: DeviceSpec | None = None
    device_name: str | None = None
    # launch configuration of the main kernel (timeline or ncu)
    grid_size: int | None = None
    block_size: int | None = None
    registers_per_thread: int | None = None
    smem_per_block_bytes: int | None = None
    # clock / power (NVML for measurements; ncu gpc clock for profiled kernels)
    sm_clock_hz: float | None = None
    clock_source: str | None = None
    power_w: float | None = None
    power_limit_w: float | None = None
    throttle_reasons: int | None = None
    # evidence rows
    ncu: dict[str, Any] | None = None
    ncu_metrics: dict[str, float] = field(default_factory=dict)
    ncu_rules: list[dict[str, Any]] = field(default_factory=list)
    ncu_id: int | None = None
    measurement_id: int | None = None
    range_ids: list[int] = field(default_factory=list)
    achieved_estimate: str | None = None  # set when TFLOP/s had to be estimated (no shape)
    estimated_tflops: float | None = None
    calibrated_tflops: float | None = None
    # without a shape: what Nsight Compute counted (per launch of the main kernel), the profiler's own FLOP
    # count (Kineto ``flops``), and DRAM bytes the main kernel moved (ncu)
    counted: CountedFlops | None = None
    profiler_flops: float | None = None
    dram_bytes: float | None = None
    user_range: bool = False  # the case is the user's own NVTX / record_function range
    range_name: str | None = None  # the range's own name when ``name`` adds the shape to it
    ncu_borrowed_from: str | None = None  # range whose profiled launch of the same kernel is the evidence

    # -- derived quantities --------------------------------------------------------------------------------
    @property
    def shape_known(self) -> bool:
        return bool(self.m and self.n and self.k)

    @property
    def flops_source(self) -> str:
        """Where :attr:`flops` came from: shape | ncu-counters | profiler-flops | none."""
        if self.shape_known:
            return "shape"
        if self.counted is not None:
            return "ncu-counters"
        if self.profiler_flops:
            return "profiler-flops"
        return "none"

    @property
    def dtype_source(self) -> str:
        """Where :attr:`dtype_class` came from: shape | ncu-counters | kernel-name | none."""
        if any(naming.DTYPE_CLASS.get(d) for d in (self.dtype_a, self.dtype_b) if d):
            return "shape"
        if self.counted is not None and self.counted.dtype_class:
            return "ncu-counters"
        if dtype_class(None, None, self.main_kernel):
            return "kernel-name"
        return "none"

    @property
    def padding_ratio(self) -> float | None:
        """Counted (executed) FLOPs over the shape's useful 2*M*N*K, when both are known (> 1: tile padding)."""
        if self.shape_known and self.counted is not None and self.counted.flops:
            return self.counted.flops / (2.0 * self.m * self.n * self.k)  # type: ignore[operator]
        return None

    @property
    def label(self) -> str:
        return f"{self.name} [{self.context}]" if self.context else self.name

    @property
    def dtype_class(self) -> str | None:
        named = [d for d in (self.dtype_a, self.dtype_b) if d and naming.DTYPE_CLASS.get(d)]
        if not named and self.counted is not None and self.counted.dtype_class:
            return self.counted.dtype_class
        return dtype_class(self.dtype_a, self.dtype_b, self.main_kernel)

    @property
    def flops(self) -> float | None:
        """FLOPs per launch: 2*M*N*K from the shape, else what Nsight Compute counted (executed math, tile
        padding included), else the profiler's own count."""
        if self.m and self.n and self.k:
            return 2.0 * self.m * self.n * self.k * (self.batch or 1)
        if self.counted is not None:
            return self.counted.flops
        return self.profiler_flops or None

    @property
    def bytes_min(self) -> float | None:
        if not (self.m and self.n and self.k):
            return None
        one = min_bytes(self.m, self.n, self.k, self.dtype_a, self.dtype_b, self.dtype_out, self.scale)
        return one * (self.batch or 1)

    @property
    def bytes_moved(self) -> float | None:
        """Bytes that set the memory roofline: the shape's minimum, else the DRAM bytes ncu measured."""
        return self.bytes_min or self.dram_bytes or None

    @property
    def bytes_source(self) -> str | None:
        if self.bytes_min:
            return "shape (A, B, C once)"
        return "ncu dram__bytes (read + write)" if self.dram_bytes else None

    @property
    def intensity(self) -> float | None:
        f, b = self.flops, self.bytes_moved
        return f / b if f and b else None

    @property
    def total_ns(self) -> float | None:
        return self.main_ns + self.aux_ns + self.gap_ns if self.main_ns else None

    @property
    def kernel_tflops(self) -> float | None:
        """FLOPs over the GEMM's own kernel time."""
        if self.flops and self.main_ns:
            return self.flops / self.main_ns / 1e3
        return self.estimated_tflops

    @property
    def achieved_tflops(self) -> float | None:
        """FLOPs over the whole range: own kernels, auxiliary kernels and launch gaps."""
        if self.flops and self.total_ns:
            return self.flops / self.total_ns / 1e3
        if self.estimated_tflops is not None and self.main_ns:
            return self.estimated_tflops * self.main_ns / (self.main_ns + self.aux_ns + self.gap_ns)
        return None

    @property
    def peak_tflops(self) -> float | None:
        return self.device.peak_tflops(self.dtype_class) if self.device else None

    @property
    def memory_roof_tflops(self) -> float | None:
        ai = self.intensity
        bw = self.device.memory_bandwidth_bytes_per_s if self.device else None
        return ai * bw / 1e12 if ai and bw else None

    @property
    def bound(self) -> str | None:
        peak, roof = self.peak_tflops, self.memory_roof_tflops
        if peak is None or roof is None:
            return None
        return "memory" if roof < peak else "compute"

    def metric(self, name: str) -> float | None:
        """A numeric ncu metric of the main kernel (named column of ``ncu`` first, then ``ncu_metrics``)."""
        if self.ncu and self.ncu.get(name) is not None:
            value = self.ncu[name]
            return float(value) if isinstance(value, int | float) else None
        return self.ncu_metrics.get(name)


# --- names, dtypes and bytes --------------------------------------------------------------------------------------
def _legacy_fields(name: str) -> dict[str, str] | None:
    """The probe's older names: ``gemm/<dtype>/M=1024,N=2048,K=6144``."""
    parts = name.split("/")
    if len(parts) != 3 or parts[0] != "gemm":
        return None
    dims = dict(item.partition("=")[::2] for item in parts[2].split(","))
    if set(dims) != {"M", "N", "K"} or not all(v.isdigit() for v in dims.values()):
        return None
    dtype = {"fp8": "e4m3", "fp4": "e2m1"}.get(parts[1], naming.canonical_dtype(parts[1]))
    out = "bf16" if dtype in ("e4m3", "e2m1") else dtype
    scale = "tensorwise" if dtype == "e4m3" else None
    return {"backend": f"torch-{parts[1]}", "op": "mm", "a": dtype, "b": dtype, "out": out, **dims} | (
        {"scale": scale} if scale else {}
    )


def parse_gemm_name(name: str | None) -> dict[str, Any] | None:
    """GEMM fields of a range name (tracekit's codec, or the legacy probe form); None for other names."""
    if not name:
        return None
    decoded = naming.decode(name)
    if decoded is not None:
        if decoded.kind != "gemm":
            return None
        f = decoded.fields
    else:
        f = _legacy_fields(name)
        if f is None:
            return None

    def as_int(key: str) -> int | None:
        v = f.get(key)
        return int(v) if v is not None and v.isdigit() else None

    return {
        "backend": f.get("backend"),
        "op": f.get("op"),
        "m": as_int("M"),
        "n": as_int("N"),
        "k": as_int("K"),
        "dtype_a": f.get("a"),
        "dtype_b": f.get("b"),
        "dtype_out": f.get("out"),
        "scale": f.get("scale"),
    }


def aux_key(name: str | None) -> tuple[str, int, int] | None:
    """(backend, M, K) of a tracekit ``aux`` range name: the GEMM it serves has the same three; None otherwise."""
    decoded = naming.decode(name) if name else None
    if decoded is None or decoded.kind != "aux":
        return None
    backend, m, k = decoded.fields.get("backend"), decoded.get_int("M"), decoded.get_int("K")
    return (backend, m, k) if backend and m is not None and k is not None else None


def _gemm_key(case: GemmCase) -> tuple[str, int, int] | None:
    return (
        (case.backend, case.m, case.k) if case.backend and case.m is not None and case.k is not None else None
    )


def _serves(aux: tuple[str, int, int], gemm: tuple[str, int, int]) -> bool:
    """Whether an aux range's (backend, M, K) feeds a GEMM's: same M and K, and the same backend or its family
    (an instrumented ``flashinfer.fp4_quantize`` names ``flashinfer-fp4``; the GEMM after it,
    ``flashinfer-fp4-cutlass``)."""
    return aux[1:] == gemm[1:] and (gemm[0] == aux[0] or gemm[0].startswith(aux[0] + "-"))


_NAME_CLASS = (
    (re.compile(r"e2m1|fp4|nvf4|mxf4", re.I), "fp4"),
    (re.compile(r"e4m3|e5m2|fp8|qgmma|_qq|f8f6f4|float_e4m3", re.I), "fp8"),
    (re.compile(r"bf16|bfloat16", re.I), "bf16"),
    (re.compile(r"f16|fp16|h16|hgemm|s16816|s1688|s161616|half_t|__half", re.I), "fp16"),
    (re.compile(r"tf32|s1684|tfloat32", re.I), "tf32"),
    (re.compile(r"imma|igemm|i8i8|s8s8|int8_t|_i8_|_s8_|signed char", re.I), "int8"),
    (re.compile(r"sgemm|f32f32|float", re.I), "fp32"),
)


def dtype_class(
    dtype_a: str | None, dtype_b: str | None = None, kernel_name: str | None = None
) -> str | None:
    """The tensor-core rate class of a GEMM: the wider of its two inputs' classes (a weight-only FP4 GEMM with
    BF16 activations runs at the BF16 rate), else guessed from the kernel name; None when unknown."""
    classes = [naming.DTYPE_CLASS.get(d) for d in (dtype_a, dtype_b) if d]
    classes = [c for c in classes if c]
    if classes:
        return max(classes, key=lambda c: naming.DTYPE_BITS.get(_CLASS_DTYPE.get(c, c), 0))
    if kernel_name and (_GEMM_PATTERN.search(kernel_name) or "float" in kernel_name):
        # The element type named first wins (CUTLASS names list A's type before the accumulator's).
        hits = [(m.start(), cls) for pattern, cls in _NAME_CLASS if (m := pattern.search(kernel_name))]
        if hits:
            return min(hits)[1]
    return None


_CLASS_DTYPE = {"fp8": "e4m3", "fp4": "e2m1", "fp16": "fp16", "bf16": "bf16", "tf32": "tf32", "int8": "int8"}


def _scale_bytes(
    m: int, n: int, k: int, dtype_a: str | None, dtype_b: str | None, scale: str | None
) -> float:
    """Bytes of block / row / tensor scales for both operands (fp32 scales unless the layout says otherwise)."""
    s = (scale or "").lower()
    fp4 = "e2m1" in (dtype_a, dtype_b)
    if "mx" in s or "e8m0" in s or "1x32" in s:
        return (m * k + k * n) / 32  # one e8m0 byte per 32 elements
    if "nvfp4" in s or "1x16" in s or (fp4 and not s):
        return (m * k + k * n) / 16 + 8  # one e4m3 byte per 16 elements, plus two fp32 global scales
    if s == "tensorwise":
        return 8.0
    if s == "rowwise":
        return 4.0 * (m + n)
    if s.startswith("blockwise") or "128" in s:
        kb = math.ceil(k / 128)
        if "1x128" in s and s.count("1x128") >= 2:  # 1x128 for both operands
            return 4.0 * (m * kb + n * kb)
        return 4.0 * (m * kb + kb * math.ceil(n / 128))  # A 1x128, B 128x128 (DeepSeek-style)
    return 0.0


def min_bytes(
    m: int,
    n: int,
    k: int,
    dtype_a: str | None,
    dtype_b: str | None = None,
    dtype_out: str | None = None,
    scale: str | None = None,
) -> float:
    """The fewest bytes a GEMM must move: A and B read once, C written once, at their real widths (FP4 is 4
    bits), plus their scales. Unknown dtypes count as 16-bit."""
    bits_a = naming.DTYPE_BITS.get(dtype_a or "", 16)
    bits_b = naming.DTYPE_BITS.get(dtype_b or dtype_a or "", bits_a)
    low = dtype_a in ("e4m3", "e5m2", "e2m1", "int8")
    bits_c = naming.DTYPE_BITS.get(dtype_out or "", 16 if low else bits_a)
    return (m * k * bits_a + k * n * bits_b + m * n * bits_c) / 8 + _scale_bytes(
        m, n, k, dtype_a, dtype_b, scale
    )


_NOT_GEMM_FUNCTION = re.compile(
    r"flash|attn|attention|softmax|finaliz|norm|topk|permut|gather|scatter|rotary|rope|embedding|sort|histogram",
    re.IGNORECASE,
)
"""Words in a kernel's own function name (before its template arguments) that say it is not a GEMM, although its
template arguments name CUTLASS types (``pytorch_flash::flash_fwd_kernel<... cutlass::bfloat16_t ...>``,
``moe::dev::finalize::finalizeKernelVecLoad<... cutlass::bfloat16_t ...>``)."""


def _function_part(name: str) -> str:
    """A demangled kernel name without its return type, template arguments and parameters."""
    text = name.removeprefix("void ").strip()
    cut = min((i for i in (text.find("<"), text.find("(")) if i >= 0), default=len(text))
    return text[:cut]


def is_gemm_kernel(name: str | None) -> bool:
    """A GEMM kernel by its name alone: named like a GEMM, not an attention / normalisation / routing kernel by
    its own function name, and classified ``main`` (not an auxiliary kernel)."""
    if not name or not _GEMM_PATTERN.search(name) or classify_kernel(name) != "main":
        return False
    return not _NOT_GEMM_FUNCTION.search(_function_part(name))


def classify_kernel(name: str | None, in_aux_range: bool = False) -> str:
    """``main`` for a GEMM kernel, ``aux`` for quantize / split-K reduce / scale swizzle / copies."""
    if in_aux_range:
        return "aux"
    text = name or ""
    if _AUX_PATTERN.search(text) and not re.match(r"^(nvjet|sm\d+_xmma|cutlass)", text):
        return "aux"
    return "main"


# --- devices ------------------------------------------------------------------------------------------------------
def device_from_frames(
    frames: dict[str, pl.DataFrame], environment: dict[str, Any] | None
) -> DeviceSpec | None:
    dev = frames.get("devices")
    if dev is not None and dev.height:
        row = dev.filter(pl.col("name").is_not_null()).head(1).to_dicts()
        if row:
            r = row[0]
            return match_device(
                r["name"], r["compute_capability"], r["sm_count"], clock_hz=r["boost_clock_hz"]
            )
    env = environment or {}
    gpu = env.get("gpu") if isinstance(env.get("gpu"), dict) else env
    name = gpu.get("gpu_name") or gpu.get("name") if isinstance(gpu, dict) else None
    if name:
        return match_device(name, gpu.get("compute_capability"), gpu.get("sm_count"))
    return None


def _device_for_ncu(row: dict[str, Any], fallback: DeviceSpec | None) -> DeviceSpec | None:
    """The device of a profiled kernel; a CSV export without a GPU name still gets its architecture's limits."""
    if row.get("device_name") or (fallback is None and row.get("compute_capability")):
        return match_device(
            row.get("device_name"),
            row.get("compute_capability"),
            row.get("sm_count"),
            clock_hz=row.get("boost_clock_hz"),
        )
    return fallback


# --- ncu evidence -------------------------------------------------------------------------------------------------
_EXTRA_METRIC_PREFIXES = (
    "smsp__average_warps_issue_stalled_",
    "smsp__pcsamp_warps_issue_stalled_",
    "sm__pipe_tensor_op_hmma_cycles_active.avg.pct_of_peak_sustained_elapsed",
    "sm__pipe_tensor_cycles_active.avg.pct_of_peak_sustained_elapsed",
    "sm__inst_executed_pipe_tensor",
    "smsp__sass_thread_inst_executed_op_ffma_pred_on.sum.per_cycle_elapsed",
    "launch__occupancy_limit_",
    "launch__cluster_size",
    "sm__maximum_warps_per_active_cycle_pct",
    "gpu__dram_throughput.avg.pct_of_peak_sustained_elapsed",
    "dram__bytes.sum.per_second",
    "launch__waves_per_multiprocessor",
    "sm__warps_active.avg.pct_of_peak_sustained_active",
    *COUNTER_PREFIXES,
)


def _ncu_evidence(
    frames: dict[str, pl.DataFrame],
) -> tuple[dict[int, dict[str, float]], dict[int, list[dict]]]:
    metrics: dict[int, dict[str, float]] = {}
    m = frames.get("ncu_metrics")
    if m is not None and m.height:
        expr = pl.lit(False)
        for p in _EXTRA_METRIC_PREFIXES:
            expr = expr | pl.col("metric").str.starts_with(p)
        for r in m.filter(expr & pl.col("value").is_not_null()).iter_rows(named=True):
            metrics.setdefault(r["ncu_id"], {})[r["metric"]] = r["value"]
    rules: dict[int, list[dict]] = {}
    nr = frames.get("ncu_rules")
    if nr is not None and nr.height:
        for r in nr.filter(pl.col("kind") != "OK").iter_rows(named=True):
            rules.setdefault(r["ncu_id"], []).append(r)
    return metrics, rules


def _kernel_counts(row: dict[str, Any], metrics: dict) -> CountedFlops | None:
    return counted_flops(metrics.get(row["ncu_id"], {}), row.get("demangled_name") or row.get("name"))


def _same_kernel(a: str | None, b: str | None) -> bool:
    """Whether two spellings of a kernel name (timeline vs ncu; demangled vs function name) are one kernel."""
    if not a or not b:
        return False
    if a == b:
        return True
    short_a, short_b = a.split("(")[0].split("<")[0], b.split("(")[0].split("<")[0]
    return short_a.removeprefix("void ").strip() == short_b.removeprefix("void ").strip()


def _pick_main(case: GemmCase, rows: list[dict[str, Any]], metrics: dict) -> dict[str, Any]:
    """The profiled row of the case's main kernel: the timeline's main kernel by name when known, else the row
    with the most counted math, else the longest kernel classified ``main``."""
    if case.main_kernel:
        named = [r for r in rows if _same_kernel(case.main_kernel, r.get("demangled_name") or r.get("name"))]
        named = named or [r for r in rows if _same_kernel(case.main_kernel, r.get("name"))]
        if named:
            return max(named, key=lambda r: r.get("duration_ns") or 0.0)
    counted = [(c.flops, r) for r in rows if (c := _kernel_counts(r, metrics)) is not None and not c.simt]
    if counted:
        return max(counted, key=lambda fr: fr[0])[1]
    mains = [r for r in rows if classify_kernel(r.get("name")) == "main"] or rows
    return max(mains, key=lambda r: r.get("duration_ns") or 0.0)


def _attach_ncu(case: GemmCase, rows: list[dict[str, Any]], metrics: dict, rules: dict) -> None:
    """Use the main kernel of ``rows`` (:func:`_pick_main`) as the case's profiled evidence, with its counted
    FLOPs and DRAM bytes."""
    main = _pick_main(case, rows, metrics)
    case.counted = case.counted or _kernel_counts(main, metrics)
    if case.dram_bytes is None and main.get("dram_bytes"):
        case.dram_bytes = float(main["dram_bytes"])
    elif case.dram_bytes is None and main.get("dram_bytes_per_s") and main.get("duration_ns"):
        case.dram_bytes = float(main["dram_bytes_per_s"]) * float(main["duration_ns"]) * 1e-9  # rate x time
    case.ncu = main
    case.ncu_id = main["ncu_id"]
    case.ncu_metrics = metrics.get(main["ncu_id"], {})
    case.ncu_rules = [x for r in rows for x in rules.get(r["ncu_id"], [])]
    case.main_kernel = case.main_kernel or main.get("demangled_name") or main.get("name")
    case.grid_size = case.grid_size or main.get("grid_size")
    case.block_size = case.block_size or main.get("block_size")
    case.registers_per_thread = case.registers_per_thread or main.get("registers_per_thread")
    if case.smem_per_block_bytes is None:
        smem = (main.get("static_smem_bytes") or 0) + (main.get("dynamic_smem_bytes") or 0)
        case.smem_per_block_bytes = smem or None
    if case.sm_clock_hz is None and main.get("sm_clock_hz"):
        case.sm_clock_hz = main["sm_clock_hz"]
        control = main.get("clock_control")
        case.clock_source = "ncu gpc__cycles_elapsed.avg.per_second" + (
            f" (clock control {control})" if control else ""
        )


def _ncu_gemm_names(frames: dict[str, pl.DataFrame], metrics: dict) -> set[str]:
    """Names (function and demangled) of profiled kernels with tensor math > 0 by Nsight Compute's counters."""
    ncu = frames.get("ncu")
    out: set[str] = set()
    if ncu is None or ncu.height == 0:
        return out
    for row in ncu.select("ncu_id", "name", "demangled_name").iter_rows(named=True):
        c = _kernel_counts(row, metrics)
        if c is not None and not c.simt:
            out.update(n for n in (row.get("name"), row.get("demangled_name")) if n)
    return out


def _user_range_of(row: dict[str, Any]) -> str | None:
    """The user's own innermost NVTX range of a profiled kernel: profiler op ranges (``aten::addmm, seq = 7``)
    are skipped outward through the NVTX stack; None when the kernel is in no user range."""
    rng = row.get("nvtx_range")
    if not rng or naming.decode(rng) is not None:
        return None
    if not is_op_range(rng):
        return rng
    try:
        stack = json.loads(row.get("nvtx_stack") or "[]")
    except ValueError:
        stack = []
    for entry in reversed(stack):
        name = entry.get("name") if isinstance(entry, dict) else None
        if name and not is_op_range(name) and naming.decode(name) is None:
            return name
    return None


def _user_split(
    name: str, rows: list[dict[str, Any]], metrics: dict, gemm_names: set[str]
) -> tuple[list[dict], list[dict]] | None:
    """Main and auxiliary rows of a user range's profiled kernels; None when the range is not a GEMM case (no
    GEMM-like kernel and a name that does not say GEMM)."""
    mains = [
        r
        for r in rows
        if _gemm_like(r.get("name"), gemm_names) or _gemm_like(r.get("demangled_name"), gemm_names)
    ]
    if not mains:
        if not _GEMM_RANGE.search(name):
            return None
        # a SIMT kernel the user's range names: the kernel with the most time (or counted math) is the GEMM
        totals: dict[str, float] = {}
        for r in rows:
            totals[r.get("name") or ""] = totals.get(r.get("name") or "", 0.0) + (r.get("duration_ns") or 0.0)
        top = max(totals, key=lambda n: totals[n])
        mains = [r for r in rows if (r.get("name") or "") == top]
    return mains, [r for r in rows if r not in mains]


def _ncu_cases(
    frames: dict[str, pl.DataFrame], device: DeviceSpec | None, metrics: dict, rules: dict
) -> tuple[dict[str, list[dict]], dict[str, list[dict]], list[GemmCase], dict[str, tuple[list, list]]]:
    """ncu rows grouped by GEMM range name, rows of tracekit ``aux`` ranges grouped by range name (auxiliary
    kernels of a GEMM, never GEMMs themselves), cases for kernels in no range (one per kernel), and the user's
    own GEMM ranges (innermost NVTX range of a GEMM-like kernel: name -> (main rows, auxiliary rows)). Kernels of
    a user range that holds no GEMM-like kernel are not GEMM cases."""
    ncu = frames.get("ncu")
    by_range: dict[str, list[dict]] = {}
    aux_rows: dict[str, list[dict]] = {}
    loose: list[GemmCase] = []
    user: dict[str, list[dict]] = {}
    if ncu is None or ncu.height == 0:
        return by_range, aux_rows, loose, {}
    gemm_names = _ncu_gemm_names(frames, metrics)
    for row in ncu.sort("ncu_id").iter_rows(named=True):
        if aux_key(row.get("nvtx_range")) is not None:
            aux_rows.setdefault(row["nvtx_range"], []).append(row)
            continue
        parsed = parse_gemm_name(row.get("nvtx_range"))
        if parsed is None and row.get("nvtx_stack"):
            try:
                stack = json.loads(row["nvtx_stack"])
            except ValueError:
                stack = []
            for entry in reversed(stack):
                if parse_gemm_name(entry.get("name")):
                    row = {**row, "nvtx_range": entry["name"]}
                    parsed = parse_gemm_name(entry["name"])
                    break
        if parsed is not None:
            by_range.setdefault(row["nvtx_range"], []).append(row)
            continue
        rng = _user_range_of(row)
        if rng:
            user.setdefault(rng, []).append(row)
            continue
        loose.append(_kernel_case(row, device, metrics, rules))
    user_cases: dict[str, tuple[list, list]] = {}
    for name, rows in user.items():
        split = _user_split(name, rows, metrics, gemm_names)
        if split is not None:
            user_cases[name] = split
    return by_range, aux_rows, loose, user_cases


def _kernel_case(row: dict[str, Any], device: DeviceSpec | None, metrics: dict, rules: dict) -> GemmCase:
    """A profiled kernel in no GEMM range, explained on its own and named by kernel."""
    name = row.get("demangled_name") or row.get("name") or f"kernel {row['ncu_id']}"
    case = GemmCase(origin="ncu-kernel", name=name, context=row.get("nvtx_range") or None)
    case.device = _device_for_ncu(row, device)
    case.device_name = row.get("device_name")
    case.main_ns = row.get("duration_ns")
    _attach_ncu(case, [row], metrics, rules)
    _estimate_achieved(case)
    return case


def _borrow_ncu(cases: list[GemmCase], frames: dict[str, pl.DataFrame], metrics: dict, rules: dict) -> None:
    """A user range on the timeline whose own launches were not profiled (ncu limits launches per range, a CUDA
    graph replays them) takes the evidence of the same kernel with the same grid profiled elsewhere in the run:
    same kernel and launch configuration, same math. ``ncu_borrowed_from`` names where it came from."""
    ncu = frames.get("ncu")
    if ncu is None or ncu.height == 0:
        return
    rows = ncu.sort("ncu_id").to_dicts()
    for case in cases:
        if not case.user_range or case.ncu is not None or not case.main_kernel or not case.grid_size:
            continue
        same = [
            r
            for r in rows
            if r.get("grid_size") == case.grid_size
            and _same_kernel(case.main_kernel, r.get("demangled_name") or r.get("name"))
        ]
        if not same:
            continue
        if case.counted is None and not case.shape_known:
            case.counted = _kernel_counts(same[0], metrics)
        _attach_ncu(case, same[:1], metrics, rules)
        case.ncu_borrowed_from = same[0].get("nvtx_range") or "(no range)"


def _user_ncu_case(
    name: str, mains: list[dict], auxs: list[dict], device: DeviceSpec | None, metrics: dict, rules: dict
) -> GemmCase:
    """A user range known only from Nsight Compute: per launch of its main kernel, the main kernels' time and
    counted FLOPs, and the auxiliary kernels' time."""
    case = GemmCase(origin="ncu", name=name)
    case.user_range = True
    case.range_name = name
    case.device = _device_for_ncu(mains[0], device)
    case.device_name = mains[0].get("device_name")
    per_name: dict[str, int] = {}
    for r in mains:
        per_name[r.get("name") or ""] = per_name.get(r.get("name") or "", 0) + 1
    case.launches = max(per_name.values())
    case.main_ns = sum(r.get("duration_ns") or 0.0 for r in mains) / case.launches
    case.aux_ns = sum(r.get("duration_ns") or 0.0 for r in auxs) / case.launches
    case.aux_kernels = sorted({r.get("demangled_name") or r.get("name") for r in auxs if r.get("name")})
    counts = [c for r in mains if (c := _kernel_counts(r, metrics)) is not None]
    if counts:
        top = max(counts, key=lambda c: c.flops)
        total = sum(c.flops for c in counts if c.simt == top.simt) / case.launches
        case.counted = CountedFlops(total, top.dtype_class, top.counter_names, top.simt, top.dtype_note)
    case.time_source = "Nsight Compute: duration of each profiled launch (kernel replay)"
    _attach_ncu(case, mains + auxs, metrics, rules)
    _estimate_achieved(case)
    return case


def _estimate_achieved(case: GemmCase) -> None:
    """Without a shape, estimate TFLOP/s from the tensor pipe's (or FP32 FMA pipe's) activity."""
    dev = case.device
    if dev is None or not case.sm_clock_hz or not dev.sm_count:
        return
    cls = case.dtype_class
    ffma = case.metric("smsp__sass_thread_inst_executed_op_ffma_pred_on.sum.per_cycle_elapsed")
    tensor = case.metric("sm__pipe_tensor_cycles_active.avg.pct_of_peak_sustained_elapsed")
    if tensor is None:
        tensor = case.metric("sm__pipe_tensor_op_hmma_cycles_active.avg.pct_of_peak_sustained_elapsed")
    if tensor is not None and tensor > 1.0 and cls and cls != "fp32":
        peak = dev.peak_tflops(cls)
        if peak and dev.peak_clock_hz:
            case.estimated_tflops = peak * case.sm_clock_hz / dev.peak_clock_hz * tensor / 100.0
            case.achieved_estimate = "peak at the kernel's clock x tensor pipe active (elapsed)"
    elif ffma is not None and ffma > 0 and cls in (None, "fp32"):
        case.estimated_tflops = 2.0 * ffma * case.sm_clock_hz / 1e12
        case.achieved_estimate = "2 x smsp__sass_thread_inst_executed_op_ffma_pred_on x clock"


# --- timeline ------------------------------------------------------------------------------------------------------
def _gemm_ancestor(ranges: pl.DataFrame) -> dict[int, tuple[int, bool]]:
    """range_id -> (gemm range it belongs to, whether it is an aux range) for gemm ranges and descendants."""
    rows = ranges.select("range_id", "parent_id", "range_kind").to_dicts()
    kind = {r["range_id"]: r["range_kind"] for r in rows}
    parent = {r["range_id"]: r["parent_id"] for r in rows}
    out: dict[int, tuple[int, bool]] = {}
    for rid in kind:
        cur, aux, depth = rid, False, 0
        while cur is not None and depth < 64:
            if kind.get(cur) == "gemm":
                out[rid] = (cur, aux)
                break
            if kind.get(cur) == "aux":
                aux = True
            cur, depth = parent.get(cur), depth + 1
    return out


def _free_aux(ranges: pl.DataFrame, owner: dict[int, tuple[int, bool]]) -> dict[int, int]:
    """range_id -> the outermost ``aux`` range enclosing it, for ranges under no GEMM range."""
    rows = ranges.select("range_id", "parent_id", "range_kind").to_dicts()
    kind = {r["range_id"]: r["range_kind"] for r in rows}
    parent = {r["range_id"]: r["parent_id"] for r in rows}
    out: dict[int, int] = {}
    for rid in kind:
        if rid in owner:
            continue
        cur, top, depth = rid, None, 0
        while cur is not None and depth < 64:
            if kind.get(cur) == "aux":
                top = cur
            cur, depth = parent.get(cur), depth + 1
        if top is not None:
            out[rid] = top
    return out


def _free_aux_time(
    ranges: pl.DataFrame, kernels: pl.DataFrame, owner: dict[int, tuple[int, bool]]
) -> dict[tuple[str, int, int], tuple[float, dict[str, int]]]:
    """Per (backend, M, K): the auxiliary kernel time one GEMM launch carries from ``aux`` ranges outside GEMM
    ranges (per aux range name, the median kernel time of its instances that launched kernels, summed over names:
    a quantize and a swizzle step both count), and the aux kernels' names with their launch counts."""
    free = _free_aux(ranges, owner)
    if not free:
        return {}
    names = dict(zip(ranges["range_id"].to_list(), ranges["name"].to_list(), strict=True))
    ks = kernels.filter(pl.col("range_id").is_in(list(free))).select("range_id", "name", "duration_ns")
    per_instance: dict[int, float] = {}
    kernel_names: dict[str, dict[str, int]] = {}
    for r in ks.iter_rows(named=True):
        top = free[r["range_id"]]
        per_instance[top] = per_instance.get(top, 0.0) + (r["duration_ns"] or 0)
        counts = kernel_names.setdefault(names[top], {})
        counts[r["name"]] = counts.get(r["name"], 0) + 1
    by_name: dict[str, list[float]] = {}
    for top, ns in per_instance.items():
        by_name.setdefault(names[top], []).append(ns)
    out: dict[tuple[str, int, int], tuple[float, dict[str, int]]] = {}
    for name, times in by_name.items():
        key = aux_key(name)
        if key is None:
            continue
        total, counts = out.get(key, (0.0, {}))
        for kname, c in kernel_names.get(name, {}).items():
            counts[kname] = counts.get(kname, 0) + c
        out[key] = (total + statistics.median(times), counts)
    return out


def _union_busy(intervals: list[tuple[int, int]]) -> int:
    busy, end = 0, None
    for s, e in sorted(intervals):
        if end is None or s >= end:
            busy += e - s
            end = e
        elif e > end:
            busy += e - end
            end = e
    return busy


MAX_GEMMS_PER_CASE = 2
"""A user range holding more distinct GEMM kernels than this (a whole model step, a decoder layer) is context, not
one GEMM case: its GEMM kernels are explained by name."""
_OP_RANGE = re.compile(r"^[A-Za-z_]\w*::\w+|, (?:seq|op_id) = \d+")
"""Ranges a profiler writes per operator (PyTorch ``emit_nvtx`` / Kineto ``cpu_op``: ``aten::addmm, seq = 7,
op_id = 12``), as opposed to the user's own ranges."""
_OP_SUFFIX = re.compile(r",\s*(?:seq|op_id|sizes|input_op_ids)\s*=.*$")


def is_op_range(name: str | None) -> bool:
    """Whether a range is a profiler's per-operator range rather than one the user named."""
    return bool(name) and bool(_OP_RANGE.search(name))


def range_key(name: str) -> str:
    """A range name without the per-call counters a profiler adds (``aten::addmm, seq = 7, op_id = 12`` ->
    ``aten::addmm``): every call of one op is an instance of one range."""
    return _OP_SUFFIX.sub("", name).strip()


_GEMM_RANGE = re.compile(
    r"gemm|matmul|(?<![a-z])(?:mm|bmm|addmm|linear|mma|dot|fc|proj)(?![a-z])", re.IGNORECASE
)
"""A user range whose name says it runs a GEMM: its longest kernel is the GEMM even when the kernel's name does
not say so (a SIMT kernel ``simt_kernel`` inside a range ``sgemm_smem``)."""


def _gemm_like(name: str | None, gemm_names: set[str]) -> bool:
    """A GEMM kernel by Nsight Compute's counters (tensor math > 0: ``gemm_names``) or by its name."""
    return bool(name) and (name in gemm_names or is_gemm_kernel(name))


def _user_gemm_ranges(
    ranges: pl.DataFrame,
    kernels: pl.DataFrame,
    tracekit_owner: dict[int, tuple[int, bool]],
    gemm_names: set[str],
) -> dict[int, tuple[int, bool]]:
    """The user's own GEMM ranges (no tracekit kind): range_id -> (case range, is auxiliary) for each case range
    (itself, not auxiliary) and the user ranges under it that are not cases themselves (their kernels are the
    case's auxiliary kernels). A case range is the innermost range a GEMM-like kernel was launched in, or a range
    named like a GEMM holding kernels; a range with only other kernels (elementwise, softmax) is not one, and an
    outer range (``step``, ``model``) holding GEMM ranges is context, not a case."""
    shaped_cols = [c for c in ("m", "flops") if c in ranges.columns]
    rows = ranges.select("range_id", "parent_id", "range_kind", "name", *shaped_cols).to_dicts()
    kind = {r["range_id"]: r["range_kind"] for r in rows}
    parent = {r["range_id"]: r["parent_id"] for r in rows}
    rname = {r["range_id"]: r["name"] for r in rows}
    # a profiler's op range (aten::addmm, seq = 7) is a case only with the shape or FLOPs the profiler recorded;
    # without them its kernels belong to the user's range around it
    transparent = {
        r["range_id"]
        for r in rows
        if r["range_kind"] is None and is_op_range(r["name"]) and not any(r.get(c) for c in shaped_cols)
    }

    def holder(rid: int | None) -> int | None:
        depth = 0
        while rid is not None and rid in transparent and depth < 64:
            rid, depth = parent.get(rid), depth + 1
        if rid is not None and _STEP.fullmatch((rname.get(rid) or "").strip()):
            return None  # a training / profiler step is context, never the GEMM's own range
        return rid

    direct: dict[int, list[str]] = {}
    for rid, kname in kernels.filter(pl.col("range_id").is_not_null()).select("range_id", "name").iter_rows():
        if rid in tracekit_owner:
            continue
        rid = holder(rid)
        if rid is not None and rid not in tracekit_owner and kind.get(rid) is None:
            direct.setdefault(rid, []).append(kname)
    by_kernel = {
        rid
        for rid, names in direct.items()
        if 0 < len({n for n in names if _gemm_like(n, gemm_names)}) <= MAX_GEMMS_PER_CASE
    }
    by_name = {
        rid
        for rid in direct
        if rid not in by_kernel
        and _GEMM_RANGE.search(rname.get(rid) or "")
        and not _STEP.fullmatch((rname.get(rid) or "").strip())
    }
    # a range named like a GEMM is a case for the kernel it names only when no GEMM range sits inside it
    inside: set[int] = set()
    for rid in by_kernel:
        cur, depth = parent.get(rid), 0
        while cur is not None and depth < 64:
            inside.add(cur)
            cur, depth = parent.get(cur), depth + 1
    cases = by_kernel | (by_name - inside)
    out: dict[int, tuple[int, bool]] = {rid: (rid, False) for rid in cases}
    for rid in kind:
        if rid in cases or rid in tracekit_owner or kind.get(rid) is not None:
            continue
        cur, depth = parent.get(rid), 0
        while cur is not None and depth < 64:
            if cur in cases:
                # a profiler's op range inside the case holds its kernels directly (roles by kernel); a user's
                # own sub-range (a "quantize" step) holds auxiliary kernels
                out[rid] = (cur, rid not in transparent)
                break
            cur, depth = parent.get(cur), depth + 1
    return out


def _range_cases(
    frames: dict[str, pl.DataFrame], device: DeviceSpec | None, gemm_names: set[str] | None = None
) -> list[GemmCase]:
    """Timeline cases: tracekit ``gemm`` ranges and the user's own GEMM ranges (:func:`_user_gemm_ranges`).
    ``gemm_names`` are kernel names Nsight Compute counted tensor math for."""
    ranges = frames.get("ranges")
    kernels = frames.get("kernels")
    if ranges is None or kernels is None or ranges.height == 0 or kernels.height == 0:
        return []
    gemm_names = gemm_names or set()
    # a profiler's per-operator GEMM range (Kineto cpu_op, emit_nvtx: range_kind gemm-op) is the user's side of
    # the run, not tracekit's: a case when it carries a shape or FLOP count, else transparent to the range around it
    ranges = ranges.with_columns(
        pl.when(pl.col("range_kind") == "gemm-op")
        .then(None)
        .otherwise(pl.col("range_kind"))
        .alias("range_kind")
    )
    owner = _gemm_ancestor(ranges)
    user = _user_gemm_ranges(ranges, kernels, owner, gemm_names)
    user_cases = {rid for rid, (gid, _) in user.items() if gid == rid}
    owner.update(user)
    gemm_ranges = ranges.filter((pl.col("range_kind") == "gemm") | pl.col("range_id").is_in(list(user_cases)))
    if gemm_ranges.height == 0:
        return []
    shape_cols = [
        c for c in ("m", "n", "k", "dtype_a", "dtype_b", "dtype_out", "batch", "flops") if c in ranges.columns
    ]
    extra = {r["range_id"]: r for r in ranges.select("range_id", *shape_cols).iter_rows(named=True)}
    names = dict(zip(ranges["range_id"].to_list(), ranges["name"].to_list(), strict=True))
    parents = dict(zip(ranges["range_id"].to_list(), ranges["parent_id"].to_list(), strict=True))
    kcols = [
        "kernel_id", "device", "name", "start_ns", "end_ns", "duration_ns", "range_id", "grid_x", "grid_y",
        "grid_z", "block_x", "block_y", "block_z", "registers_per_thread", "static_smem_bytes",
        "dynamic_smem_bytes",
    ]  # fmt: skip
    timed = pl.col("start_ns").is_not_null() & pl.col("end_ns").is_not_null()  # a damaged row may lack them
    ks = kernels.filter(pl.col("range_id").is_in(list(owner)) & timed).select(kcols).sort("start_ns")
    per_instance: dict[int, list[dict]] = {}
    for r in ks.iter_rows(named=True):
        gid, aux = owner[r["range_id"]]
        if gid in user_cases:
            r["role"] = "main" if not aux and _gemm_like(r["name"], gemm_names) else "aux"
        else:
            r["role"] = classify_kernel(r["name"], aux)
        per_instance.setdefault(gid, []).append(r)
    # every kernel start per device, to tell a launch gap from time spent in other kernels
    starts: dict[Any, list[int]] = {}
    for dev, grp in (
        kernels.filter(timed)
        .select("device", "start_ns")
        .sort("start_ns")
        .group_by("device", maintain_order=True)
    ):
        starts[dev[0]] = grp["start_ns"].to_list()

    groups: dict[tuple[str, str | None, tuple], list[int]] = {}
    for r in gemm_ranges.sort("start_ns").iter_rows(named=True):
        if r["range_id"] not in per_instance:
            continue
        parent = parents.get(r["range_id"])
        ctx = context_key(names.get(parent)) if parent is not None else None
        shape: tuple = ()
        name = r["name"]
        if r["range_id"] in user_cases:  # a shape the profiler recorded (Kineto Input Dims) splits the case
            e = extra.get(r["range_id"], {})
            shape = tuple(e.get(c) for c in ("m", "n", "k", "dtype_a", "dtype_b", "dtype_out", "batch"))
            name = range_key(name)
            ctx = range_key(ctx) if ctx else ctx
        elif parse_gemm_name(name) is None:  # a gemm range another reader marked: per-call counters dropped
            name = range_key(name)
        groups.setdefault((name, ctx, shape), []).append(r["range_id"])

    cases: list[GemmCase] = []
    for (name, ctx, shape), rids in groups.items():
        is_user = rids[0] in user_cases
        if is_user:
            m, n, k, da, db, do, batch = shape or (None,) * 7
            parsed = {"m": m, "n": n, "k": k, "dtype_a": da, "dtype_b": db, "dtype_out": do, "batch": batch}
            label = f"{name} M={m} N={n} K={k}" if m and n and k else name
            if label != name and batch and batch > 1:
                label = f"{label} batch={batch}"
            case = GemmCase(origin="range", name=label, context=ctx, **parsed)
            case.user_range = True
            case.range_name = name
            pf = [extra.get(rid, {}).get("flops") for rid in rids]
            pf = [f for f in pf if f]
            if pf:
                case.profiler_flops = statistics.median(pf)
        else:
            parsed = parse_gemm_name(name)
            if parsed is None:  # a gemm range whose name tracekit did not write: the shape its row carries
                e = extra.get(rids[0], {})
                parsed = {c: e.get(c) for c in ("m", "n", "k", "dtype_a", "dtype_b") if e.get(c) is not None}
            case = GemmCase(origin="range", name=name, context=ctx, **parsed)
            pf = [f for rid in rids if (f := extra.get(rid, {}).get("flops"))]
            if pf:
                case.profiler_flops = statistics.median(pf)
        case.device = device
        case.range_ids = rids
        rows_all = [r for rid in rids for r in per_instance[rid]]
        if not any(
            r["role"] == "main" for r in rows_all
        ):  # only aux-looking kernels: the longest is the GEMM
            main_name = max(rows_all, key=lambda r: r["duration_ns"])["name"]
            for r in rows_all:
                if r["name"] == main_name:
                    r["role"] = "main"
        # Per instance: own kernel time, auxiliary kernel time, idle time (inside the range, and since the
        # previous instance when nothing else ran in between). The median instance is reported: one cold
        # first launch (module load, a lazily created handle) must not set the typical launch's numbers.
        mains: list[float] = []
        auxs: list[float] = []
        gaps: list[float] = []
        aux_names: dict[str, int] = {}
        main_rows: list[dict] = []
        prev_end: int | None = None
        prev_dev = None
        n_launches = 0
        for rid in rids:
            rows = per_instance[rid]
            intervals = [(r["start_ns"], r["end_ns"]) for r in rows]
            first, last = min(s for s, _ in intervals), max(e for _, e in intervals)
            gap = max(last - first - _union_busy(intervals), 0)
            main_i = aux_i = 0
            for r in rows:
                if r["role"] == "aux":
                    aux_i += r["duration_ns"]
                    aux_names[r["name"]] = aux_names.get(r["name"], 0) + 1
                else:
                    main_i += r["duration_ns"]
                    main_rows.append(r)
            dev = rows[0]["device"]
            if prev_end is not None and dev == prev_dev and 0 < first - prev_end < LAUNCH_GAP_MAX_NS:
                dev_starts = starts.get(dev, [])
                i = bisect.bisect_right(dev_starts, prev_end)
                if i >= len(dev_starts) or dev_starts[i] >= first:  # nothing else ran in between
                    gap += first - prev_end
            prev_end, prev_dev = last, dev
            # a user range may hold a loop of GEMM launches: its times are per launch of the main kernel
            n_i = 1
            if is_user:
                counts: dict[str, int] = {}
                for r in rows:
                    if r["role"] == "main":
                        counts[r["name"]] = counts.get(r["name"], 0) + 1
                n_i = max(counts.values(), default=1)
                n_launches += n_i
            mains.append(main_i / n_i)
            auxs.append(aux_i / n_i)
            gaps.append(gap / n_i)
        case.launches = n_launches if is_user else len(rids)
        case.main_ns = statistics.median(mains)
        case.aux_ns = statistics.median(auxs)
        case.gap_ns = statistics.median(gaps)
        case.aux_kernels = sorted(aux_names)
        top = max(main_rows, key=lambda r: r["duration_ns"])
        case.main_kernel = top["name"]
        grid = [top.get(c) for c in ("grid_x", "grid_y", "grid_z")]
        block = [top.get(c) for c in ("block_x", "block_y", "block_z")]
        if all(g is not None for g in grid):
            case.grid_size = int(grid[0] * grid[1] * grid[2])
        if all(b is not None for b in block):
            case.block_size = int(block[0] * block[1] * block[2])
        case.registers_per_thread = top.get("registers_per_thread")
        smem = (top.get("static_smem_bytes") or 0) + (top.get("dynamic_smem_bytes") or 0)
        case.smem_per_block_bytes = smem or None
        case.time_source = "timeline: kernel durations and idle time inside the GEMM's ranges"
        cases.append(case)
    free_aux = _free_aux_time(ranges, kernels, owner)
    for case in cases:
        key = _gemm_key(case)
        for akey, (ns, counts) in free_aux.items() if key is not None else ():
            if _serves(akey, key):
                case.aux_ns += ns
                case.aux_kernels = sorted(set(case.aux_kernels) | set(counts))
    return cases


def _loose_timeline_cases(
    frames: dict[str, pl.DataFrame], device: DeviceSpec | None, owned: set[int] | None = None
) -> list[GemmCase]:
    """A timeline with no GEMM range at all (someone else's capture, no NVTX, or only a profiler's per-op ranges
    without shapes): each GEMM kernel name is a case, named by kernel, its time the mean over its launches. No
    launch gap: with no range there is nothing to attribute idle time to."""
    kernels = frames.get("kernels")
    if kernels is None or kernels.height == 0:
        return []
    ranges = frames.get("ranges")
    if owned and ranges is not None and ranges.height:
        parent = dict(zip(ranges["range_id"].to_list(), ranges["parent_id"].to_list(), strict=True))
        inside: set[int] = set()
        for rid in parent:  # every range at or under a case's range
            cur, depth = rid, 0
            while cur is not None and depth < 64:
                if cur in owned:
                    inside.add(rid)
                    break
                cur, depth = parent.get(cur), depth + 1
        kernels = kernels.filter(pl.col("range_id").is_null() | ~pl.col("range_id").is_in(list(inside)))
    out: list[GemmCase] = []
    ordered = kernels.sort("start_ns")
    names = ordered["name"].to_list()
    starts, ends = ordered["start_ns"].to_list(), ordered["end_ns"].to_list()
    groups: dict[str, list[int]] = {}
    for i, n in enumerate(names):
        if is_gemm_kernel(n):
            groups.setdefault(n, []).append(i)
    for name, idx in groups.items():
        case = GemmCase(origin="kernel", name=name)
        case.device = device
        case.main_kernel = name
        case.launches = len(idx)
        timed = [ends[i] - starts[i] for i in idx if ends[i] is not None and starts[i] is not None]
        case.main_ns = statistics.fmean(timed) if timed else None  # a damaged file's kernel with no time
        top = ordered.row(idx[0], named=True)
        grid = [top.get(c) for c in ("grid_x", "grid_y", "grid_z")]
        if all(g is not None for g in grid):
            case.grid_size = int(grid[0] * grid[1] * grid[2])
        block = [top.get(c) for c in ("block_x", "block_y", "block_z")]
        if all(b is not None for b in block):
            case.block_size = int(block[0] * block[1] * block[2])
        case.registers_per_thread = top.get("registers_per_thread")
        smem = (top.get("static_smem_bytes") or 0) + (top.get("dynamic_smem_bytes") or 0)
        case.smem_per_block_bytes = smem or None
        case.time_source = "timeline: kernel durations (the kernel is in no range)"
        out.append(case)
    return out


# --- measurements -------------------------------------------------------------------------------------------------
def _measurement_cases(frames: dict[str, pl.DataFrame], device: DeviceSpec | None) -> list[GemmCase]:
    meas = frames.get("measurements")
    if meas is None or meas.height == 0:
        return []
    cases = []
    for r in meas.filter(pl.col("status").fill_null("ok") == "ok").iter_rows(named=True):
        parsed = parse_gemm_name(r.get("range")) or {}
        case = GemmCase(
            origin="measurement",
            name=r.get("range") or f"{r.get('backend')} M={r.get('m')} N={r.get('n')} K={r.get('k')}",
            backend=r.get("backend"),
            op=r.get("op"),
            m=r.get("m"),
            n=r.get("n"),
            k=r.get("k"),
            dtype_a=r.get("dtype") or parsed.get("dtype_a"),
            dtype_b=parsed.get("dtype_b") or r.get("dtype"),
            dtype_out=r.get("dtype_out") or parsed.get("dtype_out"),
            scale=r.get("scale") or parsed.get("scale"),
        )
        case.device = device
        case.measurement_id = r.get("measurement_id")
        case.timing = r.get("timing")
        case.time_source = (
            f"measurement: {case.timing or 'timed'}, median of {r.get('repeats') or '?'} repeats"
        )
        if r.get("time_us"):
            case.main_ns = r["time_us"] * 1e3
        if r.get("aux_time_us"):
            case.aux_ns = r["aux_time_us"] * 1e3
        case.sm_clock_hz = r.get("sm_clock_hz")
        case.clock_source = "NVML mean SM clock during the timing" if case.sm_clock_hz else None
        case.power_w = r.get("power_w")
        case.power_limit_w = r.get("power_limit_w")
        case.throttle_reasons = r.get("throttle_reasons")
        cases.append(case)
    return cases


# --- all together ------------------------------------------------------------------------------------------------
_LAUNCH_FIELDS = ("main_kernel", "grid_size", "block_size", "registers_per_thread", "smem_per_block_bytes")


def _merge_timeline(mc: GemmCase, tc: GemmCase) -> None:
    """A measurement and the timeline of the same range. CUDA-graph timing keeps its times (the timeline, often
    taken under a profiler, lends kernel names and launch configuration); events timing under a profiler carries
    host overhead in every launch, so the timeline's kernel, auxiliary and idle times replace it."""
    if mc.timing != "cuda-graph":
        mc.main_ns, mc.aux_ns, mc.gap_ns, mc.launches = tc.main_ns, tc.aux_ns, tc.gap_ns, tc.launches
        mc.time_source = f"{tc.time_source} (the {mc.timing or 'untimed'} measurement of the same range is kept as evidence)"
        mc.aux_kernels = tc.aux_kernels
    elif not mc.aux_kernels:
        mc.aux_kernels = tc.aux_kernels
    mc.range_ids = tc.range_ids
    for f in _LAUNCH_FIELDS:
        if getattr(mc, f) is None:
            setattr(mc, f, getattr(tc, f))


def _attach_ncu_aux(cases: list[GemmCase], ncu_aux: dict[str, list[dict]]) -> None:
    """Profiled kernels of ``aux`` ranges: named as the auxiliary kernels of the GEMMs with the same backend, M
    and K; for GEMMs known only from ncu, their time too (per aux range name, the summed duration over the number
    of instances, an instance being one launch of each distinct kernel the range holds)."""
    by_key: dict[tuple[str, int, int], tuple[float, set[str]]] = {}
    for name, rows in ncu_aux.items():
        key = aux_key(name)
        if key is None:
            continue
        kernel_names = [r.get("name") or "" for r in rows]
        distinct = set(kernel_names)
        instances = max(kernel_names.count(n) for n in distinct)
        ns = sum(r.get("duration_ns") or 0.0 for r in rows) / instances
        total, names = by_key.get(key, (0.0, set()))
        by_key[key] = (total + ns, names | distinct)
    for case in cases:
        key = _gemm_key(case)
        for akey, (ns, names) in by_key.items() if key is not None else ():
            if not _serves(akey, key):
                continue
            if case.origin == "ncu":
                case.aux_ns += ns
            case.aux_kernels = sorted(set(case.aux_kernels) | names)


def build_cases(
    frames: dict[str, pl.DataFrame],
    *,
    calibration: dict[str, Any] | None = None,
    environment: dict[str, Any] | None = None,
    device: DeviceSpec | None = None,
) -> list[GemmCase]:
    """Every GEMM of a run, with its evidence (see the module docstring for where GEMMs come from).

    ``device`` (``--device``: tracekit.devices.lookup_device) replaces the GPU the files name, for every GEMM:
    Nsight Compute CSV exports name only the compute capability, and a user may know better than a report."""
    given = device
    if device is None:
        device = device_from_frames(frames, environment)
    elif (ncu := frames.get("ncu")) is not None and ncu.height:
        # each profiled kernel's own GPU name would win in _device_for_ncu: the flag wins over it
        frames = {**frames, "ncu": ncu.with_columns(pl.lit(None, pl.String).alias("device_name"))}
    metrics, rules = _ncu_evidence(frames)
    ncu_by_range, ncu_aux, loose, ncu_user = _ncu_cases(frames, device, metrics, rules)
    cases = _measurement_cases(frames, device)
    measured: dict[str, list[GemmCase]] = {}
    for mc in cases:
        measured.setdefault(mc.name, []).append(mc)
    for case in _range_cases(frames, device, _ncu_gemm_names(frames, metrics)):
        for mc in measured.get(case.name, []):
            _merge_timeline(mc, case)
        if case.name not in measured:
            cases.append(case)
    # the user's ranges: a timeline case takes the profiled kernels of the range with the same name as evidence
    timeline_user = {c.range_name: c for c in cases if c.user_range and c.range_name}
    for name, (mains, auxs) in ncu_user.items():
        tc = timeline_user.get(name)
        if tc is not None:
            if tc.counted is None and not tc.shape_known:
                tc.counted = _user_ncu_case(name, mains, auxs, device, metrics, rules).counted
            _attach_ncu(tc, mains, metrics, rules)
            tc.ncu_rules = [x for r in mains + auxs for x in rules.get(r["ncu_id"], [])]
        else:
            cases.append(_user_ncu_case(name, mains, auxs, device, metrics, rules))
    _borrow_ncu(cases, frames, metrics, rules)
    names = {c.name for c in cases}
    for name, rows in ncu_by_range.items():
        if name in names:
            for c in cases:
                if c.name == name:
                    _attach_ncu(c, rows, metrics, rules)
            continue
        parsed = parse_gemm_name(name) or {}
        case = GemmCase(origin="ncu", name=name, **parsed)
        case.device = _device_for_ncu(rows[0], device)
        case.device_name = rows[0].get("device_name")
        mains = [r for r in rows if classify_kernel(r.get("name")) == "main"] or rows
        auxs = [r for r in rows if r not in mains]
        case.launches = len(mains)
        case.main_ns = sum(r.get("duration_ns") or 0.0 for r in mains) / len(mains)
        case.aux_ns = sum(r.get("duration_ns") or 0.0 for r in auxs) / len(mains)
        case.aux_kernels = sorted({r.get("name") for r in auxs if r.get("name")})
        case.time_source = "Nsight Compute: duration of each profiled launch (kernel replay)"
        _attach_ncu(case, rows, metrics, rules)
        cases.append(case)
    _attach_ncu_aux(cases, ncu_aux)
    cases.extend(loose)
    foreign = not any(c.origin == "measurement" or (c.origin == "range" and not c.user_range) for c in cases)
    if foreign and (frames.get("ncu") is None or frames["ncu"].height == 0):
        owned = {rid for c in cases if c.user_range for rid in c.range_ids}
        cases.extend(_loose_timeline_cases(frames, device, owned))
    for case in cases:
        if case.device is None or given is not None:
            case.device = device
        if case.device_name is None and case.device is not None:
            case.device_name = case.device.name
        if calibration:
            case.calibrated_tflops = calibrated_peak(calibration, case.dtype_class)
    return cases


def calibrated_peak(calibration: dict[str, Any], cls: str | None) -> float | None:
    """The sustained TFLOP/s a calibration profile measured for an input class (bf16 stands in for fp16)."""
    gemm = calibration.get("gemm") or {}
    if not cls:
        return None
    entry = gemm.get(cls) or (gemm.get("bf16") if cls == "fp16" else None)
    if isinstance(entry, dict):
        value = entry.get("sustained_tflops")
        return float(value) if value else None
    return None


def gemm_frame(
    cases: list[GemmCase], verdicts: dict[int, tuple[str | None, float | None]] | None = None
) -> pl.DataFrame:
    """The ``gemms`` frame: one row per case (``verdicts`` maps case index -> (verdict, gain %))."""
    rows = []
    for i, c in enumerate(cases):
        peak = c.peak_tflops
        ach = c.achieved_tflops
        verdict, gain = (verdicts or {}).get(i, (None, None))
        rows.append(
            {
                "gemm_id": i,
                "origin": c.origin,
                "range": c.name,
                "context": c.context,
                "backend": c.backend,
                "op": c.op,
                "m": c.m,
                "n": c.n,
                "k": c.k,
                "dtype_a": c.dtype_a,
                "dtype_b": c.dtype_b,
                "dtype_out": c.dtype_out,
                "scale": c.scale,
                "dtype_class": c.dtype_class,
                "launches": c.launches,
                "time_source": c.time_source,
                "main_kernel": c.main_kernel,
                "aux_kernels": json.dumps(c.aux_kernels) if c.aux_kernels else None,
                "device_name": c.device_name,
                "device_key": c.device.key if c.device else None,
                "flops": c.flops,
                "flops_source": c.flops_source,
                "dtype_source": c.dtype_source,
                "counted_flops": c.counted.flops if c.counted else None,
                "min_bytes": c.bytes_min,
                "intensity_flops_per_byte": c.intensity,
                "main_time_ns": c.main_ns,
                "aux_time_ns": c.aux_ns,
                "gap_time_ns": c.gap_ns,
                "kernel_tflops": c.kernel_tflops,
                "achieved_tflops": ach,
                "achieved_estimate": c.achieved_estimate,
                "peak_tflops": peak,
                "peak_source": c.device.peak_source(c.dtype_class) if c.device and peak else None,
                "calibrated_tflops": c.calibrated_tflops,
                "pct_of_peak": 100.0 * ach / peak if ach and peak else None,
                "pct_of_calibrated": 100.0 * ach / c.calibrated_tflops
                if ach and c.calibrated_tflops
                else None,
                "roofline_bound": c.bound,
                "memory_roof_tflops": c.memory_roof_tflops,
                "sm_clock_hz": c.sm_clock_hz,
                "clock_source": c.clock_source,
                "power_w": c.power_w,
                "power_limit_w": c.power_limit_w,
                "throttle_reasons": c.throttle_reasons,
                "grid_size": c.grid_size,
                "block_size": c.block_size,
                "registers_per_thread": c.registers_per_thread,
                "smem_per_block_bytes": c.smem_per_block_bytes,
                "ncu_id": c.ncu_id,
                "measurement_id": c.measurement_id,
                "verdict": verdict,
                "verdict_gain_pct": gain,
            }
        )
    spec = SPECS["gemms"]
    if not rows:
        return spec.empty()
    return spec.conform(pl.DataFrame(rows, infer_schema_length=None))
