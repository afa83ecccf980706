"""The summary every view opens with: GPU time, the three largest losses in the calls' time, and what the analysis could
not tell with how to learn it (:func:`summarize`)."""

from __future__ import annotations

from collections.abc import Callable, Sequence

from tracekit.numbers import share_of_kernel_time

from ..explain import NCU_HINT, PROFILE_FAILED_HINT
from ..gemm.ncu_evidence import SEVERAL_HOW
from ..rules import NO_LOSS
from ..rules.waves import MODELS_AGREE
from .model import Case, DeviceInfo, Loss, RunInfo, Summary, Unknown, VerdictKind

TOP_LOSSES = 3
"""Losses the summary names."""

NCU_HOW = "`tracekit capture --ncu` (`--ranges REGEX`: your own ranges)"


def top_losses(cases: Sequence[Case], n: int = TOP_LOSSES) -> list[Loss]:
    """The ``n`` largest losses over all cases, by the calls' time lost (``Factor.lost_ns_total``), not by percent: a
    large percentage of a tiny op is noise. Factors that cost nothing and factors the explainer does not blame
    (evidence ``blamed: false``) are left out."""
    found = []
    for c in cases:
        for f in c.factors:
            lost = f.lost_ns_total or 0.0
            if lost <= 0 or f.value >= NO_LOSS or f.evidence.get("blamed") is False:
                continue
            found.append(
                Loss(
                    case_id=c.id,
                    case_name=c.name,
                    factor=f.name,
                    cause=f.cause,
                    lost_ns_total=lost,
                    sentence=f.sentence,
                    remedy=f.remedy,
                )
            )
        v = c.verdict
        if v.kind == "fusion" and v.lost_ns_total:  # the verdict's fusion candidates: the time fusing saves
            found.append(
                Loss(
                    case_id=c.id,
                    case_name=c.name,
                    factor="fusion candidates",
                    lost_ns_total=v.lost_ns_total,
                    sentence=v.sentence,
                    remedy=v.remedy,
                )
            )
    return sorted(found, key=lambda x: -x.lost_ns_total)[:n]


def unknowns(cases: Sequence[Case], info: RunInfo, devices: Sequence[DeviceInfo] = ()) -> list[Unknown]:
    """What the analysis could not tell, each with how to learn it and how many cases it concerns."""
    out: list[Unknown] = []
    named = any(d.name for d in devices) or any(c.device is not None and c.device.name for c in cases)
    if cases and not named and info.device_override is None and not info.device_notes:
        out.append(
            Unknown(
                what="the files name no GPU: no peaks, no waves",
                how="name it with --device NAME (e.g. --device h100-sxm; tracekit explain --help lists the catalog)",
                cases=len(cases),
            )
        )
    if info.partial:
        reason = f": {info.incomplete_reason}" if info.incomplete_reason else ""
        out.append(Unknown(what=f"the run is partial{reason}", how="re-capture; what was kept is analysed"))
    for line in info.device_notes:
        if "--device" in line and info.device_override is None:
            out.append(Unknown(what="the files name no GPU, only its compute capability", how=line))
    several = [c for c in cases if not c.flops.per_call and c.flops.counters]  # counted, but no one count
    if several:
        out.append(
            Unknown(
                what=(
                    f"{len(several)} case(s) hold several GEMMs under one kernel and grid (their calls counted or "
                    "ran differently): no one FLOP count per call, no TFLOP/s"
                ),
                how=SEVERAL_HOW,
                cases=len(several),
            )
        )
    # a kernel Nsight Compute measured nothing for is said once, by its verdict (re-profile), below; so are cases
    # that say themselves why they have no FLOP count (a graph replay without a captured shape, kernels whose
    # launches are not in the trace), with their own reason and remedy
    failed = {c.id for c in cases if c.verdict.capture_hint == PROFILE_FAILED_HINT}
    no_flops = [
        c
        for c in cases
        if not c.flops.per_call and not c.flops.counters and c.id not in failed and not _own_flops_reason(c)
    ]
    # the cards of cases without a FLOP count whose rate is estimated from pipe activity print that estimate
    estimated = [c for c in no_flops if c.timing.kernel_tflops is not None and c.timing.achieved_estimate]
    unrated = [c for c in no_flops if c not in estimated]
    if unrated:
        out.append(
            Unknown(
                what=f"{len(unrated)} case(s) without shape or FLOP count have no TFLOP/s",
                how=f"{NCU_HOW} counts the FLOPs; or record shapes (PyTorch profiler record_shapes=True)",
                cases=len(unrated),
            )
        )
    if estimated:
        out.append(
            Unknown(
                what=f"{len(estimated)} case(s) without shape or FLOP count: TFLOP/s estimated from pipe activity",
                how=f"the estimate (peak x tensor pipe active, or 2 x FFMA rate) is no count: {NCU_HOW} counts "
                "the FLOPs; or record shapes (PyTorch profiler record_shapes=True)",
                cases=len(estimated),
            )
        )
    no_peak = [c for c in cases if c.flops.per_call and c.peak is None]
    if no_peak:
        devices = sorted({c.device.name for c in no_peak if c.device and c.device.name}) or ["an unnamed GPU"]
        out.append(
            Unknown(
                what=f"{len(no_peak)} case(s) have no datasheet peak ({', '.join(devices)})",
                how="name the GPU with --device NAME, or add it to the device catalog (~/.config/tracekit/devices.json)",
                cases=len(no_peak),
            )
        )
    no_clock = [
        c
        for c in cases
        if c.peak is not None
        and c.sm_clock_hz is None
        and not any(f.name == "clock" for f in c.factors)
        and c.id not in failed
    ]
    blind = [c for c in cases if c.ncu is None and c.verdict.factor == "in-kernel"]
    if no_clock and blind:  # both are learnt from one Nsight Compute capture: said once
        n = len({c.id for c in (*no_clock, *blind)})
        out.append(
            Unknown(
                what=f"SM clock and in-kernel causes (stalls, occupancy, tensor pipe) not measured for {n} case(s)",
                how=f"{NCU_HOW} records both",
                cases=n,
            )
        )
    elif no_clock:
        out.append(
            Unknown(
                what=f"SM clock not measured for {len(no_clock)} case(s): a clock loss hides in in-kernel",
                how=f"{NCU_HOW} records the clock each kernel ran at",
                cases=len(no_clock),
            )
        )
    elif blind:
        out.append(
            Unknown(
                what=f"in-kernel loss of {len(blind)} case(s) unexplained (no stalls, occupancy, tensor pipe)",
                how=NCU_HOW,
                cases=len(blind),
            )
        )
    # where a profile exists its occupancy is on the card; without one, the run cannot tell
    ranged = [c for c in cases if c.ncu is None and _waves_range(c)]
    if ranged:
        out.append(
            Unknown(
                what=f"wave loss of {len(ranged)} case(s) (several CTAs per SM): a range, on each card",
                how="`tracekit capture --ncu` measures the occupancy that tells which holds",
                cases=len(ranged),
            )
        )
    missing = sum(c.timing.calls_without_kernel for c in cases)
    if missing:
        out.append(
            Unknown(
                what=f"{missing} call(s) whose GEMM kernel is missing (sampled out) are left out of every number",
                how="capture the whole loop (a longer nsys or profiler window)",
                cases=sum(1 for c in cases if c.timing.calls_without_kernel),
            )
        )
    counted = (
        {c.id for c in several} | {c.id for c in (*no_flops, *no_peak) if not _own_flops_reason(c)}
    ) - failed
    hints: dict[tuple[str, str], int] = {}
    for c in cases:  # what else a verdict could not tell (no kernel time, stalled kernels ...), once per kind
        v = c.verdict
        what = v.unknown.split(": ")[0] if v.unknown else v.sentence
        if (
            v.capture_hint
            and (v.kind not in (VerdictKind.EXPLAINED, VerdictKind.NO_LOSS) or v.unknown)
            and c.id not in counted
        ):
            hints[(what, v.capture_hint)] = hints.get((what, v.capture_hint), 0) + 1
    for (what, how), n in hints.items():
        out.append(Unknown(what=f"{what} ({n} case(s))", how=how, cases=n))
    return out


def _waves_range(case: Case) -> bool:
    """Whether the case's waves factor is a range: the SM and slot models differ (several CTAs per SM)."""
    f = next((f for f in case.factors if f.name == "waves"), None)
    if f is None:
        return False
    sm, slot = f.evidence.get("sm_model"), f.evidence.get("slot_model")
    return sm is not None and slot is not None and sm - slot >= MODELS_AGREE


def summarize(
    cases: Sequence[Case],
    info: RunInfo,
    *,
    gpu_ns: float | None,
    breakdown: str | None,
    devices: Sequence[DeviceInfo] = (),
) -> Summary:
    """The :class:`Summary` of a run's cases; ``breakdown`` the step breakdown's one-line headline."""
    return Summary(
        cases=len(cases),
        gpu_ns_total=gpu_ns,
        case_ns_total=sum(c.timing.span_ns_total for c in cases),
        gemm_ns_total=sum(c.timing.gemm_ns_total for c in cases),
        breakdown=breakdown.strip() if breakdown and breakdown.strip() else None,
        top_losses=top_losses(cases),
        unknowns=unknowns(cases, info, devices),
    )


def time_headline(
    cases: int, gemm_ns: float, span_ns: float, gpu_ns: float | None, ns_text: Callable[[float], str]
) -> str:
    """The summary's first line: how many GEMM cases and their GEMM kernels' time against every kernel's. Where
    the cases' call spans (each card's time: GEMM, auxiliary kernels and the idle gaps inside the calls) add up
    past every kernel's time, as in a launch-bound loop, the line says what they span and why.
    ``ns_text`` formats a duration as the view does."""
    line = f"{cases:,} GEMM case{'s' if cases != 1 else ''}"
    if gemm_ns:
        line += f": GEMM kernels {ns_text(gemm_ns)}"
        share = share_of_kernel_time(gemm_ns, gpu_ns)
        if share is not None:
            line += f", {share:.0f}% of {ns_text(gpu_ns)} in all kernels"
        elif gpu_ns:
            line += f" (Nsight Compute replay times; all kernels on the timeline: {ns_text(gpu_ns)})"
        # the cards' times (call spans) add up past every kernel's time: say why
        if gpu_ns and span_ns > gpu_ns:
            line += f"; their calls span {ns_text(span_ns)} with auxiliary kernels and idle gaps"
    elif gpu_ns:
        line += f"; all kernels: {ns_text(gpu_ns)}"
    return line


def _own_flops_reason(c: Case) -> bool:
    """The case has no FLOP count and its verdict says why in its own words (``CaseEvidence.flops_note``), not the
    generic "no GEMM shape or FLOP count"."""
    v = c.verdict
    return (
        not c.flops.per_call
        and (v.kind == VerdictKind.CANNOT_EXPLAIN or v.unknown is not None)
        and v.capture_hint is not None
        and v.capture_hint != NCU_HINT
        and not (v.unknown or v.sentence).startswith("no GEMM shape")
    )
