"""Every GEMM of a transformer block a user wrote (benchmarks/foreign/block_step.py, no tracekit import), captured
on an H100 under ``--nsys --ncu --ranges '^block/'`` and under ``--torch-profiler`` (samples/README.md): the eager
block's cuBLAS GEMMs on persistent ``nvjet`` kernels, the compiled block's Inductor Triton templates, the FP8
MLP's ``torch._scaled_mm`` and SDPA attention. The expected GEMMs and FLOPs are computed from the script's own
sizes (read from its source), not from tracekit's output; the program's printed TFLOP/s is checked against
tracekit's GEMM rate and time."""

from __future__ import annotations

import math
import re
from pathlib import Path

import polars as pl
import pytest

import tracekit

ROOT = Path(__file__).resolve().parents[2]
SCRIPT = ROOT / "benchmarks" / "foreign" / "block_step.py"
NCU = ROOT / "samples" / "h100-block-nsys-ncu"
TORCH = ROOT / "samples" / "h100-block-torchprof"
RUNS = [NCU, TORCH]


def _need(run: Path) -> None:
    if not (run / "run.json").is_file():
        pytest.skip(f"{run.name} is not in this checkout (samples/)")


def _sizes() -> dict[str, tuple[int, int, int]]:
    """(M, N, K) of each GEMM of one block, from the script's constants and its default ``--tokens``."""
    src = SCRIPT.read_text()
    hidden, heads, head_dim, inter = (
        int(v)
        for v in re.search(
            r"HIDDEN, HEADS, HEAD_DIM, INTERMEDIATE = (\d+), (\d+), (\d+), (\d+)", src
        ).groups()
    )
    tokens = int(re.search(r'"--tokens", type=int, default=(\d+)', src).group(1))
    assert heads * head_dim == hidden
    return {
        "qkv": (tokens, 3 * hidden, hidden),
        "o": (tokens, hidden, hidden),
        "gate": (tokens, inter, hidden),
        "up": (tokens, inter, hidden),
        "down": (tokens, hidden, inter),
    }


def _flops(m: int, n: int, k: int) -> float:
    return 2.0 * m * n * k


def _close(a: float | None, b: float, rel: float = 1e-3) -> bool:
    return a is not None and abs(a - b) <= rel * b


@pytest.fixture(scope="module")
def analyses() -> dict[Path, tracekit.Analysis]:
    return {run: tracekit.analyze(run) for run in RUNS if (run / "run.json").is_file()}


def _cases(analyses: dict, run: Path, way: str) -> list:
    _need(run)
    return [c for c in analyses[run].cases if c.range == f"block/{way}"]


@pytest.mark.parametrize("run", RUNS, ids=lambda p: p.name)
def test_each_triton_template_gemm_is_a_case_with_its_dtype_and_flops(analyses: dict, run: Path) -> None:
    """Inductor's templates (``triton_tem_fused_*mm*``) are GEMMs by name; their FLOPs come from ncu's tensor-op
    counters under nsys+ncu and from the launch op's argument sizes under the PyTorch profiler. The four
    templates of a block are its five GEMMs (gate and up run one template, one shape: one case of 2 calls a
    block), and their FLOPs add up to the block's."""
    sizes = _sizes()
    cases = _cases(analyses, run, "compiled")
    assert cases and all(c.kernel.name.startswith("triton_tem_fused_") for c in cases), [
        c.name for c in cases
    ]
    assert len({c.kernel.name for c in cases}) == 4
    want = {_flops(*s) for s in sizes.values()}
    for c in cases:
        assert c.kernel.kernel_class == "gemm" and c.rate.dtype_class == "bf16", (c.name, c.rate)
        assert any(_close(c.flops.per_call, f) for f in want), (c.name, c.flops.per_call)
        assert c.flops.source == ("ncu-counters" if run == NCU else "shape"), (c.name, c.flops.source)
        assert c.timing.achieved_tflops and c.pct_of_peak and 0 < c.pct_of_peak <= 100
    blocks = min(c.timing.calls for c in cases)
    assert sum(c.timing.calls for c in cases) == 5 * blocks
    assert _close(sum(c.flops.total for c in cases) / blocks, sum(_flops(*s) for s in sizes.values()))
    # every template launched in the range is in a case
    kernels = tracekit.load(run).frames["kernels"]
    tem = kernels.filter(pl.col("name").str.starts_with("triton_tem_"))
    assert set(tem["kernel_class"]) == {"gemm"}


@pytest.mark.parametrize("run", RUNS, ids=lambda p: p.name)
def test_each_eager_gemm_on_a_persistent_kernel_is_a_case_with_its_flops(analyses: dict, run: Path) -> None:
    """cuBLAS runs qkv on ``nvjet_sm90_tst_256x128_*`` with a grid of 132 CTAs, o and down on the same kernel
    with a grid of 128, gate and up on ``nvjet_sm90_tst_176x128_*``. qkv, o and down are each a case of their
    own with 2*M*N*K; gate and up (one kernel, one shape, the same math) are one case of two calls a block."""
    sizes = _sizes()
    cases = _cases(analyses, run, "eager")
    assert all(c.kernel.name.startswith("nvjet_sm90_tst_") for c in cases)
    blocks = max(c.timing.calls for c in cases) // 2
    by_flops: dict[float, list] = {}
    for c in cases:
        assert c.rate.dtype_class == "bf16" and c.flops.per_call, (c.name, c.flops)
        by_flops.setdefault(round(c.flops.per_call / 1e6), []).append(c)
    calls = sorted((round(c.flops.per_call / 1e6), c.timing.calls) for c in cases)
    expected = sorted(
        [(round(_flops(*sizes[g]) / 1e6), blocks) for g in ("qkv", "o", "down")]
        + [(round(_flops(*sizes["gate"]) / 1e6), 2 * blocks)]
    )
    assert calls == expected, (calls, expected)
    # o and down share one kernel and one launch configuration: told apart by shape or by place
    shared = [c for c in cases if "256x128" in c.kernel.name and c.kernel.grid == 128]
    assert len(shared) == 2
    if run == NCU:
        assert all(c.place is not None for c in shared)
        assert sorted(c.place.nth[0] for c in shared) == [2, 5]  # the 2nd (o) and 5th (down) GEMM of 5
    else:
        assert {(c.shape.n, c.shape.k) for c in shared} == {(sizes["o"][1], sizes["o"][2]), sizes["down"][1:]}
    gate_up = [c for c in cases if c.timing.calls == 2 * blocks]
    assert len(gate_up) == 1 and "176x128" in gate_up[0].kernel.name
    assert _close(sum(c.flops.total for c in cases) / blocks, sum(_flops(*s) for s in sizes.values()))


@pytest.mark.parametrize("run", RUNS, ids=lambda p: p.name)
def test_fp8_scaled_mm_gemms_are_cases_with_e4m3_and_flops(analyses: dict, run: Path) -> None:
    """The FP8 MLP's three ``_scaled_mm`` GEMMs run on ``nvjet_sm90_qqtst_*``: dtype fp8 (e4m3 operands where the
    profiler recorded the op; ncu's counters say fp8 only), FLOPs 2*M*N*K from the op's shape, or counted by ncu:
    the 144-wide tile pads N = 5632 to 40 tiles, and the count includes the padding."""
    sizes = _sizes()
    cases = [c for c in _cases(analyses, run, "fp8") if "_qqtst_" in c.kernel.name]
    assert cases
    gate_up, down = _flops(*sizes["gate"]), _flops(*sizes["down"])
    blocks = min(c.timing.calls for c in cases)
    assert sum(c.timing.calls for c in cases) == 3 * blocks
    for c in cases:
        assert c.rate.dtype_class == "fp8", (c.name, c.rate)
        assert c.timing.achieved_tflops and c.timing.kernel_tflops
        if run == TORCH:
            assert c.op == "_scaled_mm" and (c.shape.dtype_a, c.shape.dtype_b) == ("e4m3", "e4m3")
            assert any(_close(c.flops.per_call, f) for f in (gate_up, down)), (c.name, c.flops.per_call)
        else:
            assert c.flops.source == "ncu-counters"
            tile = int(re.search(r"_qqtst_(\d+)x(\d+)_", c.kernel.name).group(1))
            m, n, k = sizes["gate"] if c.timing.calls == 2 * blocks else sizes["down"]
            padded = 2.0 * m * k * math.ceil(n / tile) * tile
            assert _close(c.flops.per_call, padded), (c.name, c.flops.per_call, padded)


@pytest.mark.parametrize("run", RUNS, ids=lambda p: p.name)
def test_sdpa_kernels_are_attention_and_no_gemm_case(analyses: dict, run: Path) -> None:
    _need(run)
    kernels = tracekit.load(run).frames["kernels"]
    sdpa = kernels.filter(pl.col("name").str.contains(r"sdpa|flash|fmha|attention|efficient"))
    assert sdpa.height >= 9  # one a block, 3 ways x (3 warm-up + 3 timed)
    assert set(sdpa["kernel_class"]) == {"attention"}
    assert not {c.kernel.name for c in analyses[run].cases} & set(sdpa["name"])


def _program_lines(run: Path) -> dict[str, tuple[float, float]]:
    """``block/WAY: MS ms median of N, TFLOPS GEMM TFLOP/s`` lines of the program's stdout."""
    name = "program.nsys.stdout" if run == NCU else "program.stdout"
    text = (run / "raw" / name).read_text()
    pat = r"^(block/\w+): ([\d.]+) ms median of \d+, ([\d.]+) GEMM TFLOP/s$"
    return {w: (float(ms), float(tf)) for w, ms, tf in re.findall(pat, text, re.MULTILINE)}


@pytest.mark.parametrize("run", RUNS, ids=lambda p: p.name)
def test_the_programs_tflops_is_tracekits_gemm_rate_over_the_whole_block(analyses: dict, run: Path) -> None:
    """The program divides the block's GEMM FLOPs by the whole block's time (CUDA events around it: attention,
    norms, SiLU, residual adds included), tracekit each GEMM's by its own time: tracekit's rate is 1.5-3x the
    program's. Scaled by the GEMMs' share of the block's time they agree within 2%."""
    lines = _program_lines(run)
    for way in ("eager", "compiled"):
        cases = _cases(analyses, run, way)
        ms, program_tflops = lines[f"block/{way}"]
        blocks = min(c.timing.calls for c in cases)  # qkv: once a block
        flops = sum(c.flops.total for c in cases)
        gemm_ns = sum(c.timing.gemm_ns_total for c in cases)
        gemm_tflops = flops / gemm_ns / 1e3
        assert 1.5 < gemm_tflops / program_tflops < 3, (way, gemm_tflops, program_tflops)
        share = gemm_ns / blocks / (ms * 1e6)
        assert gemm_tflops * share == pytest.approx(program_tflops, rel=0.02), (way, gemm_tflops, share)


def test_a_gemm_whose_configuration_counted_other_math_elsewhere_borrows_nothing(analyses: dict) -> None:
    """``block/fp8``'s o projection runs on the kernel and grid (128) that ran o and down in ``block/eager``; the
    ncu pass's per-configuration bound (2 launches) spent itself there (17.2 and 47.2 GFLOP). Neither count is this
    GEMM's: no FLOPs and no borrowed evidence, rather than "several GEMMs" for calls that are one."""
    (o,) = [
        c for c in _cases(analyses, NCU, "fp8") if "_tst_256x128" in c.kernel.name and c.kernel.grid == 128
    ]
    assert o.flops.per_call is None and not o.flops.counters and o.ncu is None, (o.flops, o.ncu)
    assert not any("several GEMMs" in u.what for u in analyses[NCU].summary.unknowns)
