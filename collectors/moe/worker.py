"""The MoE worker (``python -m tracekit.collectors.moe``): runs one backend over the cases it is given, checks
each result against the reference, and emits measurement, curve and failure rows on the event protocol of
tracekit.collectors.worker."""

from __future__ import annotations

import argparse
import json
import os
import sys
import traceback
from pathlib import Path
from typing import Any

from tracekit.collectors import failures as F
from tracekit.collectors import ranges
from tracekit.collectors.worker import (
    CudaTimer,
    Emitter,
    NoCudaError,
    quantile,
    report_trace_window,
    wall_times,
)

from .backends import MoeBackend, all_moe_backends
from .cases import MoeCase, MoeConfig


# --- the worker ---------------------------------------------------------------------------------------------------
def _check(tolerance: float, dtype: str, out: Any, ref: Any) -> tuple[float | None, str, str]:
    from tracekit.collectors.worker import _check as check_gemm

    class _B:  # the GEMM worker's check wants .tolerance and .dtype
        pass

    b = _B()
    b.tolerance, b.dtype = tolerance, dtype  # type: ignore[attr-defined]
    return check_gemm(b, out, ref)


def _row(
    backend: MoeBackend,
    config: MoeConfig,
    case: MoeCase,
    times: list[float],
    how: str,
    nv: dict[str, Any],
    rel: float | None,
    status: str,
) -> dict[str, Any]:
    med = quantile(times, 0.5)
    tile_m, tile_n, tile_src = backend.tile(config, case)
    inter = config.inter if backend.fused else None
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
        "time_us": med,
        "time_us_p10": quantile(times, 0.1),
        "time_us_p90": quantile(times, 0.9),
        "repeats": len(times),
        "tflops": backend.flops(config, case) / (med * 1e-6) / 1e12 if med > 0 else None,
        "rel_error": rel,
        "status": status,
        **nv,
        "timing": how,
        "counts": list(case.counts),
        "expert_time_us": None,
        "expert_time_source": None,
        "tile_m": tile_m,
        "tile_n": tile_n,
        "tile_source": tile_src,
    }


def _curve_row(
    backend: MoeBackend, config: MoeConfig, m: int, times: list[float], how: str, nv: dict[str, Any]
) -> dict[str, Any]:
    med = quantile(times, 0.5)
    return {
        "range": backend.curve_name(config, m),
        "backend": backend.name,
        "op": "expert",
        "m": m,
        "n": config.n,
        "k": config.k,
        "dtype": backend.dtype,
        "dtype_out": backend.dtype_out,
        "scale": backend.scale,
        "time_us": med,
        "time_us_p10": quantile(times, 0.1),
        "time_us_p90": quantile(times, 0.9),
        "repeats": len(times),
        "tflops": 2.0 * m * config.n * config.k / (med * 1e-6) / 1e12 if med > 0 else None,
        "aux_time_us": None,
        "rel_error": None,
        "status": "ok",
        **nv,
        "timing": how,
    }


_NO_NVML = {
    "sm_clock_hz": None,
    "power_w": None,
    "power_limit_w": None,
    "temperature_c": None,
    "throttle_reasons": None,
}


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
        torch = timer.torch
        with ranges.suppressed():
            out = backend.run(state)
        torch.cuda.synchronize()
        ref = backend.reference(state)
        rel, status, why = _check(backend.tolerance, backend.dtype, out, ref)
        del out, ref
        times, how, nv_sample = timer.time([lambda: backend.run(state)], warmup, repeats)
        nv = nv_sample.as_columns()
    else:
        times, how, nv = wall_times([lambda: backend.run(state)], warmup, repeats), "wall", dict(_NO_NVML)
    row = _row(backend, config, case, times, how, nv, rel, status)
    if backend.per_expert:
        for m in sorted({c for c in case.counts if c} - set(curve)):
            if timer is not None:
                count = timer.buffers_for(config.n * config.k * _bytes(backend.dtype))
                fns = backend.expert_fns(config, weights, m, count, device, seed)
                t, h, s = timer.time(fns, max(1, warmup // 2), repeats)
                cnv = s.as_columns()
            else:
                fns = backend.expert_fns(config, weights, m, 2, device, seed)
                t, h, cnv = wall_times(fns, max(1, warmup // 2), repeats), "wall", dict(_NO_NVML)
            crow = _curve_row(backend, config, m, t, h, cnv)
            curve[m] = (crow["time_us"], crow)
            emit("curve", shape=[case.rows, config.n, config.k, case.case_id], row=crow)
        row["expert_time_us"] = [curve[c][0] if c else None for c in case.counts]
        row["expert_time_source"] = "measured: each distinct per-expert row count timed as its own GEMM"
    return row, why


def _bytes(dtype: str) -> int:
    return 1 if dtype in ("e4m3", "e5m2") else 2


def run_worker(args: argparse.Namespace) -> int:
    emit = Emitter(args.out)
    emit("hello", backend=args.backend, pid=os.getpid(), python=sys.version.split()[0])
    from tracekit.collectors.env import versions_json

    spec = json.loads(Path(args.cases).read_text(encoding="utf-8"))
    config = MoeConfig(**spec["config"])
    by_id = {
        c["case_id"]: MoeCase(c["case_id"], c["tokens"], c["route"], tuple(c["counts"]))
        for c in spec["cases"]
    }
    cases = [by_id[int(i)] for i in args.ids.split(",") if i.strip()]
    backends = all_moe_backends()
    backend = backends.get(args.backend)
    device_name = cc = None
    versions = None

    def fail(case: MoeCase, kind: str, etype: str, msg: str, tb: str, poisoned: bool = False) -> None:
        row = F.failure_record(
            backend=args.backend,
            op=backend.op if backend else None,
            m=case.rows,
            n=config.n,
            k=config.k,
            kind=kind,
            error_type=etype,
            message=msg,
            traceback=tb,
            device_name=device_name,
            compute_capability=cc,
            versions=versions,
        )
        emit("failure", shape=[case.rows, config.n, config.k, case.case_id], row=row, poisoned=poisoned)

    setup_error: tuple[str, str, str, str] | None = None
    timer: CudaTimer | None = None
    if backend is None:
        setup_error = (
            F.UNAVAILABLE,
            "KeyError",
            f"unknown MoE backend {args.backend!r}; known: {', '.join(backends)}",
            "",
        )
    else:
        versions = versions_json((*backend.packages, "triton"))
        ok, reason = backend.available()
        if not ok:
            setup_error = (F.UNAVAILABLE, "tracekit.collectors.backends.BackendUnavailable", reason, "")
        elif backend.timer == "cuda":
            try:
                timer = CudaTimer(args.device, args.timing)
                device_name, cc = timer.info.get("gpu_name"), timer.info.get("compute_capability")
            except NoCudaError as exc:
                setup_error = (F.UNAVAILABLE, F.type_name(exc), str(exc), "")
            except Exception as exc:
                msg = F.full_message(exc)
                setup_error = (
                    F.classify(F.type_name(exc), msg),
                    F.type_name(exc),
                    msg,
                    traceback.format_exc(),
                )
    weights = None
    if setup_error is None:
        try:
            weights = backend.prepare_weights(config, timer.device if timer else None, args.seed)  # type: ignore[union-attr]
        except Exception as exc:
            msg = F.full_message(exc)
            kind = F.UNAVAILABLE if isinstance(exc, ImportError) else F.classify(F.type_name(exc), msg)
            setup_error = (kind, F.type_name(exc), msg, traceback.format_exc())
    curve: dict[int, tuple[float, dict[str, Any]]] = {}
    for case in cases:
        shape = [case.rows, config.n, config.k, case.case_id]
        emit("start", shape=shape)
        if setup_error is not None:
            fail(case, *setup_error)
            emit("done", shape=shape)
            continue
        try:
            row, why = measure_case(
                backend,
                timer,
                config,
                case,
                weights,
                curve,
                emit,  # type: ignore[arg-type]
                warmup=args.warmup,
                repeats=args.repeats,
                seed=args.seed,
            )
        except Exception as exc:
            msg = F.full_message(exc)
            etype = F.type_name(exc)
            poisoned = F.poisons_context(msg)
            kind = F.UNAVAILABLE if isinstance(exc, ImportError) else F.classify(etype, msg)
            fail(case, kind, etype, msg, traceback.format_exc(), poisoned)
            if poisoned:
                emit("poisoned", shape=shape)
                emit.close()
                return 3
            emit("done", shape=shape)
            continue
        emit("measurement", shape=shape, row=row)
        if row["status"] != "ok":
            fail(case, F.WRONG, "tracekit.WrongResult", why, "")
        emit("done", shape=shape)
    emit("finished")
    emit.close()
    report_trace_window()
    return 0


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
    parser.add_argument("--out", required=True)
    parser.add_argument("--warmup", type=int, default=10)
    parser.add_argument("--repeats", type=int, default=25)
    parser.add_argument("--timing", choices=("auto", "graph", "events"), default="auto")
    parser.add_argument("--device", type=int, default=0)
    parser.add_argument("--seed", type=int, default=0)
    return run_worker(parser.parse_args(argv))
