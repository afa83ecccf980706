"""The parts a GEMM case is made of, each built once from the columns the import already parsed:

- :class:`~tracekit.analyzers.analysis.model.Shape` (the Analysis model's): M, N, K, batch, dtypes and scale, and
  where they came from;
- :class:`KernelInfo`: the GEMM kernel's name, family, class and launch configuration (its signature);
- :class:`Timing`: every call of the case aggregated (:meth:`Timing.from_calls`): counts, totals, per-call
  median and p10 / p90, the median call itself, and the auxiliary kernels the calls own;
- :class:`NcuPart`: what Nsight Compute measured for the case's kernel (its row, metrics and rules);
- :class:`Clock`: the SM clock and power during the case.

A case (:class:`~.case.GemmCase`) holds these parts and derives its FLOPs, rates and peak from them; the rules
(analyzers/rules) read the parts, never a row of a frame.
"""

from __future__ import annotations

import math
import statistics
from collections.abc import Sequence
from dataclasses import dataclass, field, fields
from typing import Any

from ..analysis.model import Dist, Shape
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


@dataclass
class KernelInfo:
    """The case's GEMM kernel: name, library family, kernel class and launch configuration (None = unknown).
    ``grid`` counts CTAs, ``block`` threads per CTA; name, grid and block are the kernel's signature."""

    name: str | None = None
    family: str | None = None
    kernel_class: str | None = None
    grid: int | None = None
    block: int | None = None
    registers: int | None = None
    smem_bytes: int | None = None
    blocks_per_sm: float | None = None  # CTAs of the grid per SM, as the PyTorch profiler wrote it
    est_occupancy_pct: float | None = None  # achieved occupancy as the PyTorch profiler estimates it (no ncu)

    @classmethod
    def from_row(cls, row: dict[str, Any], name: str | None = None) -> KernelInfo:
        """From a kernels-frame (or ncu-frame) row: grid and block as products of their dimensions; shared memory
        the ``smem_bytes`` sum where a file gives only that (Kineto), else static + dynamic; None where unsaid."""
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
        return cls(
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

    def fill(self, other: KernelInfo) -> None:
        """Take what this one does not know from ``other`` (the same kernel seen by another tool)."""
        for f in fields(self):
            if getattr(self, f.name) is None:
                setattr(self, f.name, getattr(other, f.name))


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


@dataclass
class AuxUse:
    """An auxiliary kernel of the case's calls: its class, its role for the GEMM (quantize | splitk-reduce |
    activation | layout | other), its time over all calls and how many times it ran."""

    name: str
    kernel_class: str | None = None
    role: str = "other"
    total_ns: float = 0.0
    count: int = 0


@dataclass(frozen=True)
class Call:
    """One call's parts: GEMM time (the GEMM kernel and its split-K reduce), auxiliary time, the gap (idle GPU
    time inside the call, and before it when it follows the previous call of its case back to back)."""

    gemm_ns: float
    aux_ns: float = 0.0
    gap_ns: float = 0.0
    splitk_ns: float = 0.0

    @property
    def span_ns(self) -> float:
        return self.gemm_ns + self.aux_ns + self.gap_ns


@dataclass
class Timing:
    """A case's calls, aggregated (issue 26 item 4: one formula, labelled everywhere).

    ``calls`` counts calls with their GEMM kernel; ``calls_without_kernel`` those whose GEMM kernel is missing
    (sampled out, or a range that launched nothing): left out of every number, and counted. Totals are sums over
    calls; ``gemm`` / ``aux`` / ``gap`` / ``span`` the per-call distributions; ``median_call`` the call whose span
    is the median one, with its own parts (what a "per call" line shows: the parts of one real call, not medians
    of separate parts). ``splitk_ns_total`` is the split-K reduce time inside ``gemm_ns_total``.
    ``source``: timeline | measurement:cuda-graph | measurement:events | ncu-replay; ``detail`` in words.
    ``paused_ns_total`` / ``pauses``: idle stretches inside calls longer than the launch-gap limit (a module load,
    a synchronisation), left out of the gap."""

    calls: int = 0
    calls_without_kernel: int = 0
    launches: int = 0
    gemm_ns_total: float = 0.0
    splitk_ns_total: float = 0.0
    aux_ns_total: float = 0.0
    gap_ns_total: float = 0.0
    gemm: Dist = field(default_factory=Dist)
    aux: Dist = field(default_factory=Dist)
    gap: Dist = field(default_factory=Dist)
    span: Dist = field(default_factory=Dist)
    median_call: Call | None = None
    aux_kernels: list[AuxUse] = field(default_factory=list)
    source: str = "timeline"
    detail: str | None = None
    pauses: int = 0
    paused_ns_total: float = 0.0
    fusion: list[Any] = field(default_factory=list)
    """Fusion candidates (:class:`~.fusion.FusionUse`): kernels of the operators around the GEMM's that work on its
    data, launched by those operators: not in the calls' time."""
    busy: Dist = field(default_factory=Dist)
    """Per call, the time of the kernels it owns (GEMM + auxiliary, no gap): what TraceLens times an operator by."""
    aux_apart_runs: int = 0
    """Runs of an auxiliary step (a tracekit ``aux`` range feeding the case) that ran apart from the calls, not
    one before each: not in the calls' time (0: none, or one run per call, each the aux time of the call after it)."""
    aux_apart_ns: float | None = None
    """Their median run's kernel time: what a layer that runs the step on every call would pay per call."""
    aux_by_order_ns_total: float = 0.0
    """Auxiliary time the calls own by launch order alone (no operator record says who launched it)."""
    gap_max: float | None = None
    """The largest one call's gap (None where the calls are not known one by one): with a few calls, whether one
    call holds the idle (a first call's setup) or every call does."""

    @classmethod
    def from_calls(cls, calls: Sequence[Call], **kw: Any) -> Timing:
        """The aggregate of ``calls`` (every call with its GEMM kernel); ``kw`` sets the other fields."""
        if not calls:
            return cls(**kw)
        spans = [c.span_ns for c in calls]
        order = sorted(range(len(calls)), key=lambda i: spans[i])
        median = calls[order[(len(order) - 1) // 2]]
        kw.setdefault("launches", len(calls))
        return cls(
            calls=len(calls),
            gemm_ns_total=sum(c.gemm_ns for c in calls),
            splitk_ns_total=sum(c.splitk_ns for c in calls),
            aux_ns_total=sum(c.aux_ns for c in calls),
            gap_ns_total=sum(c.gap_ns for c in calls),
            gemm=spread([c.gemm_ns for c in calls]),
            aux=spread([c.aux_ns for c in calls]),
            gap=spread([c.gap_ns for c in calls]),
            span=spread(spans),
            median_call=median,
            gap_max=max(c.gap_ns for c in calls),
            **kw,
        )

    @classmethod
    def repeated(
        cls,
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
            return cls(**kw)
        call = Call(gemm_ns, aux_ns or 0.0, gap_ns or 0.0)
        extra = call.aux_ns + call.gap_ns
        kw.setdefault("launches", calls)
        return cls(
            calls=calls,
            gemm_ns_total=call.gemm_ns * calls,
            aux_ns_total=call.aux_ns * calls,
            gap_ns_total=call.gap_ns * calls,
            gemm=Dist(median=gemm_ns, p10=gemm_p10, p90=gemm_p90),
            aux=Dist(median=call.aux_ns),
            gap=Dist(median=call.gap_ns),
            span=Dist(
                median=call.span_ns,
                p10=gemm_p10 + extra if gemm_p10 is not None else None,
                p90=gemm_p90 + extra if gemm_p90 is not None else None,
            ),
            median_call=call,
            **kw,
        )

    @property
    def span_ns_total(self) -> float:
        return self.gemm_ns_total + self.aux_ns_total + self.gap_ns_total

    def _mean(self, total: float) -> float | None:
        return total / self.calls if self.calls else None

    @property
    def gemm_ns(self) -> float | None:
        """GEMM time per call, the mean over calls (total / calls): what the waterfall's arithmetic uses, so its
        product is sum of FLOPs / sum of spans."""
        return self.gemm_ns_total / self.calls if self.calls and self.gemm_ns_total else None

    @property
    def aux_ns(self) -> float:
        return self._mean(self.aux_ns_total) or 0.0

    @property
    def gap_ns(self) -> float:
        return self._mean(self.gap_ns_total) or 0.0

    @property
    def splitk_ns(self) -> float:
        return self._mean(self.splitk_ns_total) or 0.0

    @property
    def span_ns(self) -> float | None:
        return self._mean(self.span_ns_total) if self.gemm_ns else None


@dataclass
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


@dataclass
class Clock:
    """The SM clock the case ran at, where it was measured (``source``), and the board's power and NVML throttle
    reasons during a measurement."""

    sm_clock_hz: float | None = None
    source: str | None = None
    power_w: float | None = None
    power_limit_w: float | None = None
    throttle_reasons: int | None = None
