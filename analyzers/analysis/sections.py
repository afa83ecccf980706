"""The run-wide parts of the :class:`~.model.Analysis`, typed: the step breakdown, the grouped (MoE) launches,
the cross-rank analysis, the failures grouped by one rule and the run's tables of ranges, kernels and Nsight
Compute kernels (docs/ANALYSIS.md).

Every view renders these Structs as they are (no view regroups failures or recomputes the breakdown). Like the
rest of the model they import msgspec only: decoding an Analysis stays cheap. Field names are the JSON keys;
units are in the names (ns, pct 0-100, TFLOP/s, Hz); None means unknown.
"""

from __future__ import annotations

from collections.abc import Iterable, Sequence
from typing import Any

import msgspec

__all__ = [
    "IDLE",
    "TABLE_ROWS",
    "ClassShare",
    "Collectives",
    "ExpertRow",
    "FailureGroup",
    "HistogramBin",
    "KernelRow",
    "MoeLaunch",
    "MoeSummary",
    "NcuKernelRow",
    "RangeRow",
    "RankGemm",
    "RankRow",
    "RankSpread",
    "RankStep",
    "RankSummary",
    "RunTables",
    "Slice",
    "StepBreakdown",
    "WhatIf",
    "WrongResult",
    "failure_groups",
    "first_line",
]

IDLE = "idle"
"""The ``class`` of the share of a span when no kernel, memcpy or memset ran on the device."""


class _S(msgspec.Struct, kw_only=True, frozen=True):
    """Base of every part: keyword-only, frozen."""


# --- the step breakdown (docs/BREAKDOWN.md) ---------------------------------------------------------------------------
class ClassShare(_S):
    """One class's time in a slice: ``time_ns`` it owns under the priority order (docs/BREAKDOWN.md), ``pct``
    of the slice's span, ``kernels`` its rows (kernels, memcpy / memset) in the slice, and ``union_ns`` the time
    any of them ran (its own union, counting time other classes also ran). JSON key of ``cls``: ``class``."""

    cls: str = msgspec.field(name="class")
    time_ns: int
    pct: float
    kernels: int
    union_ns: int


class Slice(_S):
    """The breakdown of one device over the whole run (``range`` None) or over the instances of one range name.

    ``span_ns``: first start to last end of the device's rows (a range: the sum of its instances' GPU windows);
    ``busy_ns``: the union of every row; ``idle_ns`` = span - busy. ``compute_ns``: the union of the compute
    classes (all but communication and memory); ``communication_ns``: the union of communication kernels;
    ``overlap_ns``: communication time during which compute also ran (on another stream, since a stream runs
    one kernel at a time), ``overlap_pct`` its share of ``communication_ns`` (None without communication).
    ``*_pct``: of the span. ``classes``: every class present, in the priority order, then ``idle``; their
    ``time_ns`` sum to the span."""

    rank: int | None
    device: int | None
    span_ns: int
    busy_ns: int
    idle_ns: int
    compute_ns: int
    communication_ns: int
    overlap_ns: int
    overlap_pct: float | None
    kernels: int
    classes: tuple[ClassShare, ...]
    range: str | None = None
    instances: int | None = None
    idle_pct: float = 0.0
    compute_pct: float = 0.0
    communication_pct: float = 0.0

    def __post_init__(self) -> None:
        # the shares of the span are derived, kept in the JSON for scripts: set here, so no builder forgets them
        for name, value in (
            ("idle_pct", self.idle_ns),
            ("compute_pct", self.compute_ns),
            ("communication_pct", self.communication_ns),
        ):
            msgspec.structs.force_setattr(self, name, self.pct(value))

    def share(self, cls: str) -> ClassShare | None:
        """The share of ``cls`` (``idle`` included), None when the class has no time here."""
        return next((c for c in self.classes if c.cls == cls), None)

    def pct(self, value_ns: int) -> float:
        """``value_ns`` as a percentage of the span (0 for an empty span)."""
        return 100.0 * value_ns / self.span_ns if self.span_ns else 0.0


class StepBreakdown(_S):
    """GPU time by kernel class, idle and communication overlap: per device for the whole run (``devices``) and
    per range name and device (``ranges``, the first ones of the ``ranges_total`` names with GPU work ranked by
    span). ``order``: the priority order of the classes; ``notes``: what the numbers leave out; ``headline``: one
    line per GPU over the user's steps where the run has any, else the whole run's, saying which
    (analyzers/breakdown/steps.py)."""

    devices: list[Slice] = msgspec.field(default_factory=list)
    ranges: list[Slice] = msgspec.field(default_factory=list)
    ranges_total: int = 0
    order: tuple[str, ...] = ()
    notes: list[str] = msgspec.field(default_factory=list)
    headline: str | None = None

    @property
    def empty(self) -> bool:
        return not self.devices


# --- grouped (MoE) launches (docs/MOE.md) -----------------------------------------------------------------------------
class ExpertRow(_S):
    """One expert of a grouped launch: its rows (``m``), padded rows and CTA tiles, its share of the launch's
    time (``time_source``: measured or split by tiles), FLOPs, rate, % of peak and of its roofline."""

    launch_id: int
    expert: int
    m: float
    padded_m: float | None = None
    tiles: float | None = None
    time_ns: float | None = None
    time_source: str | None = None
    time_share_pct: float | None = None
    flops: float | None = None
    tflops: float | None = None
    pct_of_peak: float | None = None
    min_bytes: float | None = None
    intensity_flops_per_byte: float | None = None
    roofline_bound: str | None = None
    roofline_tflops: float | None = None
    pct_of_roofline: float | None = None
    hot: bool | None = None


class HistogramBin(_S):
    """Active experts of one launch with rows in ``rows`` (1, 2-3, 4-7, ...): how many, their share of the rows
    and of the time, their median % of peak, how many are memory-bound, whether the hot expert is among them."""

    rows: str
    experts: int
    rows_share_pct: float
    time_share_pct: float | None = None
    median_pct_of_peak: float | None = None
    memory_bound: int = 0
    hot: bool = False


class MoeLaunch(_S):
    """One grouped launch (docs/MOE.md, "launches"): routing, tokens, experts active, its time, rate, padding
    waste, hot expert and verdict, with its experts in ``per_expert`` and them binned by rows in ``histogram``."""

    launch_id: int
    origin: str | None = None
    range: str | None = None
    backend: str | None = None
    op: str | None = None
    route: str | None = None
    tokens: int | None = None
    topk: int | None = None
    experts: int | None = None
    active: int | None = None
    rows: float | None = None
    n: int | None = None
    k: int | None = None
    dtype_class: str | None = None
    launches: int | None = None
    time_ns: float | None = None
    aux_time_ns: float | None = None
    flops: float | None = None
    tflops: float | None = None
    peak_tflops: float | None = None
    pct_of_peak: float | None = None
    roofline_tflops: float | None = None
    pct_of_roofline: float | None = None
    kernel: str | None = None
    tile_m: int | None = None
    tile_n: int | None = None
    tile_source: str | None = None
    padded_rows: float | None = None
    padding_waste_pct: float | None = None
    time_source: str | None = None
    hot_expert: int | None = None
    hot_rows_share_pct: float | None = None
    hot_time_share_pct: float | None = None
    hot_vs_median: float | None = None
    memory_bound_experts: int | None = None
    memory_bound_time_pct: float | None = None
    skewed: bool | None = None
    hot_dominates: bool | None = None
    verdict: str | None = None
    sm_clock_hz: float | None = None
    status: str | None = None
    per_expert: list[ExpertRow] = msgspec.field(default_factory=list)
    histogram: list[HistogramBin] = msgspec.field(default_factory=list)


class WhatIf(_S):
    """The rows per expert a backend needs to reach ``target_pct`` of peak on its measured curve, and what that
    takes in tokens per step / expert-parallel degree (docs/MOE.md, "what-if")."""

    backend: str | None = None
    curve: str | None = None
    dtype_class: str | None = None
    n: int | None = None
    k: int | None = None
    target_pct: float | None = None
    m_needed: float | None = None
    how: str | None = None
    curve_m_min: float | None = None
    curve_m_max: float | None = None
    best_pct: float | None = None
    tokens_per_step: float | None = None
    ep_degree: float | None = None
    ep_batch: float | None = None


class MoeSummary(_S):
    """Grouped (MoE) launches (docs/MOE.md): each launch with its per-expert rows, the what-if, and the launch
    the views' histogram focuses on with that histogram."""

    launches: list[MoeLaunch] = msgspec.field(default_factory=list)
    whatif: list[WhatIf] = msgspec.field(default_factory=list)
    focus_launch: int | None = None
    histogram: list[HistogramBin] = msgspec.field(default_factory=list)


# --- ranks (docs/RANKS.md) -----------------------------------------------------------------------------------------
class RankRow(_S):
    """One rank of a multi-rank run (analyzers/ranks): kernel time split into GEMM, communication and other."""

    rank: int
    pid: int | None = None
    device: int | None = None
    gpu: str | None = None
    kernels: int | None = None
    busy_ns: float | None = None
    gemm_ns: float | None = None
    comm_ns: float | None = None
    other_ns: float | None = None
    compute_ns: float | None = None
    span_ns: float | None = None
    idle_ns: float | None = None
    gemm_pct: float | None = None
    comm_pct: float | None = None
    steps: int | None = None
    last_arrivals: int | None = None
    ncu_kernels: int | None = None
    straggler: bool = False


class RankGemm(_S):
    """One GEMM on one rank: launches, main kernel, time per launch, rate, % of peak, SM clock and verdict."""

    gemm: str
    rank: int
    origin: str | None = None
    launches: int | None = None
    main_kernel: str | None = None
    time_ns: float | None = None
    tflops: float | None = None
    pct_of_peak: float | None = None
    sm_clock_hz: float | None = None
    verdict: str | None = None


class RankSpread(_S):
    """The same GEMM on every rank: its time per launch at its fastest, median and slowest rank, the spread
    (max / min - 1, in %) and why the slowest is slower where the evidence says."""

    gemm: str
    origin: str | None = None
    ranks: int = 0
    min_ns: float | None = None
    median_ns: float | None = None
    max_ns: float | None = None
    spread_pct: float | None = None
    fastest_rank: int | None = None
    slowest_rank: int | None = None
    why: str | None = None


class RankStep(_S):
    """One profiler step on one rank: its window and kernel time by GEMM, communication and other."""

    rank: int
    step: int | None = None
    name: str | None = None
    start_ns: int | None = None
    end_ns: int | None = None
    duration_ns: int | None = None
    kernels: int | None = None
    gemm_ns: int | None = None
    comm_ns: int | None = None
    other_ns: int | None = None
    compute_ns: int | None = None


class Collectives(_S):
    """The collectives matched across ranks: how many and their mean skew (last arrival - first), ns."""

    count: int = 0
    mean_skew_ns: float | None = None


class RankSummary(_S):
    """The cross-rank analysis (docs/RANKS.md): one row per rank, the straggler and why, the same GEMM on every
    rank (``gemm_spread``, ``gemms``), steps per rank and the collectives' count and skew."""

    ranks: list[RankRow]
    straggler: int | None = None
    reasons: list[str] = msgspec.field(default_factory=list)
    gemm_spread: list[RankSpread] = msgspec.field(default_factory=list)
    gemms: list[RankGemm] = msgspec.field(default_factory=list)
    steps: list[RankStep] = msgspec.field(default_factory=list)
    collectives: Collectives = msgspec.field(default_factory=Collectives)
    notes: list[str] = msgspec.field(default_factory=list)


# --- the run's tables (show's top ranges and kernels, its Nsight Compute kernels; the TUI's kernels by name) -------
TABLE_ROWS = 200
"""Rows :class:`RunTables` keeps per table in the stored Analysis (the names with the most total time); an Analysis
built with every range name of the breakdown (``show --all``) keeps every row."""


class RangeRow(_S):
    """One range name: its ``count`` instances, their total and median duration (ns; None where no instance has
    an end) and the kernels launched inside them (each kernel counted in its innermost range)."""

    name: str | None
    count: int
    total_ns: int | None
    median_ns: float | None
    kernels: int


class KernelRow(_S):
    """One kernel name on the timeline: launches, total, mean, shortest and longest duration (ns) and ``pct``,
    its share of every kernel's time."""

    name: str | None
    launches: int
    total_ns: int
    mean_ns: float | None
    min_ns: int | None
    max_ns: int | None
    pct: float


class NcuKernelRow(_S):
    """One kernel Nsight Compute profiled, in the report's order: its name, NVTX range, duration, SM clock,
    achieved occupancy, tensor-pipe activity and the report's clock control."""

    ncu_id: int | None
    name: str | None
    nvtx_range: str | None = None
    duration_ns: float | None = None
    sm_clock_hz: float | None = None
    achieved_occupancy_pct: float | None = None
    tensor_pipe_pct: float | None = None
    clock_control: str | None = None


class RunTables(_S):
    """The run's tables, grouped once when the Analysis is built (no view groups the frames): ``ranges`` by name
    and ``kernels`` by name, most total time first, the first :data:`TABLE_ROWS` of ``ranges_total`` /
    ``kernels_total`` names (every one in an Analysis built with ``breakdown="all"``); ``ncu_kernels`` every
    profiled kernel."""

    ranges: list[RangeRow] = msgspec.field(default_factory=list)
    ranges_total: int = 0
    kernels: list[KernelRow] = msgspec.field(default_factory=list)
    kernels_total: int = 0
    ncu_kernels: list[NcuKernelRow] = msgspec.field(default_factory=list)


class WrongResult(_S):
    """A measurement whose output was wrong (all zeros, NaN, or off the fp32 reference beyond its dtype's
    tolerance): the cases leave it out; ``compare`` says a GEMM measured right in one run and wrong in the other
    broke. ``rel_error`` the relative error against the reference."""

    backend: str | None = None
    op: str | None = None
    m: int | None = None
    n: int | None = None
    k: int | None = None
    dtype: str | None = None
    range: str | None = None
    rel_error: float | None = None


# --- failures grouped -------------------------------------------------------------------------------------------------
class FailureGroup(_S):
    """Failures of one backend with the same exception type and the same first message line (the one grouping
    rule: :func:`failure_groups`). ``message``: ``ErrorType: first line`` (the type without its module path);
    ``kinds`` the kinds seen (error, unsupported, crashed ...), in order; ``shapes`` the ``MxNxK`` of the
    members, in order, repeats kept (unknown sizes as ``?``); ``shapes_text`` the shapes covered, compact
    (``M=16..4096, N=768|2048, K=6144``); ``failure_ids`` the members' ids and ``example`` the index in
    ``Analysis.failures`` of the first one."""

    backend: str | None
    error_type: str | None
    first_line: str
    message: str
    count: int
    op: str | None = None
    kinds: list[str] = msgspec.field(default_factory=list)
    shapes: list[str] = msgspec.field(default_factory=list)
    shapes_text: str = "shape unknown"
    failure_ids: list[int | None] = msgspec.field(default_factory=list)
    example: int = 0


def first_line(text: Any) -> str:
    """The first non-blank line of a message, stripped ('' for none)."""
    for line in str(text or "").split("\n"):
        if line.strip():
            return line.strip()
    return ""


def _dims(values: list[int]) -> str:
    """Distinct sizes of one dimension, compact: ``6144``, ``768|2048|4096``, or ``16..4096`` beyond three."""
    if len(values) <= 3:
        return "|".join(map(str, values))
    return f"{values[0]}..{values[-1]}"


def shapes_text(m: Iterable[Any], n: Iterable[Any], k: Iterable[Any]) -> str:
    """The shapes a group of failures covers: ``M=16..4096, N=768|2048, K=6144`` (unknown sizes left out)."""
    parts = [
        f"{d}={_dims(sorted({v for v in vals if v is not None}))}"
        for d, vals in zip("MNK", (list(m), list(n), list(k)), strict=True)
    ]
    known = [p for p in parts if not p.endswith("=")]
    return ", ".join(known) if known else "shape unknown"


def failure_groups(failures: Sequence[Any]) -> list[FailureGroup]:
    """The failures (:class:`~.model.Failure`) grouped by backend, exception type and first message line, most
    frequent first (ties in the order they first occurred). The one rule every view shows."""
    order: dict[tuple[Any, ...], list[int]] = {}
    for i, f in enumerate(failures):
        order.setdefault((f.backend, f.error_type, first_line(f.message)), []).append(i)
    groups = []
    for (backend, etype, first), members in order.items():
        rows = [failures[i] for i in members]
        short = (etype or "").rsplit(".", 1)[-1]
        message = f"{short}: {first}" if short and first else short or first
        groups.append(
            FailureGroup(
                backend=backend,
                error_type=etype,
                first_line=first,
                message=message or "(no message)",
                count=len(rows),
                op=rows[0].op,
                kinds=list(dict.fromkeys(r.kind for r in rows if r.kind)),
                shapes=[
                    "x".join("?" if v is None else str(v) for v in (r.m, r.n, r.k))
                    for r in rows
                    if (r.m, r.n, r.k) != (None, None, None)
                ],
                shapes_text=shapes_text([r.m for r in rows], [r.n for r in rows], [r.k for r in rows]),
                failure_ids=[r.id for r in rows],
                example=members[0],
            )
        )
    return sorted(groups, key=lambda g: -g.count)  # stable: ties keep the order they first occurred
