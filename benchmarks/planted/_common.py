"""Shared bits of the planted-cause scripts: CUDA-event timing, NVML beside it, measurement records.

Each script plants one known cause of a GEMM's gap to peak and wraps its GEMMs in tracekit ranges, so
``tracekit capture --nsys [--ncu] -- python benchmarks/planted/<script>.py`` followed by ``tracekit explain RUN``
must name that cause (``expected.json``; ``check.py`` compares). Scripts run in bare GPU environments: torch,
nvidia-ml-py and tracekit's collectors only (no polars).
"""

from __future__ import annotations

import json
import os
import statistics
import time
from pathlib import Path
from typing import Any

# tracekit must be installed (pip install -e . here; the built wheel on a GPU machine): putting the checkout on
# sys.path would not help, since collectors/ maps into tracekit.collectors only through the install.
from tracekit.collectors.nvml import Nvml, Sampler
from tracekit.collectors.ranges import gemm_range, range_for
from tracekit.naming import encode

__all__ = ["event_times", "gemm_range", "measurement", "nvml", "record", "step_range", "torch_cuda"]


def torch_cuda() -> Any:
    import torch

    if not torch.cuda.is_available():
        raise SystemExit("planted scripts need a CUDA GPU")
    torch.manual_seed(0)
    return torch


def step_range(name: str) -> Any:
    """A ``step`` range (the GEMM ranges inside it are analysed in its context)."""
    return range_for(("step", name), lambda: encode("step", name=name), is_gemm=False)


def event_times(torch: Any, fn: Any, count: int) -> list[float]:
    """Seconds per launch of ``count`` back-to-back launches (CUDA events)."""
    ev = [(torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)) for _ in range(count)]
    for s, e in ev:
        s.record()
        fn()
        e.record()
    torch.cuda.synchronize()
    return [s.elapsed_time(e) / 1e3 for s, e in ev]


_NVML: Nvml | None = None


def nvml() -> Nvml:
    global _NVML
    if _NVML is None:
        _NVML = Nvml(index=0)
    return _NVML


def measurement(
    name: str, m: int, n: int, k: int, dtype: str, times: list[float], sample: Any, **extra: Any
) -> dict:
    """A ``measurements`` row (tracekit/frames.py) for ``times`` (seconds) with the NVML sample beside it."""
    t = sorted(times)
    med = statistics.median(t)
    row = {
        "range": name, "backend": extra.pop("backend", f"torch-{dtype}"), "op": extra.pop("op", "mm"),
        "m": m, "n": n, "k": k, "dtype": dtype, "dtype_out": "bf16", "scale": extra.pop("scale", None),
        "time_us": med * 1e6, "time_us_p10": t[len(t) // 10] * 1e6, "time_us_p90": t[(9 * len(t)) // 10] * 1e6,
        "repeats": len(t), "tflops": 2.0 * m * n * k / med / 1e12, "status": "ok", "timing": "events",
        **(sample.as_columns() if sample is not None else {}), **extra,
    }  # fmt: skip
    return row


def record(row: dict) -> None:
    """Append a measurement to the capture's raw/ (``TRACEKIT_RUN_DIR``), else to ./planted-measurements.jsonl."""
    run_dir = os.environ.get("TRACEKIT_RUN_DIR")
    path = (
        Path(run_dir) / "raw" / "planted-measurements.jsonl"
        if run_dir
        else Path("planted-measurements.jsonl")
    )
    path.parent.mkdir(parents=True, exist_ok=True)
    with path.open("a") as f:
        f.write(json.dumps(row) + "\n")
    print(
        f"{row['range']}: {row['tflops']:.0f} TFLOP/s at {(row.get('sm_clock_hz') or 0) / 1e6:.0f} MHz",
        flush=True,
    )


def sampled(fn: Any) -> tuple[Any, Any]:
    """Run ``fn()`` with NVML sampled around it; returns (fn's result, NvmlSample)."""
    s = Sampler(nvml(), interval_s=0.01)
    with s:
        out = fn()
    return out, s.result


def sleep_idle(seconds: float) -> None:
    """Leave the GPU idle so its clock relaxes (a 'cold' launch follows)."""
    time.sleep(seconds)
