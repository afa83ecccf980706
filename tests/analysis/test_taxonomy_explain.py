"""The explainer on the kernel taxonomy (issue 25): each bullet of the issue's "Why" that the taxonomy answers,
on the shared files and the exact kernels it names.

- TF32 read as FP32: HTA's A100 ``trace_diff`` trace, ``cutlass_80_tensorop_s1688gemm`` on fp32 shapes;
- kernels that are not GEMMs get no GEMM case: FlashAttention, TRT-LLM ``fmhaSm100a``, curand
  ``distribution_elementwise`` (sglang ncu report), fbgemm_gpu's index kernels, cuDNN convolutions, split-K reduce,
  SiLU / RMSNorm kernels in an ncu report;
- a bf16 decoder step's attention, RMSNorm, rotary and SiLU kernels named by class, never "quantize";
- SiLU through ``gpu_kernel_impl_nocast`` and the SwiGLU ``MulFunctor`` are activation, not "cast";
- dtype from names: cuBLAS ``nvjet_sm90_tst`` is bf16 on an H200;
- a Triton GEMM named ``_mm`` in a report without tensor counters is found by its busy tensor pipe.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

import polars as pl
import pytest
from msgspec.structs import replace

from tests.support.explain_data import H200, frames, make_case
from tracekit.analyzers.explain import Waterfall, explain_case
from tracekit.analyzers.gemm import CaseEvidence, build_cases, timing_repeated
from tracekit.analyzers.importer import combine, read_file
from tracekit.analyzers.taxonomy import classify_name
from tracekit.devices import lookup_device


def explain(frames: dict, *, gemm_filter: str | None = None, **kw: object) -> list[Waterfall]:
    """The explainer's waterfall of every case the builders find in ``frames`` (those whose name contains
    ``gemm_filter``), in the order they are built: these tests read the case model and the waterfall behind the
    Analysis."""
    return [explain_case(c) for c in build_cases(frames, **kw) if not gemm_filter or gemm_filter in c.name]


TRACE_DIFF = "thirdparty/hta/trace_diff__control__control.json.gz"


def _read(shared: Path, rel: str) -> dict[str, pl.DataFrame]:
    return combine([read_file(shared / rel)])


def test_tf32_tensor_op_kernels_on_fp32_shapes_are_rated_against_the_tf32_peak(shared_data: Path) -> None:
    """Before: 50 of 145 GEMMs above 100% of the 19.5 TFLOP/s FP32 peak, up to 569%. The s1688 kernels are TF32
    (torch's allow_tf32): rated against the A100's 156 TFLOP/s TF32 peak; cuBLAS's SIMT ampere_sgemm stays FP32."""
    wfs = explain(_read(shared_data, TRACE_DIFF))
    a100 = lookup_device("a100-sxm")
    assert a100 is not None
    tf32 = [w for w in wfs if "tensorop_s1688gemm" in (w.case.main_kernel or "")]
    sgemm = [w for w in wfs if (w.case.main_kernel or "").startswith("ampere_sgemm")]
    # one case per (range, kernel signature, shape): a shape run by both an _nn and an _nt kernel is two
    assert len(tf32) == 128 and len(sgemm) == 14
    for w in tf32:
        assert (w.case.dtype_a, w.case.dtype_class, w.case.dtype_source) == ("fp32", "tf32", "kernel-name")
        assert w.peak_tflops == pytest.approx(a100.peak_tflops("tf32"))
        assert any("allow_tf32" in n for n in w.notes)
    for w in sgemm:
        assert w.case.dtype_class == "fp32" and w.peak_tflops == pytest.approx(a100.peak_tflops("fp32"))
    # the case the issue quotes at 569% (110.9 TFLOP/s on the FP32 peak)
    top = max(tf32, key=lambda w: w.achieved_tflops or 0)
    assert top.achieved_tflops == pytest.approx(110.9, abs=0.1)
    assert 100 * top.achieved_tflops / top.peak_tflops == pytest.approx(71.1, abs=0.1)
    for w in wfs:
        pct = 100 * w.achieved_tflops / w.peak_tflops if w.achieved_tflops and w.peak_tflops else None
        assert pct is None or pct <= 100.0, w.case.name
        assert all(f.value <= 1.0 for f in w.factors), w.case.name
        # no "in-kernel x1.389", no "waves 1.000 next to 0.30 waves": a raised factor says it was raised
        for f in w.factors:
            if "adjusted_from" in f.evidence:
                assert "raised" in f.sentence, f.sentence


def test_a_raised_wave_factor_says_so() -> None:
    """A wave estimate the kernel beat (33 CTAs of one per SM over 132 SMs: 0.25 waves, yet 90% of peak): the
    factor is raised to what the rate allows and its sentence says the estimate is not the limit. (132 CTAs of 4
    per SM were 0.25 waves by CTA slots, but every SM holds one: no wave loss, docs/CASES.md.)"""
    h200 = lookup_device("h200")
    flops = 2.0 * 8192**3
    case = make_case(
        "range", "mm", m=8192, n=8192, k=8192, dtype_a="bf16", dtype_b="bf16", device=h200,
        main_kernel="simple_gemm_kernel",  # no tile in the name: the grid is the work
        main_ns=flops / (0.9 * h200.peak_tflops("bf16")) / 1e3,  # type: ignore[union-attr]
        grid=33, block=256, registers=255,  # 8 warps of 255 registers: one CTA per SM
    )  # fmt: skip
    wf = explain_case(case)
    waves = next(f for f in wf.factors if f.name == "waves")
    assert waves.evidence["adjusted_from"] == pytest.approx(0.25, abs=0.01)
    assert waves.value > 0.25 and "0.25 waves" in waves.sentence and "raised" in waves.sentence
    assert all(f.value <= 1.0 for f in wf.factors) and wf.complete


def test_a_rate_above_every_fitting_peak_gets_no_peak() -> None:
    """A bf16 GEMM timed faster than the H200's bf16 peak (a wrong FLOP count): no percentage above 100, the
    reason said instead; an fp32 one at a tensor-core rate is TF32."""
    h200 = lookup_device("h200")
    bf16 = make_case("range", "fast", m=4096, n=4096, k=4096, dtype_a="bf16", dtype_b="bf16", device=h200)
    bf16 = replace(bf16, timing=timing_repeated(10.0))  # 13,744 TFLOP/s
    wf = explain_case(bf16)
    assert wf.peak_tflops is None
    assert any("cannot be the rate class" in n for n in wf.notes)
    fp32 = make_case("range", "f32", m=4096, n=4096, k=4096, dtype_a="fp32", dtype_b="fp32", device=h200)
    fp32 = replace(fp32, timing=timing_repeated(2 * 4096**3 / 300e3))  # 300 TFLOP/s: above FP32, below TF32
    wf = explain_case(fp32)
    assert (wf.case.dtype_class, wf.case.dtype_source) == ("tf32", "achieved-rate")
    assert wf.peak_tflops == pytest.approx(h200.peak_tflops("tf32"))  # type: ignore[union-attr]
    assert any("allow_tf32" in n for n in wf.notes)


def test_a_rate_within_the_maximum_clock_is_rated_at_that_clock() -> None:
    """An H200 bf16 GEMM at 1.05x the peak NVIDIA quotes at 1830 MHz: the SMs boost to 1980 MHz, so the class fits
    and the peak is taken at 1980 MHz (97% of it), said in a note."""
    h200 = lookup_device("h200")
    assert h200 is not None and h200.boost_clock_hz > h200.peak_clock_hz  # type: ignore[operator]
    peak = h200.peak_tflops("bf16")
    case = make_case("range", "hot", m=8192, n=8192, k=8192, dtype_a="bf16", dtype_b="bf16", device=h200)
    case = replace(case, timing=timing_repeated(case.flops / (1.05 * peak) / 1e3))  # type: ignore[operator]
    wf = explain_case(case)
    assert wf.case.dtype_class == "bf16" and wf.peak_tflops == pytest.approx(peak * 1980 / 1830)
    assert 100 * wf.achieved_tflops / wf.peak_tflops == pytest.approx(100 * 1.05 * 1830 / 1980)  # type: ignore[operator]
    assert any("maximum clock, 1980 MHz" in n for n in wf.notes)
    assert all(f.value <= 1.0 for f in wf.factors)


def _main_classes(cases: list[CaseEvidence]) -> set[str]:
    return {classify_name(c.main_kernel).kernel_class for c in cases if c.main_kernel}


def test_fbgemm_attention_rng_and_conv_kernels_are_no_gemm_cases(shared_data: Path) -> None:
    trace_diff = build_cases(_read(shared_data, TRACE_DIFF))
    assert not any("fbgemm" in (c.main_kernel or "") for c in trace_diff)
    assert "## forward:pos_w ##" not in {c.range for c in trace_diff}  # held only fbgemm index kernels
    assert _main_classes(trace_diff) == {"gemm"}
    # curand's distribution_elementwise and a FlashAttention kernel: no GEMM in the sglang report ("5 GEMMs")
    assert build_cases(_read(shared_data, "thirdparty/sglang-fork/profile.ncu-rep")) == []
    # cuDNN convolutions of a ResNet-50 (implicit GEMMs, no M, N, K to rate)
    resnet = build_cases(
        _read(
            shared_data,
            "thirdparty/kineto-tbplugin/resnet50_num_workers_0__worker0.1623143089861.pt.trace.json.gz",
        )
    )
    assert resnet and _main_classes(resnet) == {"gemm"}
    # TRT-LLM's fmhaSm100a attention on the B200 is no case; in the step that holds it, it is an operation of
    # its own, not "quantize and layout"
    b200 = explain(_read(shared_data, "thirdparty/tracelens/b200__eager_trace.json.gz"))
    assert _main_classes([w.case for w in b200]) == {"gemm"}
    for w in b200:
        aux = next((f for f in w.factors if f.name == "aux kernels"), None)
        fmha = [n for n in (aux.evidence["aux_kernels"] if aux else []) if n.startswith("fmha")]
        if fmha:
            assert {aux.evidence["aux_classes"][n] for n in fmha} == {"attention"}  # type: ignore[union-attr]
            assert "other operations in the range (attention" in aux.sentence  # type: ignore[union-attr]


def _ncu_rows(rows: list[dict[str, Any]]) -> pl.DataFrame:
    base = {**H200, "device_name": H200["name"], "duration_ns": 20_000.0, "grid_size": 264, "block_size": 256}
    return pl.DataFrame([{"ncu_id": i, **base, **r} for i, r in enumerate(rows)], infer_schema_length=None)


def test_an_ncu_report_without_counters_finds_gemms_by_name_or_tensor_pipe_only() -> None:
    """Kernels in no range of a report taken with the usual sections: SiLU, RMSNorm, a split-K reduce, curand and
    FlashAttention are no cases (they were rated against the FP32 peak); a Triton GEMM named ``_mm`` with its
    tensor pipe 90% busy is one, as is an unknown kernel (a SIMT GEMM of one's own)."""
    silu = (
        "void at::native::elementwise_kernel<(int)128, (int)4, void at::native::gpu_kernel_impl_nocast<"
        "at::native::silu_kernel(at::TensorIteratorBase &)::[lambda() (instance 1)]::operator ()() const::"
        "[lambda(c10::BFloat16) (instance 1)]>(at::TensorIteratorBase &, const T1 &)::[lambda(int) (instance 1)]>"
        "(int, T3)"
    )
    rows = [
        {"name": "elementwise_kernel", "demangled_name": silu, "tensor_pipe_pct": 0.0},
        {
            "name": "rms_norm_kernel",
            "demangled_name": "void vllm::rms_norm_kernel<c10::BFloat16, 8, 2>(c10::BFloat16*)",
            "tensor_pipe_pct": 0.0,
        },
        {
            "name": "splitKreduce_kernel",
            "demangled_name": "void cublasLt::splitKreduce_kernel<32, 16, int, float>(P)",
            "tensor_pipe_pct": 0.8,
        },
        {
            "name": "flash_fwd_kernel",
            "demangled_name": "void flash::flash_fwd_kernel<Flash_fwd_kernel_traits<128>>(Flash_fwd_params)",
            "tensor_pipe_pct": 80.0,
        },
        {"name": "_mm", "demangled_name": "_mm", "tensor_pipe_pct": 90.0},
        {"name": "my_sgemm_tile", "demangled_name": "my_sgemm_tile", "tensor_pipe_pct": 0.0},
    ]
    fr = frames(ncu=_ncu_rows(rows))
    names = sorted(c.name for c in build_cases(fr))
    assert names == ["_mm", "my_sgemm_tile"]


def test_a_bf16_decoder_step_is_named_by_class_and_never_told_to_fuse_a_quantize() -> None:
    """The user's ``step/prefill`` range of a bf16 SwiGLU decoder layer holds two distinct GEMM kernels and
    attention, RMSNorm, rotary, SiLU and the SwiGLU multiply: one case per GEMM kernel (issue 26 item 3), each
    owning only what its role gives it: the SiLU and the multiply after the second GEMM are its epilogue
    candidate; attention, the norms and rotary are operations of their own, no GEMM's. Before: one case of the
    whole step, "Quantize and layout kernels (, at::native::, at::native::)" and "fuse the activation quantize" in
    a model with no quantization."""
    gemm_a, gemm_b = "nvjet_sm90_tst_128x128_64x6_2x1_v_bz_TNT", "nvjet_sm90_tst_64x64_64x13_2x1_v_bz_TNT"
    silu = (
        "void at::native::elementwise_kernel<(int)128, (int)4, void at::native::gpu_kernel_impl_nocast<"
        "at::native::silu_kernel(at::TensorIteratorBase &)::[lambda() (instance 1)]::operator ()() const::"
        "[lambda(c10::BFloat16) (instance 1)]>(at::TensorIteratorBase &, const T1 &)::[lambda(int) (instance 1)]>"
        "(int, T3)"
    )
    mul = (
        "void at::native::vectorized_elementwise_kernel<(int)4, at::native::BinaryFunctor<c10::BFloat16, "
        "c10::BFloat16, c10::BFloat16, at::native::binary_internal::MulFunctor<float>>, std::array<char *, "
        "(unsigned long)3>>(int, T2, T3)"
    )
    attn = "void pytorch_flash::flash_fwd_kernel<pytorch_flash::Flash_fwd_kernel_traits<64, 128, 128, 4>>(Params)"
    norm = "void vllm::rms_norm_kernel<c10::BFloat16, 8, 2>(c10::BFloat16*, c10::BFloat16 const*, long)"
    rope = "void vllm::rotary_embedding_kernel<c10::BFloat16, true>(long const*, c10::BFloat16*)"
    order = [norm, gemm_a, rope, attn, gemm_a, norm, gemm_b, silu, mul, gemm_a]
    kernels, t = [], 1_000
    for step in range(3):
        for i, name in enumerate(order):
            dur = 30_000 if name.startswith("nvjet") else 8_000
            kernels.append(
                {
                    "kernel_id": len(kernels),
                    "device": 0,
                    "stream": 7,
                    "name": name,
                    "start_ns": t,
                    "end_ns": t + dur,
                    "duration_ns": dur,
                    "range_id": step,
                    "grid_x": 132,
                    "grid_y": 1,
                    "grid_z": 1,
                    "block_x": 384,
                    "block_y": 1,
                    "block_z": 1,
                }
            )
            t += dur + 200 * (i + 1)
        t += 50_000
    ranges = []
    for step in range(3):
        ks = [k for k in kernels if k["range_id"] == step]
        ranges.append({"range_id": step, "name": "step/prefill", "kind": "push_pop", "depth": 0,
                       "start_ns": ks[0]["start_ns"] - 100, "end_ns": ks[-1]["end_ns"] + 100})  # fmt: skip
    fr = frames(kernels=kernels, ranges=ranges, devices=[{"device": 0, **H200}])
    a, b = explain(fr)  # in order of first launch
    assert [w.case.name for w in (a, b)] == [
        "step/prefill #1 (nvjet_sm90_tst_128x128_64x6_2x1_v_bz_TNT)",
        "step/prefill #2 (nvjet_sm90_tst_64x64_64x13_2x1_v_bz_TNT)",
    ]
    assert (a.case.position, b.case.position, a.case.range) == (1, 2, "step/prefill")
    assert a.case.timing.calls == 9 and b.case.timing.calls == 3  # three launches of A per step, one of B
    for w in (a, b):
        assert w.case.user_range and w.case.dtype_class == "bf16" and w.peak_tflops
        owned = {u.name for u in w.case.aux}
        assert not owned & {attn, norm, rope}  # operations of their own, not the GEMM's
    assert not any(f.name == "aux kernels" for f in a.factors)
    aux = next(f for f in b.factors if f.name == "aux kernels")
    classes = aux.evidence["aux_classes"]
    assert classes == {silu: "activation", mul: "activation"}  # SiLU and the SwiGLU multiply after gemm B
    assert "quantize" not in aux.sentence.lower() and "quantize" not in (aux.remedy or "").lower()
    assert aux.sentence.startswith("Activation kernels take")
    assert "elementwise_kernel<silu_kernel>" in aux.sentence
    assert "(, " not in aux.sentence and "::," not in aux.sentence and "::)" not in aux.sentence
    assert "epilogue" in (aux.remedy or "") and "silu_and_mul" in (aux.remedy or "")


def test_nvjet_names_give_bf16_and_fp8_peaks_without_a_shape(shared_data: Path) -> None:
    """The probe's GEMMs outside any range (warm-up launches on the timeline of a capture whose ranges the user
    named) have no shape: their rate class comes from cuBLAS's nvjet code (tst bf16, qqtst fp8), so the H200's
    peak is known ("dtype unknown", "no tensor peak known for NVIDIA H200" before)."""
    from tests.analysis.test_explain_foreign import _foreign

    h200 = lookup_device("h200")
    fr = _foreign(_read(shared_data, "h200-probe/probe.sqlite"))
    cases = [c for c in build_cases(fr) if c.origin == "kernel"]
    assert cases
    for c in cases:
        want = "fp8" if "_qqtst_" in c.main_kernel else "bf16"  # type: ignore[operator]
        assert (c.dtype_class, c.dtype_source) == (want, "kernel-name"), c.main_kernel
        assert c.peak_tflops == pytest.approx(h200.peak_tflops(want))  # type: ignore[union-attr]
