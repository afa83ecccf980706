"""Nsight Compute evidence for GEMM cases: the device a row ran on, the metrics and ncu rules attached to a
case, cases from ncu rows alone (tracekit's ranges, the user's ranges, or one kernel each), and borrowing ncu
rows for cases found on a timeline."""

from __future__ import annotations

from typing import Any

import polars as pl

from tracekit import naming
from tracekit.devices import DeviceSpec, match_device
from tracekit.records import gpu_of

from ..flops import COUNTER_PREFIXES, CountedFlops, counted_flops
from ..taxonomy import classify_name
from ..taxonomy.frames import ncu_evidence
from .case import GemmCase
from .names import aux_key, classify_kernel, parse_gemm_name
from .user_ranges import _GEMM_RANGE, _gemm_like, is_op_range


# --- devices ------------------------------------------------------------------------------------------------------
def device_from_frames(
    frames: dict[str, pl.DataFrame], environment: dict[str, Any] | None
) -> DeviceSpec | None:
    dev = frames.get("devices")
    if dev is not None and dev.height:
        row = dev.filter(pl.col("name").is_not_null()).head(1).to_dicts()
        if row:
            r = row[0]
            return match_device(
                r["name"],
                r["compute_capability"],
                r["sm_count"],
                clock_hz=r["boost_clock_hz"],
                memory_bytes=r.get("memory_bytes"),
            )
    gpu = gpu_of(environment)
    if gpu.name:
        return match_device(gpu.name, gpu.compute_capability, gpu.sm_count)
    return None


def _device_for_ncu(row: dict[str, Any], fallback: DeviceSpec | None) -> DeviceSpec | None:
    """The device of a profiled kernel; a CSV export without a GPU name still gets its architecture's limits."""
    if row.get("device_name") or (fallback is None and row.get("compute_capability")):
        return match_device(
            row.get("device_name"),
            row.get("compute_capability"),
            row.get("sm_count"),
            clock_hz=row.get("boost_clock_hz"),
        )
    return fallback


# --- ncu evidence -------------------------------------------------------------------------------------------------
_EXTRA_METRIC_PREFIXES = (
    "smsp__average_warps_issue_stalled_",
    "smsp__pcsamp_warps_issue_stalled_",
    "sm__pipe_tensor_op_hmma_cycles_active.avg.pct_of_peak_sustained_elapsed",
    "sm__pipe_tensor_cycles_active.avg.pct_of_peak_sustained_elapsed",
    "sm__inst_executed_pipe_tensor",
    "smsp__sass_thread_inst_executed_op_ffma_pred_on.sum.per_cycle_elapsed",
    "launch__occupancy_limit_",
    "launch__cluster_size",
    "sm__maximum_warps_per_active_cycle_pct",
    "gpu__dram_throughput.avg.pct_of_peak_sustained_elapsed",
    "dram__bytes.sum.per_second",
    "launch__waves_per_multiprocessor",
    "sm__warps_active.avg.pct_of_peak_sustained_active",
    *COUNTER_PREFIXES,
)


def _ncu_evidence(
    frames: dict[str, pl.DataFrame],
) -> tuple[dict[int, dict[str, float]], dict[int, list[dict]]]:
    metrics: dict[int, dict[str, float]] = {}
    m = frames.get("ncu_metrics")
    if m is not None and m.height:
        expr = pl.lit(False)
        for p in _EXTRA_METRIC_PREFIXES:
            expr = expr | pl.col("metric").str.starts_with(p)
        for r in m.filter(expr & pl.col("value").is_not_null()).iter_rows(named=True):
            metrics.setdefault(r["ncu_id"], {})[r["metric"]] = r["value"]
    rules: dict[int, list[dict]] = {}
    nr = frames.get("ncu_rules")
    if nr is not None and nr.height:
        for r in nr.filter(pl.col("kind") != "OK").iter_rows(named=True):
            rules.setdefault(r["ncu_id"], []).append(r)
    return metrics, rules


def _kernel_counts(row: dict[str, Any], metrics: dict) -> CountedFlops | None:
    return counted_flops(metrics.get(row["ncu_id"], {}), row.get("demangled_name") or row.get("name"))


def _same_kernel(a: str | None, b: str | None) -> bool:
    """Whether two spellings of a kernel name (timeline vs ncu; demangled vs function name) are one kernel."""
    if not a or not b:
        return False
    if a == b:
        return True
    short_a, short_b = a.split("(")[0].split("<")[0], b.split("(")[0].split("<")[0]
    return short_a.removeprefix("void ").strip() == short_b.removeprefix("void ").strip()


def _pick_main(case: GemmCase, rows: list[dict[str, Any]], metrics: dict) -> dict[str, Any]:
    """The profiled row of the case's main kernel: the timeline's main kernel by name when known, else the row
    with the most counted math, else the longest kernel classified ``main``."""
    if case.main_kernel:
        named = [r for r in rows if _same_kernel(case.main_kernel, r.get("demangled_name") or r.get("name"))]
        named = named or [r for r in rows if _same_kernel(case.main_kernel, r.get("name"))]
        if named:
            return max(named, key=lambda r: r.get("duration_ns") or 0.0)
    counted = [(c.flops, r) for r in rows if (c := _kernel_counts(r, metrics)) is not None and not c.simt]
    if counted:
        return max(counted, key=lambda fr: fr[0])[1]
    mains = [r for r in rows if classify_kernel(r.get("name")) == "main"] or rows
    return max(mains, key=lambda r: r.get("duration_ns") or 0.0)


def _attach_ncu(case: GemmCase, rows: list[dict[str, Any]], metrics: dict, rules: dict) -> None:
    """Use the main kernel of ``rows`` (:func:`_pick_main`) as the case's profiled evidence, with its counted
    FLOPs and DRAM bytes."""
    main = _pick_main(case, rows, metrics)
    case.counted = case.counted or _kernel_counts(main, metrics)
    if case.dram_bytes is None and main.get("dram_bytes"):
        case.dram_bytes = float(main["dram_bytes"])
    elif case.dram_bytes is None and main.get("dram_bytes_per_s") and main.get("duration_ns"):
        case.dram_bytes = float(main["dram_bytes_per_s"]) * float(main["duration_ns"]) * 1e-9  # rate x time
    case.ncu = main
    case.ncu_id = main["ncu_id"]
    case.ncu_metrics = metrics.get(main["ncu_id"], {})
    case.ncu_rules = [x for r in rows for x in rules.get(r["ncu_id"], [])]
    case.main_kernel = case.main_kernel or main.get("demangled_name") or main.get("name")
    case.grid_size = case.grid_size or main.get("grid_size")
    case.block_size = case.block_size or main.get("block_size")
    case.registers_per_thread = case.registers_per_thread or main.get("registers_per_thread")
    if case.smem_per_block_bytes is None:
        smem = (main.get("static_smem_bytes") or 0) + (main.get("dynamic_smem_bytes") or 0)
        case.smem_per_block_bytes = smem or None
    if case.sm_clock_hz is None and main.get("sm_clock_hz"):
        case.sm_clock_hz = main["sm_clock_hz"]
        control = main.get("clock_control")
        case.clock_source = "ncu gpc__cycles_elapsed.avg.per_second" + (
            f" (clock control {control})" if control else ""
        )


def _ncu_gemm_names(frames: dict[str, pl.DataFrame], metrics: dict) -> set[str]:
    """Names (function and demangled) of profiled kernels the kernel table does not know that Nsight Compute
    shows doing tensor math (tensor-op counters > 0, or a busy tensor pipe: analyzers/taxonomy/frames.py): a
    Triton GEMM named ``_mm`` is GEMM-like; a known attention or convolution kernel is not, whatever its
    counters."""
    return {name for name in ncu_evidence(frames) if not classify_name(name).known}


def _known_other(row: dict[str, Any]) -> bool:
    """Whether a profiled kernel is one the kernel table knows to be no GEMM (attention, rng, a norm, a
    convolution ...): never a GEMM case of its own."""
    info = classify_name(row.get("demangled_name") or row.get("name"))
    return info.known and info.kernel_class != "gemm"


def _user_range_of(row: dict[str, Any]) -> str | None:
    """The user's own innermost NVTX range of a profiled kernel: profiler op ranges (``aten::addmm, seq = 7``)
    are skipped outward through the NVTX stack; None when the kernel is in no user range."""
    rng = row.get("nvtx_range")
    if not rng or naming.decode(rng) is not None:
        return None
    if not is_op_range(rng):
        return rng
    for entry in reversed(row.get("nvtx_stack") or []):
        name = entry.get("name") if isinstance(entry, dict) else None
        if name and not is_op_range(name) and naming.decode(name) is None:
            return name
    return None


def _user_split(
    name: str, rows: list[dict[str, Any]], metrics: dict, gemm_names: set[str]
) -> tuple[list[dict], list[dict]] | None:
    """Main and auxiliary rows of a user range's profiled kernels; None when the range is not a GEMM case (no
    GEMM-like kernel and a name that does not say GEMM)."""
    mains = [
        r
        for r in rows
        if _gemm_like(r.get("name"), gemm_names) or _gemm_like(r.get("demangled_name"), gemm_names)
    ]
    if not mains:
        unknown = [r for r in rows if not _known_other(r)]
        if not _GEMM_RANGE.search(name) or not unknown:
            return None
        # a SIMT kernel the user's range names: the kernel with the most time (or counted math) is the GEMM
        totals: dict[str, float] = {}
        for r in unknown:
            totals[r.get("name") or ""] = totals.get(r.get("name") or "", 0.0) + (r.get("duration_ns") or 0.0)
        top = max(totals, key=lambda n: totals[n])
        mains = [r for r in rows if (r.get("name") or "") == top]
    return mains, [r for r in rows if r not in mains]


def _ncu_cases(
    frames: dict[str, pl.DataFrame], device: DeviceSpec | None, metrics: dict, rules: dict
) -> tuple[dict[str, list[dict]], dict[str, list[dict]], list[GemmCase], dict[str, tuple[list, list]]]:
    """ncu rows grouped by GEMM range name, rows of tracekit ``aux`` ranges grouped by range name (auxiliary
    kernels of a GEMM, never GEMMs themselves), cases for kernels in no range (one per kernel), and the user's
    own GEMM ranges (innermost NVTX range of a GEMM-like kernel: name -> (main rows, auxiliary rows)). Kernels of
    a user range that holds no GEMM-like kernel are not GEMM cases, and a kernel in no range is a case only when
    the kernel table does not know it as something else (attention, rng, a norm: they are no GEMMs)."""
    ncu = frames.get("ncu")
    by_range: dict[str, list[dict]] = {}
    aux_rows: dict[str, list[dict]] = {}
    loose: list[GemmCase] = []
    user: dict[str, list[dict]] = {}
    if ncu is None or ncu.height == 0:
        return by_range, aux_rows, loose, {}
    gemm_names = _ncu_gemm_names(frames, metrics)
    for row in ncu.sort("ncu_id").iter_rows(named=True):
        if aux_key(row.get("nvtx_range")) is not None:
            aux_rows.setdefault(row["nvtx_range"], []).append(row)
            continue
        parsed = parse_gemm_name(row.get("nvtx_range"))
        if parsed is None and row.get("nvtx_stack"):
            for entry in reversed(row["nvtx_stack"]):
                if parse_gemm_name(entry.get("name")):
                    row = {**row, "nvtx_range": entry["name"]}
                    parsed = parse_gemm_name(entry["name"])
                    break
        if parsed is not None:
            by_range.setdefault(row["nvtx_range"], []).append(row)
            continue
        rng = _user_range_of(row)
        if rng:
            user.setdefault(rng, []).append(row)
            continue
        if not _known_other(row):
            loose.append(_kernel_case(row, device, metrics, rules))
    user_cases: dict[str, tuple[list, list]] = {}
    for name, rows in user.items():
        split = _user_split(name, rows, metrics, gemm_names)
        if split is not None:
            user_cases[name] = split
    return by_range, aux_rows, loose, user_cases


def _kernel_case(row: dict[str, Any], device: DeviceSpec | None, metrics: dict, rules: dict) -> GemmCase:
    """A profiled kernel in no GEMM range, explained on its own and named by kernel."""
    name = row.get("demangled_name") or row.get("name") or f"kernel {row['ncu_id']}"
    case = GemmCase(origin="ncu-kernel", name=name, context=row.get("nvtx_range") or None)
    case.device = _device_for_ncu(row, device)
    case.device_name = row.get("device_name")
    case.main_ns = row.get("duration_ns")
    _attach_ncu(case, [row], metrics, rules)
    _estimate_achieved(case)
    return case


def _borrow_ncu(cases: list[GemmCase], frames: dict[str, pl.DataFrame], metrics: dict, rules: dict) -> None:
    """A user range on the timeline whose own launches were not profiled (ncu limits launches per range, a CUDA
    graph replays them) takes the evidence of the same kernel with the same grid profiled elsewhere in the run:
    same kernel and launch configuration, same math. ``ncu_borrowed_from`` names where it came from."""
    ncu = frames.get("ncu")
    if ncu is None or ncu.height == 0:
        return
    rows = ncu.sort("ncu_id").to_dicts()
    for case in cases:
        if not case.user_range or case.ncu is not None or not case.main_kernel or not case.grid_size:
            continue
        same = [
            r
            for r in rows
            if r.get("grid_size") == case.grid_size
            and _same_kernel(case.main_kernel, r.get("demangled_name") or r.get("name"))
        ]
        if not same:
            continue
        if case.counted is None and not case.shape_known:
            case.counted = _kernel_counts(same[0], metrics)
        _attach_ncu(case, same[:1], metrics, rules)
        case.ncu_borrowed_from = same[0].get("nvtx_range") or "(no range)"


def _user_ncu_case(
    name: str, mains: list[dict], auxs: list[dict], device: DeviceSpec | None, metrics: dict, rules: dict
) -> GemmCase:
    """A user range known only from Nsight Compute: per launch of its main kernel, the main kernels' time and
    counted FLOPs, and the auxiliary kernels' time."""
    case = GemmCase(origin="ncu", name=name)
    case.user_range = True
    case.range_name = name
    case.device = _device_for_ncu(mains[0], device)
    case.device_name = mains[0].get("device_name")
    per_name: dict[str, int] = {}
    for r in mains:
        per_name[r.get("name") or ""] = per_name.get(r.get("name") or "", 0) + 1
    case.launches = max(per_name.values())
    case.main_ns = sum(r.get("duration_ns") or 0.0 for r in mains) / case.launches
    case.aux_ns = sum(r.get("duration_ns") or 0.0 for r in auxs) / case.launches
    case.aux_kernels = sorted({r.get("demangled_name") or r.get("name") for r in auxs if r.get("name")})
    counts = [c for r in mains if (c := _kernel_counts(r, metrics)) is not None]
    if counts:
        top = max(counts, key=lambda c: c.flops)
        total = sum(c.flops for c in counts if c.simt == top.simt) / case.launches
        case.counted = CountedFlops(total, top.dtype_class, top.counter_names, top.simt, top.dtype_note)
    case.time_source = "Nsight Compute: duration of each profiled launch (kernel replay)"
    _attach_ncu(case, mains + auxs, metrics, rules)
    _estimate_achieved(case)
    return case


def _estimate_achieved(case: GemmCase) -> None:
    """Without a shape, estimate TFLOP/s from the tensor pipe's (or FP32 FMA pipe's) activity."""
    dev = case.device
    if dev is None or not case.sm_clock_hz or not dev.sm_count:
        return
    cls = case.dtype_class
    ffma = case.metric("smsp__sass_thread_inst_executed_op_ffma_pred_on.sum.per_cycle_elapsed")
    tensor = case.metric("sm__pipe_tensor_cycles_active.avg.pct_of_peak_sustained_elapsed")
    if tensor is None:
        tensor = case.metric("sm__pipe_tensor_op_hmma_cycles_active.avg.pct_of_peak_sustained_elapsed")
    if tensor is not None and tensor > 1.0 and cls and cls != "fp32":
        peak = dev.peak_tflops(cls)
        if peak and dev.peak_clock_hz:
            case.estimated_tflops = peak * case.sm_clock_hz / dev.peak_clock_hz * tensor / 100.0
            case.achieved_estimate = "peak at the kernel's clock x tensor pipe active (elapsed)"
    elif ffma is not None and ffma > 0 and cls in (None, "fp32"):
        case.estimated_tflops = 2.0 * ffma * case.sm_clock_hz / 1e12
        case.achieved_estimate = "2 x smsp__sass_thread_inst_executed_op_ffma_pred_on x clock"
