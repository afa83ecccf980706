"""The parts a GEMM case is made of, each the Analysis model's own (analyzers/analysis/model.py), built once from
the columns the import already parsed:

- :class:`~tracekit.analyzers.analysis.model.Shape`: M, N, K, batch, dtypes and scale, and where they came from;
- :class:`~tracekit.analyzers.analysis.model.KernelRef` (:func:`kernel_ref`): the GEMM kernel's name, family,
  class and launch configuration (its signature);
- :class:`~tracekit.analyzers.analysis.model.Timing` (:func:`timing_from_calls`, :func:`timing_repeated`): every
  call of the case (:class:`~tracekit.analyzers.analysis.model.CallParts`, :func:`call`) aggregated: counts,
  totals, per-call median and p10 / p90, the median call itself;

and the evidence beside them that the Analysis keeps in its own form: :class:`NcuPart`, what Nsight Compute
measured for the case's kernel (its row, metrics and rules; :meth:`NcuPart.evidence` is the Analysis'
:class:`~tracekit.analyzers.analysis.model.NcuEvidence`), and :class:`Clock`, the SM clock and power during the
case.

A case's evidence (:class:`~.case.CaseEvidence`) holds these parts and derives its FLOPs, rates and peak from them;
the rules (analyzers/rules) read the parts, never a row of a frame.
"""

from __future__ import annotations

import math
import statistics
from collections.abc import Sequence
from dataclasses import dataclass, field
from typing import Any

import msgspec

from tracekit.numbers import finite

from ..analysis.model import CallParts, Dist, KernelRef, NcuEvidence, NcuRule, Shape, Timing
from .names import min_bytes


def shape_bytes_min(shape: Shape) -> float:
    """The fewest bytes one call of ``shape`` moves: A, B and their scales read once, C written once."""
    one = min_bytes(shape.m, shape.n, shape.k, shape.dtype_a, shape.dtype_b, shape.dtype_out, shape.scale)
    return one * (shape.batch or 1)


def shape_text(shape: Shape) -> str:
    """``M=.. N=.. K=..`` with the batch where there is one: how a case named by its shape is titled."""
    return f"M={shape.m} N={shape.n} K={shape.k}" + (
        f" batch={shape.batch}" if shape.batch and shape.batch > 1 else ""
    )


def kernel_ref(row: dict[str, Any], name: str | None = None) -> KernelRef:
    """A kernel from a kernels-frame (or ncu-frame) row: grid and block as products of their dimensions; shared
    memory the ``smem_bytes`` sum where a file gives only that (Kineto), else static + dynamic; None where unsaid."""
    grid = row.get("grid_size")
    if grid is None:
        dims = [row.get(c) for c in ("grid_x", "grid_y", "grid_z")]
        grid = int(dims[0] * dims[1] * dims[2]) if all(d is not None for d in dims) else None  # type: ignore[operator]
    block = row.get("block_size")
    if block is None:
        dims = [row.get(c) for c in ("block_x", "block_y", "block_z")]
        block = int(dims[0] * dims[1] * dims[2]) if all(d is not None for d in dims) else None  # type: ignore[operator]
    smem = row.get("smem_bytes")
    if smem is None:
        smem = (row.get("static_smem_bytes") or 0) + (row.get("dynamic_smem_bytes") or 0)
    return KernelRef(
        name=name or row.get("demangled_name") or row.get("name"),
        family=row.get("kernel_family"),
        kernel_class=row.get("kernel_class"),
        grid=int(grid) if grid else None,
        block=int(block) if block else None,
        registers=row.get("registers_per_thread"),
        smem_bytes=int(smem) if smem else None,
        blocks_per_sm=row.get("blocks_per_sm"),
        est_occupancy_pct=row.get("est_occupancy_pct"),
    )


def filled(kernel: KernelRef, other: KernelRef) -> KernelRef:
    """``kernel`` with what it does not know taken from ``other`` (the same kernel seen by another tool)."""
    missing = {f: getattr(other, f) for f in KernelRef.__struct_fields__ if getattr(kernel, f) is None}
    return msgspec.structs.replace(kernel, **missing) if missing else kernel


def spread(values: Sequence[float]) -> Dist:
    """The per-call distribution of ``values``: median and the 10th / 90th percentiles (those None with fewer
    than two values; non-finite values left out)."""
    vals = sorted(v for v in values if v is not None and math.isfinite(v))
    if not vals:
        return Dist()
    if len(vals) == 1:
        return Dist(median=vals[0])
    return Dist(median=statistics.median(vals), p10=_quantile(vals, 0.1), p90=_quantile(vals, 0.9))


def _quantile(sorted_values: Sequence[float], q: float) -> float:
    """Linear interpolation between the two nearest ranks (numpy's default)."""
    pos = q * (len(sorted_values) - 1)
    lo = math.floor(pos)
    hi = min(lo + 1, len(sorted_values) - 1)
    return sorted_values[lo] + (sorted_values[hi] - sorted_values[lo]) * (pos - lo)


def call(gemm_ns: float, aux_ns: float = 0.0, gap_ns: float = 0.0) -> CallParts:
    """One call's parts: GEMM time (the GEMM kernel and its split-K reduce), auxiliary time, the gap (idle GPU
    time inside the call, and before it when it follows the previous call of its case back to back), and their
    sum, the span."""
    return CallParts(gemm_ns=gemm_ns, aux_ns=aux_ns, gap_ns=gap_ns, span_ns=gemm_ns + aux_ns + gap_ns)


def timing(**kw: Any) -> Timing:
    """A :class:`Timing` whose ``span_ns_total`` is the sum of its GEMM, auxiliary and gap totals."""
    kw["span_ns_total"] = (
        kw.get("gemm_ns_total", 0.0) + kw.get("aux_ns_total", 0.0) + kw.get("gap_ns_total", 0.0)
    )
    return Timing(**kw)


def retimed(t: Timing, **changes: Any) -> Timing:
    """``t`` with ``changes``, its ``span_ns_total`` kept the sum of its parts' totals."""
    t = msgspec.structs.replace(t, **changes)
    return msgspec.structs.replace(t, span_ns_total=t.gemm_ns_total + t.aux_ns_total + t.gap_ns_total)


def timing_from_calls(calls: Sequence[CallParts], splitk_ns_total: float = 0.0, **kw: Any) -> Timing:
    """The aggregate of ``calls`` (every call with its GEMM kernel; ``splitk_ns_total`` the split-K reduce time
    inside their GEMM time): counts, totals, per-call median and p10 / p90, the median call itself (the call
    whose span is the median one, with its own parts); ``kw`` sets the other fields."""
    if not calls:
        return timing(**kw)
    spans = [c.span_ns for c in calls]
    order = sorted(range(len(calls)), key=lambda i: spans[i])
    median = calls[order[(len(order) - 1) // 2]]
    kw.setdefault("launches", len(calls))
    return timing(
        calls=len(calls),
        gemm_ns_total=sum(c.gemm_ns for c in calls),
        splitk_ns_total=splitk_ns_total,
        aux_ns_total=sum(c.aux_ns for c in calls),
        gap_ns_total=sum(c.gap_ns for c in calls),
        gemm_ns=spread([c.gemm_ns for c in calls]),
        aux_ns=spread([c.aux_ns for c in calls]),
        gap_ns=spread([c.gap_ns for c in calls]),
        span_ns=spread(spans),
        median_call=median,
        gap_max_ns=max(c.gap_ns for c in calls),
        **kw,
    )


def timing_repeated(
    gemm_ns: float | None,
    aux_ns: float = 0.0,
    gap_ns: float = 0.0,
    calls: int = 1,
    *,
    gemm_p10: float | None = None,
    gemm_p90: float | None = None,
    **kw: Any,
) -> Timing:
    """``calls`` calls of the same parts: what a measurement gives (the median of its repeats, with their
    p10 / p90 where recorded) or a single profiled call. No GEMM time: no call."""
    if not gemm_ns:
        return timing(**kw)
    one = call(gemm_ns, aux_ns or 0.0, gap_ns or 0.0)
    extra = one.aux_ns + one.gap_ns
    kw.setdefault("launches", calls)
    return timing(
        calls=calls,
        gemm_ns_total=one.gemm_ns * calls,
        aux_ns_total=one.aux_ns * calls,
        gap_ns_total=one.gap_ns * calls,
        gemm_ns=Dist(median=gemm_ns, p10=gemm_p10, p90=gemm_p90),
        aux_ns=Dist(median=one.aux_ns),
        gap_ns=Dist(median=one.gap_ns),
        span_ns=Dist(
            median=one.span_ns,
            p10=gemm_p10 + extra if gemm_p10 is not None else None,
            p90=gemm_p90 + extra if gemm_p90 is not None else None,
        ),
        median_call=one,
        **kw,
    )


@dataclass(frozen=True)
class NcuPart:
    """Nsight Compute's evidence for the case's GEMM kernel: its row of the ``ncu`` frame, its metrics (name ->
    value, the ones the rules read), the report's rules for the case's profiled kernels, how many launches were
    profiled, and where the row was borrowed from (the same kernel and grid profiled in another range)."""

    row: dict[str, Any]
    metrics: dict[str, float] = field(default_factory=dict)
    rules: list[dict[str, Any]] = field(default_factory=list)
    kernels: int = 1
    borrowed_from: str | None = None
    clock_locked: str | None = None

    @property
    def ncu_id(self) -> int | None:
        return self.row.get("ncu_id")

    def evidence(self) -> NcuEvidence:
        """What the Analysis keeps of it: the row's numbers and the metrics by name (non-finite ones left out),
        the report's clock, sections and each distinct finding once (the largest estimated speed-up of its
        repeats: every profiled launch repeats them)."""
        metrics: dict[str, float] = {}
        for key, value in self.row.items():
            if key in NCU_NOT_METRICS or isinstance(value, bool):
                continue
            v = finite(value) if isinstance(value, int | float) else None
            if v is not None:
                metrics[key] = v
        for key, value in self.metrics.items():
            v = finite(value)
            if v is not None:
                metrics[key] = v
        rules: dict[tuple[Any, ...], NcuRule] = {}
        for r in self.rules:  # one entry per distinct finding (each profiled launch repeats them)
            rule = NcuRule(
                rule=_text(r.get("rule")),
                kind=_text(r.get("kind")),
                title=_text(r.get("title")),
                message=_text(r.get("message")),
                speedup_pct=finite(r.get("speedup_pct")),
            )
            key = (rule.rule, rule.title, rule.message)
            if key not in rules or (rule.speedup_pct or 0) > (rules[key].speedup_pct or 0):
                rules[key] = rule
        return NcuEvidence(
            kernels=self.kernels,
            ncu_id=self.ncu_id,
            metrics=metrics,
            sm_clock_hz=finite(self.row.get("sm_clock_hz")),
            clock_control=_text(self.row.get("clock_control")),
            sections=self.sections,
            rules=list(rules.values()),
            borrowed_from=_text(self.borrowed_from),
        )

    def metric(self, name: str) -> float | None:
        """A numeric metric: a named column of the row first, then the long metrics."""
        value = self.row.get(name)
        if value is not None:
            return float(value) if isinstance(value, int | float) and not isinstance(value, bool) else None
        return self.metrics.get(name)

    @property
    def launch_stats_only(self) -> bool:
        """True when the report holds only launch statistics for the kernel (no Speed Of Light throughputs, no
        clock, no achieved occupancy): not enough to say why it is slow."""
        row = self.row
        keys = ("compute_throughput_pct", "dram_throughput_pct", "memory_throughput_pct", "sm_clock_hz")
        keys += ("achieved_occupancy_pct", "tensor_pipe_pct", "issue_active_pct")
        return all(row.get(k) is None for k in keys) and not any(
            m.startswith(("smsp__average_warps_issue_stalled_", "smsp__pcsamp_warps_issue_stalled_"))
            for m in self.metrics
        )

    @property
    def profile_failed(self) -> bool:
        """True when Nsight Compute measured nothing for the kernel: no duration, no launch configuration and
        none of the numbers :attr:`launch_stats_only` looks for (every metric NaN; its rules error with "Metric
        ... not found"): the profiling of this kernel failed, and it is not a report of launch statistics."""
        row = self.row
        keys = ("duration_ns", "grid_size", "block_size", "registers_per_thread")
        return self.launch_stats_only and all(row.get(k) is None for k in keys)

    @property
    def rule_errors(self) -> list[str]:
        """The first line of each of Nsight Compute's rules that errored on this kernel, in order."""
        return [
            str(r.get("message") or "").splitlines()[0]
            for r in self.rules
            if str(r.get("kind") or "").upper() == "ERROR" and r.get("message")
        ]

    @property
    def sections(self) -> list[str]:
        """The report's sections that gave this kernel's numbers: named by its rules, else told by which numbers
        are there."""
        found = {r.get("section") for r in self.rules if r.get("section")}
        row = self.row
        if row.get("grid_size") or row.get("block_size"):
            found.add("LaunchStats")
        if row.get("compute_throughput_pct") is not None or row.get("dram_throughput_pct") is not None:
            found.add("SpeedOfLight")
        if row.get("achieved_occupancy_pct") is not None:
            found.add("Occupancy")
        if any(m.startswith("smsp__average_warps_issue_stalled_") for m in self.metrics):
            found.add("WarpStateStats")
        return sorted(str(s) for s in found)


@dataclass(frozen=True)
class Clock:
    """The SM clock the case ran at, where it was measured (``source``), and the board's power and NVML throttle
    reasons during a measurement."""

    sm_clock_hz: float | None = None
    source: str | None = None
    power_w: float | None = None
    power_limit_w: float | None = None
    throttle_reasons: int | None = None


NCU_NOT_METRICS = frozenset(
    {"ncu_id", "range_index", "action_index", "rank", "grid_x", "grid_y", "grid_z", "block_x", "block_y"}
)
"""Columns of the ncu frame that are ids or launch dimensions, not measurements: not in :attr:`NcuEvidence.metrics`."""


def _text(value: Any) -> str | None:
    """A string or None, never an empty string."""
    if value is None:
        return None
    text = str(value).strip()
    return text or None
