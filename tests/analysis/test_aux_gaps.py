"""Which kernels a call owns and what its idle is blamed on, on real files (docs/CASES.md, "Which kernels a call
owns"): the FP8 GEMMs of the H100 serving step own their quantizer, never the RMSNorm
and residual add before it; the idle between kernels of a CUDA-graph replay is not slow launching; a case of a few
calls does not say why its idle is there; the aux sentence names its denominator."""

from __future__ import annotations

import re
from pathlib import Path

import polars as pl
import pytest

from tests.support.cases import cases
from tests.support.cases import factor as _factor
from tracekit.analyzers.analysis import Case
from tracekit.analyzers.importer import combine, read_file
from tracekit.analyzers.store import load_frames, open_run

SAMPLES = Path(__file__).resolve().parents[2] / "samples"
SERVE_TORCH = SAMPLES / "h100-serve-torchprof"
SERVE_NCU = SAMPLES / "h100-serve-nsys-ncu"
NORM = re.compile(r"MeanOps|pow_tensor_scalar|rsqrt|CUDAFunctor_add|CUDAFunctorOnSelf_add|bfloat16_copy")
"""The kernels of the serve script's residual add and RMSNorm (x.float(), pow, mean, + eps, rsqrt, two
multiplies, .to(bf16)): never a GEMM's."""


def _explain(run: Path) -> list[Case]:
    if not (run / "run.json").is_file():
        pytest.skip(f"{run.name} is not in this checkout (samples/)")
    r = open_run(run)
    return cases(load_frames(r), environment=r.manifest.get("environment"))


def _quantizer_and_activation_ns(run: Path) -> tuple[int, float]:
    """Walk the raw kernels of every prefill step: for each FP8 GEMM kernel of the gate_up projection (N=4096,
    K=6144: its profiler operator's shape), the kernels back to the quantizer's ``abs`` (abs, amax, copy, scale,
    clamp, divide, the cast to e4m3) and the two after it (SwiGLU's silu and multiply). (GEMM kernels, ns)."""
    kernels = pl.read_parquet(run / "frames" / "kernels.parquet")
    ranges = pl.read_parquet(run / "frames" / "ranges.parquet")
    steps = ranges.filter(pl.col("name") == "serve/prefill").select("start_ns", "end_ns").rows()
    gate_up = (pl.col("name") == "aten::_scaled_mm") & (pl.col("m") == 4096) & (pl.col("n") == 4096)
    ops = ranges.filter(gate_up & (pl.col("k") == 6144))
    gemm_ids = set(kernels.filter(pl.col("range_id").is_in(ops["range_id"].implode()))["kernel_id"].to_list())
    seq = kernels.sort("start_ns").select("kernel_id", "name", "start_ns", "duration_ns").rows()
    found, total = 0, 0.0
    for i, (kid, _name, start, _dur) in enumerate(seq):
        if kid not in gemm_ids or not any(a <= start <= b for a, b in steps):
            continue
        found += 1
        j = i - 1
        while "AbsFunctor" not in seq[j][1]:
            total += seq[j][3]
            j -= 1
        total += seq[j][3] + seq[i + 1][3] + seq[i + 2][3]
        assert "silu" in seq[i + 1][1] and "MulFunctor" in seq[i + 2][1]
    return found, total


def test_the_fp8_gate_up_gemm_owns_its_own_kernels_and_names_its_quantizer_and_activation_as_fusions() -> (
    None
):
    """h100-serve-torchprof, prefill: before each FP8 gate_up GEMM run the residual add and the RMSNorm (445 us),
    then the quantizer (194 us), and after it silu and the multiply (53 us). The PyTorch profiler recorded which
    operator launched each (aten::abs, aten::max, aten::to ..., aten::silu, aten::mul): the ``_scaled_mm`` call owns
    only its GEMM kernel and its cuBLAS memset, and the quantizer and the activation are its fusion candidates
    (before it and after it), with their time; the norm is neither."""
    wfs = _explain(SERVE_TORCH)
    (wf,) = [
        w
        for w in wfs
        if w.range == "serve/prefill"
        and w.op == "_scaled_mm"
        and w.shape is not None
        and (w.shape.n, w.shape.k) == (4096, 6144)
    ]
    t = wf.timing
    found, walked = _quantizer_and_activation_ns(SERVE_TORCH)
    assert found == t.calls == 30
    assert {u.kernel_class for u in wf.aux} <= {"memory"}
    fused = sum(u.time_ns_total for u in wf.fusion)
    assert fused == pytest.approx(walked, rel=1e-6)
    before = [u for u in wf.fusion if u.side != "after"]
    after = [u for u in wf.fusion if u.side == "after"]
    assert 185_000 < sum(u.time_ns_total for u in before) / t.calls < 200_000  # the quantizer, 194 us
    assert 50_000 < sum(u.time_ns_total for u in after) / t.calls < 56_000  # silu and the multiply, 53 us
    assert {u.op for u in after} == {"aten::silu", "aten::mul"}
    assert {u.kernel_class for u in after} == {"activation", "gating multiply"}
    assert not [k for u in wf.fusion for k in u.kernels if NORM.search(k)]
    assert _factor(wf, "aux kernels") is None or _factor(wf, "aux kernels").value > 0.95


@pytest.mark.parametrize("run", [SERVE_TORCH, SERVE_NCU], ids=lambda p: p.name)
def test_no_gemm_of_the_serving_step_owns_a_norm_or_residual_kernel(run: Path) -> None:
    """Prefill and the graph-replayed decode, the PyTorch-profiler run and its nsys + ncu twin: the norm's
    kernels are operations of their own (the step breakdown counts them), never a GEMM's auxiliary time. The FP8
    GEMMs keep their quantizer (abs, amax, cast)."""
    wfs = _explain(run)
    owned = [(w.name, u.name) for w in wfs for u in w.aux]
    assert owned and not [o for o in owned if NORM.search(o[1])]
    fp8 = [w for w in wfs if w.rate.dtype_class == "fp8" and w.range in ("serve/prefill", "serve/decode")]
    assert len(fp8) >= 3
    for w in fp8:
        # the quantizer (abs, amax, cast): the call's where only launch order tells (nsys without emit_nvtx, a
        # graph replay), a fusion candidate where the profiler recorded the operators that launched it
        names = " ".join(u.name for u in w.aux)
        names += " ".join(k for u in w.fusion if u.side != "after" for k in u.kernels)
        assert "float8_copy" in names and "AbsFunctor" in names and "MaxNanFunctor" in names, w.name
        assert not [k for u in w.fusion for k in u.kernels if NORM.search(k)]


@pytest.mark.parametrize("run", [SERVE_TORCH, SERVE_NCU], ids=lambda p: p.name)
def test_idle_between_kernels_of_a_graph_replay_is_not_blamed_on_the_host(run: Path) -> None:
    """serve/decode runs as one cudaGraphLaunch per step: every kernel of a step carries that launch's
    correlation id, and the gaps between them are 0.4 us (median over the 4,650 gaps of the 50 replays). The
    FP8 decode GEMMs' idle said "the host does not launch fast enough" and advised a CUDA graph."""
    wfs = _explain(run)
    decode = [w for w in wfs if w.range == "serve/decode"]
    assert decode
    with_gaps = [f for w in decode if (f := _factor(w, "launch gaps")) is not None and f.value < 0.9]
    assert with_gaps  # the FP8 decode GEMMs: 11% and more of their span idle
    for f in with_gaps:
        assert "host does not launch" not in f.sentence and "CUDA graph replay" in f.sentence
        assert "capture the loop in a CUDA graph" not in (f.remedy or "")
        assert f.evidence["graph_replay"] is True
        assert 200 < f.evidence["idle_ns_per_boundary"] < 1_000


def test_three_calls_do_not_say_the_host_is_slow(samples_dir: Path) -> None:
    """h200-instrument-torchprof: 3 calls, 573 us of idle of which 499 us is one call's (the gap after the
    first call: cuBLAS's setup). Three calls cannot tell slow launching from a first call's setup."""
    (wf,) = [w for w in _explain(samples_dir / "h200-instrument-torchprof") if w.timing.calls == 3]
    f = _factor(wf, "launch gaps")
    assert f is not None and f.evidence["too_few_calls"] is True
    assert "host does not launch" not in f.sentence and "cannot be told" in f.sentence
    assert f.evidence["idle_ns_max_call"] == pytest.approx(499_326, abs=1_000)
    assert f.evidence["idle_ns_total"] == pytest.approx(573_246, abs=1_000)
    assert "499.3 µs" in f.sentence and "warm-up" in (f.remedy or "")


def test_the_one_call_of_an_amd_trace_does_not_say_the_host_is_slow(shared_data: Path) -> None:
    """HTA's MI250 trace: addmm 5x128x128 runs once, with 69 us of idle inside the call."""
    path = shared_data / "thirdparty" / "hta" / "amd_trace__mi250_minitoy_train_ROCm6_2_kineto.json.gz"
    if not path.is_file():
        pytest.skip(f"{path} is absent")
    wfs = cases(combine([read_file(path)]))
    gaps = [f for w in wfs if (f := _factor(w, "launch gaps")) is not None]
    assert gaps
    for f in gaps:
        assert (
            "host does not launch" not in f.sentence
            and "With one call the cause cannot be told" in f.sentence
        )


def test_the_aux_sentence_names_its_denominator(samples_dir: Path) -> None:
    """An aux factor's share is of GEMM + aux time (the factor's value), not of the GEMM's time: the sentence once
    said "30% of the GEMM's GPU time" for 30% of GEMM + aux. On the planted quantize (one per call, each before
    its call) and the benchmark's measured quantizes (h200-capture-gemm's FP8 calls own none: their quantize ran
    apart from them)."""
    wfs = _explain(samples_dir / "h200-planted-f-aux-quantize") + _explain(samples_dir / "h200-bench-gemm")
    checked = 0
    for w in wfs:
        f = _factor(w, "aux kernels")
        if f is None:
            continue
        t = w.timing
        share = 100 * t.aux_ns_total / (t.gemm_ns_total + t.aux_ns_total)
        assert f"{share:.0f}% of the GEMM + aux time" in f.sentence
        assert "GEMM's GPU time" not in f.sentence
        checked += 1
    assert checked >= 2


def _owners(kernels: list[tuple[str, ...]]) -> list[int | None]:
    """:func:`assign` over one sequence of (class, name[, memop kind]) rows, a GEMM call (``gemm``) owned by
    call 1."""
    from tracekit.analyzers.gemm.roles import assign

    rows = pl.DataFrame(
        {
            "g": [0] * len(kernels),
            "i": list(range(len(kernels))),
            "cls": [k[0] for k in kernels],
            "name": [k[1] for k in kernels],
            "call_of": [1 if k[0] == "gemm" else None for k in kernels],
            "memop_kind": [k[2] if len(k) > 2 else None for k in kernels],
        },
        schema_overrides={"call_of": pl.Int64, "memop_kind": pl.String},
    )
    return assign(rows, ["g"], ["i"]).sort("i")["owner"].to_list()


NORM_CHAIN = [
    ("elementwise", "vectorized_elementwise_kernel<CUDAFunctor_add<c10::BFloat16>>"),
    ("layout", "unrolled_elementwise_kernel<direct_copy_kernel_cuda>"),
    ("elementwise", "vectorized_elementwise_kernel<pow_tensor_scalar_kernel_impl<float, float>>"),
    ("reduction", "reduce_kernel<512, 1, ReduceOp<float, MeanOps<float, float, float, float>>>"),
    ("elementwise", "vectorized_elementwise_kernel<rsqrt_kernel_cuda>"),
    ("elementwise", "elementwise_kernel<BinaryFunctor<float, float, float, MulFunctor<float>>>"),
    ("elementwise", "vectorized_elementwise_kernel<bfloat16_copy_kernel_cuda>"),
    ("elementwise", "elementwise_kernel<BinaryFunctor<c10::BFloat16, MulFunctor<float>>>"),
]


def test_a_quantizer_owns_from_its_amax_and_a_static_scale_only_its_divide_clamp_and_cast() -> None:
    """The serve sample's order (residual add, RMSNorm, then abs, amax, scale, clamp, divide, cast, GEMM): the
    call owns the quantizer from its abs; with a given scale (no amax) only the divide, clamp and cast before
    it. The norm's multiplies and copies are no quantizer step, though their names look like one."""
    dynamic = [
        ("elementwise", "vectorized_elementwise_kernel<AbsFunctor<c10::BFloat16>>"),
        ("reduction", "reduce_kernel<ReduceOp<c10::BFloat16, func_wrapper_t<MaxNanFunctor<c10::BFloat16>>>>"),
        ("layout", "unrolled_elementwise_kernel<direct_copy_kernel_cuda>"),
        ("elementwise", "vectorized_elementwise_kernel<BUnaryFunctor<float, MulFunctor<float>>>"),
        ("elementwise", "vectorized_elementwise_kernel<launch_clamp_scalar>"),
        ("elementwise", "elementwise_kernel<BinaryFunctor<c10::BFloat16, DivFunctor<c10::BFloat16>>>"),
        ("quantize", "vectorized_elementwise_kernel<float8_copy_kernel_cuda>"),
    ]
    gemm = [("gemm", "nvjet_sm90_qqtst_128x128_128x6_1x2_h_bz_coopA_algo2_TNT")]
    assert _owners(NORM_CHAIN + dynamic + gemm) == [None] * len(NORM_CHAIN) + [1] * (len(dynamic) + 1)
    static = dynamic[4:]  # clamp, divide, cast
    assert _owners(NORM_CHAIN + static + gemm) == [None] * len(NORM_CHAIN) + [1] * (len(static) + 1)
    # a bf16 GEMM after the same norm owns none of it
    assert _owners([*NORM_CHAIN, ("gemm", "nvjet_sm90_tst_256x128_64x4_1x2_h_bz_coopA_TNT")]) == [
        None
    ] * 8 + [1]


def test_a_memset_right_before_a_gemm_is_its_call_and_keeps_the_idle_between_calls(samples_dir: Path) -> None:
    """h200-foreign-base_clock_none (nsys, no profiler operators; three `big_gemm` ranges, each a cuBLAS memset
    then the GEMM): each call owns its memset, and the idle between the previous GEMM and the next memset is the
    calls' gap. Unowned, the memsets sat between the calls and hid that idle (no launch-gaps factor at all)."""
    run = samples_dir / "h200-foreign-base_clock_none"
    (wf,) = [w for w in _explain(run) if w.name == "big_gemm"]
    frames = load_frames(open_run(run))
    ids = frames["ranges"].filter(pl.col("name") == "big_gemm")["range_id"]
    memsets = frames["memops"].filter(pl.col("range_id").is_in(ids.implode()) & (pl.col("kind") == "memset"))
    assert memsets.height == 3
    t = wf.timing
    assert t.calls == 3
    assert t.aux_ns_total == pytest.approx(memsets["duration_ns"].sum())
    assert [a.name for a in wf.aux] == ["[CUDA memset]"]
    gemms = frames["kernels"].filter(pl.col("range_id").is_in(ids.implode())).sort("start_ns")
    # the idle inside each call (memset end to GEMM start) and between calls (GEMM end to the next memset)
    ms = memsets.sort("start_ns")
    inside = (gemms["start_ns"] - ms["end_ns"]).sum()
    between = (ms["start_ns"][1:] - gemms["end_ns"][:-1]).sum()
    f = _factor(wf, "launch gaps")
    assert f is not None and f.evidence["idle_ns_total"] == pytest.approx(inside + between, abs=2)


def test_only_a_memset_right_before_the_call_is_its_own() -> None:
    memset = ("memory", "[CUDA memset]", "memset")
    fill = ("memory", "vectorized_elementwise_kernel<4, FillFunctor<float>>")
    gemm = ("gemm", "nvjet_sm90_tst_320x128_64x3_1x2_h_bz_coopA_NNT")
    assert _owners([memset, gemm]) == [1, 1]
    assert _owners([("memory", "Memset (Device)", "memset"), gemm]) == [1, 1]  # Kineto's name
    assert _owners([("memory", "[CUDA memcpy Host-to-Device]", "memcpy"), gemm]) == [
        None,
        1,
    ]  # a copy: not this rule
    assert _owners([("memory", "[CUDA memset]"), gemm]) == [None, 1]  # a kernel of that name is no memset
    assert _owners([memset, fill, gemm]) == [None, None, 1]  # a fill between: the program's zeroing
    assert _owners([fill, gemm]) == [None, 1]
