"""The what-if: the rows per expert (batch size or expert-parallel degree) that would reach a share of peak,
read off a measured time-vs-M curve."""

from __future__ import annotations

import itertools
import math
from typing import Any

import polars as pl

from tracekit.devices import DeviceSpec

from ..gemm import dtype_class
from .experts import _expert_flops_bytes
from .launches import MoeLaunch


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
