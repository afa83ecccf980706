""":func:`build_cases`: measurements, timeline and Nsight Compute cases merged into one list per run."""

from __future__ import annotations

from dataclasses import replace as dc_replace
from typing import Any

import polars as pl
from msgspec.structs import replace

from tracekit.devices import DeviceSpec
from tracekit.records import Environment

from ..analysis.model import AuxKernel, Shape
from .case import CaseEvidence, _gemm_key, settle_rate
from .graph_replay import captured_ops, replay_kernel_shapes
from .names import _serves, aux_key, cannot_be_gemm, parse_gemm_name
from .ncu_evidence import (
    Evidence,
    attach_ncu,
    borrow_ncu,
    counted_per_call,
    device_from_frames,
    gather_evidence,
    ncu_cases,
    ncu_gemm_names,
    same_kernel,
    settle_several,
    tracekit_ncu_case,
)
from .parts import Clock, call, filled, retimed, timing_repeated
from .timeline import Place, timeline_cases


# --- measurements -------------------------------------------------------------------------------------------------
def _measurement_cases(frames: dict[str, pl.DataFrame], device: DeviceSpec | None) -> list[CaseEvidence]:
    """``tracekit bench`` measurements: one case per measured GEMM, one call: the median of its timed repeats
    (each repeat the GEMM once per rotated input set), with the repeats' p10 / p90 where recorded; a measurement
    keeps no single call, so its GPU time is that call's."""
    meas = frames.get("measurements")
    if meas is None or meas.height == 0:
        return []
    cases = []
    for r in meas.filter(pl.col("status").fill_null("ok") == "ok").iter_rows(named=True):
        parsed = parse_gemm_name(r.get("range")) or {}
        name = r.get("range") or f"{r.get('backend')} M={r.get('m')} N={r.get('n')} K={r.get('k')}"
        shape = None
        if r.get("m") and r.get("n") and r.get("k"):
            shape = Shape(
                m=r["m"],
                n=r["n"],
                k=r["k"],
                dtype_a=r.get("dtype") or parsed.get("dtype_a"),
                dtype_b=parsed.get("dtype_b") or r.get("dtype"),
                dtype_out=r.get("dtype_out") or parsed.get("dtype_out"),
                scale=r.get("scale") or parsed.get("scale"),
                source="measurement",
            )
        method = r.get("timing") or "events"

        def us(key: str, r: dict[str, Any] = r) -> float | None:
            return r[key] * 1e3 if r.get(key) is not None else None

        aux: tuple[AuxKernel, ...] = ()
        if r.get("aux_time_us"):  # tracekit's benchmark: the backend's activation quantize, timed apart
            to = r.get("dtype") or "its low-precision type"
            aux = (
                AuxKernel(
                    name=f"activation quantize to {to}" + (f" ({r['scale']})" if r.get("scale") else ""),
                    kernel_class="quantize",
                    role="quantize",
                    time_ns_total=us("aux_time_us") or 0.0,
                    count=1,
                ),
            )
        cases.append(
            CaseEvidence(
                origin="measurement",
                name=name,
                range=r.get("range"),
                backend=r.get("backend"),
                op=r.get("op"),
                shape=shape,
                device=device,
                measurement_id=r.get("measurement_id"),
                timing=timing_repeated(
                    us("time_us"),
                    us("aux_time_us") or 0.0,
                    0.0,
                    1,
                    gemm_p10=us("time_us_p10"),
                    gemm_p90=us("time_us_p90"),
                    source=f"measurement:{method}",
                    source_detail=f"measurement: {method}, median of {r.get('repeats') or '?'} repeats",
                ),
                aux=aux,
                notes=(MEASURED_AUX_NOTE,) if aux else (),
                clock=Clock(
                    sm_clock_hz=r.get("sm_clock_hz"),
                    source="NVML mean SM clock during the timing" if r.get("sm_clock_hz") else None,
                    power_w=r.get("power_w"),
                    power_limit_w=r.get("power_limit_w"),
                    throttle_reasons=r.get("throttle_reasons"),
                ),
                key=("measurement", name, r.get("measurement_id")),
            )
        )
    return cases


MEASURED_AUX_NOTE = (
    "aux is the backend's activation quantize (amax, scale, cast) timed apart in a loop of its own, the median of "
    "its runs, charged once per call: what a layer that quantizes its activation on every call pays. The GEMM was "
    "timed on inputs quantized beforehand; capture the run with --nsys to see the quantize's kernels by name"
)
"""What a measured case with an auxiliary time says (``tracekit bench``: ``aux_time_us``)."""


def _merge_timeline(mc: CaseEvidence, tc: CaseEvidence) -> CaseEvidence:
    """A measurement and the timeline of the same range. CUDA-graph timing keeps its times (the timeline, often
    taken under a profiler, lends kernel names and launch configuration); events timing under a profiler carries
    host overhead in every launch, so the timeline's calls replace it."""
    if not mc.timing.source.endswith("cuda-graph"):
        detail = f"{tc.timing.source_detail} (the {mc.timing.source.split(':')[-1]} measurement of the same range is kept as evidence)"
        mc = replace(
            mc,
            timing=replace(tc.timing, source_detail=detail),
            aux=tc.aux,
            fusion=tc.fusion,
            notes=tuple(
                n for n in mc.notes if n != MEASURED_AUX_NOTE
            ),  # the timeline's aux replaces the measured
        )
    elif tc.aux:  # the kernels by name, for the measurement's quantize
        mc = replace(mc, aux=tc.aux)
    return replace(
        mc, range_ids=tc.range_ids, parents=mc.parents or tc.parents, kernel=filled(mc.kernel, tc.kernel)
    )


def _attach_ncu_aux(cases: list[CaseEvidence], aux_rows: dict[str, list[dict]]) -> list[CaseEvidence]:
    """Profiled kernels of tracekit ``aux`` ranges: the auxiliary kernels of the GEMMs they feed (same backend or
    its family, M and K); for GEMMs known only from ncu, their time too (per aux range name, the summed duration
    over its instances, an instance being one launch of each distinct kernel the range holds)."""
    by_key: dict[tuple[str, int, int], tuple[float, dict[str, tuple[str | None, float, int]]]] = {}
    for name, rows in aux_rows.items():
        key = aux_key(name)
        if key is None:
            continue
        short = [r.get("name") or "" for r in rows]
        instances = max(short.count(n) for n in set(short))
        kernel_names = [r.get("demangled_name") or r.get("name") or "" for r in rows]
        ns = sum(r.get("duration_ns") or 0.0 for r in rows) / instances
        total, names = by_key.get(key, (0.0, {}))
        for r, kn in zip(rows, kernel_names, strict=True):
            cls, t, c = names.get(kn, (r.get("kernel_class"), 0.0, 0))
            names[kn] = (cls, t + (r.get("duration_ns") or 0.0) / instances, c + 1)
        by_key[key] = (total + ns, names)
    return [_with_ncu_aux(c, by_key) for c in cases]


def _with_ncu_aux(
    case: CaseEvidence,
    by_key: dict[tuple[str, int, int], tuple[float, dict[str, tuple[str | None, float, int]]]],
) -> CaseEvidence:
    """``case`` (a GEMM known only from ncu) with the profiled aux ranges that feed it (:func:`_attach_ncu_aux`)."""
    key = _gemm_key(case)
    if key is not None and case.origin == "ncu":
        for akey, (ns, names) in by_key.items():
            if not _serves(akey, key):
                continue
            t = case.timing
            mid = t.median_call
            case = replace(
                case,
                timing=retimed(
                    t,
                    aux_ns_total=t.aux_ns_total + ns * t.calls,
                    median_call=call(mid.gemm_ns, mid.aux_ns + ns, mid.gap_ns) if mid else None,
                ),
                aux=(
                    *case.aux,
                    *(
                        AuxKernel(
                            name=kn,
                            kernel_class=cls,
                            role="quantize" if cls == "quantize" else "other",
                            time_ns_total=per * t.calls,
                            count=count,
                        )
                        for kn, (cls, per, count) in names.items()
                    ),
                ),
            )
    return case


def _join_user_ncu(
    cases: list[CaseEvidence], ncu: list[CaseEvidence], rows: dict[tuple, list[dict]], ev: Evidence
) -> tuple[list[CaseEvidence], list[CaseEvidence]]:
    """The user's ranges seen by both tools: a timeline case takes the profiled rows of the same range and kernel
    (and grid, where both know it) as its evidence; ncu cases with no timeline counterpart stand alone. Returns
    the cases (those joined with their evidence) and the ncu cases that stand alone."""
    cases = list(cases)
    alone = []
    for nc in ncu:
        _, rng, kname, grid, _block = nc.key[:5]  # (a 6th: the place of a persistent kernel's launches)
        match = [
            i
            for i, c in enumerate(cases)
            if c.user_range
            and c.origin == "range"
            and (c.range == rng or c.name == rng)
            and same_kernel(c.kernel.name, kname)
            and (c.kernel.grid is None or grid is None or c.kernel.grid == grid)
        ]
        if not match:
            alone.append(nc)
            continue
        for i in match:
            tc = cases[i]
            mine = _at_place(tc, rows[(rng, kname, grid, _block)], kname)
            if tc.counted is None and tc.shape is None:
                tc = replace(tc, counted=counted_per_call(_mains(mine, kname), ev) if mine else nc.counted)
            tc = attach_ncu(tc, mine or rows[(rng, kname, grid, _block)], ev)
            if mine == [] and tc.shape is None:
                # the places no launch was profiled for: another place's count is not theirs, its rate class is
                tc = replace(
                    tc,
                    counted=dc_replace(nc.counted, flops=None, spread=None)
                    if nc.counted is not None
                    else None,
                )
            cases[i] = tc
    return cases, alone


def _mains(rows: list[dict], kname: str | None) -> list[dict]:
    """The launches of the GEMM kernel ``kname`` among a user range's profiled rows, in profiling order."""
    return sorted(
        (r for r in rows if same_kernel(r.get("demangled_name") or r.get("name"), kname)),
        key=lambda r: r["ncu_id"],
    )


def _at_place(case: CaseEvidence, rows: list[dict], kname: str | None) -> list[dict] | None:
    """The profiled rows of a case keyed by its place in its range's instances (timeline.positions): the j-th
    profiled launch of its kernel is slot j mod the kernel's launches per instance, and each takes the rows
    profiled after it up to the next launch of the kernel (its split-K reduce, its quantize); None for any other
    case."""
    place = case.key[-1] if case.key else None
    if not isinstance(place, Place):
        return None
    mains = _mains(rows, kname)
    bounds = [r["ncu_id"] for r in mains] + [float("inf")]
    out: list[dict] = []
    for j, main in enumerate(mains):
        if j % place.per_instance in place.slots:
            out.append(main)
            out.extend(r for r in rows if r not in mains and bounds[j] < r["ncu_id"] < bounds[j + 1])
    return out


def _launch_counts(profiled_rows: dict[tuple, list[dict]], ev: Evidence) -> dict[tuple, list[float | None]]:
    """Per user range and GEMM signature profiled, the FLOPs Nsight Compute counted for each launch, in
    profiling order (timeline.positions tells the launches of one kernel and grid apart by them)."""
    out: dict[tuple, list[float | None]] = {}
    for (rng, kname, grid, block), rows in profiled_rows.items():
        counts = [counted_per_call([r], ev) for r in _mains(rows, kname)]
        out[(rng, kname, grid, block)] = [c.flops if c is not None else None for c in counts]
    return out


def build_cases(
    frames: dict[str, pl.DataFrame],
    *,
    calibration: dict[str, Any] | None = None,
    environment: Environment | dict[str, Any] | None = None,
    device: DeviceSpec | None = None,
    kernel_shapes: dict[int, tuple[str, tuple] | None] | None = None,
) -> list[CaseEvidence]:
    """Every GEMM of a run, with its evidence (see the package docstring for where GEMMs come from).

    ``device`` (``--device``: tracekit.devices.lookup_device) replaces the GPU the files name, for every GEMM:
    Nsight Compute CSV exports name only the compute capability, and a user may know better than a report."""
    given = device
    if device is None:
        device = device_from_frames(frames, environment)
    elif (ncu := frames.get("ncu")) is not None and ncu.height:
        # each profiled kernel's own GPU name would win in _device_for_ncu: the flag wins over it
        frames = {**frames, "ncu": ncu.with_columns(pl.lit(None, pl.String).alias("device_name"))}
    frames = _classified(frames)
    ev = gather_evidence(frames, device)
    profiled = ncu_cases(frames, device, ev)
    cases = _measurement_cases(frames, device)
    measured: dict[str, list[int]] = {}
    for i, mc in enumerate(cases):
        measured.setdefault(mc.name, []).append(i)
    if kernel_shapes is None:  # GEMM kernels replayed from CUDA graphs, with the captured operators' shapes
        kernel_shapes = replay_kernel_shapes(frames)
    timeline = timeline_cases(
        frames,
        device,
        ncu_gemm_names(frames),
        kernel_shapes,
        captured_ops(frames),
        _launch_counts(profiled.user_rows, ev),
    )
    for case in timeline.cases:
        for i in measured.get(case.name, []):
            cases[i] = _merge_timeline(cases[i], case)
        if case.name not in measured:
            cases.append(case)
    cases, alone = _join_user_ncu(cases, profiled.user, profiled.user_rows, ev)
    cases.extend(alone)
    cases = borrow_ncu(cases, frames, ev)
    names = {c.name for c in cases}
    for name, rows in profiled.by_range.items():
        if name in names:
            cases = [attach_ncu(c, rows, ev) if c.name == name else c for c in cases]
            continue
        cases.append(tracekit_ncu_case(name, rows, device, ev))
    cases = _attach_ncu_aux(cases, profiled.aux_rows)
    cases.extend(c for c in profiled.loose if not _not_a_gemm(c))
    foreign = not any(c.origin == "measurement" or (c.origin == "range" and not c.user_range) for c in cases)
    if foreign and (frames.get("ncu") is None or frames["ncu"].height == 0):
        cases.extend(timeline.loose)
    return [_settled(c, device, given, calibration) for c in cases]


def _settled(
    case: CaseEvidence,
    device: DeviceSpec | None,
    given: DeviceSpec | None,
    calibration: dict[str, Any] | None,
) -> CaseEvidence:
    """A case with its device (``given``, ``--device``, wins over the one its rows name), its several GEMMs said
    (:func:`settle_several`), its rate class settled against the peak (:func:`settle_rate`) and the calibrated
    peak of its class."""
    if case.device is None or given is not None:
        case = replace(case, device=device)
    if case.device_name is None and case.device is not None:
        case = replace(case, device_name=case.device.name)
    case = settle_rate(settle_several(case))
    if calibration:
        case = replace(case, calibrated_tflops=calibrated_peak(calibration, case.dtype_class))
    return case


def _not_a_gemm(case: CaseEvidence) -> bool:
    """A profiled kernel in no range that cannot be a GEMM: the kernel table does not class it ``gemm``, its
    tensor pipe did nothing, and its arguments are pointers and scalars with fewer than three pointers (a GEMM
    reads A and B and writes C). yzwang2000's ``kernel_A(double *, int, int)`` and ``kernel_C(double *, const
    double *, int)`` were two "GEMMs" of a report that holds none."""
    if case.kernel.kernel_class == "gemm":
        return False
    tensor = (case.ncu.row if case.ncu else {}).get("tensor_pipe_pct")
    return not (tensor is not None and tensor > 0) and cannot_be_gemm(case.kernel.name)


def _classified(frames: dict[str, pl.DataFrame]) -> dict[str, pl.DataFrame]:
    """The frames with every kernel's class: a run imported by this version has them; frames made otherwise
    (older runs read without migration, tests) are classified here."""
    kernels = frames.get("kernels")
    ncu = frames.get("ncu")
    need = any(
        df is not None
        and df.height
        and ("kernel_class" not in df.columns or df["kernel_class"].null_count() == df.height)
        for df in (kernels, ncu)
    )
    if not need:
        return frames
    from ..taxonomy.frames import classify_frames

    return {**frames, **{k: v for k, v in classify_frames(frames).items() if k in ("kernels", "ncu")}}


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
