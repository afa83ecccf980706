"""Building the one :class:`~.model.Analysis` of a run: its cases (found, explained and converted once), failures,
devices, ranks, MoE and the summary every view opens with.

:func:`case_list` is the only place GEMM cases are built and explained (``analyzers/gemm`` + ``analyzers/explain``);
the cross-rank analysis calls it per rank. :func:`analyze_frames` assembles an Analysis from a run's frames,
:func:`analyze_run` from a run on disk (frames, calibration and ``--device`` notes included).
"""

from __future__ import annotations

from pathlib import Path
from typing import TYPE_CHECKING, Any

import msgspec
import polars as pl

from tracekit import __version__
from tracekit.devices import DeviceSpec, candidates_line, find_calibration, match_device
from tracekit.numbers import finite
from tracekit.records import Environment, gpu_of
from tracekit.run import Run

from .headline import summarize
from .model import (
    Analysis,
    Case,
    CasePlace,
    DeviceInfo,
    Dist,
    Failure,
    FlopsInfo,
    PeakInfo,
    RateClass,
    RunInfo,
    SourceInfo,
)
from .sections import (
    Collectives,
    HistogramBin,
    MoeLaunch,
    MoeSummary,
    RankGemm,
    RankRow,
    RankSpread,
    RankStep,
    RankSummary,
    StepBreakdown,
    WhatIf,
    failure_groups,
)
from .tables import run_tables, wrong_results

if TYPE_CHECKING:
    from ..explain import Waterfall

__all__ = [
    "analyze_frames",
    "analyze_run",
    "case_list",
    "case_of",
    "device_info",
    "device_notes",
    "order_cases",
]


# --- cases ---------------------------------------------------------------------------------------------------------
def order_cases(cases: list[Case]) -> list[Case]:
    """Most time in calls first (``timing.span_ns_total``); cases of unknown time last, then by name."""
    return sorted(cases, key=lambda c: (-(c.timing.span_ns_total or 0.0), c.name, c.id))


def _unique_ids(cases: list[Case]) -> list[Case]:
    """Ids made unique within the run (two cases with the same key get ``-2``, ``-3`` in their order)."""
    import msgspec

    seen: dict[str, int] = {}
    out = []
    for c in cases:
        n = seen.get(c.id, 0) + 1
        seen[c.id] = n
        out.append(c if n == 1 else msgspec.structs.replace(c, id=f"{c.id}-{n}"))
    return out


def case_list(
    frames: dict[str, pl.DataFrame],
    *,
    environment: Environment | dict[str, Any] | None = None,
    device: DeviceSpec | None = None,
    calibration: dict[str, Any] | None = None,
) -> list[Case]:
    """Every GEMM case of ``frames``, explained, ordered by time in calls (largest first). ``device`` (``--device``)
    replaces the GPU the files name."""
    from ..explain import explain_case
    from ..gemm import build_cases

    source = "--device" if device else None
    found = build_cases(frames, calibration=calibration, environment=environment, device=device)
    return order_cases(_unique_ids([case_of(explain_case(c), device_source=source) for c in found]))


_ORIGIN = {
    "measurement": "measurement",
    "range": "timeline",
    "ncu": "ncu",
    "ncu-kernel": "ncu",
    "kernel": "kernel",
}
"""A found case's origin as the Analysis names it."""


def _text(value: Any) -> str | None:
    """A string or None, never an empty string."""
    if value is None:
        return None
    text = str(value).strip()
    return text or None


def _dist(d: Dist) -> Dist:
    return Dist(median=finite(d.median), p10=finite(d.p10), p90=finite(d.p90))


def device_info(
    spec: DeviceSpec | None, name: str | None = None, source: str | None = None
) -> DeviceInfo | None:
    """A catalog device (or only a name the files gave) as :class:`DeviceInfo`."""
    if spec is None:
        return DeviceInfo(name=_text(name), source="unknown") if _text(name) else None
    return DeviceInfo(
        key=spec.key,
        name=spec.name,
        compute_capability=spec.compute_capability,
        sm_count=spec.sm_count,
        boost_clock_hz=spec.boost_clock_hz,
        memory_bandwidth_bytes_per_s=spec.memory_bandwidth_bytes_per_s,
        source=source or spec.provenance,
    )


def case_of(wf: Waterfall, *, device_source: str | None = None) -> Case:
    """The one :class:`Case` of an explained GEMM: the parts found (already the model's: shape, kernel, timing,
    auxiliary kernels, fusion candidates), the numbers derived from them (FLOPs, rate class, peak, rates), the
    waterfall's factors and notes and its verdict, each unknown as None and each text never empty.
    ``device_source`` names where the device came from when it was not the files (``--device``)."""
    from ..explain import verdict_of

    gc = wf.case
    t = gc.timing
    peak_value = finite(wf.peak_tflops)
    dtype_class, rate_source, rate_note = gc.rate()
    ach = finite(gc.achieved_tflops)
    peak = None
    if peak_value is not None:
        cal = finite(gc.calibrated_tflops)
        peak = PeakInfo(
            tflops=peak_value,
            source=gc.device.peak_source(dtype_class) if gc.device else "datasheet",
            dtype_class=dtype_class,
            calibrated_tflops=cal,
            pct_of_calibrated=100.0 * ach / cal if ach and cal else None,
            memory_roof_tflops=finite(gc.memory_roof_tflops),
            roofline_bound=gc.bound,
        )
    counted = gc.counted
    per_call = finite(gc.flops)
    k = gc.kernel
    calls = max(t.calls, 1)
    return Case(
        id=gc.id,
        name=_text(gc.name) or _text(k.name) or "GEMM",
        origin=_ORIGIN.get(gc.origin, gc.origin),
        range=_text(gc.range),
        parents=[p for p in (_text(x) for x in gc.parents) if p],
        position=gc.position,
        place=CasePlace(nth=list(gc.place.nth), launches=gc.place.launches) if gc.place else None,
        backend=_text(gc.backend),
        op=_text(gc.op),
        kernel=msgspec.structs.replace(  # a named kernel with no class is the case's main kernel
            k,
            name=_text(k.name),
            family=_text(k.family),
            kernel_class=_text(k.kernel_class) or ("gemm" if k.name else None),
        ),
        shape=gc.shape,
        flops=FlopsInfo(
            per_call=per_call,
            total=per_call * t.calls if per_call is not None and t.calls else None,
            source=gc.flops_source,
            counted_per_call=finite(counted.flops) if counted else None,
            counters=list(counted.counter_names) if counted else [],
            bytes_min=finite(gc.bytes_moved),
            bytes_source=_text(gc.bytes_source),
            note=_text(gc.flops_note if counted and counted.spread else counted.dtype_note)
            if counted
            else None,
        ),
        rate=RateClass(dtype_class=dtype_class, source=rate_source, note=_text(rate_note)),
        timing=msgspec.structs.replace(
            t,
            gemm_ns=_dist(t.gemm_ns),
            aux_ns=_dist(t.aux_ns),
            gap_ns=_dist(t.gap_ns),
            span_ns=_dist(t.span_ns),
            busy_ns=_dist(t.busy_ns),
            gap_max_ns=finite(t.gap_max_ns),
            aux_apart_ns=finite(t.aux_apart_ns),
            achieved_tflops=ach,
            kernel_tflops=finite(gc.kernel_tflops),
            achieved_estimate=_text(gc.achieved_estimate),
            source_detail=_text(t.source_detail),
        ),
        aux=[
            msgspec.structs.replace(
                u,
                kernel_class=_text(u.kernel_class),
                time_ns_total=finite(u.time_ns_total),
                per_call_ns=finite((u.time_ns_total or 0.0) / calls),
            )
            for u in gc.aux
            if _text(u.name)
        ],
        fusion=[
            msgspec.structs.replace(
                u,
                op=_text(u.op),
                kernels=[n for n in (_text(x) for x in u.kernels) if n],
                per_call_ns=finite(u.time_ns_total / calls),
                remedy=_text(u.remedy),
            )
            for u in gc.fusion
        ],
        ncu=gc.ncu.evidence() if gc.ncu is not None else None,
        device=device_info(gc.device, gc.device_name, device_source),
        peak=peak,
        pct_of_peak=min(100.0, 100.0 * ach / peak_value) if ach and peak_value else None,
        sm_clock_hz=finite(gc.clock.sm_clock_hz),
        clock_source=_text(gc.clock.source),
        power_w=finite(gc.clock.power_w),
        power_limit_w=finite(gc.clock.power_limit_w),
        factors=list(wf.factors),
        complete=wf.complete if peak_value is not None and ach is not None else None,
        verdict=verdict_of(wf),
        notes=list(dict.fromkeys(n for n in (_text(x) for x in wf.notes) if n)),
    )


# --- the run's other parts --------------------------------------------------------------------------------------------
def _failures(frames: dict[str, pl.DataFrame]) -> list[Failure]:
    df = frames.get("failures")
    if df is None or df.height == 0:
        return []
    fields = set(Failure.__struct_fields__)
    out = []
    for r in df.iter_rows(named=True):
        row = {k: v for k, v in r.items() if k in fields and v not in (None, "")}
        if "failure_id" in r and r["failure_id"] is not None:
            row["id"] = r["failure_id"]
        versions = r.get("versions")
        row["versions"] = (
            {str(p["package"]): str(p["version"]) for p in versions if p.get("version")} if versions else None
        )
        for key in ("m", "n", "k", "id"):
            if key in row and row[key] is not None:
                row[key] = int(row[key])
        for key, value in list(row.items()):
            if key not in ("m", "n", "k", "id", "versions") and value is not None:
                row[key] = str(value)
        out.append(Failure(**row))
    return out


def _devices(frames: dict[str, pl.DataFrame], run: Run | None, device: DeviceSpec | None) -> list[DeviceInfo]:
    if device is not None:
        return [device_info(device, source="--device")]  # type: ignore[list-item]
    from ..summary import devices

    out = []
    for d in devices(frames, run):
        spec = match_device(d["name"]) if d.get("name") else None
        known = spec is not None and spec.provenance != "unknown"
        out.append(
            DeviceInfo(
                key=spec.key if known else None,  # type: ignore[union-attr]
                name=d.get("name"),
                compute_capability=d.get("compute_capability")
                or (spec.compute_capability if known else None),  # type: ignore[union-attr]
                sm_count=d.get("sm_count") or (spec.sm_count if known else None),  # type: ignore[union-attr]
                boost_clock_hz=spec.boost_clock_hz if known else None,  # type: ignore[union-attr]
                memory_bandwidth_bytes_per_s=spec.memory_bandwidth_bytes_per_s if known else None,  # type: ignore[union-attr]
                source=spec.provenance if spec is not None else "unknown",
            )
        )
    return out


def _ranks(
    frames: dict[str, pl.DataFrame],
    environment: Environment | dict[str, Any] | None,
    calibration: dict[str, Any] | None,
) -> RankSummary | None:
    import msgspec

    from ..ranks import analyze_ranks

    ra = analyze_ranks(frames, environment=environment, calibration=calibration)
    if ra is None:
        return None
    d = ra.to_dict()

    def typed(rows: list[dict[str, Any]], kind: type) -> list[Any]:
        fields = set(kind.__struct_fields__)
        return [msgspec.convert({k: v for k, v in r.items() if k in fields}, kind) for r in rows]

    return RankSummary(
        ranks=typed(d["ranks"], RankRow),
        straggler=d["straggler"],
        reasons=list(d["reasons"]),
        gemm_spread=typed(d["gemm_spread"], RankSpread),
        gemms=typed(d["gemms"], RankGemm),
        steps=typed(d["steps"], RankStep),
        collectives=msgspec.convert(d["collectives"], Collectives),
        notes=list(d["notes"]),
    )


def _moe(
    frames: dict[str, pl.DataFrame], environment: Environment | dict[str, Any] | None
) -> MoeSummary | None:
    has_rows = frames.get("moe") is not None and frames["moe"].height > 0
    ranges = frames.get("ranges")
    has_ranges = ranges is not None and ranges.height and ranges.filter(pl.col("range_kind") == "moe").height
    if not has_rows and not has_ranges:
        return None
    from ..moe import analyze_moe, expert_histogram, focus_launch, moe_json

    analysis = analyze_moe(frames, environment=environment)
    if analysis.empty:
        return None
    data = moe_json(analysis)
    focus = focus_launch(analysis.launches)
    for launch in data["launches"]:  # every launch's histogram: the views draw the highlighted one's
        launch["histogram"] = expert_histogram(analysis.experts, launch["launch_id"])
    return MoeSummary(
        launches=msgspec.convert(data["launches"], list[MoeLaunch]),
        whatif=msgspec.convert(data["whatif"], list[WhatIf]),
        focus_launch=focus,
        histogram=msgspec.convert(
            expert_histogram(analysis.experts, focus) if focus is not None else [], list[HistogramBin]
        ),
    )


def _named_gpus(
    frames: dict[str, pl.DataFrame], environment: Environment | dict[str, Any] | None
) -> set[str]:
    """Every GPU name the run's files and environment give."""
    names: set[str] = set()
    for frame, col in (("devices", "name"), ("ncu", "device_name")):
        df = frames.get(frame)
        if df is not None and df.height and col in df.columns:
            names.update(df[col].drop_nulls().unique().to_list())
    name = gpu_of(environment).name
    if name:
        names.add(name)
    return names


def device_notes(
    frames: dict[str, pl.DataFrame],
    environment: Environment | dict[str, Any] | None,
    device: DeviceSpec | None,
) -> list[str]:
    """One line each: the GPU ``--device`` replaced (when the run names another), or, without ``--device``, the
    catalog GPUs a run that names no GPU but a compute capability may have run on (with the ``--device`` hint)."""

    def catalog_key(name: str) -> str | None:
        dev = match_device(name)
        return dev.key if dev is not None and dev.provenance != "unknown" else None

    named = _named_gpus(frames, environment)
    if device is not None:
        others = sorted(n for n in named if catalog_key(n) != device.key)
        if others:
            return [f"--device {device.key}: the run names {', '.join(others)}; using {device.name} as asked"]
        return []
    if named:
        return []
    capabilities: set[str] = set()
    for frame in ("ncu", "devices"):
        df = frames.get(frame)
        if df is not None and df.height and "compute_capability" in df.columns:
            capabilities.update(df["compute_capability"].drop_nulls().unique().to_list())
    lines = [candidates_line(cc) for cc in sorted(capabilities)]
    return [line for line in lines if line]


def _run_info(run: Run | None, path: str | None, frames: dict[str, pl.DataFrame], **extra: Any) -> RunInfo:
    record = run.record if run is not None else None
    command = record.command if record is not None else None
    sources = [
        SourceInfo(path=s.path, kind=s.kind, status=s.status, message=s.message)
        for s in (record.sources if record is not None else [])
    ]

    def height(name: str) -> int:
        df = frames.get(name)
        return df.height if df is not None else 0

    return RunInfo(
        path=str(run.path) if run is not None else str(path or ""),
        name=run.name if run is not None else (Path(path).name if path else None),
        status=run.status if run is not None else None,
        partial=bool(record is not None and record.partial),
        incomplete_reason=(record.incomplete_reason or None) if record is not None else None,
        created=(record.created or None) if record is not None else None,
        command=[str(c) for c in command] if isinstance(command, list) else None,
        tracekit_version=__version__,
        sources=sources,
        kernel_count=height("kernels"),
        range_count=height("ranges"),
        ncu_kernel_count=height("ncu"),
        measurement_count=height("measurements"),
        **extra,
    )


BREAKDOWN_SCOPES = ("none", "devices", "top", "all")
"""How much of the step breakdown an Analysis holds: none; per device only; per device and the ``RANGE_LIMIT``
range names with the longest GPU windows (the default); per device and every range name. Per range name costs the
most at scale (7.7 s against 1.8 s at 945k kernels: docs/PERFORMANCE.md), so explain holds the devices (its
summary line needs no more); show, report and the TUI hold the top range names (show: every one with ``--all``)
and draw that breakdown, none computes its own."""


def _breakdown(frames: dict[str, pl.DataFrame], run: Run | None, scope: str) -> StepBreakdown | None:
    """The step breakdown (analyzers/breakdown: GPU time by kernel class, idle and communication overlap per device
    and per range name, as ``scope`` says: :data:`BREAKDOWN_SCOPES`); None for a run with no timeline or ``scope``
    none."""
    if scope not in BREAKDOWN_SCOPES:
        raise ValueError(f"breakdown scope {scope!r} is not one of {', '.join(BREAKDOWN_SCOPES)}")
    if scope == "none":
        return None
    from ..breakdown import RANGE_LIMIT, breakdown_and, memops_recorded
    from ..breakdown.steps import step_headline, step_windows

    kernels, memops = frames.get("kernels"), frames.get("memops")
    if (kernels is None or kernels.height == 0) and (memops is None or memops.height == 0):
        return None
    # over the user's steps where the run has any, saying which (analyzers/breakdown/steps.py): their windows
    # broken down from the same interval covers as the run's
    found = step_windows(frames.get("ranges"))
    result, step_slices = breakdown_and(
        frames,
        also=found[1] if found is not None else None,
        range_limit=None if scope == "all" else RANGE_LIMIT,
        with_ranges=scope in ("top", "all"),
        memops=memops_recorded(run.record if run is not None else None),
    )
    if not result.devices:
        return None
    line = step_headline(result, (found[0], step_slices) if found is not None else None)
    return msgspec.structs.replace(result, headline=line)


def _recommendation(run: Run | None, frames: dict[str, pl.DataFrame]) -> Any:
    """The backends table of a ``bench gemm --shapes-from`` run (its manifest's plan, its measurements and
    failures), None for any other run."""
    if run is None:
        return None
    from ..recommend import recommendation_of

    return recommendation_of(run.record, frames)


# --- all together ------------------------------------------------------------------------------------------------------
def analyze_frames(
    frames: dict[str, pl.DataFrame],
    *,
    run: Run | None = None,
    path: str | None = None,
    device: DeviceSpec | None = None,
    calibration: dict[str, Any] | None = None,
    calibration_source: str | None = None,
    breakdown: str = "top",
) -> Analysis:
    """The Analysis of a run's frames (``run`` gives the manifest: status, command, environment, sources);
    ``breakdown`` says how much of the step breakdown it holds (:data:`BREAKDOWN_SCOPES`)."""
    environment = run.record.environment if run is not None else None
    cases = case_list(frames, environment=environment, device=device, calibration=calibration)
    notes = device_notes(frames, environment, device)
    info = _run_info(
        run,
        path,
        frames,
        calibration=calibration_source,
        device_override=device.key if device is not None else None,
        device_notes=notes,
    )
    kernels = frames.get("kernels")
    gpu_ns = float(kernels["duration_ns"].sum()) if kernels is not None and kernels.height else None
    steps = _breakdown(frames, run, breakdown)
    devices = _devices(frames, run, device)
    line = None
    if steps is not None:
        from ..breakdown.table import headline

        line = steps.headline or "; ".join(headline(s) for s in steps.devices)
    failures = _failures(frames)
    return Analysis(
        run=info,
        devices=devices,
        summary=summarize(cases, info, gpu_ns=gpu_ns, breakdown=line, devices=devices),
        breakdown=steps,
        cases=cases,
        failures=failures,
        failure_groups=failure_groups(failures),
        ranks=_ranks(frames, environment, calibration),
        moe=_moe(frames, environment),
        tables=run_tables(frames, limit=None) if breakdown == "all" else run_tables(frames),
        wrong_results=wrong_results(frames),
        recommendation=_recommendation(run, frames),
    )


def analyze_run(
    run: Run,
    frames: dict[str, pl.DataFrame] | None = None,
    *,
    device: DeviceSpec | None = None,
    calibration: Path | str | dict[str, Any] | None = None,
    breakdown: str = "top",
) -> Analysis:
    """The Analysis of a run on disk: its frames (read when not given), the calibration profile
    (:func:`tracekit.devices.find_calibration`: ``calibration`` a path or a loaded profile, else the one the run
    carries or the cached one of its GPU) and ``device`` (``--device``)."""
    if frames is None:
        from ..store import load_frames

        frames = load_frames(run)
    if isinstance(calibration, dict):
        cal, source = calibration, "given"
    else:
        cal, source = find_calibration(run, frames, calibration)
    return analyze_frames(
        frames, run=run, device=device, calibration=cal, calibration_source=source, breakdown=breakdown
    )
