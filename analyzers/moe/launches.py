"""Grouped MoE launches (:class:`MoeLaunch`) from ``tracekit bench moe`` rows or ``moe`` ranges on a timeline,
with their per-expert counts and the CTA tile read from the kernel's name."""

from __future__ import annotations

import re
import statistics
from dataclasses import dataclass, field
from typing import Any

import polars as pl

from tracekit import naming
from tracekit.devices import DeviceSpec
from tracekit.records import Environment

from ..gemm import classify_kernel, device_from_frames, dtype_class

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
def _list(value: Any) -> list[Any] | None:
    """A list column's value (``counts``, ``expert_time_us``), None where the cell is null."""
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
        counts = _list(r.get("counts"))
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
        times = _list(r.get("expert_time_us"))
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
        out[(r["range"], int(r["pid"] or 0), int(r["instance"] or 0))] = _list(r.get("counts"))
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
    frames: dict[str, pl.DataFrame], environment: Environment | dict[str, Any] | None = None
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
