"""The typed analysis of a run: :class:`Analysis` and its parts, msgspec Structs encoded as versioned JSON.

One :class:`Analysis` is built per run (:func:`tracekit.analyzers.analysis.analyze`) and every view renders it:
``show``, ``explain``, ``report``, ``compare``, the TUI and the Python API. Its JSON encoding
(:meth:`Analysis.to_json`) is what ``explain --json`` prints; the schema is documented in docs/ANALYSIS.md and
versioned by :data:`ANALYSIS_SCHEMA_VERSION` (a field renamed or removed, or a meaning changed, bumps it; a field
added does not).

Units: times in ns, FLOPs, TFLOP/s, bytes, Hz, percent 0-100. ``None`` means unknown, never zero: a kernel's
shared memory that no file recorded is None, not 0. Lists are empty, never None. Strings are never empty.

This module imports the standard library and msgspec only (polars inside :meth:`Analysis.cases_frame`), so the
model is cheap to import and safe to decode anywhere.
"""

from __future__ import annotations

import enum
from typing import Any

import msgspec

from ..recommend import Recommendation
from .sections import FailureGroup, MoeSummary, RankRow, RankSummary, RunTables, StepBreakdown, WrongResult

ANALYSIS_SCHEMA_VERSION = 4
"""Version of the Analysis JSON (docs/ANALYSIS.md). 1: the first typed analysis; 2: the breakdown, MoE and ranks
typed (analysis/sections.py), the failures grouped in the Analysis (``failure_groups``); 3: one case model (the
rules read the Case's own parts): ``kernel`` gains the PyTorch profiler's ``blocks_per_sm`` and
``est_occupancy_pct``, ``timing`` gains ``busy_ns``, ``gap_max_ns``, ``aux_apart_runs``, ``aux_apart_ns`` and
``aux_by_order_ns_total``; 4: the run's tables of ranges, kernels and Nsight Compute kernels (``tables``), which
show and the TUI render instead of the frames, the measurements with wrong results (``wrong_results``), which
compare reads, a ``--shapes-from`` bench run's ``recommendation``, which the report and the TUI render, and the
verdict kind ``no-measured-loss``."""

__all__ = [
    "ANALYSIS_SCHEMA_VERSION",
    "Analysis",
    "AuxKernel",
    "CallParts",
    "Case",
    "CasePlace",
    "DeviceInfo",
    "Dist",
    "Factor",
    "Failure",
    "FailureGroup",
    "FlopsInfo",
    "FusionCandidate",
    "KernelRef",
    "Loss",
    "MoeSummary",
    "NcuEvidence",
    "NcuRule",
    "PeakInfo",
    "RankRow",
    "RankSummary",
    "RateClass",
    "RunInfo",
    "RunTables",
    "Shape",
    "SourceInfo",
    "StepBreakdown",
    "Summary",
    "Timing",
    "Unknown",
    "Verdict",
    "VerdictKind",
    "WrongResult",
    "json_schema",
]


class _S(msgspec.Struct, kw_only=True, frozen=True):
    """Base of every part: keyword-only, frozen (an analysis is built once and then only read)."""


# --- a case's parts ---------------------------------------------------------------------------------------------------
class Dist(_S):
    """A per-call distribution: median and the 10th / 90th percentiles (None when not known, e.g. one call)."""

    median: float | None = None
    p10: float | None = None
    p90: float | None = None


class KernelRef(_S):
    """The GEMM's own kernel: its name and launch configuration (None = unknown, never 0).

    ``grid`` is the number of CTAs, ``block`` the threads per CTA (name, grid and block are the kernel's
    signature); ``family`` the library family (cublas, cutlass, triton ...) and ``kernel_class`` its class in the
    kernel taxonomy (``gemm`` for a case's main kernel) where the run's frames name them; ``blocks_per_sm`` and
    ``est_occupancy_pct`` the PyTorch profiler's own estimates for the launch (CTAs of the grid per SM, achieved
    occupancy), where it wrote them."""

    name: str | None = None
    family: str | None = None
    kernel_class: str | None = None
    grid: int | None = None
    block: int | None = None
    registers: int | None = None
    smem_bytes: int | None = None
    blocks_per_sm: float | None = None
    est_occupancy_pct: float | None = None


class Shape(_S):
    """M, N, K (per batch), the batch count and dtypes; ``source`` where the shape came from (tracekit's range
    name, the profiler's ``Input Dims``, a measurement ...)."""

    m: int
    n: int
    k: int
    batch: int | None = None
    dtype_a: str | None = None
    dtype_b: str | None = None
    dtype_out: str | None = None
    scale: str | None = None
    source: str | None = None

    @property
    def flops(self) -> float:
        """2 x M x N x K x batch: the multiply-adds of one call."""
        return 2.0 * self.m * self.n * self.k * (self.batch or 1)


class FlopsInfo(_S):
    """FLOPs per call and over all calls; ``source``: shape | ncu-counters | profiler-flops | none.

    ``counted_per_call`` is what Nsight Compute's counters say the main kernel executed (tile padding included);
    ``bytes_min`` the fewest bytes a call moves (A, B, scales and C once), ``bytes_source`` where the roofline's
    bytes came from; ``note`` says how a count was chosen (e.g. a multi-type counter)."""

    per_call: float | None = None
    total: float | None = None
    source: str = "none"
    counted_per_call: float | None = None
    counters: list[str] = msgspec.field(default_factory=list)
    bytes_min: float | None = None
    bytes_source: str | None = None
    note: str | None = None


class RateClass(_S):
    """The tensor-core rate class the peak is taken at (fp4, fp8, bf16, fp16, tf32, fp32 ...) and where it came
    from: shape | kernel-name | ncu-counters | none; ``note`` explains a choice (e.g. why TF32)."""

    dtype_class: str | None = None
    source: str = "none"
    note: str | None = None


class CallParts(_S):
    """The parts of one call: GEMM time, auxiliary time, gap and their sum, the span (ns)."""

    gemm_ns: float
    aux_ns: float = 0.0
    gap_ns: float = 0.0
    span_ns: float = 0.0


class Timing(_S):
    """One formula, labelled everywhere (issue 26 item 4).

    Per call: GEMM time (the GEMM kernel plus its split-K reduce), auxiliary time and the idle gap inside the
    call; ``span = gemm + aux + gap``. ``achieved_tflops`` = sum of FLOPs / sum of call spans; ``kernel_tflops``
    = sum of FLOPs / sum of GEMM time. Calls whose GEMM kernel is missing (sampled out) are left out of every
    number and counted in ``calls_without_kernel``. ``source``: timeline | measurement:cuda-graph |
    measurement:events | ncu-replay; ``source_detail`` says it in words. ``median_call`` is the call whose span is
    the median one, with its own parts (a "per call" line shows one real call, not medians of separate parts);
    ``splitk_ns_total`` the split-K reduce time inside ``gemm_ns_total``; ``pauses`` / ``paused_ns_total`` idle
    stretches of 1 ms or more inside calls (a module load, a synchronisation), left out of the gap.

    ``busy_ns`` is per call the time of the kernels it owns (GEMM + auxiliary, no gap: what TraceLens times an
    operator by); ``gap_max_ns`` the largest one call's gap (None where the calls are not known one by one);
    ``aux_apart_runs`` the runs of an auxiliary step (a tracekit ``aux`` range feeding the case) that ran apart
    from the calls, not one before each (not in the calls' time), ``aux_apart_ns`` their median run's kernel time;
    ``aux_by_order_ns_total`` the auxiliary time the calls own by launch order alone (no operator record says who
    launched it)."""

    calls: int = 0
    calls_without_kernel: int = 0
    launches: int = 0
    gemm_ns_total: float = 0.0
    aux_ns_total: float = 0.0
    gap_ns_total: float = 0.0
    span_ns_total: float = 0.0
    gemm_ns: Dist = msgspec.field(default_factory=Dist)
    aux_ns: Dist = msgspec.field(default_factory=Dist)
    gap_ns: Dist = msgspec.field(default_factory=Dist)
    span_ns: Dist = msgspec.field(default_factory=Dist)
    achieved_tflops: float | None = None
    kernel_tflops: float | None = None
    achieved_estimate: str | None = None
    source: str = "timeline"
    source_detail: str | None = None
    median_call: CallParts | None = None
    splitk_ns_total: float = 0.0
    pauses: int = 0
    paused_ns_total: float = 0.0
    busy_ns: Dist = msgspec.field(default_factory=Dist)
    gap_max_ns: float | None = None
    aux_apart_runs: int = 0
    aux_apart_ns: float | None = None
    aux_by_order_ns_total: float = 0.0


class AuxKernel(_S):
    """An auxiliary kernel of the case's calls; ``role``: quantize | splitk-reduce | activation | layout |
    other. Time over all calls, per call (total / calls), and how many times it ran."""

    name: str
    kernel_class: str | None = None
    role: str = "other"
    time_ns_total: float | None = None
    per_call_ns: float | None = None
    count: int | None = None


class FusionCandidate(_S):
    """Kernels of an operator next to the GEMM's that work on its data: an activation, a bias add or a gating
    multiply reading its output (``side`` after), or a quantize writing its input (before). The profiler recorded
    that operator (``op``, e.g. ``aten::silu``) launching them, so they are not in the case's calls (its achieved
    rate counts the kernels its own operator launched); fusing them into the GEMM or into one kernel removes their
    time. ``kernel_class``: activation | gating multiply | bias | quantize | elementwise; time over all calls, per
    call (total / the case's calls), launches, and the ``remedy``."""

    op: str | None
    kernels: list[str]
    kernel_class: str
    side: str
    time_ns_total: float
    per_call_ns: float | None = None
    count: int = 0
    remedy: str | None = None


class NcuRule(_S):
    """One of Nsight Compute's own findings (its rule, kind, title, message and estimated speed-up)."""

    rule: str | None = None
    kind: str | None = None
    title: str | None = None
    message: str | None = None
    speedup_pct: float | None = None


class NcuEvidence(_S):
    """What Nsight Compute measured for the case's main kernel.

    ``kernels`` profiled launches; ``metrics`` the named numbers the rules read (ncu frame columns and metrics,
    by name); ``sm_clock_hz`` the clock the kernel ran at and ``clock_control`` the report's clock setting;
    ``sections`` the report's sections where known; ``borrowed_from`` the range whose profiled launch of the same
    kernel and grid stands in for this one's."""

    kernels: int = 0
    ncu_id: int | None = None
    metrics: dict[str, float] = msgspec.field(default_factory=dict)
    sm_clock_hz: float | None = None
    clock_control: str | None = None
    sections: list[str] = msgspec.field(default_factory=list)
    rules: list[NcuRule] = msgspec.field(default_factory=list)
    borrowed_from: str | None = None


class DeviceInfo(_S):
    """A GPU: catalog key and name, compute capability, SMs, and where its numbers came from (``source``:
    catalog | unknown | user | --device)."""

    key: str | None = None
    name: str | None = None
    compute_capability: str | None = None
    sm_count: int | None = None
    boost_clock_hz: float | None = None
    memory_bandwidth_bytes_per_s: float | None = None
    source: str | None = None


class PeakInfo(_S):
    """The peak a case is rated against: ``tflops`` for ``dtype_class`` from ``source`` (datasheet | derived |
    calibrated); ``calibrated_tflops`` the sustained rate a `tracekit calibrate` profile measured, beside it."""

    tflops: float
    source: str
    dtype_class: str | None = None
    calibrated_tflops: float | None = None
    pct_of_calibrated: float | None = None
    memory_roof_tflops: float | None = None
    roofline_bound: str | None = None


class Factor(_S):
    """One multiplicative step of the waterfall from peak to achieved.

    ``value`` <= 1 (1: no loss); ``cause`` a short sub-cause; ``sentence`` what happened in plain words;
    ``remedy`` what to try (None when the factor costs nothing); ``evidence`` the numbers the rule used;
    ``lost_ns_total`` the calls' time it costs over all calls: the time of the part of the call it acts on x
    (1 - value), where launch gaps act on the whole span, aux kernels on GEMM + aux time, split-K on the GEMM
    time and the kernel's own factors on the GEMM kernel's time (so an in-kernel loss never exceeds the kernel's
    time); ``gain_pct`` the speed-up of the calls if it alone were removed, lost / (span - lost)."""

    name: str
    value: float
    sentence: str
    cause: str | None = None
    remedy: str | None = None
    evidence: dict[str, Any] = msgspec.field(default_factory=dict)
    gain_pct: float | None = None
    lost_ns_total: float | None = None


class VerdictKind(enum.StrEnum):
    """What a verdict says the case comes down to (a str enum: its JSON is the plain string)."""

    EXPLAINED = "explained"
    """A factor is blamed: the one that costs the most of the calls' time."""
    NO_LOSS = "no-loss"
    """At peak: no factor loses 0.5% or more."""
    CANNOT_EXPLAIN = "cannot-explain"
    """Too little evidence: ``capture_hint`` says what to capture."""
    STALLED = "stalled"
    """SM and DRAM throughput both a few percent: the kernel's warps wait."""
    CLOCKS_LOCKED = "clocks-locked"
    """The report ran its kernels at a locked clock well below boost."""
    FUSION = "fusion"
    """The kernels of the operators around the GEMM (its fusion candidates) cost more than any factor."""
    LATENCY_BOUND = "latency-bound"
    """A GEMM kernel of a few microseconds with SM and DRAM nearly idle: launch and latency set its time."""
    NO_MEASURED_LOSS = "no-measured-loss"
    """No FLOP count or no peak, and every factor measured without one loses nothing (the waves fill the GPU, no
    split-K reduce, no auxiliary kernels, no launch gaps): ``sentence`` says what was measured, ``unknown`` what
    stays unknown (the achieved TFLOP/s or the % of peak, the kernel's own loss), ``capture_hint`` how to learn
    it."""


class Verdict(_S):
    """What the case comes down to.

    ``kind``: explained (a factor is blamed) | no-loss (at peak, nothing to blame) | cannot-explain (too little
    evidence: ``capture_hint`` says what to capture) | stalled | clocks-locked | fusion (the case's fusion
    candidates cost more than any factor: ``lost_ns_total`` is their time) ...; ``factor`` the blamed factor's
    name (with ``cause``), ``sentence`` in words, ``remedy`` what to try, ``lost_ns_total`` the calls' time it
    costs, ``gain_pct`` the speed-up if removed. The blamed factor is the largest measured loss, also without a
    FLOP count (waves, clock, memory from DRAM throughput, split-K, aux, gaps are measured without one);
    ``unknown`` then says what stays unknown (the achieved rate, the kernel's own loss) and ``capture_hint`` how to
    learn it. ``no-measured-loss``: no rate or no peak, and what was measured without one loses nothing.
    ``cannot-explain`` only where no factor is measured."""

    kind: VerdictKind
    sentence: str
    factor: str | None = None
    cause: str | None = None
    value: float | None = None
    remedy: str | None = None
    gain_pct: float | None = None
    lost_ns_total: float | None = None
    capture_hint: str | None = None
    unknown: str | None = None


class CasePlace(_S):
    """Where a case's calls sit in the instances of their range, for GEMMs that share one kernel and launch
    configuration there (cuBLAS's persistent kernels on Hopper run several shapes on one grid): ``nth`` the
    1-based numbers of the case's launches among the ``launches`` GEMM launches of each instance. The case's name
    says the same (``GEMM launches 3, 4, 5, 6 of 8``); the timeline export reads this to give each launch its
    case."""

    nth: list[int]
    launches: int


class Case(_S):
    """One GEMM as the user ran it, with all its evidence and its explanation.

    ``id`` is stable within a run (a hash of the case's key); ``name`` the display name; ``origin``:
    measurement | timeline | ncu | kernel; ``range`` the innermost user range (index suffixes folded), ``parents``
    the enclosing ranges outermost first, ``position`` the 1-based order of first launch inside its range (None
    when it is the range's only GEMM), ``place`` its launches' place in the range's instances where that alone
    tells it from another GEMM of the same kernel and grid (None otherwise). ``backend`` / ``op`` name tracekit's
    benchmark backend and entry point where known. ``pct_of_peak`` = achieved / peak x 100, never above 100."""

    id: str
    name: str
    origin: str
    kernel: KernelRef
    flops: FlopsInfo
    rate: RateClass
    timing: Timing
    verdict: Verdict
    range: str | None = None
    parents: list[str] = msgspec.field(default_factory=list)
    position: int | None = None
    place: CasePlace | None = None
    backend: str | None = None
    op: str | None = None
    shape: Shape | None = None
    aux: list[AuxKernel] = msgspec.field(default_factory=list)
    ncu: NcuEvidence | None = None
    device: DeviceInfo | None = None
    peak: PeakInfo | None = None
    pct_of_peak: float | None = None
    sm_clock_hz: float | None = None
    clock_source: str | None = None
    power_w: float | None = None
    power_limit_w: float | None = None
    factors: list[Factor] = msgspec.field(default_factory=list)
    complete: bool | None = None
    notes: list[str] = msgspec.field(default_factory=list)
    fusion: list[FusionCandidate] = msgspec.field(default_factory=list)

    @property
    def label(self) -> str:
        """The name with the range it ran in (or the range around that), as the views title a case."""
        where = self.range if self.range and self.range not in self.name else None
        where = where or (self.parents[-1] if self.parents else None)
        return f"{self.name} [{where}]" if where and where not in self.name else self.name

    @property
    def shape_text(self) -> str | None:
        """``M=.. N=.. K=..`` (with the batch), None without a shape."""
        s = self.shape
        if s is None:
            return None
        text = f"M={s.m} N={s.n} K={s.k}"
        return text + (f" x{s.batch}" if s.batch and s.batch > 1 else "")


# --- the run --------------------------------------------------------------------------------------------------------
class Failure(_S):
    """A failed GEMM call or crashed program, as recorded (the failures frame)."""

    id: int | None = None
    backend: str | None = None
    op: str | None = None
    m: int | None = None
    n: int | None = None
    k: int | None = None
    kind: str | None = None
    error_type: str | None = None
    message: str | None = None
    traceback: str | None = None
    dtype_a: str | None = None
    dtype_b: str | None = None
    dtype_out: str | None = None
    range: str | None = None
    caller: str | None = None
    signal: str | None = None
    python_stack: str | None = None
    stderr_tail: str | None = None
    device_name: str | None = None
    compute_capability: str | None = None
    versions: dict[str, str] | None = None


class SourceInfo(_S):
    """One raw file of the run: its path, detected kind and import status."""

    path: str | None = None
    kind: str | None = None
    status: str | None = None
    message: str | None = None


class RunInfo(_S):
    """Where the analysis came from: the run's path and name, its status, the command that captured it, its raw
    files, the calibration profile used and the device given with ``--device``."""

    path: str
    name: str | None = None
    status: str | None = None
    partial: bool = False
    incomplete_reason: str | None = None
    created: str | None = None
    command: list[str] | None = None
    tracekit_version: str | None = None
    sources: list[SourceInfo] = msgspec.field(default_factory=list)
    calibration: str | None = None
    device_override: str | None = None
    device_notes: list[str] = msgspec.field(default_factory=list)
    kernel_count: int = 0
    range_count: int = 0
    ncu_kernel_count: int = 0
    measurement_count: int = 0


class Loss(_S):
    """One of the largest losses of the run in the calls' time: which case, which factor, how much time."""

    case_id: str
    case_name: str
    factor: str
    lost_ns_total: float
    cause: str | None = None
    sentence: str | None = None
    remedy: str | None = None


class Unknown(_S):
    """Something the analysis could not tell, and how to learn it (``how``: the capture or option to use)."""

    what: str
    how: str
    cases: int = 0


class Summary(_S):
    """The short opening of every view: GPU time (all kernels, GEMM cases), the step breakdown's headline, the
    three largest losses in the calls' time and what is unknown with how to learn it. ``gpu_ns_total``: every kernel's
    time; ``gemm_ns_total``: the cases' GEMM kernels (split-K reduce included), a part of it; ``case_ns_total``:
    the cases' call spans, which add their auxiliary kernels and the idle gaps inside the calls (so it can exceed
    the kernel time)."""

    cases: int = 0
    gpu_ns_total: float | None = None
    case_ns_total: float = 0.0
    gemm_ns_total: float = 0.0
    breakdown: str | None = None
    top_losses: list[Loss] = msgspec.field(default_factory=list)
    unknowns: list[Unknown] = msgspec.field(default_factory=list)


class Analysis(_S):
    """The analysis of one run: what every view renders (see the module docstring).

    ``cases`` are ordered by time in calls (``timing.span_ns_total``), largest first. ``breakdown`` is the step
    breakdown (GPU time by kernel class, idle, overlap) where the analyzers build one, else None;
    ``failure_groups`` the failures grouped by backend, exception type and first message line, most frequent
    first (every view shows these groups); ``tables`` the run's range and kernel names by total time and its
    Nsight Compute kernels (None only in an Analysis decoded from an older schema); ``wrong_results`` the
    measurements whose output was wrong, which the cases leave out; ``recommendation`` the backends table of a
    ``bench gemm --shapes-from`` run (analyzers/recommend.py), None for any other run."""

    run: RunInfo
    summary: Summary
    schema_version: int = ANALYSIS_SCHEMA_VERSION
    devices: list[DeviceInfo] = msgspec.field(default_factory=list)
    breakdown: StepBreakdown | None = None
    cases: list[Case] = msgspec.field(default_factory=list)
    failures: list[Failure] = msgspec.field(default_factory=list)
    failure_groups: list[FailureGroup] = msgspec.field(default_factory=list)
    ranks: RankSummary | None = None
    moe: MoeSummary | None = None
    tables: RunTables | None = None
    wrong_results: list[WrongResult] = msgspec.field(default_factory=list)
    recommendation: Recommendation | None = None

    def case(self, case_id: str) -> Case:
        """The case with this id (KeyError when there is none)."""
        for c in self.cases:
            if c.id == case_id:
                return c
        raise KeyError(case_id)

    def to_builtins(self) -> dict[str, Any]:
        """The JSON-able form (dicts, lists, numbers, strings): what :meth:`to_json` encodes."""
        return msgspec.to_builtins(self)

    def to_json(self) -> bytes:
        """The analysis as JSON (docs/ANALYSIS.md); non-finite numbers are written as null."""
        return msgspec.json.encode(self)

    @classmethod
    def from_json(cls, data: bytes | str) -> Analysis:
        """An analysis decoded from :meth:`to_json`'s output (unknown fields of a newer tracekit are ignored)."""
        return msgspec.json.decode(data, type=cls)

    def cases_frame(self) -> Any:
        """One row per case, flat columns (a polars DataFrame): see docs/ANALYSIS.md, "cases_frame"."""
        from .frame import cases_frame

        return cases_frame(self.cases)


def json_schema() -> dict[str, Any]:
    """The JSON Schema of :class:`Analysis` (docs/analysis.schema.json is this, written out and checked by the
    tests), with the schema version it describes."""
    schema = msgspec.json.schema(Analysis)
    schema["$comment"] = (
        f"tracekit Analysis JSON, schema_version {ANALYSIS_SCHEMA_VERSION} (docs/ANALYSIS.md)"
    )
    return schema
