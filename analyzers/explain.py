"""The plateau explainer: a waterfall of multiplicative factors from the datasheet peak to the achieved TFLOP/s,
and a verdict that says only what the evidence supports.

For a compute-bound GEMM::

    achieved = peak x clock x waves x memory x in-kernel x split-K x aux x gaps

``clock`` (SM clock / the clock the peak is quoted at), ``waves`` (last-wave fill, SMs a persistent grid leaves
idle, and tile padding; docs/CASES.md) and ``memory`` (roofline: ``intensity x bandwidth`` over what the first two
leave) are computed from evidence;
``in-kernel`` is the residual (the GEMM kernel's own rate over the ceiling), broken down with tensor-pipe, stall,
occupancy and shared-memory evidence; ``split-K`` (the reduce kernels' share of the GEMM time), ``aux`` (GEMM
time over GEMM + auxiliary time) and ``gaps`` (busy over busy + idle) take it down to the calls' rate. Every
time is a sum over the case's calls, so the product is sum of FLOPs / sum of call spans (achieved) exactly, and
the kernel rate (sum of FLOPs / sum of GEMM time) sits between in-kernel and aux. Where a measured clock or wave
estimate is pessimistic enough that the residual would exceed 1, the clock factor, then the wave factor, is raised
just enough (and says so in its evidence).

A GEMM that is memory-bound at its clock (``intensity x bandwidth`` below ``peak x clock``) gets no clock or wave
factor (neither sets its ceiling): ``achieved = peak x memory x in-kernel x ...``, and ``in-kernel`` is then its
fraction of the bandwidth roofline.

The verdict (:func:`verdict_of`) is the factor that costs the most of the calls' time
(:meth:`Waterfall.losses`: gaps cost the idle time, aux kernels their time, the kernel's factors a share of the
kernel's time), where the evidence holds it: a report of
launch statistics only cannot explain anything (it says what to capture); a kernel whose SMs and DRAM are both
nearly idle is *stalled*; a report whose kernels all ran at one clock well below boost has *clocks locked*; a
case without a FLOP count or a peak names its largest measured loss and says what stays unknown, or, where what
was measured loses nothing, says so (*no measured loss*); only a case with nothing measured cannot be explained.
Nsight Compute's finding with the largest estimated speed-up is a factor of its own where it counts
(:mod:`.rules.ncu_findings`: carved out of the in-kernel loss, so the factors still multiply to the achieved
rate); its other findings ride along beside the waterfall.
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from dataclasses import dataclass, field
from typing import Any

import msgspec

from tracekit.devices import peak_note
from tracekit.numbers import finite

from .analysis.model import Verdict, VerdictKind
from .gemm import CaseEvidence, settle_rate
from .gemm.fusion import ORDER_NOTE, apart_note, fusion_verdict
from .rules import NO_LOSS, Ceiling, Factor, Rule
from .rules.clock import LOCKED, LOCKED_REMEDY, locked
from .rules.kernel import SHORT_REMEDY, STALL_MEANING, short_kernel_ns, short_sentence, stalled, top_stalls
from .rules.memory import memory, memory_by_throughput
from .rules.ncu_findings import FACTOR
from .rules.registry import RULES, rule
from .rules.tiles import parse_tile

__all__ = ["Waterfall", "explain_case", "verdict_of"]

NCU_HINT = "capture with `tracekit capture --ncu` (its counters count the FLOPs), or record shapes (the PyTorch profiler's record_shapes=True, or tracekit's own ranges)"
LAUNCH_STATS_ONLY = "the report has only launch statistics"
PROFILE_FAILED = (
    "Nsight Compute measured nothing for this kernel (no duration, no launch configuration, every metric "
    "missing): its profiling failed"
)
PROFILE_FAILED_HINT = (
    "re-profile the kernel (`ncu -k regex:NAME`, or `tracekit capture --ncu`) and read ncu's output for the "
    "error"
)
UNKNOWN_WITHOUT_RATE = "the achieved TFLOP/s and the kernel's own loss (in-kernel) stay unknown"
"""What a verdict from measured evidence cannot tell where the case has no FLOP count or no peak."""
UNKNOWN_WITHOUT_PEAK = "the % of peak and the kernel's own loss (in-kernel) stay unknown"
"""The same where the case has a rate but no peak to rate it against."""
UNKNOWN_ESTIMATED = "the achieved TFLOP/s stays unknown, and the in-kernel loss is Nsight Compute's estimate"
"""The same where Nsight Compute estimated the in-kernel loss (:mod:`.rules.ncu_estimate`)."""
LAUNCH_STATS_HINT = "capture with the SpeedOfLight and Occupancy sections (tracekit capture --ncu does)"
INSIDE_KERNEL = ("in-kernel", FACTOR)
"""The factors of what happens inside the kernel (the residual, and Nsight Compute's finding carved out of it): a
stalled or latency-bound kernel's verdict takes their place."""


@dataclass
class Waterfall:
    """One GEMM's explanation."""

    case: CaseEvidence
    peak_tflops: float | None
    achieved_tflops: float | None
    factors: list[Factor] = field(default_factory=list)
    notes: list[str] = field(default_factory=list)
    call_factors: int = 0
    """How many of the last factors act on the call rather than inside the GEMM kernel (split-K, aux, gaps)."""

    @property
    def product_tflops(self) -> float | None:
        if self.peak_tflops is None:
            return None
        value = self.peak_tflops
        for f in self.factors:
            value *= f.value
        return value

    @property
    def complete(self) -> bool:
        """True when the factors account for the whole gap (peak x product == achieved within 1%)."""
        p, a = self.product_tflops, self.achieved_tflops
        return p is not None and a is not None and a > 0 and abs(p / a - 1) <= 0.01

    def losses(self) -> list[tuple[float, float | None]]:
        """Each factor's cost in the calls' time, in factor order: (time lost over all calls in ns, speed-up in %
        if it alone were removed).

        A factor acts on one part of a call, not on the whole. The call's factors nest (:attr:`call_factors`):
        launch gaps act on the span (busy / span), aux kernels on the busy time (GEMM / GEMM + aux), split-K on the
        GEMM time (kernel / kernel + reduce); the kernel's own factors (clock, waves, memory, in-kernel) each act on
        the GEMM kernel's time. So gaps cost the idle time itself, aux kernels their own time, split-K its reduce,
        and a kernel factor its share of the kernel's time, never more than all of it: a faster kernel leaves the
        host's gaps as they were. (Span x (1 - value) for every factor, as before, charged a launch-bound loop's
        in-kernel loss with the idle gaps too: 7.59 ms lost in 5.22 ms of kernels.) Each is what removing that
        factor alone saves; the kernel's factors multiply, so their times do not add up. The speed-up is lost /
        (span - lost). Without a span (no timing) the time lost is 0 and the speed-up the rate's, 1 / value - 1."""
        span = self.case.timing.span_ns_total or 0.0
        n, calls = len(self.factors), min(self.call_factors, len(self.factors))
        out: list[tuple[float, float | None]] = [(0.0, None)] * n
        base = span
        for i in range(n - 1, -1, -1):
            f = self.factors[i]
            v = f.value
            lost = base * (1.0 - v) if base > 0 and v < 1.0 else 0.0
            if span > 0:
                gain = 100.0 * lost / (span - lost) if span > lost else None
            else:
                gain = (1.0 / v - 1.0) * 100.0 if v > 0 else None
            out[i] = (lost, gain)
            if i >= n - calls:  # the call's factors nest; the kernel's all act on the kernel's time
                base *= v
        return out

    def loss_of(self, factor: Factor | None) -> tuple[float, float | None]:
        """:meth:`losses`' entry for ``factor`` (one of :attr:`factors`, by identity): (0.0, None) for None or a
        factor not in this waterfall."""
        for f, loss in zip(self.factors, self.losses(), strict=True):
            if f is factor:
                return loss
        return (0.0, None)

    @property
    def kernel_limit(self) -> Factor | None:
        """The largest loss among the kernel's own factors (clock, waves, memory, in-kernel: all but the last
        :attr:`call_factors`): they all act on the kernel's time, so the smallest of them loses the most. None when
        none loses more than 0.5%."""
        inside = [f for f in self.factors[: len(self.factors) - self.call_factors] if f.value < NO_LOSS]
        return min(inside, key=lambda f: f.value) if inside else None

    @property
    def verdict(self) -> Factor | None:
        """The factor that costs the most of the calls' time (:meth:`losses`; on a tie, or without a timing, the
        smallest factor), among those that lose more than 0.5% and are blamed; None when nothing is lost or
        nothing is known."""
        losing = [
            (lost, f.value, i)
            for i, (f, (lost, _)) in enumerate(zip(self.factors, self.losses(), strict=True))
            if f.value < NO_LOSS and f.evidence.get("blamed") is not False
        ]
        if not losing:
            return None
        return self.factors[min(losing, key=lambda x: (-x[0], x[1], x[2]))[2]]

    @property
    def ncu_rules(self) -> list[dict[str, Any]]:
        rules = self.case.ncu.rules if self.case.ncu else []
        return [{k: r.get(k) for k in ("rule", "kind", "title", "speedup_pct", "message")} for r in rules]


def _absorb(residual: float, factors: list[Factor | None]) -> tuple[float, list[Factor | None]]:
    """Raise pessimistic factors (in order) until the residual is at most 1; returns the new residual and the
    factors (raised ones replaced). A raised factor says so in its sentence: its own estimate (``0.30 waves``) no
    longer matches its value, and the kernel ran faster than the estimate allows."""
    out: list[Factor | None] = []
    for f in factors:
        if residual <= 1.0 or f is None:
            out.append(f)
            continue
        new = min(1.0, f.value * residual)
        residual *= f.value / new
        out.append(
            msgspec.structs.replace(
                f,
                value=new,
                evidence={
                    **f.evidence,
                    "adjusted_from": round(f.value, 4),
                    "adjusted_because": "achieved throughput is higher than this factor allows",
                },
                sentence=f.sentence.rstrip(".")
                + f"; but the kernel ran faster than this estimate allows ({f.value:.3f}), so it is not the limit"
                + f" here: the factor is raised to {new:.3f}.",
                remedy=None if new >= NO_LOSS else f.remedy,
            )
        )
    return residual, out


def _with_evidence(f: Factor, **evidence: Any) -> Factor:
    """``f`` with more evidence."""
    return msgspec.structs.replace(f, evidence={**f.evidence, **evidence})


def _kernel_only_rate(case: CaseEvidence) -> float | None:
    """FLOPs over the GEMM kernel's own time (without its split-K reduce): what the in-kernel factor rates."""
    t = case.timing
    kernel_ns = t.gemm_ns_total - t.splitk_ns_total
    if case.flops and t.calls and kernel_ns > 0:
        return case.flops * t.calls / kernel_ns / 1e3
    return case.estimated_tflops


def explain_case(case: CaseEvidence) -> Waterfall:
    """The waterfall of one GEMM (see the module docstring for the arithmetic), its factors final
    (:func:`_finish`)."""
    return _finish(_waterfall(case))


def _waterfall(case: CaseEvidence) -> Waterfall:
    case = settle_rate(case)
    peak = case.peak_tflops
    kernel_rate = _kernel_only_rate(case)
    wf = Waterfall(case, peak, case.achieved_tflops)
    wf.notes.extend(n for n in (case.rate()[2], case.peak_note) if n)
    wf.notes.extend(case.notes)
    if case.achieved_estimate:
        wf.notes.append(
            f"achieved TFLOP/s estimated ({case.achieved_estimate}): the profile has no GEMM shape"
        )
    if case.ncu is not None and case.ncu.borrowed_from:
        wf.notes.append(
            f"Nsight Compute evidence from the same kernel and grid profiled in range {case.ncu.borrowed_from!r}: "
            "this range's own launches were not profiled"
        )
    if case.timing.aux_by_order_ns_total:
        wf.notes.append(ORDER_NOTE)
    if case.timing.aux_apart_runs:
        wf.notes.append(apart_note(case))
    if case.timing.pauses:
        wf.notes.append(
            f"{case.timing.pauses} pause(s) of 1 ms or more inside calls ({case.timing.paused_ns_total / 1e6:.3g} ms: "
            "a first call's module load, a synchronisation) are left out of the gap"
        )
    tail = _run(RULES, "call", case, None)
    wf.call_factors = len(tail)  # every path below ends its factors with the whole tail
    if peak is None or kernel_rate is None:
        if case.peak_unknown:
            wf.notes.append(case.peak_unknown)
        elif peak is None:
            wf.notes.append(peak_note(case.device, case.device_name, case.dtype_class))
        if kernel_rate is None:
            wf.notes.append(case.flops_note or "no GEMM shape or FLOP count: achieved TFLOP/s unknown")
        # the kernel's rules that need no rate: clock, waves, and Nsight Compute's estimate of the in-kernel loss
        inside = [
            _not_this_runs(case, f)
            for f in _run([r for r in RULES if not r.needs_rate], "kernel", case, None)
        ]
        occupancy_note = _occupancy_note(case)
        if occupancy_note and not any(f.name == "in-kernel" for f in inside):
            wf.notes.append(occupancy_note)
        f_sol = memory_by_throughput(case)
        if f_sol is not None:
            wf.notes.append("memory-bound by Nsight Compute's throughputs: waves do not set its ceiling")
            wf.factors = [f_sol, *tail]
            return wf
        wf.factors = [*inside, *tail]
        return wf

    f_clock = rule("clock").run(case, None)
    clock_v = f_clock.value if f_clock else 1.0
    roof = case.memory_roof_tflops
    # no FLOP count (an estimated rate): Nsight Compute's Speed Of Light places it on the roofline instead
    f_sol = memory_by_throughput(case) if not case.flops else None
    memory_bound = (roof is not None and roof < peak * clock_v) or f_sol is not None
    if memory_bound:
        # the bandwidth roof alone sets the ceiling: the clock and the waves ride along as the memory factor's
        # evidence, not as factors
        f_mem = memory(case, peak) if f_sol is None else _sol_memory(f_sol, kernel_rate, peak)
        ceiling = peak * (f_mem.value if f_mem else 1.0)
        residual, (f_mem,) = _absorb(kernel_rate / ceiling, [f_mem])
        f_wave = rule("waves").run(case, None)
        if f_mem is not None:
            if f_clock is not None:
                f_mem = _with_evidence(f_mem, sm_clock_hz_not_the_ceiling=case.clock.sm_clock_hz)
            if f_wave is not None:
                f_mem = _with_evidence(f_mem, waves_not_the_ceiling=f_wave.evidence.get("waves"))
        parts: list[Factor | None] = [f_mem]
    else:
        # each kernel rule on the ceiling the ones before it leave
        ceiling = peak
        found: list[Factor | None] = []
        for r in RULES:
            if r.acts_on != "kernel":
                continue
            f = f_clock if r.name == "clock" else r.run(case, Ceiling(peak, ceiling, kernel_rate))
            found.append(f)
            ceiling *= f.value if f else 1.0
        residual, parts = _absorb(kernel_rate / ceiling, found)
        f_wave = next((f for f in parts if f is not None and f.name == "waves"), None)
    if residual > 1.0:
        wf.notes.append(f"achieved exceeds the {peak:.0f} TFLOP/s peak by {100 * (residual - 1):.0f}%")
    at = Ceiling(peak, ceiling, kernel_rate, memory_bound, residual)
    wf.factors = [f for f in (*parts, *_run(RULES, "residual", case, at), *tail) if f is not None]
    _padding_evidence(wf, f_wave)
    return wf


def _not_this_runs(case: CaseEvidence, f: Factor) -> Factor:
    """Without a rate to check it against, a clock Nsight Compute measured under its own clock control says
    nothing of the timeline's calls (ncu locks the clock while it replays; the timed run's clock was not
    measured): the factor stays as evidence, not blamed."""
    timed_by_ncu = case.timing.source == "ncu-replay"
    if f.name != "clock" or timed_by_ncu or not (case.clock.source or "").startswith("ncu"):
        return f
    return _with_evidence(
        f,
        blamed=False,
        not_blamed_because="the clock Nsight Compute measured while it replayed the kernel, not the timed calls'",
    )


def _run(rules: Sequence[Rule], acts_on: str, case: CaseEvidence, at: Ceiling | None) -> list[Factor]:
    """The factors of the ``rules`` that act on ``acts_on``, in table order (those with nothing to say left
    out)."""
    out = []
    for r in rules:
        if r.acts_on == acts_on and (f := r.run(case, at)) is not None:
            out.append(f)
    return out


def _finish(wf: Waterfall) -> Waterfall:
    """The waterfall's factors as the Analysis holds them: each with its time lost and speed-up
    (:meth:`Waterfall.losses`), its evidence as plain JSON values, and no remedy where it loses nothing."""
    wf.factors = [
        msgspec.structs.replace(
            f,
            value=float(f.value),
            sentence=_text(f.sentence) or f.name,
            cause=_text(f.cause),
            remedy=_text(f.remedy) if f.value < NO_LOSS else None,
            evidence=_jsonable(f.evidence),
            gain_pct=finite(gain) if f.value > 0 else None,
            lost_ns_total=lost,
        )
        for f, (lost, gain) in zip(wf.factors, wf.losses(), strict=True)
    ]
    return wf


def _text(value: Any) -> str | None:
    """A string or None, never an empty string."""
    if value is None:
        return None
    text = str(value).strip()
    return text or None


def _jsonable(value: Any) -> Any:
    """Evidence as plain JSON values: non-finite numbers become None, tuples lists, other objects their text."""
    if isinstance(value, dict):
        return {str(k): _jsonable(v) for k, v in value.items()}
    if isinstance(value, list | tuple | set):
        return [_jsonable(v) for v in value]
    if isinstance(value, bool) or value is None or isinstance(value, str | int):
        return value
    if isinstance(value, float):
        return value if math.isfinite(value) else None
    return str(value)


def _verdict(
    wf: Waterfall,
    kind: VerdictKind,
    sentence: str,
    f: Factor | None = None,
    remedy: str | None = None,
    capture_hint: str | None = None,
    *,
    lost_ns: float | None = None,
    unknown: str | None = None,
) -> Verdict:
    """A verdict of ``kind`` blaming ``f`` (one of the waterfall's factors) with its time lost and speed-up;
    ``lost_ns`` the time a verdict without a factor names (kind fusion: its candidates' time over all calls);
    ``unknown`` what it cannot tell, ``capture_hint`` how to learn it."""
    blamed = next((x for x in wf.factors if f is not None and x.name == f.name), None)
    return Verdict(
        kind=kind,
        sentence=_text(sentence) or kind,
        factor=f.name if f is not None else None,
        cause=_text(f.cause) if f is not None else None,
        value=float(f.value) if f is not None else None,
        remedy=_text(remedy) if f is None or f.value < NO_LOSS else None,
        gain_pct=blamed.gain_pct if blamed else None,
        lost_ns_total=blamed.lost_ns_total if blamed else lost_ns,
        capture_hint=_text(capture_hint),
        unknown=_text(unknown),
    )


def verdict_of(wf: Waterfall) -> Verdict:
    """The case's verdict from its waterfall and the evidence behind it (see the module docstring)."""
    case, blamed = wf.case, wf.verdict
    if case.ncu is not None and case.ncu.profile_failed and not case.flops and blamed is None:
        errors = [e for e in case.ncu.rule_errors if e.startswith("Rule ")] or case.ncu.rule_errors
        said = f" ({len(errors)} of Nsight Compute's rules errored, e.g. '{errors[0]}')" if errors else ""
        return _verdict(
            wf,
            VerdictKind.CANNOT_EXPLAIN,
            f"cannot explain: {PROFILE_FAILED}{said}",
            capture_hint=PROFILE_FAILED_HINT,
        )
    launch_stats_only = (
        case.ncu is not None
        and case.ncu.launch_stats_only
        and case.timing.source == "ncu-replay"
        and not case.flops
    )
    if launch_stats_only and blamed is None and not wf.factors:
        return _verdict(
            wf,
            VerdictKind.CANNOT_EXPLAIN,
            f"cannot explain: {LAUNCH_STATS_ONLY}",
            capture_hint=LAUNCH_STATS_HINT,
        )
    lack = missing(case, wf.peak_tflops)
    if launch_stats_only:  # what such a report lacks, and which sections to capture
        lack = (LAUNCH_STATS_ONLY, LAUNCH_STATS_HINT)
    # what a verdict blaming a measured factor cannot tell without a FLOP count or a peak, and how to learn it
    estimated = any(f.name == "in-kernel" and "ncu_speedup_pct" in f.evidence for f in wf.factors)
    rated = bool(case.flops or case.estimated_tflops)  # then only the peak is missing
    left = UNKNOWN_WITHOUT_PEAK if rated else UNKNOWN_ESTIMATED if estimated else UNKNOWN_WITHOUT_RATE
    unknown = f"{lack[0]}: {left}" if lack is not None else None
    learn = lack[1] if lack is not None else None
    short = short_kernel_ns(case)
    if short is not None and stalled(case) and (blamed is None or blamed.name in INSIDE_KERNEL):
        # a few microseconds: launch and latency set its time before anything its warps wait on
        return _verdict(
            wf,
            VerdictKind.LATENCY_BOUND,
            short_sentence(case, short),
            blamed,
            SHORT_REMEDY,
            capture_hint=learn,
            unknown=unknown,
        )
    if stalled(case) and (blamed is None or blamed.name in INSIDE_KERNEL):
        stalls = top_stalls(case)
        why = ", ".join(f"{n} ({STALL_MEANING.get(n, n)})" for n, _, _ in stalls)
        row = case.ncu.row if case.ncu else {}
        sentence = (
            f"stalled: SM throughput {row.get('compute_throughput_pct'):.2g}% and DRAM throughput "
            f"{row.get('dram_throughput_pct'):.2g}% of peak, so no unit and no occupancy limit sets its time: its "
            "warps wait" + (f" ({why})" if why else "")
        )
        hint = (
            None
            if stalls
            else "capture the WarpStateStats section (tracekit capture --ncu does) to see on what"
        )
        return _verdict(
            wf,
            VerdictKind.STALLED,
            sentence,
            blamed,
            blamed.remedy if blamed and stalls else None,
            capture_hint=hint or learn,
            unknown=unknown,
        )
    why_locked = locked(case)
    f_clock = next((f for f in wf.factors if f.name == "clock"), None)
    if (
        why_locked
        and f_clock is not None
        and f_clock.value < NO_LOSS
        and (blamed is None or blamed is f_clock)
    ):
        sentence = f"{LOCKED}: {why_locked}"
        hint = None
        if not case.flops and not case.estimated_tflops:
            sentence += "; without a FLOP count the rest cannot be rated"
            hint = NCU_HINT
        return _verdict(
            wf,
            VerdictKind.CLOCKS_LOCKED,
            sentence,
            f_clock,
            LOCKED_REMEDY,
            capture_hint=hint or learn,
            unknown=unknown,
        )
    fused = fusion_verdict(case, wf.loss_of(blamed)[0] if blamed is not None else 0.0)
    if fused is not None:  # the operators after (or before) the GEMM cost more than anything inside its calls
        return _verdict(wf, VerdictKind.FUSION, fused[0], remedy=fused[1], lost_ns=fused[2])
    if blamed is not None:
        # the largest measured loss is the verdict, with or without a FLOP count: every factor the waterfall
        # holds without one (waves from the grid, the clock, memory from DRAM throughput, split-K, aux, gaps)
        # is measured; what stays unknown (the achieved rate, the kernel's own loss) is said, with how to learn it
        if lack is None:
            return _verdict(wf, VerdictKind.EXPLAINED, blamed.sentence, blamed, blamed.remedy)
        return _verdict(
            wf,
            VerdictKind.EXPLAINED,
            blamed.sentence,
            blamed,
            blamed.remedy,
            capture_hint=learn,
            unknown=unknown,
        )
    measured = _measured_no_loss(wf) if lack is not None else []
    if lack is not None and measured:
        # every factor measured without a rate loses nothing: say what was measured, and what stays unknown
        return _verdict(
            wf,
            VerdictKind.NO_MEASURED_LOSS,
            f"measured, and losing nothing: {'; '.join(measured)}. Unknown: {unknown}.",
            capture_hint=learn,
            unknown=unknown,
        )
    if lack is not None or not wf.factors:
        return _verdict(
            wf,
            VerdictKind.CANNOT_EXPLAIN,
            lack[0] if lack else "no factor could be measured",
            capture_hint=lack[1] if lack else None,
        )
    pct = wf.achieved_tflops / wf.peak_tflops * 100 if wf.achieved_tflops and wf.peak_tflops else None
    at = f"at {min(pct, 100.0):.0f}% of peak: " if pct is not None else ""
    return _verdict(wf, VerdictKind.NO_LOSS, f"{at}no factor loses more than {100 * (1 - NO_LOSS):.1f}%")


def _join(words: list[str]) -> str:
    return ", ".join(words[:-1]) + " and " + words[-1] if len(words) > 1 else words[0]


CALL_PARTS_ABSENT = ("no split-K reduce", "no auxiliary kernels", "no launch gaps")
"""What a timeline shows of a call's own factors where they are absent: measured, and nothing lost."""


def _measured_no_loss(wf: Waterfall) -> list[str]:
    """What was measured without a FLOP count and found losing nothing worth blaming, in words (empty where
    nothing was measured): each factor of the waterfall (all measured: ``waves x1.000``, a clock Nsight Compute
    measured in its replay, launch gaps too small to blame) and, where the calls come from a timeline, the
    call's factors it found absent (no split-K reduce, no auxiliary kernels, no launch gaps in the calls)."""
    out: list[str] = []
    for f in wf.factors:
        said = f"{f.name} x{f.value:.3f}"
        if f.name == "waves" and f.evidence.get("waves") is not None:
            n = f.evidence["waves"]
            said += f" ({f.evidence.get('grid_size')} CTAs, {n:g} wave{'s' if n != 1 else ''})"
        why = f.evidence.get("not_blamed_because")
        if f.value < NO_LOSS and f.evidence.get("blamed") is False:
            said += f" (not blamed: {why})" if why else " (too little to blame)"
        out.append(said)
    t = wf.case.timing
    if t.source == "timeline" and t.gemm_ns_total and t.calls:
        names = {f.name for f in wf.factors}
        absent = [
            text
            for name, text in zip(
                ("split-K reduce", "aux kernels", "launch gaps"), CALL_PARTS_ABSENT, strict=True
            )
            if name not in names
        ]
        if absent:
            out.append(f"in its {t.calls:,} call{'s' if t.calls != 1 else ''} {_join(absent)}")
    return out


def missing(case: CaseEvidence, peak: float | None) -> tuple[str, str] | None:
    """What the case lacks to be explained and how to learn it (reason, what to capture or pass); None when it
    lacks nothing."""
    if not case.flops and not case.estimated_tflops:
        if case.flops_note:
            what, _, how = case.flops_note.partition(": ")
            return what, how or "capture with `tracekit capture --ncu`"
        return "no GEMM shape or FLOP count", NCU_HINT
    if peak is None:
        cls = case.dtype_class or "tensor"
        if (
            case.device is None or case.device.provenance == "unknown"
        ):  # no GPU named, by the files or --device
            return (
                f"no {cls} peak known for this GPU",
                "name the GPU with --device NAME (tracekit explain --help lists the catalog)",
            )
        # the GPU is known (named by the files or by --device): never ask for --device again
        if case.peak_unknown:
            return (
                f"the {cls} peak of {case.device.name} is below the measured rate",
                f"check that {case.device.name} is the GPU that ran (`tracekit devices {case.device.key}`) "
                "and that the FLOP count is right",
            )
        return (
            f"the device catalog has no {cls} peak for {case.device.name}",
            f"measure this GPU's ceilings with `tracekit calibrate` and pass --calibration, or use a GPU whose "
            f"{cls} peak the catalog lists (`tracekit devices`)",
        )
    if not case.timing.gemm_ns_total:
        return (
            "no kernel time",
            "capture a timeline (`tracekit capture --nsys`) or profile with `tracekit capture --ncu`",
        )
    return None


def _sol_memory(f_sol: Factor, kernel_rate: float, peak: float) -> Factor:
    """The memory factor of a memory-bound kernel with no FLOP count: DRAM ran at ``d`` of its peak, so the
    bandwidth roof it was on allows ``rate / d``; the factor is that roof over the peak, and the in-kernel
    factor that follows is ``d`` (how close to the bandwidth roof the kernel ran)."""
    dram = f_sol.evidence["dram_throughput_pct"] / 100.0
    roof = kernel_rate / dram if dram > 0 else peak
    return msgspec.structs.replace(
        f_sol,
        value=min(1.0, roof / peak),
        evidence={**f_sol.evidence, "memory_roof_tflops": round(roof, 1)},
        sentence=f_sol.sentence.rstrip(".") + f"; at that bandwidth it would reach {roof:.0f} TFLOP/s.",
    )


def _occupancy_note(case: CaseEvidence) -> str | None:
    """Without a rate there is no in-kernel factor; a launch configuration that caps occupancy (computed from the
    timeline's block size, registers and shared memory) is still worth saying."""
    from .rules.kernel import LOW_OCCUPANCY_PCT, _warp_specialised
    from .rules.occupancy import ctas_per_sm, theoretical_occupancy_pct

    theo = theoretical_occupancy_pct(case)
    per_sm, limiter = ctas_per_sm(case)
    if theo is None or not limiter or theo > LOW_OCCUPANCY_PCT or _warp_specialised(case):
        return None
    first = limiter.split(" and ")[0]
    k = case.kernel
    what = {
        "shared_mem": f"shared memory: {k.smem_bytes / 1024:.0f} KB per block"
        if k.smem_bytes
        else "shared memory (per block: unknown)",
        "registers": f"registers: {k.registers} per thread",
    }.get(first, f"{first}: {k.block} threads per block")
    est = k.est_occupancy_pct
    said = f", {est:.0f}% as estimated by the PyTorch profiler" if est is not None else ""
    return (
        f"occupancy capped at {theo:.1f}% ({per_sm} CTA/SM){said}, limited by {what}; with no FLOP count its "
        "cost is not measured (profile with `tracekit capture --ncu`)"
    )


PADDING_NOTE_RATIO = 1.02
"""Counted FLOPs above 2*M*N*K by more than this are reported as tile padding waste."""


def _padding_evidence(wf: Waterfall, f_wave: Factor | None) -> None:
    """Where the shape and Nsight Compute's counters are both known, executed math beyond 2*M*N*K is the tiles'
    padding: attached to the waves / tiles factor (or a note when there is none)."""
    case = wf.case
    ratio = case.padding_ratio
    if ratio is None or ratio < PADDING_NOTE_RATIO:
        return
    tile = f_wave.evidence.get("tile") if f_wave is not None else None
    if tile is None and (parsed := parse_tile(case.kernel.name)) is not None:
        tile = f"{parsed.tm}x{parsed.tn}"
    text = f"executed {ratio:.1f}x the useful FLOPs (counted {case.counted.flops:.3g} vs 2*M*N*K {case.flops:.3g})"  # type: ignore[union-attr]
    if tile:
        text += f": M={case.m}, N={case.n} on {tile} tiles"
    if f_wave is not None and any(f is f_wave for f in wf.factors):
        padded = msgspec.structs.replace(
            f_wave,
            evidence={
                **f_wave.evidence,
                "counted_flops": case.counted.flops,  # type: ignore[union-attr]
                "executed_over_useful": round(ratio, 3),
                "padding": text,
            },
            sentence=f_wave.sentence.rstrip(".") + f"; the tensor cores {text}.",
        )
        wf.factors = [padded if f is f_wave else f for f in wf.factors]
    else:
        wf.notes.append(f"tile padding: the tensor cores {text}")
