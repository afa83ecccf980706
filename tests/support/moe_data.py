"""A realistic ``tracekit bench moe`` run built on the CPU: the records are made by the benchmark's own row builders
(collectors/moe/worker.py ``_row`` / ``_curve_row``, so the format is exactly what a run holds) from the benchmark's own
routing draws, with times shaped like the H200 measurements in DEVICE.md.

Time model (microseconds), fitted to DEVICE.md's bf16 table (M=16 / 256 / 1024 / 4096 at N=2048, K=6144 gives
35 / 488 / 632 / 683 TF/s against the measured 34 / 466 / 650 / 722): one dense expert GEMM costs
``4 + max(bytes / 3.3 TB/s, flops / 720 TF/s)`` (fp8: 1200 TF/s); a grouped launch costs
``5 + max(bytes of the active experts / 3.3 TB/s, padded flops / 650 TF/s)`` with rows padded to the 64-row tile.
"""

from __future__ import annotations

import json
from pathlib import Path

from tracekit.collectors.harness.timing import Timing
from tracekit.collectors.moe import (
    GLM5,
    MOE_BACKENDS,
    MoeConfig,
    _curve_row,
    _row,
    build_cases,
)
from tracekit.collectors.worker import MEASUREMENT_KEYS
from tracekit.run import Run

H200_ENV = {
    "gpu_name": "NVIDIA H200",
    "compute_capability": "9.0",
    "sm_count": 132,
    "l2_bytes": 62914560,
    "memory_bytes": 150109880320,
}
TOKENS = (1, 16, 64, 256, 1024, 4096)
NV = {
    "sm_clock_hz": 1.755e9,
    "power_w": 420.0,
    "power_limit_w": 700.0,
    "temperature_c": 52.0,
    "throttle_reasons": 0,
}


def dense_us(m: int, n: int, k: int, width: int = 2) -> float:
    flops = 2.0 * m * n * k
    nbytes = n * k * width + m * k * width + m * n * 2
    rate = 720e12 if width == 2 else 1200e12
    return 4.0 + max(nbytes / 3.3e12, flops / rate) * 1e6


def grouped_us(counts: list[int], n: int, k: int, width: int = 2, tile_m: int = 64) -> float:
    active = [c for c in counts if c]
    nbytes = sum(n * k * width + c * k * width + c * n * 2 for c in active)
    padded = sum(-(-c // tile_m) * tile_m for c in active)
    rate = 650e12 if width == 2 else 1100e12
    return 5.0 + max(nbytes / 3.3e12, 2.0 * padded * n * k / rate) * 1e6


def make_moe_run(
    path: Path,
    config: MoeConfig = GLM5,
    tokens: tuple[int, ...] = TOKENS,
    routing: tuple[str, ...] = ("uniform", "zipf:1.2"),
) -> Run:
    """A complete run at ``path``: raw/moe.jsonl (grouped bf16 / fp8 and the bf16 loop), raw/moe_curve.jsonl (the
    loop's per-expert curve), an H200 environment. Frames are built on first load."""
    run = Run.create(path, command=["tracekit", "bench", "moe"], capture={"tool": "tracekit bench moe"})
    run.set_environment(dict(H200_ENV))
    run.save()
    cases = build_cases(config, tokens, routing, seed=0)
    moe_rows, curve_rows, curve = [], [], {}
    for name in ("torch-bf16-grouped", "torch-fp8-grouped", "torch-bf16-loop"):
        backend = MOE_BACKENDS[name]
        width = 1 if backend.dtype == "e4m3" else 2
        for case in cases:
            counts = list(case.counts)
            if backend.per_expert:
                expert_us = []
                for c in counts:
                    if not c:
                        expert_us.append(None)
                        continue
                    if c not in curve:
                        t = dense_us(c, config.n, config.k, width)
                        crow = _curve_row(
                            backend, config, c, Timing([t * 0.99, t, t * 1.02], "cuda-graph", dict(NV))
                        )
                        curve[c] = t
                        curve_rows.append(crow)
                    expert_us.append(curve[c])
                total = (
                    sum(t for t in expert_us if t) + 0.5 * case.active
                )  # gaps between the experts' launches
                row = _row(
                    backend,
                    config,
                    case,
                    Timing([total * 0.99, total, total * 1.03], "cuda-graph", dict(NV)),
                    0.003,
                    "ok",
                )
                row["expert_time_us"] = expert_us
                row["expert_time_source"] = (
                    "measured: each distinct per-expert row count timed as its own GEMM"
                )
            else:
                t = grouped_us(counts, config.n, config.k, width)
                row = _row(
                    backend,
                    config,
                    case,
                    Timing([t * 0.99, t, t * 1.02], "cuda-graph", dict(NV)),
                    0.004,
                    "ok",
                )
            moe_rows.append(row)
    with (run.raw_dir / "moe.jsonl").open("w") as f:
        for r in moe_rows:
            f.write(json.dumps(r) + "\n")
    with (run.raw_dir / "moe_curve.jsonl").open("w") as f:
        for r in curve_rows:
            assert list(r) == list(MEASUREMENT_KEYS)
            f.write(json.dumps(r) + "\n")
    return run
