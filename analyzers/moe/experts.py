"""Per expert and per launch: effective M, time attributed by tiles (or measured), FLOPs and bytes, the hot
expert, padding waste and the launch's verdict."""

from __future__ import annotations

import math
import statistics
from typing import Any

from tracekit import naming

from .launches import ASSUMED_TILE, DOMINATES_RATIO, SKEW_RATIO, MoeLaunch


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
