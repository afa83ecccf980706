"""Mixture-of-experts analysis: per expert the effective M, time, TFLOP/s and roofline position; per grouped launch
its FLOP-weighted efficiency, tile padding waste, hot expert and verdict; and the what-if, the rows per expert
(batch size or expert-parallel degree) that would reach a given share of peak, read off a measured curve.

Where launches come from (in this order for a range name):

1. ``moe`` rows (``tracekit bench moe``, frame ``moe``): the launch time, the per-expert counts and, for the loop
   backends, each expert's measured time;
2. ``moe`` ranges on a timeline (``instrument()`` or the benchmark under ``tracekit capture --nsys``): instances of
   one name are one launch, their GEMM kernels its time (other kernels in the range, e.g. the grouped GEMM's
   argument setup, are aux), the routing sidecar (frame ``moe_routing``) the counts of each instance. A timeline
   range with the same name as a benchmark row lends it its kernel name (and so its tile size) instead.

Per-expert time. A grouped launch is one kernel whose CTAs each compute one ``tile_m x tile_n`` output tile of one
expert, all with the same K loop; so its time is attributed to experts in proportion to their tiles,
``ceil(m_e / tile_m) x ceil(N / tile_n)``. That is the model; it says an expert with 1 row costs as much as one
with ``tile_m`` rows, which is what padding does. Loop backends time every expert's GEMM on its own: their
per-expert times are measured, not attributed. The tile comes from the kernel name when a timeline has it
(``cute::C<64>, cute::C<128>, ...`` / ``Shape<_64,_128,_128>`` / ``64x128x128``), else from the backend's dispatch
rule (recorded by the benchmark), else 128 x 128 is assumed (and said).

Roofline per expert: the expert's weights are read once per launch however few rows it has, so
``bytes_e = N x K x width(B) + m_e x K x width(A) + m_e x N x width(C)`` (+ scales) and an expert at small M sits
far left of the ridge: memory-bound.

The frames built here are documented in tracekit/frames.py (``moe_launches``, ``moe_experts``, ``moe_whatif``).
"""

from __future__ import annotations

import itertools
import json
import math
import re
import statistics
from dataclasses import dataclass, field
from typing import Any

import polars as pl

from tracekit import naming
from tracekit.devices import DeviceSpec
from tracekit.frames import SPECS

from .gemm import classify_kernel, device_from_frames, dtype_class

__all__ = [
    "DEFAULT_TARGETS",
    "MoeAnalysis",
    "MoeLaunch",
    "analyze_moe",
    "launch_cases",
    "moe_json",
    "tile_from_kernel",
    "whatif",
]

DEFAULT_TARGETS = (10.0, 25.0, 50.0)
"""Shares of peak (%) the what-if asks for."""
DEFAULT_EP_BATCH = 64.0
"""Tokens per step per GPU the expert-parallel what-if assumes (a decode batch)."""
SKEW_RATIO = 4.0
"""Routing is skewed when the hot expert has at least this many times the mean rows of the active experts."""
DOMINATES_RATIO = 4.0
"""The hot expert dominates when it is the slowest expert and takes at least this many times the median time."""
ASSUMED_TILE = (128, 128)
FUSED_OPS = ("cutlass_fused_moe", "trtllm_fp4_block_scale_moe")

_TILE_PATTERNS = (
    re.compile(r"tuple<\s*cute::C<(\d+)>\s*,\s*cute::C<(\d+)>\s*,\s*cute::C<(\d+)>\s*>"),
    re.compile(r"Shape<\s*(?:cute::)?_(\d+)\s*,\s*(?:cute::)?_(\d+)\s*,\s*(?:cute::)?_(\d+)\s*>"),
    re.compile(r"(?<![0-9])(\d{2,3})x(\d{2,3})x(\d{2,3})(?![0-9])"),
)
_GEMM_NAME = re.compile(r"gemm|cutlass|nvjet|xmma|wgmma|matmul|_mm_|grouped", re.IGNORECASE)


def tile_from_kernel(name: str | None) -> tuple[int, int] | None:
    """The CTA tile (M, N) named in a grouped kernel's name: the first triple of sizes >= 16 (cluster shapes such as
    ``<2, 1, 1>`` are skipped); None when the name holds none."""
    if not name:
        return None
    for pattern in _TILE_PATTERNS:
        for m in pattern.finditer(name):
            dims = [int(x) for x in m.groups()]
            if all(d >= 16 for d in dims):
                return dims[0], dims[1]
    return None


@dataclass
class MoeLaunch:
    """One grouped launch (a benchmark row, or the instances of a ``moe`` range name) and its evidence."""

    origin: str
    name: str
    backend: str | None = None
    op: str | None = None
    route: str | None = None
    tokens: int | None = None
    topk: int | None = None
    experts: int = 0
    n: int = 0
    k: int = 0
    inter: int | None = None
    dtype_a: str | None = None
    dtype_b: str | None = None
    dtype_out: str | None = None
    scale: str | None = None
    instances: list[list[int]] = field(default_factory=list)
    """Tokens per expert of each launch aggregated (one list for a benchmark row)."""
    time_ns: float | None = None
    aux_ns: float = 0.0
    expert_time_ns: list[float | None] | None = None
    expert_time_source: str | None = None
    tile_m: int | None = None
    tile_n: int | None = None
    tile_source: str | None = None
    kernel: str | None = None
    sm_clock_hz: float | None = None
    status: str | None = None
    device: DeviceSpec | None = None

    @property
    def launches(self) -> int:
        return max(len(self.instances), 1)

    @property
    def fused(self) -> bool:
        return self.op in FUSED_OPS

    @property
    def dtype_class(self) -> str | None:
        return dtype_class(self.dtype_a, self.dtype_b, self.kernel)

    def mean_counts(self) -> list[float]:
        if not self.instances:
            return []
        n = len(self.instances)
        return [sum(col) / n for col in zip(*self.instances, strict=True)]


# --- building launches --------------------------------------------------------------------------------------------
def _json_list(text: Any) -> list[Any] | None:
    if text is None:
        return None
    try:
        value = json.loads(text) if isinstance(text, str) else text
    except ValueError:
        return None
    return value if isinstance(value, list) else None


def _fields(name: str) -> dict[str, str]:
    decoded = naming.decode(name)
    return decoded.fields if decoded is not None and decoded.kind == "moe" else {}


def _int(value: Any) -> int | None:
    try:
        return int(value) if value is not None else None
    except (TypeError, ValueError):
        return None


def _measurement_launches(frames: dict[str, pl.DataFrame], device: DeviceSpec | None) -> list[MoeLaunch]:
    moe = frames.get("moe")
    if moe is None or moe.height == 0:
        return []
    out = []
    for r in moe.iter_rows(named=True):
        counts = _json_list(r.get("counts"))
        if not counts or r.get("time_us") is None:
            continue
        launch = MoeLaunch(
            origin="measurement",
            name=r.get("range") or f"{r.get('backend')} {r.get('route')} T={r.get('tokens')}",
            backend=r.get("backend"),
            op=r.get("op"),
            route=r.get("route"),
            tokens=r.get("tokens"),
            topk=r.get("topk"),
            experts=int(r.get("experts") or len(counts)),
            n=int(r["n"]),
            k=int(r["k"]),
            inter=r.get("inter"),
            dtype_a=r.get("dtype"),
            dtype_b=r.get("dtype_b") or r.get("dtype"),
            dtype_out=r.get("dtype_out"),
            scale=r.get("scale"),
            instances=[[int(c) for c in counts]],
            time_ns=float(r["time_us"]) * 1e3,
            tile_m=r.get("tile_m"),
            tile_n=r.get("tile_n"),
            tile_source=r.get("tile_source"),
            sm_clock_hz=r.get("sm_clock_hz"),
            status=r.get("status"),
            device=device,
        )
        times = _json_list(r.get("expert_time_us"))
        if times is not None and len(times) == len(counts):
            launch.expert_time_ns = [None if t is None else float(t) * 1e3 for t in times]
            launch.expert_time_source = r.get("expert_time_source") or "measured"
        out.append(launch)
    return out


def _descendants(ranges: pl.DataFrame, roots: list[int]) -> dict[int, int]:
    """range_id -> the root (of ``roots``) it sits in, for the roots and everything nested in them."""
    parent = dict(zip(ranges["range_id"].to_list(), ranges["parent_id"].to_list(), strict=True))
    rootset = set(roots)
    out: dict[int, int] = {}
    for rid in parent:
        cur, depth = rid, 0
        while cur is not None and depth < 64:
            if cur in rootset:
                out[rid] = cur
                break
            cur, depth = parent.get(cur), depth + 1
    return out


def _routing_lookup(frames: dict[str, pl.DataFrame]) -> dict[tuple[str, int, int], list[int] | None]:
    routing = frames.get("moe_routing")
    if routing is None or routing.height == 0:
        return {}
    out: dict[tuple[str, int, int], list[int] | None] = {}
    for r in routing.iter_rows(named=True):
        out[(r["range"], int(r["pid"] or 0), int(r["instance"] or 0))] = _json_list(r.get("counts"))
    return out


def _range_launches(frames: dict[str, pl.DataFrame], device: DeviceSpec | None) -> list[MoeLaunch]:
    ranges, kernels = frames.get("ranges"), frames.get("kernels")
    if ranges is None or kernels is None or ranges.height == 0:
        return []
    moe_ranges = ranges.filter(pl.col("range_kind") == "moe").sort("start_ns")
    if moe_ranges.height == 0:
        return []
    owner = _descendants(ranges, moe_ranges["range_id"].to_list())
    per_instance: dict[int, list[dict[str, Any]]] = {}
    if kernels.height:
        ks = kernels.filter(pl.col("range_id").is_in(list(owner))).select("name", "duration_ns", "range_id")
        for r in ks.iter_rows(named=True):
            per_instance.setdefault(owner[r["range_id"]], []).append(r)
    routing = _routing_lookup(frames)
    seen: dict[tuple[str, int], int] = {}
    groups: dict[str, list[tuple[int, list[int] | None]]] = {}
    for r in moe_ranges.iter_rows(named=True):
        key = (r["name"], int(r["pid"] or 0))
        seen[key] = seen.get(key, 0) + 1  # the n-th launch of this name in its process
        counts = routing.get((r["name"], key[1], seen[key]))
        groups.setdefault(r["name"], []).append((r["range_id"], counts))
    out = []
    for name, instances in groups.items():
        f = _fields(name)
        mains: list[float] = []
        auxs: list[float] = []
        kernel_names: dict[str, float] = {}
        for rid, _counts in instances:
            rows = per_instance.get(rid, [])
            if not rows:
                continue
            gemm_rows = [
                x for x in rows if classify_kernel(x["name"]) == "main" and _GEMM_NAME.search(x["name"] or "")
            ]
            gemm_rows = [x for x in gemm_rows if "prepare" not in (x["name"] or "").lower()] or [
                max(rows, key=lambda x: x["duration_ns"] or 0)
            ]
            main = sum(x["duration_ns"] or 0 for x in gemm_rows)
            mains.append(main)
            auxs.append(sum(x["duration_ns"] or 0 for x in rows) - main)
            for x in gemm_rows:
                kernel_names[x["name"]] = kernel_names.get(x["name"], 0.0) + (x["duration_ns"] or 0)
        experts = _int(f.get("E")) or 0
        counted = [c for _rid, c in instances if c and len(c) == experts]
        launch = MoeLaunch(
            origin="range",
            name=name,
            backend=f.get("backend"),
            op=f.get("op"),
            route=f.get("route"),
            tokens=_int(f.get("T")),
            topk=_int(f.get("topk")),
            experts=experts,
            n=_int(f.get("N")) or 0,
            k=_int(f.get("K")) or 0,
            inter=_int(f.get("I")),
            dtype_a=f.get("a"),
            dtype_b=f.get("b"),
            dtype_out=f.get("out"),
            scale=f.get("scale"),
            instances=counted,
            time_ns=statistics.fmean(mains) if mains else None,
            aux_ns=statistics.fmean(auxs) if auxs else 0.0,
            kernel=max(kernel_names, key=kernel_names.__getitem__) if kernel_names else None,
            device=device,
        )
        out.append(launch)
    return out


def launch_cases(
    frames: dict[str, pl.DataFrame], environment: dict[str, Any] | None = None
) -> list[MoeLaunch]:
    """Every grouped launch of a run with its evidence (see the module docstring for the sources)."""
    device = device_from_frames(frames, environment)
    launches = _measurement_launches(frames, device)
    by_name = {launch.name: launch for launch in launches}
    for launch in _range_launches(frames, device):
        measured = by_name.get(launch.name)
        if measured is not None:  # the benchmark's timing wins; the timeline lends the kernel (and its tile)
            measured.kernel = measured.kernel or launch.kernel
            measured.aux_ns = launch.aux_ns
            continue
        launches.append(launch)
    for launch in launches:
        tile = tile_from_kernel(launch.kernel)
        if tile is not None:
            launch.tile_m, launch.tile_n, launch.tile_source = tile[0], tile[1], "kernel name"
        elif launch.expert_time_ns is not None and launch.tile_m is None:
            launch.tile_source = "none: one GEMM per expert, each timed on its own"
        elif launch.tile_m is None or launch.tile_n is None:
            launch.tile_m, launch.tile_n = ASSUMED_TILE
            launch.tile_source = "assumed 128x128 (no kernel name, no dispatch rule for this backend)"
    return launches


# --- per expert ---------------------------------------------------------------------------------------------------
def _bits(dtype: str | None, default: float = 16) -> float:
    return naming.DTYPE_BITS.get(dtype or "", default)


def _expert_flops_bytes(launch: MoeLaunch, m: float) -> tuple[float, float]:
    n, k = launch.n, launch.k
    ba, bb = _bits(launch.dtype_a), _bits(launch.dtype_b or launch.dtype_a)
    bc = _bits(launch.dtype_out, 16)
    flops = 2.0 * m * n * k
    weights = n * k * bb / 8
    act = m * k * ba / 8 + m * n * bc / 8
    if launch.fused and launch.inter:  # fc2: K x I weights, I-wide input rows, K-wide output rows
        flops += 2.0 * m * k * launch.inter
        weights += k * launch.inter * bb / 8
        act += m * launch.inter * ba / 8 + m * k * bc / 8
    scales = 0.0
    s = (launch.scale or "").lower()
    if s == "rowwise":
        scales = 4.0 * (m + n)
    elif "1x16" in s:
        scales = (m * k + n * k) / 16
    elif "1x32" in s:
        scales = (m * k + n * k) / 32
    elif s.startswith("blockwise"):
        scales = 4.0 * (m * math.ceil(k / 128) + math.ceil(n / 128) * math.ceil(k / 128))
    return flops, weights + act + scales


@dataclass
class MoeAnalysis:
    """What :func:`analyze_moe` found: the three frames (schemas in tracekit/frames.py)."""

    launches: pl.DataFrame
    experts: pl.DataFrame
    whatif: pl.DataFrame

    @property
    def empty(self) -> bool:
        return self.launches.height == 0


def _analyze_launch(lid: int, launch: MoeLaunch) -> tuple[dict[str, Any], list[dict[str, Any]]]:
    dev = launch.device
    cls = launch.dtype_class
    peak = dev.peak_tflops(cls) if dev and cls else None
    bw = dev.memory_bandwidth_bytes_per_s if dev else None
    counts = launch.mean_counts()
    has_tile = launch.tile_m is not None
    tile_m, tile_n = int(launch.tile_m or ASSUMED_TILE[0]), int(launch.tile_n or ASSUMED_TILE[1])
    n_tiles = math.ceil(launch.n / tile_n) if launch.n else 1
    inst = max(len(launch.instances), 1)
    tiles = [0.0] * len(counts)
    padded = [0.0] * len(counts)
    for counts_i in launch.instances:
        for e, c in enumerate(counts_i):
            if c:
                t = math.ceil(c / tile_m)
                tiles[e] += t * n_tiles / inst
                padded[e] += t * tile_m / inst
    total_tiles = sum(tiles) or 1.0
    measured = launch.expert_time_ns is not None
    rows: list[dict[str, Any]] = []
    for e, m in enumerate(counts):
        if m <= 0:
            continue
        if measured:
            t_ns = launch.expert_time_ns[e]  # type: ignore[index]
            source = "measured"
        else:
            t_ns = (launch.time_ns or 0.0) * tiles[e] / total_tiles if launch.time_ns else None
            source = "attributed: launch time x the expert's share of CTA tiles"
        flops, nbytes = _expert_flops_bytes(launch, m)
        intensity = flops / nbytes if nbytes else None
        memroof = intensity * bw / 1e12 if intensity and bw else None
        roof = min(peak, memroof) if peak and memroof else (peak or memroof)
        tf = flops / t_ns / 1e3 if t_ns else None
        rows.append(
            {
                "launch_id": lid,
                "expert": e,
                "m": float(m),
                "padded_m": padded[e] if has_tile else None,
                "tiles": tiles[e] if has_tile else None,
                "time_ns": t_ns,
                "time_source": source,
                "time_share_pct": None,
                "flops": flops,
                "tflops": tf,
                "pct_of_peak": 100.0 * tf / peak if tf and peak else None,
                "min_bytes": nbytes,
                "intensity_flops_per_byte": intensity,
                "roofline_bound": (
                    None if peak is None or memroof is None else "memory" if memroof < peak else "compute"
                ),
                "roofline_tflops": roof,
                "pct_of_roofline": 100.0 * tf / roof if tf and roof else None,
                "hot": False,
            }
        )
    expert_total = sum(r["time_ns"] or 0.0 for r in rows)
    for r in rows:
        r["time_share_pct"] = 100.0 * r["time_ns"] / expert_total if r["time_ns"] and expert_total else None
    rows_total = sum(counts)
    flops_total = sum(r["flops"] for r in rows)
    time_ns = launch.time_ns
    tflops = flops_total / time_ns / 1e3 if time_ns else None
    roof_s = 0.0
    for r in rows:
        if peak and bw:
            roof_s += max(r["flops"] / (peak * 1e12), r["min_bytes"] / bw)
    roof_tf = flops_total / roof_s / 1e12 if roof_s else None
    padded_total = sum(padded)
    launch_row: dict[str, Any] = {
        "launch_id": lid,
        "origin": launch.origin,
        "range": launch.name,
        "backend": launch.backend,
        "op": launch.op,
        "route": launch.route,
        "tokens": launch.tokens,
        "topk": launch.topk,
        "experts": launch.experts,
        "active": len(rows),
        "rows": float(rows_total),
        "n": launch.n,
        "k": launch.k,
        "dtype_class": cls,
        "launches": launch.launches,
        "time_ns": time_ns,
        "aux_time_ns": launch.aux_ns,
        "flops": flops_total,
        "tflops": tflops,
        "peak_tflops": peak,
        "pct_of_peak": 100.0 * tflops / peak if tflops and peak else None,
        "roofline_tflops": roof_tf,
        "pct_of_roofline": 100.0 * tflops / roof_tf if tflops and roof_tf else None,
        "kernel": launch.kernel,
        "tile_m": tile_m if has_tile else None,
        "tile_n": tile_n if has_tile else None,
        "tile_source": launch.tile_source,
        "padded_rows": padded_total if has_tile else None,
        "padding_waste_pct": (
            100.0 * (padded_total - rows_total) / padded_total if padded_total and has_tile else None
        ),
        "time_source": "measured per expert" if measured else "attributed by CTA tiles",
        "sm_clock_hz": launch.sm_clock_hz,
        "status": launch.status,
    }
    launch_row.update(_hot(rows))
    launch_row["verdict"] = _verdict(launch_row)
    return launch_row, rows


def _hot(rows: list[dict[str, Any]]) -> dict[str, Any]:
    empty = {
        "hot_expert": None,
        "hot_rows_share_pct": None,
        "hot_time_share_pct": None,
        "hot_vs_median": None,
        "memory_bound_experts": None,
        "memory_bound_time_pct": None,
        "skewed": None,
        "hot_dominates": None,
    }
    if not rows:
        return empty
    hot = max(rows, key=lambda r: (r["m"], -r["expert"]))
    hot["hot"] = True
    rows_total = sum(r["m"] for r in rows)
    times = [r["time_ns"] for r in rows if r["time_ns"]]
    med = statistics.median(times) if times else None
    total = sum(times) if times else None
    mem = [r for r in rows if r["roofline_bound"] == "memory"]
    mem_time = sum(r["time_ns"] or 0 for r in mem)
    mean_m = rows_total / len(rows)
    slowest = max(rows, key=lambda r: r["time_ns"] or 0.0)
    ratio = hot["time_ns"] / med if hot["time_ns"] and med else None
    return {
        "hot_expert": hot["expert"],
        "hot_rows_share_pct": 100.0 * hot["m"] / rows_total if rows_total else None,
        "hot_time_share_pct": 100.0 * hot["time_ns"] / total if hot["time_ns"] and total else None,
        "hot_vs_median": ratio,
        "memory_bound_experts": len(mem) if any(r["roofline_bound"] for r in rows) else None,
        "memory_bound_time_pct": 100.0 * mem_time / total
        if total and any(r["roofline_bound"] for r in rows)
        else None,
        "skewed": len(rows) > 1 and hot["m"] >= SKEW_RATIO * mean_m,
        "hot_dominates": bool(ratio is not None and ratio >= DOMINATES_RATIO and slowest is hot),
    }


def _verdict(r: dict[str, Any]) -> str:
    parts = []
    if r.get("memory_bound_time_pct") is not None and r["memory_bound_time_pct"] >= 50:
        parts.append(
            f"{r['memory_bound_experts']} of {r['active']} active experts are memory-bound at their M (each reads its "
            f"whole weights for few rows): {r['memory_bound_time_pct']:.0f}% of the time"
        )
    if r.get("skewed"):
        text = (
            f"skewed routing: expert {r['hot_expert']} gets {r['hot_rows_share_pct']:.0f}% of the rows"
            + (
                f" and {r['hot_time_share_pct']:.0f}% of the time"
                if r.get("hot_time_share_pct") is not None
                else ""
            )
            + (f", {r['hot_vs_median']:.1f}x the median expert" if r.get("hot_vs_median") else "")
        )
        parts.append(text + (" (it dominates)" if r.get("hot_dominates") else ""))
    if r.get("padding_waste_pct") is not None and r["padding_waste_pct"] >= 30:
        parts.append(
            f"tile padding: {r['padding_waste_pct']:.0f}% of the rows the MMA computes are padding (tile M "
            f"{r['tile_m']})"
        )
    if not parts:
        if r.get("pct_of_peak") is not None:
            return f"{r['pct_of_peak']:.0f}% of peak; no MoE-specific loss stands out"
        return "no time or peak known"
    return "; ".join(parts)


# --- what-if ------------------------------------------------------------------------------------------------------
def _curves(
    frames: dict[str, pl.DataFrame], launches: list[MoeLaunch], device: DeviceSpec | None
) -> list[tuple[str, str, str | None, int, int, list[tuple[float, float]], int, int]]:
    """(backend, kind, dtype class, N, K, points (m, % of peak), experts, topk) for every measured curve."""
    out = []
    meas = frames.get("moe_curve")
    ref = {launch.backend: launch for launch in launches if launch.origin == "measurement"}
    if meas is not None and meas.height:
        expert_rows = meas.filter(pl.col("status").fill_null("ok") == "ok")
        for (backend, n, k, dtype), grp in expert_rows.group_by(
            "backend", "n", "k", "dtype", maintain_order=True
        ):
            cls = dtype_class(dtype, dtype)
            peak = device.peak_tflops(cls) if device and cls else None
            if not peak:
                continue
            pts = sorted(
                (float(m), 100.0 * t / peak) for m, t in grp.select("m", "tflops").iter_rows() if m and t
            )
            launch = ref.get(backend)
            e, topk = (launch.experts, launch.topk or 0) if launch else (0, 0)
            out.append((str(backend), "expert", cls, int(n), int(k), pts, e, topk))
    by_backend: dict[tuple[str, int, int], list[MoeLaunch]] = {}
    for launch in launches:
        if launch.origin == "measurement" and launch.route == "uniform" and launch.expert_time_ns is None:
            by_backend.setdefault((str(launch.backend), launch.n, launch.k), []).append(launch)
    for (backend, n, k), group in by_backend.items():
        first = group[0]
        cls = first.dtype_class
        peak = device.peak_tflops(cls) if device and cls else None
        if not peak:
            continue
        pts = []
        for launch in group:
            counts = launch.mean_counts()
            active = sum(1 for c in counts if c)
            flops = sum(_expert_flops_bytes(launch, c)[0] for c in counts if c)
            if active and launch.time_ns:
                pts.append((sum(counts) / active, 100.0 * flops / launch.time_ns / 1e3 / peak))
        out.append((backend, "launch", cls, n, k, sorted(pts), first.experts, first.topk or 0))
    return out


def whatif(points: list[tuple[float, float]], target: float) -> tuple[float | None, str]:
    """Rows per expert at which a curve of (m, % of peak) reaches ``target`` %: linear in log2(m) between the two
    measured points around it; past the last point, extrapolated along the last segment (said so)."""
    pts = sorted(p for p in points if p[0] > 0)
    if not pts:
        return None, "no curve"
    if pts[0][1] >= target:
        return pts[0][0], "below the curve"
    for (m0, p0), (m1, p1) in itertools.pairwise(pts):
        if p1 >= target > p0:
            x0, x1 = math.log2(m0), math.log2(m1)
            return 2 ** (x0 + (target - p0) * (x1 - x0) / (p1 - p0)), "interpolated"
    if len(pts) >= 2:
        (m0, p0), (m1, p1) = pts[-2], pts[-1]
        slope = (p1 - p0) / (math.log2(m1) - math.log2(m0)) if m1 != m0 else 0.0
        if slope > 0:
            x = math.log2(m1) + (target - p1) / slope
            if x <= 24:  # 16M rows per expert: beyond that the straight line says nothing
                return 2**x, "extrapolated"
    return None, "not reached"


def _whatif_rows(curves: list[Any], targets: tuple[float, ...], ep_batch: float) -> list[dict[str, Any]]:
    rows = []
    for backend, kind, cls, n, k, pts, experts, topk in curves:
        if not pts:
            continue
        for target in targets:
            m, how = whatif(pts, target)
            tokens = m * experts / topk if m and experts and topk else None
            rows.append(
                {
                    "backend": backend,
                    "curve": kind,
                    "dtype_class": cls,
                    "n": n,
                    "k": k,
                    "target_pct": target,
                    "m_needed": m,
                    "how": how,
                    "curve_m_min": pts[0][0],
                    "curve_m_max": pts[-1][0],
                    "best_pct": max(p for _m, p in pts),
                    "tokens_per_step": tokens,
                    "ep_degree": tokens / ep_batch if tokens else None,
                    "ep_batch": ep_batch,
                }
            )
    return rows


# --- all together ---------------------------------------------------------------------------------------------------
def analyze_moe(
    frames: dict[str, pl.DataFrame],
    *,
    environment: dict[str, Any] | None = None,
    targets: tuple[float, ...] = DEFAULT_TARGETS,
    ep_batch: float = DEFAULT_EP_BATCH,
) -> MoeAnalysis:
    """The MoE frames of a run (empty frames when it holds no grouped launch)."""
    launches = launch_cases(frames, environment)
    lrows, erows = [], []
    for i, launch in enumerate(launches):
        lr, er = _analyze_launch(i, launch)
        lrows.append(lr)
        erows.extend(er)
    device = device_from_frames(frames, environment)
    wrows = _whatif_rows(_curves(frames, launches, device), targets, ep_batch)

    def frame(name: str, rows: list[dict[str, Any]]) -> pl.DataFrame:
        spec = SPECS[name]
        return spec.conform(pl.DataFrame(rows, infer_schema_length=None)) if rows else spec.empty()

    return MoeAnalysis(frame("moe_launches", lrows), frame("moe_experts", erows), frame("moe_whatif", wrows))


def moe_json(analysis: MoeAnalysis, experts: bool = True) -> dict[str, Any]:
    """The ``moe`` object of ``show --json`` / ``explain --json``: launches, each with its per-expert rows (key
    ``per_expert``), and the
    what-if rows."""

    def records(df: pl.DataFrame) -> list[dict[str, Any]]:
        return json.loads(df.write_json()) if df.height else []

    launches = records(analysis.launches)
    if experts:
        by_launch: dict[int, list[dict[str, Any]]] = {}
        for r in records(analysis.experts):
            by_launch.setdefault(r["launch_id"], []).append(r)
        for launch in launches:
            launch["per_expert"] = by_launch.get(launch["launch_id"], [])
    return {"launches": launches, "whatif": records(analysis.whatif)}


# --- views' helpers (plain data; the TUI and the report draw it) --------------------------------------------------
def _bin_label(m: float) -> tuple[int, str]:
    lo = 1 << max(math.floor(math.log2(max(m, 1.0))), 0)
    return lo, (f"{lo}" if lo == 1 else f"{lo}-{2 * lo - 1}")


def expert_histogram(experts: pl.DataFrame, launch_id: int) -> list[dict[str, Any]]:
    """Active experts of one launch binned by rows (1, 2-3, 4-7, ...): per bin the experts, their share of rows and
    of time, their median % of peak and how many are memory-bound. Bins in ascending rows."""
    rows = experts.filter(pl.col("launch_id") == launch_id).to_dicts()
    if not rows:
        return []
    total_m = sum(r["m"] for r in rows) or 1.0
    total_t = sum(r["time_ns"] or 0.0 for r in rows) or 0.0
    bins: dict[int, dict[str, Any]] = {}
    for r in rows:
        lo, label = _bin_label(r["m"])
        b = bins.setdefault(
            lo, {"rows": label, "experts": 0, "m": 0.0, "t": 0.0, "pct": [], "memory": 0, "hot": False}
        )
        b["experts"] += 1
        b["m"] += r["m"]
        b["t"] += r["time_ns"] or 0.0
        if r.get("pct_of_peak") is not None:
            b["pct"].append(r["pct_of_peak"])
        b["memory"] += r.get("roofline_bound") == "memory"
        b["hot"] = b["hot"] or bool(r.get("hot"))
    out = []
    for lo in sorted(bins):
        b = bins[lo]
        out.append(
            {
                "rows": b["rows"],
                "experts": b["experts"],
                "rows_share_pct": 100.0 * b["m"] / total_m,
                "time_share_pct": 100.0 * b["t"] / total_t if total_t else None,
                "median_pct_of_peak": statistics.median(b["pct"]) if b["pct"] else None,
                "memory_bound": b["memory"],
                "hot": b["hot"],
            }
        )
    return out


def focus_launch(launches: pl.DataFrame) -> int | None:
    """The launch a summary shows first: the skewed launch with the most time, else the one with the most time."""
    if launches.height == 0:
        return None
    ordered = launches.sort(
        [pl.col("skewed").fill_null(False), pl.col("time_ns").fill_null(0.0)], descending=[True, True]
    )
    return int(ordered["launch_id"][0])


PER_EXPERT_NOTE = (
    "Per-expert time: a grouped launch is one kernel, so its time is split over the experts in proportion to "
    "their CTA tiles (ceil(rows / tile M) x ceil(N / tile N)); the loop backends time each expert's GEMM on its "
    "own (measured). Roofline per expert: its weights are read once however few rows it gets."
)
