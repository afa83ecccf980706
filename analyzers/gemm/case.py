"""The GEMM case model: :class:`GemmCase` (one GEMM and all evidence about it) and how a range's context
is keyed (:func:`context_key`)."""

from __future__ import annotations

import re
from dataclasses import dataclass, field
from typing import Any

from tracekit.devices import DeviceSpec

from ..flops import CountedFlops
from .names import dtype_class, min_bytes, name_rate_class

_STEP = re.compile(r"(ProfilerStep)#\d+|(step)(?:\s+(?:i|step|iter|iteration|idx)=\d+)+", re.IGNORECASE)


def context_key(parent_name: str | None) -> str | None:
    """The enclosing range's name, without the counter when it is a training or serving step (``step i=7`` ->
    ``step``, ``ProfilerStep#12`` -> ``ProfilerStep``): one GEMM called in every step of a loop is one case, not
    one per step. Other names stay whole (a GEMM in ``layer i=3`` is its own case)."""
    if parent_name is None:
        return None
    m = _STEP.fullmatch(parent_name.strip())
    return (m.group(1) or m.group(2)) if m else parent_name


LAUNCH_GAP_MAX_NS = 1_000_000
"""Idle time between two consecutive launches of a GEMM counts as a launch gap only below this (1 ms): longer
pauses are deliberate (host work, sleeps, synchronisation), not launch overhead."""


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
    blocks_per_sm: float | None = None  # CTAs of the grid per SM, as the PyTorch profiler wrote it
    est_occupancy_pct: float | None = None  # achieved occupancy as the PyTorch profiler estimates it (no ncu)
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
    rate_override: tuple[str | None, str, str | None] | None = (
        None  # set by settle_rate: (class, source, note)
    )
    peak_unknown: str | None = None  # why no peak is used (set by settle_rate)
    peak_scale: float = 1.0  # the datasheet peak scaled to the GPU's maximum clock (set by settle_rate)
    peak_note: str | None = None  # why the peak is scaled

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
        """Where :attr:`dtype_class` came from: shape | ncu-counters | kernel-name | achieved-rate | none."""
        return self.rate()[1]

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
        """The rate class the GEMM is rated against (:meth:`rate`)."""
        return self.rate()[0]

    def rate(self) -> tuple[str | None, str, str | None]:
        """(rate class, where it came from, a note when it is not what the shape says). The shape's input types
        first; FP32 inputs that the kernel's name or Nsight Compute's counters show running TF32 are TF32 (torch's
        ``allow_tf32``); without a shape the counters, then the kernel's name. :func:`settle_rate` may have set
        a class the achieved rate proves (``rate_override``)."""
        if self.rate_override is not None:
            return self.rate_override
        shape = dtype_class(self.dtype_a, self.dtype_b)
        counted = self.counted.dtype_class if self.counted is not None else None
        if shape is not None:
            if shape == "fp32" and (counted == "tf32" or name_rate_class(self.main_kernel) == "tf32"):
                by = "ncu-counters" if counted == "tf32" else "kernel-name"
                what = (
                    "Nsight Compute's tensor counters show"
                    if counted == "tf32"
                    else "the kernel's name shows"
                )
                return (
                    "tf32",
                    by,
                    (
                        f"fp32 inputs, but {what} TF32 tensor-core math (torch.backends.cuda.matmul.allow_tf32 "
                        "or cuBLAS TF32 mode): rated against the TF32 peak"
                    ),
                )
            return shape, "shape", None
        if counted:
            return counted, "ncu-counters", None
        named = name_rate_class(self.main_kernel)
        return (named, "kernel-name", None) if named else (None, "none", None)

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
        if self.peak_unknown or self.device is None:
            return None
        peak = self.device.peak_tflops(self.dtype_class)
        return peak * self.peak_scale if peak else peak

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


def _gemm_key(case: GemmCase) -> tuple[str, int, int] | None:
    return (
        (case.backend, case.m, case.k) if case.backend and case.m is not None and case.k is not None else None
    )


def settle_rate(case: GemmCase) -> None:
    """Never above 100% of peak: a GEMM whose kernel ran faster than the peak of its rate class. Within what the
    GPU's maximum clock allows over the clock the datasheet quotes the peak at, the class fits and the peak is
    taken at the maximum clock (``peak_scale``, said in ``peak_note``); beyond it the class is wrong: FP32 at a
    rate only tensor cores reach is TF32 (``rate_override``, said in its note), any other class gets no peak
    (``peak_unknown`` says why) rather than a percentage above 100."""
    dev, rate = case.device, case.kernel_tflops
    peak = case.peak_tflops
    if dev is None or not rate or not peak or rate <= peak:
        return
    cls = case.dtype_class
    quoted, boost = dev.peak_clock_hz, dev.boost_clock_hz
    if quoted and boost and boost > quoted and rate <= peak * boost / quoted:
        # Hopper's peaks are quoted at 1830 MHz, its SMs boost to 1980: the class fits, the clock was higher
        case.peak_scale = boost / quoted
        case.peak_note = (
            f"{rate:.1f} TFLOP/s is above the {peak:.1f} TFLOP/s {cls} peak quoted at {quoted / 1e6:.0f} MHz: the "
            f"kernel ran faster than that clock; rated against the peak at the GPU's maximum clock, "
            f"{boost / 1e6:.0f} MHz ({peak * case.peak_scale:.1f} TFLOP/s)"
        )
        return
    tf32 = dev.peak_tflops("tf32")
    if cls == "fp32" and tf32 and rate <= tf32:
        case.rate_override = (
            "tf32",
            "achieved-rate",
            f"{rate:.1f} TFLOP/s is above the {peak:.1f} TFLOP/s FP32 peak, a rate only the tensor cores reach: the "
            "kernel ran TF32 (torch.backends.cuda.matmul.allow_tf32 or cuBLAS TF32 mode); rated against the "
            f"{tf32:.0f} TFLOP/s TF32 peak",
        )
        return
    case.peak_unknown = (
        f"{rate:.1f} TFLOP/s is above the {peak:.1f} TFLOP/s {cls} peak of {dev.name}: {cls} cannot be the rate "
        "class (or the FLOP count is too high), so no peak is used"
    )
