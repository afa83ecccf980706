"""`tracekit calibrate` on a real GPU: a sustained BF16 GEMM below the datasheet peak with the clock it ran at,
FP8 where the GPU has it, FP4 recorded as a failure where it does not, and a profile `explain` can load.
Run: `python -m pytest -m gpu tests/gpu/test_calibrate_gpu.py`."""

from __future__ import annotations

from pathlib import Path

import pytest

from tracekit.collectors.calibrate import calibrate, save_profile
from tracekit.devices import load_calibration, match_device

pytestmark = pytest.mark.gpu


def test_calibrate_bf16_fp8_fp4(tmp_path: Path) -> None:
    import torch

    profile = calibrate(dtypes=("bf16", "fp8", "fp4"), size=4096, seconds=1.0, first_launches=5)
    dev = profile["device"]
    spec = match_device(dev["name"], dev["compute_capability"], dev["sm_count"])
    bf16 = profile["gemm"]["bf16"]
    assert 0 < bf16["sustained_tflops"] < bf16["first_tflops"] * 1.5
    if spec is not None and spec.peak_tflops("bf16"):
        # Measured, not copied: below the datasheet peak, and not absurdly below it.
        assert 0.2 * spec.peak_tflops("bf16") < bf16["sustained_tflops"] < 1.05 * spec.peak_tflops("bf16")
    if dev["nvml"] == "ok":
        assert bf16["sm_clock_hz"] and bf16["sm_clock_hz"] > 3e8
        assert bf16["power_w"] and bf16["power_w"] > 0
    major, _ = torch.cuda.get_device_capability(0)
    if major >= 9:
        assert profile["gemm"]["fp8"]["sustained_tflops"] > bf16["sustained_tflops"]
    if major == 9:  # DEVICE.md: NVFP4 _scaled_mm raises CUBLAS_STATUS_NOT_SUPPORTED on the H200
        fail = next(f for f in profile["failures"] if f["what"] == "gemm fp4")
        assert fail["message"]
    assert profile["copy"]["bytes_per_s"] > 1e11
    path = save_profile(profile, tmp_path / "cal.json")
    assert load_calibration(path)["gemm"]["bf16"]["sustained_tflops"] == bf16["sustained_tflops"]
