"""Nsight Compute evidence for GEMM cases: the device a row ran on, the evidence attached to a case
(:func:`attach_ncu`), cases from ncu rows alone (:func:`ncu_cases`: tracekit's ranges, the user's ranges, kernels in
no range), whether a report ran at locked clocks, and borrowing the rows of the same kernel and grid for a
timeline case whose own launches were not profiled.

Profiled rows are calls too: in a user range, the profiled launches in profiling order form the range's sequence;
each GEMM launch is a call and owns its split-K reduce, the quantize before it and the activation after it by
the same rules as a timeline's kernels (:mod:`.roles`); a call's times are the kernels' replay durations (no gaps:
kernel replay serialises them).
"""

from __future__ import annotations

import statistics
from dataclasses import dataclass, field
from dataclasses import replace as dc_replace
from typing import Any

import polars as pl
from msgspec.structs import replace

from tracekit import naming
from tracekit.devices import DeviceSpec, match_device
from tracekit.numbers import duration
from tracekit.records import Environment, gpu_of

from ..analysis.model import AuxKernel, Timing
from ..flops import COUNTER_PREFIXES, CountedFlops, counted_flops
from ..taxonomy import classify_name
from ..taxonomy.frames import evidence_gemm, ncu_evidence
from .calls import ROLE
from .case import CaseEvidence, context_key
from .names import aux_key, classify_kernel, name_shape, parse_gemm_name
from .parts import Clock, NcuPart, call, filled, kernel_ref, timing_from_calls
from .roles import assign
from .user_ranges import _GEMM_RANGE, _gemm_like, is_op_range, range_key

NCU_DETAIL = "Nsight Compute: duration of each profiled launch (kernel replay)"


# --- devices ------------------------------------------------------------------------------------------------------
def device_from_frames(
    frames: dict[str, pl.DataFrame], environment: Environment | dict[str, Any] | None
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


# --- the evidence ---------------------------------------------------------------------------------------------------
_EXTRA_METRIC_PREFIXES = (
    "smsp__average_warps_issue_stalled_",
    "smsp__pcsamp_warps_issue_stalled_",
    "sm__pipe_tensor_op_hmma_cycles_active.avg.pct_of_peak_sustained_elapsed",
    "sm__pipe_tensor_cycles_active.avg.pct_of_peak_sustained_elapsed",
    "sm__inst_executed_pipe_tensor",
    "smsp__sass_thread_inst_executed_op_ffma_pred_on.sum.per_cycle_elapsed",
    "launch__occupancy_limit_",
    "launch__cluster_size",
    "launch__cluster_max_active",
    "sm__maximum_warps_per_active_cycle_pct",
    "gpu__dram_throughput.avg.pct_of_peak_sustained_elapsed",
    "dram__bytes.sum.per_second",
    "launch__waves_per_multiprocessor",
    "sm__warps_active.avg.pct_of_peak_sustained_active",
    *COUNTER_PREFIXES,
)


@dataclass
class Evidence:
    """A run's Nsight Compute numbers by profiled kernel: the metrics the rules read, the report's rules, and the
    reports whose kernels all ran at one locked clock (source -> why)."""

    metrics: dict[int, dict[str, float]] = field(default_factory=dict)
    rules: dict[int, list[dict]] = field(default_factory=dict)
    locked: dict[str, str] = field(default_factory=dict)


LOCKED_SPREAD = 0.03
"""A report's kernels whose SM clocks all sit within this of their median ran at one fixed clock."""
LOCKED_BELOW_BOOST = 0.9
"""A fixed clock below this fraction of the GPU's boost clock is a locked one (Nsight Compute's base clock, or an
application clock), not what the application sees."""


def _locked_reports(ncu: pl.DataFrame | None, device: DeviceSpec | None) -> dict[str, str]:
    """Per report (``source``): why its clocks count as locked, when they do: the report says ``--clock-control
    base``, or two or more kernels ran at one clock well below the GPU's boost and the report does not say
    ``--clock-control none`` (unlocked clocks that sit at one value under a sustained load are a power or thermal
    limit: an 8192^3 bf16 GEMM on the H200 holds 1551 MHz of 1980 at 700 W)."""
    out: dict[str, str] = {}
    if ncu is None or ncu.height == 0 or "sm_clock_hz" not in ncu.columns:
        return out
    for (source,), part in ncu.group_by(["source"]):
        clocks = [c for c in part["sm_clock_hz"].to_list() if c]
        control = (
            {c for c in part["clock_control"].drop_nulls().to_list()}
            if "clock_control" in part.columns
            else set()
        )
        boost = part["boost_clock_hz"].drop_nulls().max() if "boost_clock_hz" in part.columns else None
        boost = boost or (device.boost_clock_hz if device else None)
        if not clocks:
            continue
        mid = statistics.median(clocks)
        if control == {"base"}:
            out[str(source)] = f"the report was taken with --clock-control base ({mid / 1e6:.0f} MHz)"
        elif (
            "none" not in control
            and len(clocks) >= 2
            and boost
            and mid < LOCKED_BELOW_BOOST * boost  # type: ignore[operator]
            and max(abs(c / mid - 1) for c in clocks) <= LOCKED_SPREAD
        ):
            out[str(source)] = (
                f"all {len(clocks)} profiled kernels ran at {mid / 1e6:.0f} MHz, {100 * mid / boost:.0f}% of the "  # type: ignore[operator]
                f"{boost / 1e6:.0f} MHz boost"  # type: ignore[operator]
            )
    return out


def gather_evidence(frames: dict[str, pl.DataFrame], device: DeviceSpec | None = None) -> Evidence:
    ev = Evidence()
    m = frames.get("ncu_metrics")
    if m is not None and m.height:
        expr = pl.lit(False)
        for p in _EXTRA_METRIC_PREFIXES:
            expr = expr | pl.col("metric").str.starts_with(p)
        for ncu_id, metric, value in (
            m.filter(expr & pl.col("value").is_not_null()).select("ncu_id", "metric", "value").iter_rows()
        ):
            ev.metrics.setdefault(ncu_id, {})[metric] = value
    nr = frames.get("ncu_rules")
    if nr is not None and nr.height:
        for r in nr.filter(pl.col("kind") != "OK").iter_rows(named=True):
            ev.rules.setdefault(r["ncu_id"], []).append(r)
    ev.locked = _locked_reports(frames.get("ncu"), device)
    return ev


def _kernel_counts(row: dict[str, Any], ev: Evidence) -> CountedFlops | None:
    return counted_flops(ev.metrics.get(row["ncu_id"], {}), row.get("demangled_name") or row.get("name"))


def same_kernel(a: str | None, b: str | None) -> bool:
    """Whether two spellings of a kernel name (timeline vs ncu; demangled vs function name) are one kernel."""
    if not a or not b:
        return False
    if a == b:
        return True
    short_a, short_b = a.split("(")[0].split("<")[0], b.split("(")[0].split("<")[0]
    return short_a.removeprefix("void ").strip() == short_b.removeprefix("void ").strip()


def _pick_main(case: CaseEvidence, rows: list[dict[str, Any]], ev: Evidence) -> dict[str, Any]:
    """The profiled row of the case's GEMM kernel: the case's kernel by name when known (its grid first), else
    the row with the most counted math, else the longest kernel the table calls a GEMM or does not know."""
    if case.kernel.name:
        named = [r for r in rows if same_kernel(case.kernel.name, r.get("demangled_name") or r.get("name"))]
        named = named or [r for r in rows if same_kernel(case.kernel.name, r.get("name"))]
        gridded = [r for r in named if case.kernel.grid and r.get("grid_size") == case.kernel.grid]
        if gridded or named:
            return max(gridded or named, key=lambda r: r.get("duration_ns") or 0.0)
    counted = [(c.flops, r) for r in rows if (c := _kernel_counts(r, ev)) is not None and not c.simt]
    if counted:
        return max(counted, key=lambda fr: fr[0])[1]
    mains = [r for r in rows if classify_kernel(r.get("name")) == "main"] or rows
    return max(mains, key=lambda r: r.get("duration_ns") or 0.0)


def kernel_rules(main: dict[str, Any], rows: list[dict[str, Any]], ev: Evidence) -> list[dict]:
    """Nsight Compute's findings for the case's GEMM kernel: those of its profiled launches (``rows`` of the same
    kernel as ``main``; a split-K reduce's or a quantize's findings are about that kernel, not the GEMM), one per
    rule, kind and title (per message where it has no title), since each launch repeats them with its own
    numbers: the one with the largest estimated speed-up is kept, in ``main``'s order."""

    def name(r: dict[str, Any]) -> str | None:
        return r.get("demangled_name") or r.get("name")

    mine = [main, *(r for r in rows if r is not main and same_kernel(name(main), name(r)))]
    out: dict[tuple[Any, ...], dict] = {}
    for r in mine:
        for x in ev.rules.get(r["ncu_id"], []):
            key = (x.get("rule"), x.get("kind"), x.get("title") or x.get("message"))
            if key not in out or (x.get("speedup_pct") or -1.0) > (out[key].get("speedup_pct") or -1.0):
                out[key] = x
    return list(out.values())


def attach_ncu(
    case: CaseEvidence, rows: list[dict[str, Any]], ev: Evidence, borrowed_from: str | None = None
) -> CaseEvidence:
    """``case`` with the GEMM kernel of ``rows`` (:func:`_pick_main`) as its profiled evidence: its row, metrics,
    its kernel's rules (:func:`kernel_rules`), its counted FLOPs and DRAM bytes, launch configuration and clock
    (what the case knows already is kept)."""
    main = _pick_main(case, rows, ev)
    dram = case.dram_bytes
    if dram is None and main.get("dram_bytes"):
        dram = float(main["dram_bytes"])
    elif dram is None and main.get("dram_bytes_per_s") and main.get("duration_ns"):
        dram = float(main["dram_bytes_per_s"]) * float(main["duration_ns"]) * 1e-9  # rate x time
    clock = case.clock
    if clock.sm_clock_hz is None and main.get("sm_clock_hz"):
        control = main.get("clock_control")
        clock = dc_replace(
            clock,
            sm_clock_hz=main["sm_clock_hz"],
            source="ncu gpc__cycles_elapsed.avg.per_second"
            + (f" (clock control {control})" if control else ""),
        )
    return replace(
        case,
        counted=case.counted or _kernel_counts(main, ev),
        dram_bytes=dram,
        ncu=NcuPart(
            row=main,
            metrics=ev.metrics.get(main["ncu_id"], {}),
            rules=kernel_rules(main, rows, ev),
            kernels=len(rows),
            borrowed_from=borrowed_from,
            clock_locked=ev.locked.get(str(main.get("source"))),
        ),
        kernel=filled(case.kernel, kernel_ref(main)),
        clock=clock,
    )


def ncu_gemm_names(frames: dict[str, pl.DataFrame]) -> set[str]:
    """Names (function and demangled) of profiled kernels that Nsight Compute shows doing tensor math (tensor-op
    counters > 0, or a busy tensor pipe: analyzers/taxonomy/frames.py), whatever the kernel table calls them: a
    Triton GEMM named ``_mm`` or named for its epilogue is GEMM-like; a known attention or convolution kernel is
    not, whatever its counters (``EVIDENCE_EXEMPT``)."""
    ev = ncu_evidence(frames)
    return {name for name in ev if evidence_gemm(name, ev)}


def _known_other(row: dict[str, Any]) -> bool:
    """Whether a profiled kernel is one the kernel table knows to be no GEMM (attention, rng, a norm, a
    convolution ...), by its name or, for a convolution's GEMM-named kernel, by the op range it ran in
    (:func:`_convolutions`): never a GEMM case of its own."""
    if _convolutions(row):
        return True
    if row.get("kernel_class") == "gemm":  # evidence made it one (class_source counters / tensor-pipe)
        return False
    info = classify_name(row.get("demangled_name") or row.get("name"))
    return info.known and info.kernel_class != "gemm"


def _convolutions(row: dict[str, Any]) -> bool:
    """Whether the row's class columns say a convolution op launched it (family ``cudnn-conv`` decided by the
    op: cuDNN's ``volta_sgemm_*`` under an emit_nvtx ``aten::cudnn_convolution`` range), whatever its name."""
    return row.get("kernel_family") == "cudnn-conv" and row.get("class_source") == "op"


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


def _parents_of(row: dict[str, Any], rng: str) -> list[str]:
    """The user ranges around ``rng`` on a profiled kernel's NVTX stack, outermost first (folded)."""
    out = []
    for entry in row.get("nvtx_stack") or []:
        name = entry.get("name") if isinstance(entry, dict) else None
        if not name or name == rng:
            break
        if not is_op_range(name) and naming.decode(name) is None:
            out.append(context_key(range_key(name)) or name)
    return out


# --- calls from profiled rows ----------------------------------------------------------------------------------------
def _ncu_calls(
    rows: list[dict[str, Any]], mains: set[int], by_role: bool
) -> tuple[dict[int, list[dict]], dict[int, list[dict]]]:
    """Per GEMM row (a call, by ncu_id): the rows of its GEMM time (itself, its split-K reduce) and its auxiliary
    rows. ``by_role``: free rows by role (:mod:`.roles`); else each free row to the call before it (or after,
    before the first): a tracekit range holds one GEMM's kernels only."""
    ordered = sorted(rows, key=lambda r: r["ncu_id"])
    if by_role:
        frame = pl.DataFrame(
            {
                "ncu_id": [r["ncu_id"] for r in ordered],
                "name": [r.get("demangled_name") or r.get("name") for r in ordered],
                "cls": [
                    r.get("kernel_class")
                    or classify_name(r.get("demangled_name") or r.get("name")).kernel_class
                    for r in ordered
                ],
                "call_of": [r["ncu_id"] if r["ncu_id"] in mains else None for r in ordered],
                "_g": [0] * len(ordered),
            },
            schema={
                "ncu_id": pl.Int64,
                "name": pl.String,
                "cls": pl.String,
                "call_of": pl.Int64,
                "_g": pl.Int64,
            },
        )
        owner = dict(assign(frame, ["_g"], ["ncu_id"]).select("ncu_id", "owner").iter_rows())
    else:
        owner, prev = {}, None
        for r in ordered:
            if r["ncu_id"] in mains:
                prev = r["ncu_id"]
            owner[r["ncu_id"]] = prev
        first = next((r["ncu_id"] for r in ordered if r["ncu_id"] in mains), None)
        owner = {k: (v if v is not None else first) for k, v in owner.items()}
    gemm: dict[int, list[dict]] = {m: [] for m in mains}
    aux: dict[int, list[dict]] = {m: [] for m in mains}
    for r in ordered:
        o = owner.get(r["ncu_id"])
        if o is None:
            continue
        cls = r.get("kernel_class") or classify_name(r.get("demangled_name") or r.get("name")).kernel_class
        (gemm if r["ncu_id"] == o or cls == "splitk-reduce" else aux)[o].append(r)
    return gemm, aux


def _timing(gemm: dict[int, list[dict]], aux: dict[int, list[dict]]) -> tuple[Timing, list[AuxKernel]]:
    """The calls of profiled launches (each GEMM launch with its split-K reduce and the auxiliary kernels it
    owns) and those auxiliary kernels by name, largest time first."""

    def ns(rows: list[dict]) -> float:
        return sum(r.get("duration_ns") or 0.0 for r in rows)

    calls = []
    splitk_total = 0.0
    uses: dict[str, tuple[str | None, float, int]] = {}
    for owner, grows in gemm.items():
        main = ns([r for r in grows if r["ncu_id"] == owner])
        if not main:
            continue
        splitk = ns([r for r in grows if r["ncu_id"] != owner])
        calls.append(call(main + splitk, ns(aux[owner]), 0.0))
        splitk_total += splitk
        for r in [*[x for x in grows if x["ncu_id"] != owner], *aux[owner]]:
            name = r.get("demangled_name") or r.get("name") or "(unnamed kernel)"
            cls, total, count = uses.get(name) or (
                r.get("kernel_class") or classify_name(name).kernel_class,
                0.0,
                0,
            )
            uses[name] = (cls, total + (r.get("duration_ns") or 0.0), count + 1)
    kernels = [
        AuxKernel(name=n, kernel_class=c, role=ROLE.get(c or "", "other"), time_ns_total=t, count=k)
        for n, (c, t, k) in uses.items()
    ]
    return (
        timing_from_calls(calls, splitk_total, source="ncu-replay", source_detail=NCU_DETAIL),
        sorted(kernels, key=lambda u: -(u.time_ns_total or 0.0)),
    )


COUNT_TOLERANCE = 0.02
"""Profiled launches of one case whose counted FLOPs differ by more than this (relative to the most) are
different GEMMs sharing a kernel and grid, not one GEMM counted twice (the counters are exact: 2*M*N*K for a
shape that fits its tiles, samples/h200-counter-probe)."""


def _counted_per_call(rows: list[dict], ev: Evidence) -> CountedFlops | None:
    """The FLOPs every call of the launches ``rows`` executed, by Nsight Compute's counters. Launches that
    counted different math (beyond :data:`COUNT_TOLERANCE`) are several GEMMs under one kernel and grid: no one
    count holds for every call, so ``flops`` is None and ``spread`` gives the least and the most (a mean of them
    rated an H100 serving step's four GEMMs at 335 GFLOP a call, 22% above their 275)."""
    counts = [c for r in rows if (c := _kernel_counts(r, ev)) is not None]
    if not counts:
        return None
    top = max(counts, key=lambda c: c.flops or 0.0)
    same = [c.flops for c in counts if c.simt == top.simt and c.flops]
    if not same:
        return top
    low, high = min(same), max(same)
    if high - low > COUNT_TOLERANCE * high:
        return CountedFlops(
            None, top.dtype_class, top.counter_names, top.simt, top.dtype_note, spread=(low, high)
        )
    return CountedFlops(sum(same) / len(same), top.dtype_class, top.counter_names, top.simt, top.dtype_note)


counted_per_call = _counted_per_call
"""The FLOPs every call of some profiled launches executed (the name build.py uses for a case's place)."""


CALL_SPREAD = 1.5
"""A case whose calls' GEMM times run over more than this ratio (90th over 10th percentile) holds calls of
several GEMMs (one kernel and grid can serve several shapes); one GEMM's calls keep within it (clock changes
under a power cap move them ~20%)."""


def several_gemms(case: CaseEvidence) -> str | None:
    """Why the case's calls are several GEMMs (profiled launches that counted different math, or calls whose GEMM
    times differ beyond :data:`CALL_SPREAD`), in words; None when nothing says so. A case named by its shape is
    one GEMM."""
    if case.shape is not None:
        return None
    parts = []
    if case.counted is not None and case.counted.spread is not None:
        low, high = case.counted.spread
        parts.append(
            f"Nsight Compute counted {low / 1e9:.4g} to {high / 1e9:.4g} GFLOP on its profiled launches"
        )
    g = case.timing.gemm_ns
    if case.timing.source == "timeline" and g.p10 and g.p90 and g.p90 > CALL_SPREAD * g.p10:
        parts.append(
            f"the calls' GEMM times run from {duration(g.p10)} (p10) to {duration(g.p90)} (p90)"
            + (
                f", the median call's {duration(case.timing.median_call.gemm_ns)}"
                if case.timing.median_call is not None
                else ""
            )
        )
    if not parts:
        return None
    grid = f" and grid {case.kernel.grid}" if case.kernel.grid else ""
    return f"the {case.timing.calls} calls are several GEMMs sharing one kernel{grid} ({'; '.join(parts)})"


SEVERAL_HOW = (
    "put each GEMM in an NVTX range of its own (one case each), or profile every place of the range once "
    "(tracekit capture --nsys --ncu --ranges REGEX: the ncu pass takes each GEMM of the nsys timeline) so that "
    "every GEMM is counted and told apart by its place"
)


def settle_several(case: CaseEvidence) -> CaseEvidence:
    """A case whose calls are several GEMMs (:func:`several_gemms`) says so. Rated by Nsight Compute's counted
    FLOPs, it gets no FLOP count: the profiled launches' count (or their mean) does not hold for its other calls;
    ``flops_note`` says why and how to learn it, the counters' rate class stays (the same kernel, the same math
    type). Without a count, a note on the card says its calls' times mix GEMMs."""
    if case.shape is not None:
        return case
    why = several_gemms(case)
    if why is None:
        return case
    if case.counted is None:
        note = (
            f"{why[0].upper()}{why[1:]}: the per-call times (median call, p10, p90) mix them; {SEVERAL_HOW}"
        )
        return replace(case, notes=(*case.notes, note))
    c = case.counted
    return replace(
        case,
        counted=CountedFlops(
            None,  # type: ignore[arg-type]
            c.dtype_class,
            c.counter_names,
            c.simt,
            c.dtype_note,
            spread=c.spread or (c.flops, c.flops),
        ),
        estimated_tflops=None,
        achieved_estimate=None,
        dram_bytes=None,  # one profiled launch's bytes: not every call's either
        flops_note=f"FLOPs unknown, {why}: {SEVERAL_HOW}",
    )


@dataclass
class NcuCases:
    """Cases from Nsight Compute rows: tracekit's GEMM ranges by name (rows), the rows of tracekit ``aux`` ranges by
    name, the user's ranges (cases keyed by range and kernel signature), and kernels in no range."""

    by_range: dict[str, list[dict]] = field(default_factory=dict)
    aux_rows: dict[str, list[dict]] = field(default_factory=dict)
    user: list[CaseEvidence] = field(default_factory=list)
    user_rows: dict[tuple, list[dict]] = field(default_factory=dict)
    loose: list[CaseEvidence] = field(default_factory=list)


def ncu_cases(frames: dict[str, pl.DataFrame], device: DeviceSpec | None, ev: Evidence) -> NcuCases:
    """Sort a run's profiled rows into tracekit ranges, tracekit aux ranges, the user's ranges (made cases here:
    one per distinct GEMM kernel signature in a range) and kernels in no range (one case per signature). Kernels
    of a user range holding no GEMM-like kernel are no case, and a kernel in no range is one only when the kernel
    table does not know it as something else (attention, rng, a norm: no GEMMs)."""
    out = NcuCases()
    ncu = frames.get("ncu")
    if ncu is None or ncu.height == 0:
        return out
    gemm_names = ncu_gemm_names(frames)
    user: dict[str, list[dict]] = {}
    loose: dict[tuple, list[dict]] = {}
    for row in ncu.sort("ncu_id").iter_rows(named=True):
        if aux_key(row.get("nvtx_range")) is not None:
            out.aux_rows.setdefault(row["nvtx_range"], []).append(row)
            continue
        parsed = parse_gemm_name(row.get("nvtx_range"))
        if parsed is None and row.get("nvtx_stack"):
            for entry in reversed(row["nvtx_stack"]):
                if parse_gemm_name(entry.get("name")):
                    row = {**row, "nvtx_range": entry["name"]}
                    parsed = parse_gemm_name(entry["name"])
                    break
        if parsed is not None:
            out.by_range.setdefault(row["nvtx_range"], []).append(row)
            continue
        rng = _user_range_of(row)
        if rng:
            user.setdefault(rng, []).append(row)
            continue
        if not _known_other(row):
            sig = (row.get("demangled_name") or row.get("name"), row.get("grid_size"), row.get("block_size"))
            loose.setdefault(sig, []).append(row)
    for rng, rows in user.items():
        _user_range_cases(out, rng, rows, device, ev, gemm_names)
    for rows in loose.values():
        out.loose.append(_kernel_case(rows, device, ev))
    return out


def _user_range_cases(
    out: NcuCases, rng: str, rows: list[dict], device: DeviceSpec | None, ev: Evidence, gemm_names: set[str]
) -> None:
    """The cases of one user range known from ncu rows: its GEMM-like launches (or, in a range named like a GEMM,
    its kernel with the most time the table does not know), one case per kernel signature, in order of first
    profiled launch."""

    def name_of(r: dict) -> str | None:
        return r.get("demangled_name") or r.get("name")

    mains = [
        r
        for r in rows
        if not _convolutions(r)
        and (_gemm_like(r.get("name"), gemm_names) or _gemm_like(r.get("demangled_name"), gemm_names))
    ]
    if not mains:
        unknown = [r for r in rows if not _known_other(r)]
        if not _GEMM_RANGE.search(rng) or not unknown:
            return
        totals: dict[str, float] = {}
        for r in unknown:
            totals[r.get("name") or ""] = totals.get(r.get("name") or "", 0.0) + (r.get("duration_ns") or 0.0)
        top = max(totals, key=lambda n: totals[n])
        mains = [r for r in rows if (r.get("name") or "") == top]
    gemm, aux = _ncu_calls(rows, {r["ncu_id"] for r in mains}, by_role=True)
    by_sig: dict[tuple, list[int]] = {}
    for r in sorted(mains, key=lambda r: r["ncu_id"]):
        by_sig.setdefault((name_of(r), r.get("grid_size"), r.get("block_size")), []).append(r["ncu_id"])
    folded = context_key(range_key(rng)) or rng
    groups = [
        (sig, ids, place)
        for sig, launches in by_sig.items()
        for place, ids in _counted_places(launches, {r["ncu_id"]: r for r in mains}, ev)
    ]
    several = len(groups) > 1
    for pos, (sig, ids, place) in enumerate(groups, 1):
        mine = [r for r in mains if r["ncu_id"] in ids]
        label = folded if not several else f"{folded} #{pos} ({_short(sig[0])})"
        timing, aux_kernels = _timing({i: gemm[i] for i in ids}, {i: aux[i] for i in ids})
        case = CaseEvidence(
            origin="ncu",
            name=label,
            range=folded,
            user_range=True,
            position=pos if several else None,
            parents=tuple(_parents_of(mine[0], rng)),
            device=_device_for_ncu(mine[0], device),
            device_name=mine[0].get("device_name"),
            timing=timing,
            aux=tuple(aux_kernels),
            counted=_counted_per_call(mine, ev),
            kernel=kernel_ref(mine[0], name=sig[0]),
            key=("ncu", folded, *sig),
        )
        if place is not None:
            case = replace(case, key=("ncu", folded, *sig, place))
        case = attach_ncu(case, mine + [x for i in ids for x in gemm[i] + aux[i] if x not in mine], ev)
        out.user.append(_estimate_achieved(case))
        # every place's rows under the signature: the timeline's cases take theirs by place (build.py)
        out.user_rows.setdefault((folded, *sig), []).extend(
            [*mine, *[x for i in ids for x in aux[i] + gemm[i] if x not in mine]]
        )


def _counted_places(
    ids: list[int], rows: dict[int, dict[str, Any]], ev: Evidence
) -> list[tuple[int | None, list[int]]]:
    """The profiled launches ``ids`` of one kernel and launch configuration in a user range, in profiling order,
    as (place, launches) per GEMM. A persistent kernel runs several GEMMs on one configuration (cuBLAS on Hopper:
    ``nvjet_sm90_tst_*`` on a grid of one CTA per SM), and a report holds no range instances to tell their places
    apart, but Nsight Compute counted each launch's math: launches that counted the same (within
    :data:`COUNT_TOLERANCE`) are one GEMM, a place numbered from 1 in order of first launch. Where the launches
    repeat in the same order in every instance, these are the places timeline.positions finds (the n-th launch of
    every instance, one GEMM; places that counted the same math, one case); a place is no case of its own where
    the order differs. One (None, ids) where nothing tells the launches apart: one count, or a launch without a
    tensor count (its place is unknown)."""
    counts = [_kernel_counts(rows[i], ev) for i in ids]
    flops = [c.flops if c is not None and not c.simt else None for c in counts]
    if len(ids) < 2 or any(not f for f in flops):
        return [(None, ids)]
    places: list[tuple[float, list[int]]] = []
    for i, f in zip(ids, flops, strict=True):
        assert f is not None
        same = next((p for p in places if abs(p[0] - f) <= COUNT_TOLERANCE * max(p[0], f)), None)
        if same is None:
            places.append((f, [i]))
        else:
            same[1].append(i)
    if len(places) < 2:
        return [(None, ids)]
    return [(n, launches) for n, (_, launches) in enumerate(places, 1)]


def _short(name: str | None) -> str:
    from .timeline import kernel_label

    return kernel_label(name)


def tracekit_ncu_case(name: str, rows: list[dict], device: DeviceSpec | None, ev: Evidence) -> CaseEvidence:
    """A tracekit GEMM range known only from ncu rows: every GEMM launch a call with its range's other kernels."""
    parsed = parse_gemm_name(name) or {}
    shape = name_shape(parsed)
    mains = [r for r in rows if classify_kernel(r.get("name")) == "main"] or rows
    gemm, aux = _ncu_calls(rows, {r["ncu_id"] for r in mains}, by_role=False)
    timing, aux_kernels = _timing(gemm, aux)
    case = CaseEvidence(
        origin="ncu",
        name=name,
        range=name,
        backend=parsed.get("backend"),
        op=parsed.get("op"),
        shape=shape,
        device=_device_for_ncu(rows[0], device),
        device_name=rows[0].get("device_name"),
        timing=timing,
        aux=tuple(aux_kernels),
        key=("ncu", name),
    )
    return attach_ncu(case, rows, ev)


def _kernel_case(rows: list[dict], device: DeviceSpec | None, ev: Evidence) -> CaseEvidence:
    """Profiled launches of one kernel signature in no GEMM range, explained together and named by kernel."""
    row = rows[0]
    name = row.get("demangled_name") or row.get("name") or f"kernel {row['ncu_id']}"
    ctx = row.get("nvtx_range")
    case = CaseEvidence(
        origin="ncu-kernel",
        name=name,
        parents=(ctx,) if ctx else (),
        device=_device_for_ncu(row, device),
        device_name=row.get("device_name"),
        timing=timing_from_calls(
            [call(float(r["duration_ns"])) for r in rows if r.get("duration_ns")],
            source="ncu-replay",
            source_detail=NCU_DETAIL,
        ),
        kernel=kernel_ref(row, name=name),
        counted=_counted_per_call(rows, ev),
        key=("ncu-kernel", name, row.get("grid_size"), row.get("block_size")),
    )
    return _estimate_achieved(attach_ncu(case, rows, ev))


def borrow_ncu(
    cases: list[CaseEvidence], frames: dict[str, pl.DataFrame], ev: Evidence
) -> list[CaseEvidence]:
    """A user-range case on the timeline whose own launches were not profiled (ncu limits launches per range, a
    CUDA graph replays them) takes the evidence of the same kernel with the same grid profiled elsewhere in the
    run: same kernel and launch configuration, same math. ``ncu.borrowed_from`` names where it came from. Where
    those launches counted different math (a persistent kernel serving several shapes on one grid), none of them
    is known to be this case's GEMM, and nothing is borrowed."""
    ncu = frames.get("ncu")
    if ncu is None or ncu.height == 0:
        return cases
    rows = ncu.sort("ncu_id").to_dicts()
    return [_borrowed(case, rows, ev) for case in cases]


def _borrowed(case: CaseEvidence, rows: list[dict[str, Any]], ev: Evidence) -> CaseEvidence:
    """``case`` with the profiled evidence of its kernel and grid from elsewhere (:func:`borrow_ncu`), where it
    has none of its own and the run has such a launch."""
    if not case.user_range or case.ncu is not None or not case.kernel.name or not case.kernel.grid:
        return case
    same = [
        r
        for r in rows
        if r.get("grid_size") == case.kernel.grid
        and same_kernel(case.kernel.name, r.get("demangled_name") or r.get("name"))
    ]
    if not same:
        return case
    if case.counted is None and case.shape is None:
        counted = _counted_per_call(same, ev)
        if counted is not None and counted.spread is not None:
            # the launches elsewhere counted different math (one kernel and grid serving several shapes there):
            # none of them is this case's GEMM, and they say nothing of this case's own calls: nothing borrowed
            return case
        case = replace(case, counted=counted)
    return attach_ncu(case, same[:1], ev, borrowed_from=same[0].get("nvtx_range") or "(no range)")


def _estimate_achieved(case: CaseEvidence) -> CaseEvidence:
    """Without a FLOP count, estimate the kernel's TFLOP/s from the tensor pipe's (or FP32 FMA pipe's) activity."""
    dev = case.device
    if dev is None or not case.clock.sm_clock_hz or not dev.sm_count or case.flops:
        return case
    cls = case.dtype_class
    ffma = case.metric("smsp__sass_thread_inst_executed_op_ffma_pred_on.sum.per_cycle_elapsed")
    tensor = case.metric("sm__pipe_tensor_cycles_active.avg.pct_of_peak_sustained_elapsed")
    if tensor is None:
        tensor = case.metric("sm__pipe_tensor_op_hmma_cycles_active.avg.pct_of_peak_sustained_elapsed")
    if tensor is not None and tensor > 1.0 and cls and cls != "fp32":
        peak = dev.peak_tflops(cls)
        if peak and dev.peak_clock_hz:
            return replace(
                case,
                estimated_tflops=peak * case.clock.sm_clock_hz / dev.peak_clock_hz * tensor / 100.0,
                achieved_estimate="peak at the kernel's clock x tensor pipe active (elapsed)",
            )
    elif ffma is not None and ffma > 0 and cls in (None, "fp32"):
        return replace(
            case,
            estimated_tflops=2.0 * ffma * case.clock.sm_clock_hz / 1e12,
            achieved_estimate="2 x smsp__sass_thread_inst_executed_op_ffma_pred_on x clock",
        )
    return case


__all__ = [
    "Clock",
    "Evidence",
    "NcuCases",
    "attach_ncu",
    "borrow_ncu",
    "device_from_frames",
    "gather_evidence",
    "ncu_cases",
    "ncu_gemm_names",
    "same_kernel",
    "settle_several",
    "several_gemms",
    "tracekit_ncu_case",
]
