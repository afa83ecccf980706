"""What is found about a GEMM case: :class:`CaseEvidence`, one GEMM as the user ran it, made of separate parts (shape, kernel,
timing, Nsight Compute evidence, clock, device: :mod:`.parts`), and how range names are keyed
(:func:`context_key`, :func:`fold_range`).

A case's key is its origin, the innermost user range it ran in (index suffixes folded), the GEMM kernel's
signature (name, grid, block) and its shape where known; the ranges around it are listed (``parents``), not part
of the key. Everything numeric about a case derives from its parts: FLOPs from the shape (else Nsight Compute's
counters, else the profiler's own count), the rates from the timing, the peak from the device and the rate class.
"""

from __future__ import annotations

import hashlib
import re
from dataclasses import dataclass
from typing import Any

import msgspec
from msgspec.structs import replace

from tracekit.devices import DeviceSpec

from ..analysis.model import AuxKernel, FusionCandidate, KernelRef, Shape, Timing
from ..flops import CountedFlops
from .names import dtype_class, name_rate_class
from .parts import Clock, NcuPart, shape_bytes_min

_STEP = re.compile(r"(ProfilerStep)#\d+|(step)(?:\s+(?:i|step|iter|iteration|idx)=\d+)+", re.IGNORECASE)


def context_key(parent_name: str | None) -> str | None:
    """A range name without the counter when it is a training or serving step (``step i=7`` -> ``step``,
    ``ProfilerStep#12`` -> ``ProfilerStep``): one GEMM called in every step of a loop is one case, not one per
    step. Other names stay whole (a GEMM in ``layer i=3`` is its own case)."""
    if parent_name is None:
        return None
    m = _STEP.fullmatch(parent_name.strip())
    return (m.group(1) or m.group(2)) if m else parent_name


def is_step(name: str | None) -> bool:
    """Whether a range is a training or serving step of a loop (``ProfilerStep#3``, ``step i=7``)."""
    return bool(name) and bool(_STEP.fullmatch(name.strip()))  # type: ignore[union-attr]


LAUNCH_GAP_MAX_NS = 1_000_000
"""Idle GPU time counts as a launch gap only in stretches below this (1 ms), inside a call and between two
consecutive calls of a case: longer pauses are deliberate (host work, sleeps, synchronisation, a module loaded on
the first call), not launch overhead."""


def case_id(*key: Any) -> str:
    """A short stable id of a case's key: the first 12 hex digits of the SHA-1 of its text."""
    return hashlib.sha1(repr(key).encode()).hexdigest()[:12]


@dataclass(frozen=True)
class Place:
    """Where a case's calls sit in the instances of their range: ``slots`` the occurrences of the case's kernel
    signature it holds (0-based, among the signature's ``per_instance`` launches in each instance), ``nth`` the
    same launches numbered among the ``launches`` GEMM launches of an instance (1-based)."""

    per_instance: int
    slots: tuple[int, ...]
    nth: tuple[int, ...]
    launches: int


class CaseEvidence(msgspec.Struct, frozen=True, kw_only=True):
    """What was found about one GEMM as the user ran it, before it is explained: where it ran, the Analysis
    model's own parts (shape, kernel, timing, auxiliary kernels, fusion candidates) and the evidence beside them
    that the rules read (Nsight Compute's row and counts, the clock, the device). The explainer
    (:func:`tracekit.analyzers.explain.explain_case`) reads it and the Analysis builder makes the case's one
    :class:`~tracekit.analyzers.analysis.model.Case` of it; the FLOPs, rates and peak derive from the parts
    (properties below), so no number is kept twice.

    Frozen: a builder that learns more about a case makes a new one (``msgspec.structs.replace``), so a part seen
    by one step is never changed under another.

    ``origin``: measurement | range (a timeline) | ncu (Nsight Compute rows) | ncu-kernel | kernel (a GEMM kernel
    in no case range, named by kernel). ``range`` is the innermost user range (folded), ``parents`` the ranges
    around it outermost first, ``position`` the 1-based order of first launch among the range's GEMMs (None when
    it is the range's only one), ``place`` where its calls sit in the range's instances when that alone tells it
    from another GEMM of the same kernel and launch configuration (:func:`.timeline.positions`; part of its key
    and its name). ``user_range``: the range is the user's own (not one tracekit named). ``counted``: Nsight
    Compute's count of the kernel's math per call; ``dram_bytes`` the DRAM bytes it moved per call;
    ``profiler_flops`` the profiler's own FLOP count per call (Kineto ``flops``); ``flops_note`` why FLOPs are
    unknown and what to capture; ``estimated_tflops`` the kernel's rate estimated from pipe activity (no FLOP
    count) and ``achieved_estimate`` how; ``rate_override``, ``peak_unknown``, ``peak_scale`` and ``peak_note``
    what :func:`settle_rate` decided."""

    origin: str
    name: str
    range: str | None = None
    parents: tuple[str, ...] = ()
    position: int | None = None
    place: Place | None = None
    user_range: bool = False
    graph_replay: bool = False
    backend: str | None = None
    op: str | None = None
    shape: Shape | None = None
    kernel: KernelRef = msgspec.field(default_factory=KernelRef)
    timing: Timing = msgspec.field(default_factory=Timing)
    aux: tuple[AuxKernel, ...] = ()
    fusion: tuple[FusionCandidate, ...] = ()
    ncu: NcuPart | None = None
    counted: CountedFlops | None = None
    dram_bytes: float | None = None
    profiler_flops: float | None = None
    clock: Clock = msgspec.field(default_factory=Clock)
    device: DeviceSpec | None = None
    device_name: str | None = None
    measurement_id: int | None = None
    range_ids: tuple[int, ...] = ()
    key: tuple[Any, ...] = ()
    flops_note: str | None = None
    estimated_tflops: float | None = None
    achieved_estimate: str | None = None
    calibrated_tflops: float | None = None
    notes: tuple[str, ...] = ()
    rate_override: tuple[str | None, str, str | None] | None = None
    peak_unknown: str | None = None
    peak_scale: float = 1.0
    peak_note: str | None = None

    # -- the parts' most used fields -------------------------------------------------------------------------------
    @property
    def id(self) -> str:
        return case_id(*(self.key or (self.origin, self.name, self.range, self.kernel.name)))

    @property
    def m(self) -> int | None:
        return self.shape.m if self.shape else None

    @property
    def n(self) -> int | None:
        return self.shape.n if self.shape else None

    @property
    def k(self) -> int | None:
        return self.shape.k if self.shape else None

    @property
    def batch(self) -> int | None:
        return self.shape.batch if self.shape else None

    @property
    def dtype_a(self) -> str | None:
        return self.shape.dtype_a if self.shape else None

    @property
    def dtype_b(self) -> str | None:
        return self.shape.dtype_b if self.shape else None

    @property
    def main_kernel(self) -> str | None:
        return self.kernel.name

    @property
    def launches(self) -> int:
        """GEMM kernel launches over all calls."""
        return self.timing.launches

    @property
    def calls(self) -> int:
        return self.timing.calls

    @property
    def context(self) -> str | None:
        """The range the case sits in when its name does not say it (``aten::mm M=.. [serve/decode]``), else
        the innermost range around that."""
        if self.range and self.range not in self.name:
            return self.range
        return self.parents[-1] if self.parents else None

    @property
    def label(self) -> str:
        return f"{self.name} [{self.context}]" if self.context else self.name

    def metric(self, name: str) -> float | None:
        """A numeric Nsight Compute metric of the case's kernel (None without a profile)."""
        return self.ncu.metric(name) if self.ncu is not None else None

    # -- derived quantities --------------------------------------------------------------------------------------
    @property
    def shape_known(self) -> bool:
        return self.shape is not None

    @property
    def flops(self) -> float | None:
        """FLOPs per call: 2*M*N*K from the shape, else what Nsight Compute counted (executed math, tile padding
        included; none when the calls are several GEMMs whose counts differ: ``counted.spread``), else the
        profiler's own count."""
        if self.shape is not None:
            return self.shape.flops
        if self.counted is not None and self.counted.flops:
            return self.counted.flops
        return self.profiler_flops or None

    @property
    def flops_source(self) -> str:
        """Where :attr:`flops` came from: shape | ncu-counters | profiler-flops | none."""
        if self.shape is not None:
            return "shape"
        if self.counted is not None and self.counted.flops:
            return "ncu-counters"
        if self.profiler_flops:
            return "profiler-flops"
        return "none"

    @property
    def flops_total(self) -> float | None:
        f = self.flops
        return f * self.timing.calls if f and self.timing.calls else None

    @property
    def padding_ratio(self) -> float | None:
        """Counted (executed) FLOPs over the shape's useful 2*M*N*K, when both are known (> 1: tile padding)."""
        if self.shape is not None and self.counted is not None and self.counted.flops:
            return self.counted.flops / self.shape.flops
        return None

    @property
    def dtype_class(self) -> str | None:
        """The rate class the GEMM is rated against (:meth:`rate`)."""
        return self.rate()[0]

    @property
    def dtype_source(self) -> str:
        """Where :attr:`dtype_class` came from: shape | ncu-counters | kernel-name | achieved-rate | none."""
        return self.rate()[1]

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
            if shape == "fp32" and (counted == "tf32" or name_rate_class(self.kernel.name) == "tf32"):
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
        named = name_rate_class(self.kernel.name)
        return (named, "kernel-name", None) if named else (None, "none", None)

    @property
    def bytes_min(self) -> float | None:
        return shape_bytes_min(self.shape) if self.shape is not None else None

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
    def kernel_tflops(self) -> float | None:
        """The kernel rate: sum of FLOPs / sum of GEMM time (the GEMM kernel and its split-K reduce)."""
        f, g = self.flops, self.timing.gemm_ns_total
        if f and g and self.timing.calls:
            return f * self.timing.calls / g / 1e3
        return self.estimated_tflops

    @property
    def achieved_tflops(self) -> float | None:
        """achieved: sum of FLOPs / sum of call spans (GEMM + auxiliary kernels + gaps)."""
        t = self.timing
        if self.flops and t.calls and t.span_ns_total:
            return self.flops * t.calls / t.span_ns_total / 1e3
        if self.estimated_tflops is not None and t.gemm_ns_total:
            return self.estimated_tflops * t.gemm_ns_total / t.span_ns_total
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


def _gemm_key(case: CaseEvidence) -> tuple[str, int, int] | None:
    """(backend, M, K) of a tracekit GEMM: the aux ranges (quantize) that feed it name the same three."""
    m, k = case.m, case.k
    return (case.backend, m, k) if case.backend and m is not None and k is not None else None


def settle_rate(case: CaseEvidence) -> CaseEvidence:
    """Never above 100% of peak: a GEMM whose kernel ran faster than the peak of its rate class. Within what the
    GPU's maximum clock allows over the clock the datasheet quotes the peak at, the class fits and the peak is
    taken at the maximum clock (``peak_scale``, said in ``peak_note``); beyond it the class is wrong: FP32 at a
    rate only tensor cores reach is TF32 (``rate_override``, said in its note), any other class gets no peak
    (``peak_unknown`` says why) rather than a percentage above 100. Returns the case settled (itself when its
    rate is within its peak)."""
    dev, rate = case.device, case.kernel_tflops
    peak = case.peak_tflops
    if dev is None or not rate or not peak or rate <= peak:
        return case
    cls = case.dtype_class
    quoted, boost = dev.peak_clock_hz, dev.boost_clock_hz
    if quoted and boost and boost > quoted and rate <= peak * boost / quoted:
        # Hopper's peaks are quoted at 1830 MHz, its SMs boost to 1980: the class fits, the clock was higher
        scale = boost / quoted
        return replace(
            case,
            peak_scale=scale,
            peak_note=(
                f"{rate:.1f} TFLOP/s is above the {peak:.1f} TFLOP/s {cls} peak quoted at {quoted / 1e6:.0f} MHz: "
                f"the kernel ran faster than that clock; rated against the peak at the GPU's maximum clock, "
                f"{boost / 1e6:.0f} MHz ({peak * scale:.1f} TFLOP/s)"
            ),
        )
    tf32 = dev.peak_tflops("tf32")
    if cls == "fp32" and tf32 and rate <= tf32:
        return replace(
            case,
            rate_override=(
                "tf32",
                "achieved-rate",
                f"{rate:.1f} TFLOP/s is above the {peak:.1f} TFLOP/s FP32 peak, a rate only the tensor cores "
                "reach: the kernel ran TF32 (torch.backends.cuda.matmul.allow_tf32 or cuBLAS TF32 mode); rated "
                f"against the {tf32:.0f} TFLOP/s TF32 peak",
            ),
        )
    return replace(
        case,
        peak_unknown=(
            f"{rate:.1f} TFLOP/s is above the {peak:.1f} TFLOP/s {cls} peak of {dev.name}: {cls} cannot be the "
            "rate class (or the FLOP count is too high), so no peak is used"
        ),
    )
