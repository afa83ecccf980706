"""The MoE family of the sweep harness (``python -m tracekit.collectors.moe``): runs one backend over the cases it
is given, checks each result against the reference, and emits measurement, curve and failure rows on the
harness's event protocol (tracekit.collectors.harness). A measurement row is built by :func:`_row`
(``MOE_KEYS``), a curve point by tracekit.collectors.worker.gemm_row."""

from __future__ import annotations

import argparse
import json
from pathlib import Path
from typing import Any

from tracekit.collectors import ranges
from tracekit.collectors.harness import CaseContext, add_worker_options, run_worker
from tracekit.collectors.harness.timing import CudaTimer, Timing, check_output, time_calls
from tracekit.collectors.worker import gemm_row

from .backends import MoeBackend, all_moe_backends
from .cases import MoeCase, MoeConfig


def _row(
    backend: MoeBackend, config: MoeConfig, case: MoeCase, t: Timing, rel: float | None, status: str
) -> dict[str, Any]:
    """One ``raw/moe.jsonl`` row (``MOE_KEYS``, in order): one grouped launch of ``case`` timed as ``t``."""
    tile_m, tile_n, tile_src = backend.tile(config, case)
    inter = config.inter if backend.fused else None
    cols = t.columns()
    return {
        "range": backend.range_name(config, case),
        "backend": backend.name,
        "op": backend.op,
        "proj": "fused" if backend.fused else config.proj,
        "route": case.route,
        "tokens": case.tokens,
        "topk": config.topk,
        "experts": config.experts,
        "active": case.active,
        "rows": case.rows,
        "n": 2 * config.inter if backend.fused else config.n,
        "k": config.hidden if backend.fused else config.k,
        "inter": inter,
        "dtype": backend.dtype,
        "dtype_b": backend.dtype,
        "dtype_out": backend.dtype_out,
        "scale": backend.scale,
        "time_us": cols.pop("time_us"),
        "time_us_p10": cols.pop("time_us_p10"),
        "time_us_p90": cols.pop("time_us_p90"),
        "repeats": cols.pop("repeats"),
        "tflops": t.tflops(backend.flops(config, case)),
        "rel_error": rel,
        "status": status,
        **cols,  # NVML, timing
        "counts": list(case.counts),
        "expert_time_us": None,
        "expert_time_source": None,
        "tile_m": tile_m,
        "tile_n": tile_n,
        "tile_source": tile_src,
    }


def _curve_row(backend: MoeBackend, config: MoeConfig, m: int, t: Timing) -> dict[str, Any]:
    """One ``raw/moe_curve.jsonl`` row: one expert's dense GEMM of ``m`` rows (a GEMM measurement row)."""
    name = backend.curve_name(config, m)
    return gemm_row(
        name,
        backend.name,
        "expert",
        m,
        config.n,
        config.k,
        backend.dtype,
        backend.dtype_out,
        backend.scale,
        t,
    )


def measure_case(
    backend: MoeBackend,
    timer: CudaTimer | None,
    config: MoeConfig,
    case: MoeCase,
    weights: Any,
    curve: dict[int, tuple[float, dict[str, Any]]],
    emit: Any,
    *,
    warmup: int,
    repeats: int,
    seed: int,
) -> tuple[dict[str, Any], str]:
    """Time one case (and, for loop backends, every per-expert row count not yet on the curve)."""
    device = timer.device if timer is not None else None
    state = backend.prepare(config, case, weights, device, seed)
    rel, status, why = None, "ok", ""
    if timer is not None:
        with ranges.suppressed():
            out = backend.run(state)
        timer.torch.cuda.synchronize()
        ref = backend.reference(state)
        rel, status, why = check_output(out, ref, backend.tolerance, backend.dtype)
        del out, ref
    row = _row(
        backend, config, case, time_calls(timer, [lambda: backend.run(state)], warmup, repeats), rel, status
    )
    if backend.per_expert:
        for m in sorted({c for c in case.counts if c} - set(curve)):
            count = timer.buffers_for(config.n * config.k * _bytes(backend.dtype)) if timer is not None else 2
            fns = backend.expert_fns(config, weights, m, count, device, seed)
            crow = _curve_row(backend, config, m, time_calls(timer, fns, max(1, warmup // 2), repeats))
            curve[m] = (crow["time_us"], crow)
            emit("curve", shape=[case.rows, config.n, config.k, case.case_id], row=crow)
        row["expert_time_us"] = [curve[c][0] if c else None for c in case.counts]
        row["expert_time_source"] = "measured: each distinct per-expert row count timed as its own GEMM"
    return row, why


def _bytes(dtype: str) -> int:
    return 1 if dtype in ("e4m3", "e5m2") else 2


class MoeFamily:
    """``bench moe`` for the harness (tracekit.collectors.harness.Family): a case is a :class:`MoeCase` of the
    cases file, a backend a :class:`MoeBackend`, its per-worker state every expert's weights and the per-expert
    curve measured so far."""

    def __init__(self) -> None:
        self.config = MoeConfig()

    def cases(self, args: argparse.Namespace) -> list[MoeCase]:
        spec = json.loads(Path(args.cases).read_text(encoding="utf-8"))
        self.config = MoeConfig(**spec["config"])
        by_id = {
            c["case_id"]: MoeCase(c["case_id"], c["tokens"], c["route"], tuple(c["counts"]))
            for c in spec["cases"]
        }
        return [by_id[int(i)] for i in args.ids.split(",") if i.strip()]

    def key(self, case: MoeCase) -> list[int]:
        return [case.rows, self.config.n, self.config.k, case.case_id]

    def backend(self, name: str) -> MoeBackend:
        backends = all_moe_backends()
        if name not in backends:
            raise KeyError(f"unknown MoE backend {name!r}; known: {', '.join(backends)}")
        return backends[name]

    def setup(self, backend: MoeBackend, timer: CudaTimer | None, seed: int) -> dict[str, Any]:
        weights = backend.prepare_weights(self.config, timer.device if timer is not None else None, seed)
        return {"weights": weights, "curve": {}}

    def measure(self, backend: MoeBackend, case: MoeCase, ctx: CaseContext) -> tuple[dict[str, Any], str]:
        return measure_case(
            backend,
            ctx.timer,
            self.config,
            case,
            ctx.state["weights"],
            ctx.state["curve"],
            ctx.emit,
            warmup=ctx.warmup,
            repeats=ctx.repeats,
            seed=ctx.seed,
        )


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(
        prog="python -m tracekit.collectors.moe",
        description=(
            "``tracekit bench moe``: grouped (MoE) expert GEMMs over tokens per step and routing distributions."
        ),
    )
    parser.add_argument("--backend", required=True)
    parser.add_argument("--cases", required=True, help="moe_cases.json written by the sweep")
    parser.add_argument("--ids", required=True, help="comma-separated case ids to run")
    add_worker_options(parser)
    return run_worker(MoeFamily(), parser.parse_args(argv))
