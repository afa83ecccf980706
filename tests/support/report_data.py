"""Runs for the report / bundle / compare tests, built from real H200 numbers.

``bench_run`` writes ``raw/measurements.jsonl`` from ``h200-probe/gemm_bench.csv`` (CUDA-graph medians and the
p10-p90 spread of the repeats, measured on the lent H200) and ``raw/failures.jsonl`` with the error texts
recorded in shared/DEVICE.md, then imports them with the real importer.
"""

from __future__ import annotations

import csv
import json
from pathlib import Path
from typing import Any

from tracekit import naming
from tracekit.analyzers.importer import import_files, import_into
from tracekit.run import Run

ENVIRONMENT = {
    "gpu_name": "NVIDIA H200",
    "compute_capability": "9.0",
    "sm_count": 132,
    "driver": "580.159.04",
    "cuda_runtime": "13.0",
    "versions": {
        "torch": "2.11.0+cu130",
        "flashinfer-python": "0.5.3",
        "sgl-kernel": None,
        "tracekit": "0.1.0",
    },
    "python": "3.12.3",
}
CAPTURE = {"tools": ["plain"], "instrument": False}

# Real error texts from the H200 (shared/DEVICE.md, "FP4 on this GPU").
FAILURE_TEXTS = [
    (
        "torch-nvfp4",
        "scaled_mm",
        "unsupported",
        "RuntimeError",
        "CUDA error: CUBLAS_STATUS_NOT_SUPPORTED when calling cublasLtMatmulAlgoGetHeuristic(...)",
    ),
    (
        "flashinfer-fp4",
        "mm_fp4",
        "unsupported",
        "flashinfer.utils.BackendSupportedError",
        "No suitable auto backends found for mm_fp4",
    ),
    (
        "flashinfer-fp4-cutlass",
        "mm_fp4",
        "unsupported",
        "flashinfer.utils.BackendSupportedError",
        "mm_fp4 does not support backend 'cutlass' with capability 90",
    ),
    (
        "torch-fp8-blockwise",
        "scaled_mm",
        "unsupported",
        "RuntimeError",
        "scaled_gemm doesn't support fast accum with 128x128 blockwise scaling",
    ),
]
# A traceback written to break out of Markdown: fences, a closing </details>, table pipes, HTML, a mention.
HOSTILE_TRACEBACK = (
    "Traceback (most recent call last):\n"
    '  File "bench.py", line 3, in <module>\n'
    "    out = mm_fp4(a, b)  # | not | a | table |\n"
    "```\n"
    "</details>\n"
    "<script>alert(1)</script> @octocat **bold** $x$\n"
    "````\n"
    "RuntimeError: CUDA error: CUBLAS_STATUS_NOT_SUPPORTED\n"
)


def bench_rows(shared: Path) -> list[dict[str, str]]:
    with (shared / "h200-probe" / "gemm_bench.csv").open() as f:
        return [r for r in csv.DictReader(f) if r["kind"] in ("bf16", "fp8")]


def measurement(
    row: dict[str, str], *, scale_time: float = 1.0, spread: float | None = None
) -> dict[str, Any]:
    """One measurements.jsonl record from a gemm_bench.csv row (time scaled by ``scale_time``)."""
    kind = row["kind"]
    m, n, k = int(row["M"]), int(row["N"]), int(row["K"])
    dtype = "bf16" if kind == "bf16" else "e4m3"
    backend = f"torch-{kind}"
    op = "mm" if kind == "bf16" else "scaled_mm"
    t = float(row["graph_us"]) * scale_time
    s = float(row["spread10_90"]) if spread is None else spread
    return {
        "range": naming.encode(
            "gemm",
            backend=backend,
            op=op,
            M=m,
            N=n,
            K=k,
            a=dtype,
            b=dtype,
            out="bf16",
            scale="tensorwise" if kind != "bf16" else None,
        ),
        "backend": backend,
        "op": op,
        "m": m,
        "n": n,
        "k": k,
        "dtype": dtype,
        "dtype_out": "bf16",
        "scale": "tensorwise" if kind != "bf16" else None,
        "time_us": t,
        "time_us_p10": t * (1 - s / 2),
        "time_us_p90": t * (1 + s / 2),
        "repeats": int(row["nsets"]),
        "tflops": 2.0 * m * n * k / (t * 1e-6) / 1e12,
        "rel_error": float(row["rel_err"]),
        "status": "ok",
        "timing": "cuda-graph",
    }


def failure(
    i: int, backend: str, op: str, kind: str, etype: str, message: str, tb: str | None = None
) -> dict:
    m = 16 * (i + 1)
    return {
        "backend": backend,
        "op": op,
        "m": m,
        "n": 2048,
        "k": 6144,
        "kind": kind,
        "error_type": etype,
        "message": message,
        "traceback": tb
        or f'Traceback (most recent call last):\n  File "worker.py", line 88, in run\n    {op}(a, b)\n{etype}: {message}\n',
        "device_name": "NVIDIA H200",
        "compute_capability": "9.0",
        "versions": json.dumps({"torch": "2.11.0+cu130", "flashinfer-python": "0.5.3"}),
        "time_unix": 1796236416.0 + i,
    }


def write_jsonl(path: Path, rows: list[dict[str, Any]]) -> None:
    path.write_text("".join(json.dumps(r) + "\n" for r in rows))


def bench_run(
    path: Path,
    measurements: list[dict[str, Any]],
    failures: list[dict[str, Any]] | None = None,
    *,
    command: list[str] | None = None,
) -> Run:
    run = Run.create(
        path,
        command=command or ["tracekit", "bench", "gemm", "--shapes", "glm5"],
        capture=CAPTURE,
        environment=ENVIRONMENT,
    )
    write_jsonl(run.raw_dir / "measurements.jsonl", measurements)
    if failures:
        write_jsonl(run.raw_dir / "failures.jsonl", failures)
    import_into(run)
    return run


def probe_run(shared: Path, path: Path) -> Run:
    """The H200 probe (ncu report + nsys SQLite) imported as a run."""
    probe = shared / "h200-probe"
    run, _ = import_files([probe / "probe.ncu-rep", probe / "probe.sqlite"], path)
    return run


def sample_runs(samples: Path) -> list[Path]:
    """Real sample runs the lead commits under samples/ (run folders holding run.json)."""
    return sorted(p.parent for p in samples.glob("*/run.json"))
