""":func:`build_cases`: measurements, timeline and Nsight Compute cases merged into one list per run, and
:func:`gemm_frame`, the ``gemms`` frame made from them."""

from __future__ import annotations

from typing import Any

import polars as pl

from tracekit.devices import DeviceSpec
from tracekit.frames import SPECS

from .case import GemmCase, _gemm_key, settle_rate
from .names import _serves, aux_key, classify_kernel, parse_gemm_name
from .ncu_evidence import (
    _attach_ncu,
    _borrow_ncu,
    _device_for_ncu,
    _ncu_cases,
    _ncu_evidence,
    _ncu_gemm_names,
    _user_ncu_case,
    device_from_frames,
)
from .timeline import _loose_timeline_cases, _range_cases


# --- measurements -------------------------------------------------------------------------------------------------
def _measurement_cases(frames: dict[str, pl.DataFrame], device: DeviceSpec | None) -> list[GemmCase]:
    meas = frames.get("measurements")
    if meas is None or meas.height == 0:
        return []
    cases = []
    for r in meas.filter(pl.col("status").fill_null("ok") == "ok").iter_rows(named=True):
        parsed = parse_gemm_name(r.get("range")) or {}
        case = GemmCase(
            origin="measurement",
            name=r.get("range") or f"{r.get('backend')} M={r.get('m')} N={r.get('n')} K={r.get('k')}",
            backend=r.get("backend"),
            op=r.get("op"),
            m=r.get("m"),
            n=r.get("n"),
            k=r.get("k"),
            dtype_a=r.get("dtype") or parsed.get("dtype_a"),
            dtype_b=parsed.get("dtype_b") or r.get("dtype"),
            dtype_out=r.get("dtype_out") or parsed.get("dtype_out"),
            scale=r.get("scale") or parsed.get("scale"),
        )
        case.device = device
        case.measurement_id = r.get("measurement_id")
        case.timing = r.get("timing")
        case.time_source = (
            f"measurement: {case.timing or 'timed'}, median of {r.get('repeats') or '?'} repeats"
        )
        if r.get("time_us"):
            case.main_ns = r["time_us"] * 1e3
        if r.get("aux_time_us"):
            case.aux_ns = r["aux_time_us"] * 1e3
        case.sm_clock_hz = r.get("sm_clock_hz")
        case.clock_source = "NVML mean SM clock during the timing" if case.sm_clock_hz else None
        case.power_w = r.get("power_w")
        case.power_limit_w = r.get("power_limit_w")
        case.throttle_reasons = r.get("throttle_reasons")
        cases.append(case)
    return cases


# --- all together ------------------------------------------------------------------------------------------------
_LAUNCH_FIELDS = ("main_kernel", "grid_size", "block_size", "registers_per_thread", "smem_per_block_bytes")


def _merge_timeline(mc: GemmCase, tc: GemmCase) -> None:
    """A measurement and the timeline of the same range. CUDA-graph timing keeps its times (the timeline, often
    taken under a profiler, lends kernel names and launch configuration); events timing under a profiler carries
    host overhead in every launch, so the timeline's kernel, auxiliary and idle times replace it."""
    if mc.timing != "cuda-graph":
        mc.main_ns, mc.aux_ns, mc.gap_ns, mc.launches = tc.main_ns, tc.aux_ns, tc.gap_ns, tc.launches
        mc.time_source = f"{tc.time_source} (the {mc.timing or 'untimed'} measurement of the same range is kept as evidence)"
        mc.aux_kernels = tc.aux_kernels
    elif not mc.aux_kernels:
        mc.aux_kernels = tc.aux_kernels
    mc.range_ids = tc.range_ids
    for f in _LAUNCH_FIELDS:
        if getattr(mc, f) is None:
            setattr(mc, f, getattr(tc, f))


def _attach_ncu_aux(cases: list[GemmCase], ncu_aux: dict[str, list[dict]]) -> None:
    """Profiled kernels of ``aux`` ranges: named as the auxiliary kernels of the GEMMs with the same backend, M
    and K; for GEMMs known only from ncu, their time too (per aux range name, the summed duration over the number
    of instances, an instance being one launch of each distinct kernel the range holds)."""
    by_key: dict[tuple[str, int, int], tuple[float, set[str]]] = {}
    for name, rows in ncu_aux.items():
        key = aux_key(name)
        if key is None:
            continue
        kernel_names = [r.get("name") or "" for r in rows]
        distinct = set(kernel_names)
        instances = max(kernel_names.count(n) for n in distinct)
        ns = sum(r.get("duration_ns") or 0.0 for r in rows) / instances
        total, names = by_key.get(key, (0.0, set()))
        by_key[key] = (total + ns, names | distinct)
    for case in cases:
        key = _gemm_key(case)
        for akey, (ns, names) in by_key.items() if key is not None else ():
            if not _serves(akey, key):
                continue
            if case.origin == "ncu":
                case.aux_ns += ns
            case.aux_kernels = sorted(set(case.aux_kernels) | names)


def build_cases(
    frames: dict[str, pl.DataFrame],
    *,
    calibration: dict[str, Any] | None = None,
    environment: dict[str, Any] | None = None,
    device: DeviceSpec | None = None,
) -> list[GemmCase]:
    """Every GEMM of a run, with its evidence (see the module docstring for where GEMMs come from).

    ``device`` (``--device``: tracekit.devices.lookup_device) replaces the GPU the files name, for every GEMM:
    Nsight Compute CSV exports name only the compute capability, and a user may know better than a report."""
    given = device
    if device is None:
        device = device_from_frames(frames, environment)
    elif (ncu := frames.get("ncu")) is not None and ncu.height:
        # each profiled kernel's own GPU name would win in _device_for_ncu: the flag wins over it
        frames = {**frames, "ncu": ncu.with_columns(pl.lit(None, pl.String).alias("device_name"))}
    metrics, rules = _ncu_evidence(frames)
    ncu_by_range, ncu_aux, loose, ncu_user = _ncu_cases(frames, device, metrics, rules)
    cases = _measurement_cases(frames, device)
    measured: dict[str, list[GemmCase]] = {}
    for mc in cases:
        measured.setdefault(mc.name, []).append(mc)
    for case in _range_cases(frames, device, _ncu_gemm_names(frames, metrics)):
        for mc in measured.get(case.name, []):
            _merge_timeline(mc, case)
        if case.name not in measured:
            cases.append(case)
    # the user's ranges: a timeline case takes the profiled kernels of the range with the same name as evidence
    timeline_user = {c.range_name: c for c in cases if c.user_range and c.range_name}
    for name, (mains, auxs) in ncu_user.items():
        tc = timeline_user.get(name)
        if tc is not None:
            if tc.counted is None and not tc.shape_known:
                tc.counted = _user_ncu_case(name, mains, auxs, device, metrics, rules).counted
            _attach_ncu(tc, mains, metrics, rules)
            tc.ncu_rules = [x for r in mains + auxs for x in rules.get(r["ncu_id"], [])]
        else:
            cases.append(_user_ncu_case(name, mains, auxs, device, metrics, rules))
    _borrow_ncu(cases, frames, metrics, rules)
    names = {c.name for c in cases}
    for name, rows in ncu_by_range.items():
        if name in names:
            for c in cases:
                if c.name == name:
                    _attach_ncu(c, rows, metrics, rules)
            continue
        parsed = parse_gemm_name(name) or {}
        case = GemmCase(origin="ncu", name=name, **parsed)
        case.device = _device_for_ncu(rows[0], device)
        case.device_name = rows[0].get("device_name")
        mains = [r for r in rows if classify_kernel(r.get("name")) == "main"] or rows
        auxs = [r for r in rows if r not in mains]
        case.launches = len(mains)
        case.main_ns = sum(r.get("duration_ns") or 0.0 for r in mains) / len(mains)
        case.aux_ns = sum(r.get("duration_ns") or 0.0 for r in auxs) / len(mains)
        case.aux_kernels = sorted({r.get("name") for r in auxs if r.get("name")})
        case.time_source = "Nsight Compute: duration of each profiled launch (kernel replay)"
        _attach_ncu(case, rows, metrics, rules)
        cases.append(case)
    _attach_ncu_aux(cases, ncu_aux)
    cases.extend(loose)
    foreign = not any(c.origin == "measurement" or (c.origin == "range" and not c.user_range) for c in cases)
    if foreign and (frames.get("ncu") is None or frames["ncu"].height == 0):
        owned = {rid for c in cases if c.user_range for rid in c.range_ids}
        cases.extend(_loose_timeline_cases(frames, device, owned))
    for case in cases:
        if case.device is None or given is not None:
            case.device = device
        if case.device_name is None and case.device is not None:
            case.device_name = case.device.name
        settle_rate(case)
        if calibration:
            case.calibrated_tflops = calibrated_peak(calibration, case.dtype_class)
    return cases


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


def gemm_frame(
    cases: list[GemmCase], verdicts: dict[int, tuple[str | None, float | None]] | None = None
) -> pl.DataFrame:
    """The ``gemms`` frame: one row per case (``verdicts`` maps case index -> (verdict, gain %))."""
    rows = []
    for i, c in enumerate(cases):
        peak = c.peak_tflops
        ach = c.achieved_tflops
        verdict, gain = (verdicts or {}).get(i, (None, None))
        rows.append(
            {
                "gemm_id": i,
                "origin": c.origin,
                "range": c.name,
                "context": c.context,
                "backend": c.backend,
                "op": c.op,
                "m": c.m,
                "n": c.n,
                "k": c.k,
                "dtype_a": c.dtype_a,
                "dtype_b": c.dtype_b,
                "dtype_out": c.dtype_out,
                "scale": c.scale,
                "dtype_class": c.dtype_class,
                "launches": c.launches,
                "time_source": c.time_source,
                "main_kernel": c.main_kernel,
                "aux_kernels": list(c.aux_kernels) or None,
                "device_name": c.device_name,
                "device_key": c.device.key if c.device else None,
                "flops": c.flops,
                "flops_source": c.flops_source,
                "dtype_source": c.dtype_source,
                "counted_flops": c.counted.flops if c.counted else None,
                "min_bytes": c.bytes_min,
                "intensity_flops_per_byte": c.intensity,
                "main_time_ns": c.main_ns,
                "aux_time_ns": c.aux_ns,
                "gap_time_ns": c.gap_ns,
                "kernel_tflops": c.kernel_tflops,
                "achieved_tflops": ach,
                "achieved_estimate": c.achieved_estimate,
                "peak_tflops": peak,
                "peak_source": c.device.peak_source(c.dtype_class) if c.device and peak else None,
                "calibrated_tflops": c.calibrated_tflops,
                "pct_of_peak": 100.0 * ach / peak if ach and peak else None,
                "pct_of_calibrated": 100.0 * ach / c.calibrated_tflops
                if ach and c.calibrated_tflops
                else None,
                "roofline_bound": c.bound,
                "memory_roof_tflops": c.memory_roof_tflops,
                "sm_clock_hz": c.sm_clock_hz,
                "clock_source": c.clock_source,
                "power_w": c.power_w,
                "power_limit_w": c.power_limit_w,
                "throttle_reasons": c.throttle_reasons,
                "grid_size": c.grid_size,
                "block_size": c.block_size,
                "registers_per_thread": c.registers_per_thread,
                "smem_per_block_bytes": c.smem_per_block_bytes,
                "ncu_id": c.ncu_id,
                "measurement_id": c.measurement_id,
                "verdict": verdict,
                "verdict_gain_pct": gain,
            }
        )
    spec = SPECS["gemms"]
    if not rows:
        return spec.empty()
    return spec.conform(pl.DataFrame(rows, infer_schema_length=None))
