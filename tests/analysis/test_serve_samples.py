"""The serving step captured on a GPU with code that does not import tracekit (benchmarks/foreign/serve_step.py:
a two-layer decoder, CUDA-graph decode in ``serve/decode``, eager prefill in ``serve/prefill``, the last MLP in
FP8) and the layer loop (benchmarks/foreign/layer_loop.py): every kernel gets the class a performance engineer
would give it, every GEMM the dtype cuBLAS ran it in, and the bounded ncu pass profiled each kernel configuration
at most N times. The expectations are written from the kernels' own names and the script's source, not from
tracekit's output (samples/README.md says how each was captured)."""

from __future__ import annotations

import re
from pathlib import Path

import polars as pl
import pytest

import tracekit

SAMPLES = Path(__file__).resolve().parents[2] / "samples"
SERVE_NCU = SAMPLES / "h100-serve-nsys-ncu"
SERVE_TORCH = SAMPLES / "h100-serve-torchprof"
LOOP = SAMPLES / "h100-layer-loop"

# What each kernel of the step is, from its name (the script's source says which op launched it):
EXPECTED_CLASS: list[tuple[str, str]] = [
    (r"^nvjet_sm90_", "gemm"),  # cuBLAS: q/k/v/o projections, gate/up/down (bf16 and the FP8 MLP)
    (r"splitKreduce_kernel", "splitk-reduce"),  # cuBLASLt's split-K epilogue at decode sizes
    (r"cudnn_generated_fort_native_sdpa", "attention"),  # SDPA through cuDNN (prefill and decode)
    (r"distribution_elementwise_grid_stride", "rng"),  # torch.randn of the inputs
    (r"float8_copy_kernel", "quantize"),  # the activation cast to e4m3 before torch._scaled_mm
    (r"silu_kernel", "activation"),  # SwiGLU's silu
    (r"GeluCUDAKernelImpl", "activation"),
    (r"CatArrayBatchedCopy", "layout"),  # rotary's rotate_half cat
    (r"direct_copy_kernel", "layout"),  # repeat_kv's expand + reshape, contiguous copies
    (r"reduce_kernel<", "reduction"),  # RMSNorm's variance (mean), the FP8 scale's amax (max)
    (r"FillFunctor", "memory"),
]


def _need(run: Path) -> None:
    if not (run / "run.json").is_file():
        pytest.skip(f"{run.name} is not in this checkout (samples/)")


def _expected(name: str) -> str | None:
    for pattern, cls in EXPECTED_CLASS:
        if re.search(pattern, name):
            return cls
    return None


@pytest.mark.parametrize("run", [SERVE_NCU, SERVE_TORCH, LOOP], ids=lambda p: p.name)
def test_every_kernel_of_the_step_has_its_class(run: Path) -> None:
    _need(run)
    kernels = tracekit.load(run).frames["kernels"]
    assert kernels.height > 1000
    assert kernels["kernel_class"].null_count() == 0
    checked = 0
    for name, cls in kernels.select("name", "kernel_class").unique().iter_rows():
        want = _expected(name)
        if want is not None:
            assert cls == want, (name, cls, want)
            checked += 1
        else:  # what no pattern above names: PyTorch's pointwise kernels (mul, add, pow, rsqrt, neg, bf16 casts)
            assert cls in ("elementwise", "layout"), (name, cls)
            assert "at::native::" in name, name
    assert checked >= (5 if run != LOOP else 2)


@pytest.mark.parametrize("run", [SERVE_NCU, SERVE_TORCH], ids=lambda p: p.name)
def test_every_gemm_kernel_of_the_step_is_a_gemm_and_nothing_else_is(run: Path) -> None:
    _need(run)
    kernels = tracekit.load(run).frames["kernels"]
    gemm_names = set(kernels.filter(pl.col("kernel_class") == "gemm")["name"].unique())
    assert gemm_names and all(n.startswith("nvjet_sm90_") for n in gemm_names), gemm_names
    # the bf16 projections (tst) and the FP8 MLP (qqtst) both ran, at prefill and decode tile sizes
    assert any("_tst_" in n for n in gemm_names) and any("_qqtst_" in n for n in gemm_names)


def test_gemm_dtypes_are_the_ones_cublas_ran() -> None:
    """``tst`` is bf16 in, bf16 out; ``qqtst`` is e4m3 in (the FP8 MLP). The ncu counters of the same kernels
    agree: the analysis names the dtype, and where ncu measured it, the source says so."""
    _need(SERVE_NCU)
    analysis = tracekit.analyze(SERVE_NCU)
    seen = {}
    for case in analysis.cases:
        name = case.kernel.name
        if not name.startswith("nvjet_sm90_"):
            continue
        want = "fp8" if "_qqtst_" in name else "bf16"
        assert case.rate.dtype_class == want, (case.name, name, case.rate.dtype_class)
        seen[want] = seen.get(want, 0) + 1
    assert seen.get("bf16") and seen.get("fp8"), seen


def test_no_attention_or_auxiliary_kernel_is_a_gemm_case() -> None:
    _need(SERVE_NCU)
    for run in (SERVE_NCU, SERVE_TORCH):
        analysis = tracekit.analyze(run)
        assert analysis.cases
        for case in analysis.cases:
            assert case.kernel.name.startswith("nvjet_sm90_"), (run.name, case.name, case.kernel.name)
            assert case.pct_of_peak is None or 0 < case.pct_of_peak <= 100, (case.name, case.pct_of_peak)


def test_the_ncu_pass_profiled_each_kernel_configuration_at_most_twice_and_every_gemm() -> None:
    """capture's default bound (2 launches of each launch configuration inside ``--ranges serve``): no (kernel,
    grid, block, shared memory) profiled more than twice; every GEMM kernel that ran in the ranges was profiled."""
    _need(SERVE_NCU)
    run = tracekit.load(SERVE_NCU)
    ncu = run.frames["ncu"]
    config = ["name", "grid_x", "grid_y", "grid_z", "block_x", "block_y", "block_z", "dynamic_smem_bytes"]
    counts = ncu.group_by(config).len()
    assert counts["len"].max() <= 2
    assert set(ncu["nvtx_range"].unique()) <= {"serve/decode", "serve/prefill"}
    passes = {p["tool"]: p for p in run.manifest["capture"]["passes"]}
    assert passes["ncu"]["ncu"]["profiled"] == ncu.height
    kernels, ranges = run.frames["kernels"], run.frames["ranges"]
    in_serve = ranges.filter(pl.col("name").str.starts_with("serve/"))["range_id"]
    ran = set(
        kernels.filter(pl.col("range_id").is_in(in_serve.implode()) & (pl.col("kernel_class") == "gemm"))[
            "name"
        ]
    )
    profiled = set(ncu.filter(pl.col("kernel_class") == "gemm")["name"])
    assert ran and ran <= profiled, ran - profiled


def test_under_the_pytorch_profiler_prefill_gemms_have_shapes_and_replayed_decode_gemms_sit_in_serve_decode() -> (
    None
):
    """capture --torch-profiler records shapes by default: every eager prefill GEMM gets M, N, K from its
    operator and an achieved TFLOP/s; the decode step's GEMMs, replayed from a CUDA graph, have no operator of
    their own, and are cases of ``serve/decode`` with the shapes recorded while the graph was captured (M = 16,
    the script's decode batch)."""
    _need(SERVE_TORCH)
    analysis = tracekit.analyze(SERVE_TORCH)
    prefill = [c for c in analysis.cases if c.range == "serve/prefill"]
    decode = [c for c in analysis.cases if c.range == "serve/decode"]
    assert prefill and decode
    for c in prefill:
        assert c.shape is not None and c.shape.m == 4096 and c.shape.k in (2048, 6144), c.name
        assert c.timing.achieved_tflops and c.timing.calls % 30 == 0, c.name  # 30 prefill steps
        assert c.pct_of_peak is not None and 0 < c.pct_of_peak <= 100
    for c in decode:
        assert c.shape is not None and c.shape.m == 16, c.name
        assert c.timing.achieved_tflops, c.name
        assert c.timing.calls % 50 == 0  # once per replay of the 50 (twice where both layers share a shape)
    # the FP8 MLP's GEMMs are _scaled_mm at fp8 in both steps; the rest bf16 mm
    assert {c.rate.dtype_class for c in decode if c.op == "_scaled_mm"} == {"fp8"}
    assert {c.rate.dtype_class for c in decode if c.op == "mm"} == {"bf16"}
    # the operators recorded while the graph was captured launched no kernel: not "sampled out" calls
    assert all(c.timing.calls_without_kernel == 0 for c in analysis.cases)
