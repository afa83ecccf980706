"""Measure what this GPU actually sustains: a large GEMM per dtype, device-to-device copy bandwidth, and the SM
clock and power while the GEMM runs (NVML), first launches against the sustained rate.

The profile (JSON, ``tracekit.devices.CALIBRATION_FORMAT``) is what analyses show as the "measured peak" beside
the datasheet's: on an H200 a sustained 8192^3 BF16 loop settles near 665 TFLOP/s at ~1470 MHz under the 700 W
cap (DEVICE.md), 67% of the 989 TFLOP/s datasheet figure, so a GEMM at 650 TFLOP/s is near what the board allows.

torch and NVML are imported inside the functions (collectors run in bare GPU environments; nothing here needs
polars). A dtype the GPU or library cannot run (FP4 on Hopper) is recorded under ``failures`` with the full
message, never hidden.
"""

from __future__ import annotations

import statistics
import time
import traceback
from collections.abc import Callable
from pathlib import Path
from typing import Any

from tracekit.collectors.nvml import Nvml, Sampler
from tracekit.devices import CALIBRATION_FORMAT, calibration_path
from tracekit.errors import MissingToolError
from tracekit.run import write_json_atomic

__all__ = ["calibrate", "save_profile"]

DTYPES = ("bf16", "fp8", "fp4")


def _torch() -> Any:
    try:
        import torch
    except ImportError as exc:
        raise MissingToolError(
            "tracekit calibrate needs PyTorch", "pip install 'tracekit[gpu]' in the GPU environment"
        ) from exc
    if not torch.cuda.is_available():
        raise MissingToolError("no CUDA GPU is visible to PyTorch", "run calibrate on the GPU machine")
    return torch


def _gemm_fn(torch: Any, dtype: str, size: int) -> Callable[[], Any]:
    """A zero-argument callable running one ``size^3`` GEMM of ``dtype``; raises if the GPU cannot."""
    dev = "cuda"
    a = torch.randn(size, size, device=dev, dtype=torch.bfloat16)
    b = torch.randn(size, size, device=dev, dtype=torch.bfloat16)
    if dtype == "bf16":
        return lambda: torch.mm(a, b)
    if dtype == "fp8":
        a8 = a.to(torch.float8_e4m3fn)
        b8 = b.to(torch.float8_e4m3fn).t().contiguous().t()  # column-major B, as _scaled_mm requires
        one = torch.ones((), device=dev, dtype=torch.float32)
        return lambda: torch._scaled_mm(a8, b8, scale_a=one, scale_b=one, out_dtype=torch.bfloat16)
    if dtype == "fp4":
        fp4 = getattr(torch, "float4_e2m1fn_x2", None)
        if fp4 is None:
            raise RuntimeError(f"torch {torch.__version__} has no float4_e2m1fn_x2 dtype")
        packed_a = torch.randint(0, 255, (size, size // 2), device=dev, dtype=torch.uint8).view(fp4)
        packed_b = torch.randint(0, 255, (size, size // 2), device=dev, dtype=torch.uint8).view(fp4)
        # NVFP4: one e4m3 scale per 16 elements along K.
        sa = torch.ones(size, size // 16, device=dev, dtype=torch.float32).to(torch.float8_e4m3fn)
        sb = torch.ones(size, size // 16, device=dev, dtype=torch.float32).to(torch.float8_e4m3fn)
        fn = lambda: torch._scaled_mm(  # noqa: E731
            packed_a, packed_b.t(), scale_a=sa, scale_b=sb, out_dtype=torch.bfloat16
        )
        fn()  # raise here (CUBLAS_STATUS_NOT_SUPPORTED on Hopper) rather than inside the timing
        torch.cuda.synchronize()
        return fn
    raise ValueError(f"unknown calibration dtype {dtype!r}; choose from {DTYPES}")


def _time_launches(torch: Any, fn: Callable[[], Any], count: int) -> list[float]:
    """Per-launch times (s) of ``count`` back-to-back launches, from CUDA events."""
    events = [
        (torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)) for _ in range(count)
    ]
    for start, end in events:
        start.record()
        fn()
        end.record()
    torch.cuda.synchronize()
    return [s.elapsed_time(e) / 1e3 for s, e in events]


def _gemm_profile(torch: Any, dtype: str, size: int, seconds: float, first: int, nvml: Nvml) -> dict:
    fn = _gemm_fn(torch, dtype, size)
    flops = 2.0 * size**3
    torch.cuda.synchronize()
    time.sleep(1.0)  # let the clock relax: the first launches after idle are what a cold call sees
    cold = nvml.read()
    cold_s = _time_launches(torch, fn, 1)[0]
    first_s = _time_launches(torch, fn, first)
    first_clock = nvml.read()
    batch = max(1, int(0.05 / max(statistics.median(first_s), 1e-6)))

    def loop(duration: float) -> list[float]:
        rates, t0 = [], time.perf_counter()
        while time.perf_counter() - t0 < duration:
            rates.append(flops / statistics.median(_time_launches(torch, fn, batch)) / 1e12)
        return rates

    warm = loop(seconds / 2)  # the clock settles under the power cap during the first half ...
    sampler = Sampler(nvml, interval_s=0.02)
    with sampler:
        tail = loop(seconds / 2)  # ... and the second half is the sustained rate
    return {
        "m": size,
        "n": size,
        "k": size,
        "cold_single_tflops": flops / cold_s / 1e12,
        "cold_sm_clock_hz": cold.get("sm_clock_hz"),
        "first_tflops": flops / statistics.median(first_s) / 1e12,
        "first_launches": first,
        "first_sm_clock_hz": first_clock.get("sm_clock_hz"),
        "sustained_tflops": statistics.median(tail),
        "sustained_seconds": seconds,
        "launches": batch * (len(warm) + len(tail)),
        **sampler.result.as_columns(),
        "nvml_samples": sampler.result.samples,
    }


def _copy_profile(torch: Any, nbytes: int = 1 << 30, repeats: int = 10) -> dict[str, Any]:
    src = torch.empty(nbytes, device="cuda", dtype=torch.uint8)
    dst = torch.empty_like(src)
    dst.copy_(src)
    times = _time_launches(torch, lambda: dst.copy_(src), repeats)
    t = statistics.median(times)
    return {"bytes": nbytes, "seconds": t, "bytes_per_s": nbytes / t, "rw_bytes_per_s": 2 * nbytes / t}


def calibrate(
    *,
    dtypes: tuple[str, ...] = DTYPES,
    size: int = 8192,
    seconds: float = 3.0,
    first_launches: int = 10,
    device_index: int = 0,
    on_event: Callable[[str], None] | None = None,
) -> dict[str, Any]:
    """Run the calibration on one GPU and return the profile (see the module docstring)."""
    torch = _torch()
    torch.cuda.set_device(device_index)
    props = torch.cuda.get_device_properties(device_index)
    nvml = Nvml(index=device_index)
    profile: dict[str, Any] = {
        "format": CALIBRATION_FORMAT,
        "version": 1,
        "created_unix": time.time(),
        "device": {
            "name": props.name,
            "compute_capability": f"{props.major}.{props.minor}",
            "sm_count": props.multi_processor_count,
            "memory_bytes": props.total_memory,
            "torch": torch.__version__,
            "cuda": torch.version.cuda,
            "nvml": "ok" if nvml.ok else nvml.reason,
        },
        "gemm": {},
        "copy": None,
        "failures": [],
    }
    for dtype in dtypes:
        if on_event:
            on_event(f"{dtype}: {size}^3 GEMM for {seconds:.0f} s")
        try:
            profile["gemm"][dtype] = _gemm_profile(torch, dtype, size, seconds, first_launches, nvml)
        except Exception as exc:  # unsupported dtype on this GPU / library: recorded in full
            profile["failures"].append(
                {
                    "what": f"gemm {dtype}",
                    "error_type": f"{type(exc).__module__}.{type(exc).__name__}",
                    "message": str(exc),
                    "traceback": traceback.format_exc(),
                }
            )
        torch.cuda.empty_cache()
    if on_event:
        on_event("device-to-device copy bandwidth")
    try:
        profile["copy"] = _copy_profile(torch)
    except Exception as exc:
        profile["failures"].append(
            {
                "what": "copy",
                "error_type": type(exc).__name__,
                "message": str(exc),
                "traceback": traceback.format_exc(),
            }
        )
    return profile


def save_profile(profile: dict[str, Any], out: Path | None = None) -> Path:
    """Write the profile to ``out`` or to ``~/.cache/tracekit/calibration/<gpu>.json``; returns the path."""
    path = out or calibration_path(profile["device"]["name"])
    write_json_atomic(path, profile)
    return path
