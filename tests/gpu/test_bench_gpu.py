"""`tracekit bench gemm` on a real GPU (the H200 in DEVICE.md): bf16 and fp8 measured, FP4 recorded as failures
with the libraries' own error text. Run: `python -m pytest -m gpu tests/gpu -x`."""

from __future__ import annotations

import importlib.util

import pytest

from tracekit.collectors.bench import SweepSettings, read_rows, run_sweep
from tracekit.run import Run

pytestmark = pytest.mark.gpu

SHAPES = [(16, 768, 6144), (1024, 2048, 6144), (4096, 2048, 6144)]


def _cc() -> tuple[int, int]:
    import torch

    return torch.cuda.get_device_capability(0)


@pytest.fixture(scope="module")
def sweep(tmp_path_factory):
    backends = [
        "torch-bf16",
        "torch-fp8-tensorwise",
        "torch-fp8-rowwise",
        "torch-fp8-blockwise",
        "torch-nvfp4",
    ]
    if importlib.util.find_spec("flashinfer") is not None:
        backends += [
            "flashinfer-fp4-auto",
            "flashinfer-fp4-cudnn",
            "flashinfer-fp4-cutlass",
            "flashinfer-fp8",
        ]
    backends += ["sgl-fp4"]
    out = tmp_path_factory.mktemp("bench") / "run"
    settings = SweepSettings(backends=backends, shapes=SHAPES, warmup=5, repeats=10, timeout=240)
    result = run_sweep(out, settings)
    return result, backends


def test_run_complete_with_environment(sweep):
    result, _ = sweep
    run = Run.open(result.run.path)
    assert run.status == "complete"
    env = run.manifest["environment"]
    assert env["gpu_name"] and env["compute_capability"] and env["sm_count"] > 0 and env["l2_bytes"] > 0
    m, f = read_rows(run)
    assert m == result.measurements and f == result.failures


@pytest.mark.parametrize("backend", ["torch-bf16", "torch-fp8-tensorwise"])
def test_measured_and_plausible(sweep, backend):
    result, _ = sweep
    rows = {(r["m"], r["n"], r["k"]): r for r in result.measurements if r["backend"] == backend}
    assert set(rows) == set(SHAPES), [f for f in result.failures if f["backend"] == backend]
    for shape, r in rows.items():
        assert r["status"] == "ok", r
        assert r["rel_error"] is not None and r["rel_error"] < 0.1
        assert r["timing"] in ("cuda-graph", "events")
        assert r["time_us_p10"] <= r["time_us"] <= r["time_us_p90"]
        # DEVICE.md on the H200: bf16 21..722 TF/s, fp8 19..1231 TF/s over these shapes; allow a wide band
        assert 5 < r["tflops"] < 2500, (shape, r["tflops"])
        assert r["range"].startswith(f"gemm backend={backend} ")
    big = rows[(4096, 2048, 6144)]["tflops"]
    small = rows[(16, 768, 6144)]["tflops"]
    assert big > 3 * small  # small M is launch / memory bound
    if rows[(4096, 2048, 6144)]["sm_clock_hz"] is not None:
        assert 3e8 < rows[(4096, 2048, 6144)]["sm_clock_hz"] < 3.5e9


def test_fp8_faster_than_bf16_at_large_m(sweep):
    result, _ = sweep
    t = {(r["backend"], r["m"]): r["tflops"] for r in result.measurements if r["n"] == 2048}
    assert t[("torch-fp8-tensorwise", 4096)] > t[("torch-bf16", 4096)]


def test_torch_nvfp4_recorded_with_real_error(sweep):
    result, _ = sweep
    if _cc()[0] >= 10:
        pytest.skip("FP4 tensor cores present: torch-nvfp4 should measure here")
    rows = [f for f in result.failures if f["backend"] == "torch-nvfp4"]
    assert len(rows) == len(SHAPES)
    for f in rows:
        assert f["kind"] == "unsupported", f
        assert "CUBLAS_STATUS_NOT_SUPPORTED" in f["message"] or "scaling" in f["message"].lower()
        assert f["device_name"] and f["compute_capability"]


def test_flashinfer_fp4_unsupported_with_real_error(sweep):
    result, backends = sweep
    if "flashinfer-fp4-auto" not in backends:
        pytest.skip("flashinfer is not importable here")
    if _cc()[0] >= 10:
        pytest.skip("FP4 tensor cores present")
    for name in ("flashinfer-fp4-auto", "flashinfer-fp4-cudnn", "flashinfer-fp4-cutlass"):
        rows = [f for f in result.failures if f["backend"] == name]
        assert len(rows) == len(SHAPES), (name, rows)
        for f in rows:
            assert f["kind"] == "unsupported", f
            assert "support" in f["message"] and f["traceback"]
    auto = next(f for f in result.failures if f["backend"] == "flashinfer-fp4-auto")
    assert "No suitable auto backends" in auto["message"]


def test_sgl_fp4_unavailable_when_absent(sweep):
    result, _ = sweep
    if importlib.util.find_spec("sgl_kernel") is not None:
        pytest.skip("sgl-kernel is installed here")
    rows = [f for f in result.failures if f["backend"] == "sgl-fp4"]
    assert [f["kind"] for f in rows] == ["unavailable"] * len(SHAPES)
    assert "sgl_kernel" in rows[0]["message"]
