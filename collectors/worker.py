"""The GEMM family of the sweep harness: ``python -m tracekit.collectors.worker`` runs one ``bench gemm`` backend
over (M, N, K) shapes in its own process, so a CUDA fault or a segfault loses nothing else.

``python -m tracekit.collectors.worker --backend NAME --shapes MxNxK,... --out EVENTS.jsonl [...]`` speaks the
harness's event protocol (tracekit.collectors.harness: hello, start, measurement, failure, done, finished);
each measurement row is built by :func:`gemm_row` (:data:`MEASUREMENT_KEYS`). ``--fingerprint`` writes the
environment fingerprint instead (one ``{"event": "fingerprint", "environment": {...}}`` line).

A CUDA backend's case: a correctness launch checked against the fp32 reference, then the timed pass over enough
input sets to defeat the L2 (tracekit.collectors.harness.timing), and the backend's auxiliary step (activation quantize)
timed on its own where it has one. A ``wall`` backend (tests, CPU-only plugins) is timed with the wall clock.
"""

from __future__ import annotations

import argparse
import json
import sys
from typing import Any

from tracekit.collectors import ranges
from tracekit.collectors.harness import EXIT_POISONED as EXIT_POISONED
from tracekit.collectors.harness import CaseContext, Emitter, add_worker_options, run_worker
from tracekit.collectors.harness.timing import PROFILER_ENV as PROFILER_ENV
from tracekit.collectors.harness.timing import (
    CudaTimer,
    Timing,
    check_output,
    quantile,
    tensor_bytes,
    time_calls,
)
from tracekit.collectors.harness.timing import TraceWindow as TraceWindow
from tracekit.schema import jsonl_keys

__all__ = ["MEASUREMENT_KEYS", "GemmFamily", "gemm_row", "main", "quantile"]

MEASUREMENT_KEYS = jsonl_keys("measurements")
"""Keys of a ``raw/measurements.jsonl`` line: the columns of the ``measurements`` frame (tracekit/schema.py) but
the id."""


def gemm_row(
    range_name: str,
    backend: str,
    op: str,
    m: int,
    n: int,
    k: int,
    dtype: str,
    dtype_out: str,
    scale: str | None,
    t: Timing,
    *,
    aux_time_us: float | None = None,
    rel_error: float | None = None,
    status: str = "ok",
) -> dict[str, Any]:
    """One ``raw/measurements.jsonl`` row (:data:`MEASUREMENT_KEYS`, in order): a GEMM of M x N x K timed as
    ``t``; TFLOP/s from 2 MNK at the median time. The one place such a row is built (``bench gemm`` and the
    MoE per-expert curve)."""
    cols = t.columns()
    return {
        "range": range_name,
        "backend": backend,
        "op": op,
        "m": m,
        "n": n,
        "k": k,
        "dtype": dtype,
        "dtype_out": dtype_out,
        "scale": scale,
        "time_us": cols["time_us"],
        "time_us_p10": cols["time_us_p10"],
        "time_us_p90": cols["time_us_p90"],
        "repeats": cols["repeats"],
        "tflops": t.tflops(2.0 * m * n * k),
        "aux_time_us": aux_time_us,
        "rel_error": rel_error,
        "status": status,
        **{key: cols[key] for key in MEASUREMENT_KEYS[MEASUREMENT_KEYS.index("status") + 1 :]},
    }


def measure_cuda(
    backend: Any, timer: CudaTimer, m: int, n: int, k: int, *, warmup: int, repeats: int, seed: int
) -> tuple[dict[str, Any], str]:
    """Measure one shape on the GPU; returns (measurement row, why-wrong text or '')."""
    torch = timer.torch
    state0 = backend.prepare(m, n, k, timer.device, seed)
    with ranges.suppressed():  # the correctness launch is cold: keep it out of the ncu budget
        out = backend.run(state0)
    torch.cuda.synchronize()
    ref = backend.reference(state0)
    rel, status, why = check_output(out, ref, backend.tolerance, backend.dtype)
    del out, ref
    nbuf = timer.buffers_for(tensor_bytes(state0))
    states = [state0] + [backend.prepare(m, n, k, timer.device, seed + i) for i in range(1, nbuf)]
    torch.cuda.synchronize()
    fns = [lambda s=s: backend.run(s) for s in states]
    t = time_calls(timer, fns, warmup, repeats)
    aux_us = None
    if backend.has_aux:
        aux_fns = [lambda s=s: backend.aux(s) for s in states]
        aux_us = time_calls(timer, aux_fns, max(1, warmup // 2), max(3, repeats // 2)).median
    row = gemm_row(
        backend.range_name(m, n, k),
        backend.name,
        backend.op,
        m,
        n,
        k,
        backend.dtype,
        backend.out,
        backend.scale,
        t,
        aux_time_us=aux_us,
        rel_error=rel,
        status=status,
    )
    del states, fns
    return row, why


def measure_wall(
    backend: Any, m: int, n: int, k: int, *, warmup: int, repeats: int, seed: int
) -> tuple[dict[str, Any], str]:
    """CPU-only backends (tests, plugins without a GPU): wall-clock timing, no NVML, no correctness check."""
    state = backend.prepare(m, n, k, None, seed)
    t = time_calls(None, [lambda: backend.run(state)], warmup, repeats)
    name = backend.range_name(m, n, k)
    return gemm_row(name, backend.name, backend.op, m, n, k, backend.dtype, backend.out, backend.scale, t), ""


def parse_shape(text: str) -> tuple[int, int, int]:
    parts = text.lower().split("x")
    if len(parts) != 3:
        raise ValueError(f"shape {text!r} is not MxNxK")
    m, n, k = (int(p) for p in parts)
    return m, n, k


class GemmFamily:
    """``bench gemm`` for the harness (tracekit.collectors.harness.Family): a case is (M, N, K), a backend one
    of tracekit.collectors.backends, a row :func:`gemm_row`."""

    def cases(self, args: argparse.Namespace) -> list[tuple[int, int, int]]:
        return [parse_shape(s) for s in args.shapes.split(",") if s.strip()]

    def key(self, case: tuple[int, int, int]) -> list[int]:
        return list(case)

    def backend(self, name: str) -> Any:
        from tracekit.collectors.backends import get_backend

        return get_backend(name)

    def setup(self, backend: Any, timer: CudaTimer | None, seed: int) -> None:
        return None

    def measure(
        self, backend: Any, case: tuple[int, int, int], ctx: CaseContext
    ) -> tuple[dict[str, Any], str]:
        m, n, k = case
        opts = {"warmup": ctx.warmup, "repeats": ctx.repeats, "seed": ctx.seed}
        if ctx.timer is not None:
            return measure_cuda(backend, ctx.timer, m, n, k, **opts)
        return measure_wall(backend, m, n, k, **opts)


def run_fingerprint(args: argparse.Namespace) -> int:
    """``--fingerprint``: the environment as one event line (the sweep reads it; this process imports torch)."""
    from tracekit.collectors.env import fingerprint

    emit = Emitter(args.out)
    emit("fingerprint", environment=json.loads(json.dumps(fingerprint(args.device), default=str)))
    emit.close()
    return 0


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(
        prog="python -m tracekit.collectors.worker", description=__doc__.split("\n")[0]
    )
    parser.add_argument("--backend")
    parser.add_argument("--shapes", default="")
    add_worker_options(parser)
    parser.add_argument("--fingerprint", action="store_true")
    args = parser.parse_args(argv)
    if args.fingerprint:
        return run_fingerprint(args)
    if not args.backend:
        parser.error("--backend is required")
    return run_worker(GemmFamily(), args)


if __name__ == "__main__":
    sys.exit(main())
