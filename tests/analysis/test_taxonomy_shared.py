"""The kernel taxonomy on every shared file (../shared/data) and every committed sample.

- The kernel classes per shared file, printed and pinned: checked by hand once (docs/KERNELS.md, "Class counts
  of the shared files", says what was checked); a change to the table that moves a count shows here.
- Never above 100% of peak: on every shared file and sample, no GEMM's ``pct_of_peak`` exceeds 100 and no factor
  of its waterfall exceeds 1; no case's GEMM is a kernel the table knows to be something else; no auxiliary
  factor's sentence lists an empty kernel name.
"""

from __future__ import annotations

import collections
from pathlib import Path

import polars as pl
import pytest

from tests.support.cases import cases
from tracekit.analyzers.gemm import build_cases, dtype_class
from tracekit.analyzers.importer import combine, detect_kind, read_file
from tracekit.analyzers.store import load_frames, open_run
from tracekit.analyzers.taxonomy import classify_name
from tracekit.errors import TracekitError

ROOT = Path(__file__).resolve().parents[2]
SHARED = ROOT.parent / "shared" / "data"

CLASS_COUNTS: dict[str, dict[str, int]] = {
    "h200-probe/ncu_raw.csv": {"gemm": 5},
    "h200-probe/probe.ncu-rep": {"gemm": 5},
    "h200-probe/probe.sqlite": {"gemm": 10, "quantize": 4, "rng": 10},
    "h200-probe/torch_trace.json.gz": {"gemm": 5},
    "thirdparty/esmm-research/profile_049ec61.ncu-rep": {"gemm": 2, "other": 10},
    "thirdparty/esmm-research/profile_17f278c.ncu-rep": {"gemm": 2, "other": 9},
    "thirdparty/esmm-research/profile_e22c00d.ncu-rep": {"other": 4},
    "thirdparty/esmm-research/profile_output_a62323b.ncu-rep": {"other": 4},
    "thirdparty/hta/amd_trace__mi250_minitoy_train_ROCm6_2_kineto.json.gz": {
        "activation": 1,
        "elementwise": 6,
        "gemm": 2,
        "layout": 1,
        "memory": 2,
        "reduction": 2,
    },
    "thirdparty/hta/critical_path__alexnet__benchmark_result_2869224_1695835535_trace.json.gz": {
        "convolution": 30,
        "elementwise": 30,
        "gemm": 6,
        "reduction": 8,
        "rng": 5,
    },
    "thirdparty/hta/critical_path__cuda_event_sync_multi_stream__event_sync_trace.json.gz": {"gemm": 3},
    "thirdparty/hta/critical_path__simple_add__benchmark_result_493459_1694039959_trace.json.gz": {
        "convolution": 30,
        "elementwise": 30,
        "gemm": 6,
        "reduction": 8,
        "rng": 5,
    },
    "thirdparty/hta/cupti_profiler__benchmark_result_924719_1679055439_trace.json.gz": {},
    "thirdparty/hta/df_index_resolver__df_index_resolver.json.gz": {
        "activation": 600,
        "communication": 2020,
        "elementwise": 9575,
        "gemm": 2665,
        "layout": 420,
        "memory": 2065,
        "reduction": 1870,
        "splitk-reduce": 155,
    },
    "thirdparty/hta/large_integer_trace__rank-70.Mar_25_20_48_12.2861.pt.trace.json.gz": {"communication": 1},
    "thirdparty/hta/nccl_parser_config__nccl_data.json.gz": {
        "activation": 147,
        "communication": 21,
        "convolution": 1233,
        "elementwise": 933,
        "gemm": 9,
        "layout": 6,
        "memory": 6,
        "normalization": 318,
        "reduction": 15,
        "softmax": 6,
        "splitk-reduce": 6,
    },
    "thirdparty/hta/negative_queue_length_values_check__rank0.json.gz": {
        "activation": 80,
        "communication": 80,
        "elementwise": 4106,
        "gemm": 97,
        "layout": 470,
        "memory": 456,
        "other": 117,
        "reduction": 668,
        "splitk-reduce": 6,
    },
    "thirdparty/hta/ns_resolution_trace__rank-0.Apr_03_18_51_38.1102.pt.trace.json.gz": {
        "activation": 245,
        "convolution": 1940,
        "elementwise": 1555,
        "gemm": 15,
        "layout": 10,
        "memory": 10,
        "normalization": 530,
        "reduction": 25,
        "softmax": 10,
        "splitk-reduce": 10,
    },
    "thirdparty/hta/trace_diff__control__control.json.gz": {
        "activation": 528,
        "communication": 60,
        "elementwise": 3444,
        "gemm": 1776,
        "layout": 528,
        "memory": 204,
        "normalization": 486,
        "other": 90,
        "reduction": 846,
        "splitk-reduce": 606,
    },
    "thirdparty/hta/trace_filter__sampled_rank-0.json.gz": {
        "activation": 48,
        "communication": 10,
        "elementwise": 308,
        "gemm": 368,
        "layout": 138,
        "memory": 54,
        "normalization": 48,
        "other": 34,
        "quantize": 10,
        "reduction": 124,
        "softmax": 4,
        "splitk-reduce": 8,
    },
    "thirdparty/hta/triton_example__triton_example.json.gz": {"elementwise": 1},
    "thirdparty/hta/with_gpu_user_annotation__step_based_trace_2543932.json.gz": {
        "activation": 10,
        "elementwise": 60,
        "gemm": 25,
        "memory": 30,
        "reduction": 5,
    },
    "thirdparty/kineto-tbplugin/resnet50_num_workers_0__worker0.1623143089861.pt.trace.json.gz": {
        "activation": 294,
        "convolution": 2106,
        "elementwise": 4674,
        "gemm": 18,
        "layout": 6,
        "memory": 978,
        "normalization": 636,
        "reduction": 36,
        "softmax": 12,
        "splitk-reduce": 12,
    },
    "thirdparty/kineto-tbplugin/resnet50_num_workers_4__worker0.1623212756351.pt.trace.json.gz": {
        "activation": 294,
        "convolution": 2202,
        "elementwise": 4674,
        "gemm": 18,
        "layout": 6,
        "memory": 978,
        "normalization": 636,
        "reduction": 36,
        "softmax": 12,
        "splitk-reduce": 12,
    },
    "thirdparty/llm-perf-opt-rtx50/kernel_0003_ncu.details.csv": {"gemm": 1},
    "thirdparty/llm-perf-opt-rtx50/kernel_0003_ncu.metrics.csv": {"gemm": 1},
    "thirdparty/llm-perf-opt-rtx50/kernel_0005_ncu.details.csv": {"gemm": 1},
    "thirdparty/llm-perf-opt-rtx50/kernel_0005_ncu.metrics.csv": {"gemm": 1},
    "thirdparty/llm-perf-opt-rtx50/kernel_0016_ncu.details.csv": {"gemm": 1},
    "thirdparty/llm-perf-opt-rtx50/kernel_0016_ncu.metrics.csv": {"gemm": 1},
    "thirdparty/nsys-ai/h100_2gpu_1s.sqlite": {
        "activation": 54,
        "elementwise": 2116,
        "gemm": 386,
        "layout": 346,
        "memory": 114,
        "reduction": 116,
        "softmax": 56,
        "splitk-reduce": 254,
    },
    "thirdparty/nsys-ai/healthy_1pct.sqlite": {"elementwise": 200, "gemm": 200},
    "thirdparty/nsys-ai/healthy_judged_1pct.sqlite": {"elementwise": 10, "gemm": 10},
    "thirdparty/nsys-ai/mfu_2gpu_after.sqlite": {
        "activation": 30,
        "attention": 60,
        "communication": 62,
        "elementwise": 2314,
        "gemm": 302,
        "layout": 609,
        "normalization": 90,
        "reduction": 120,
    },
    "thirdparty/nsys-ai/mfu_2gpu_before.sqlite": {
        "activation": 34,
        "attention": 68,
        "communication": 66,
        "elementwise": 2601,
        "gemm": 337,
        "layout": 668,
        "normalization": 102,
        "reduction": 134,
    },
    "thirdparty/nsys-ai/mock.sqlite": {"memory": 1, "reduction": 1},
    "thirdparty/panjd123-cutlass/384.ncu-rep": {"gemm": 3},
    "thirdparty/panjd123-cutlass/report-s8.ncu-rep": {"gemm": 2},
    "thirdparty/panjd123-cutlass/report.ncu-rep": {"gemm": 3},
    "thirdparty/panjd123-cutlass/report75.ncu-rep": {"gemm": 3},
    "thirdparty/sglang-fork/profile.ncu-rep": {"attention": 1, "rng": 4},
    "thirdparty/tracelens/b200__eager_trace.json.gz": {
        "attention": 36,
        "communication": 74,
        "elementwise": 38,
        "gemm": 181,
        "layout": 113,
        "memory": 37,
        "normalization": 73,
        "other": 108,
        "quantize": 72,
        "reduction": 36,
    },
    "thirdparty/tracelens/h100__Falconsai_nsfw_image_detection__1016002.json.gz": {
        "activation": 13,
        "attention": 12,
        "convolution": 4,
        "elementwise": 26,
        "gemm": 73,
        "layout": 1,
        "normalization": 25,
    },
    "thirdparty/tracelens/h100__Qwen_Qwen1.5-0.5B-Chat__1016005.json.gz": {
        "activation": 35,
        "attention": 34,
        "elementwise": 806,
        "gemm": 242,
        "layout": 277,
        "reduction": 71,
    },
    "thirdparty/tracelens/h100__facebook_timesformer-base-finetuned-k400__1016002.json.gz": {
        "activation": 12,
        "convolution": 4,
        "elementwise": 63,
        "gemm": 133,
        "layout": 161,
        "normalization": 37,
        "reduction": 12,
        "softmax": 24,
    },
    "thirdparty/tracelens/h100__gaunernst_bert-small-uncased__1016001.json.gz": {
        "activation": 5,
        "attention": 4,
        "elementwise": 11,
        "gemm": 26,
        "layout": 3,
        "normalization": 10,
        "reduction": 1,
    },
    "thirdparty/tracelens/h100__google_owlv2-large-patch14-ensemble__1016001.json.gz": {
        "activation": 210,
        "convolution": 20,
        "elementwise": 1140,
        "gemm": 1505,
        "layout": 780,
        "memory": 20,
        "normalization": 385,
        "reduction": 25,
        "softmax": 180,
        "splitk-reduce": 65,
    },
    "thirdparty/yzwang2000-cudacode/profile.ncu-rep": {"other": 2},
}
"""Kernel launches (timeline ``kernels`` rows) plus profiled kernels (``ncu`` rows) per class, per shared file."""


def _readable(path: Path) -> bool:
    try:
        return detect_kind(path) != "nsys-rep"
    except TracekitError:
        return False


SHARED_FILES = (
    sorted(p.relative_to(SHARED).as_posix() for p in SHARED.rglob("*") if p.is_file() and _readable(p))
    if SHARED.is_dir()
    else []
)
SAMPLES = sorted(d.name for d in (ROOT / "samples").iterdir() if (d / "run.json").is_file())


def test_class_counts_of_the_shared_files(shared_data: Path) -> None:
    got: dict[str, dict[str, int]] = {}
    for rel in SHARED_FILES:
        frames = combine([read_file(shared_data / rel)])
        counts: collections.Counter[str] = collections.Counter()
        for name in ("kernels", "ncu"):
            counts.update(frames[name]["kernel_class"].to_list())
        got[rel] = dict(sorted(counts.items()))
        print(f"{rel}: {got[rel]}")
    assert got == CLASS_COUNTS


def test_name_rate_classes_agree_with_the_shapes_of_the_shared_traces(shared_data: Path) -> None:
    """Every GEMM case of the shared files whose profiler recorded the shape's input types (Kineto ``Input type``)
    and whose kernel's name says a rate class: the two agree, except fp32 shapes on TF32 tensor-op kernels
    (PyTorch's allow_tf32), which the name shows and the shape cannot."""
    seen: collections.Counter[str] = collections.Counter()
    for rel in SHARED_FILES:
        for c in build_cases(combine([read_file(shared_data / rel)])):
            shape = dtype_class(c.dtype_a, c.dtype_b)
            named = classify_name(c.main_kernel).dtype_class if c.main_kernel else None
            if shape is None or named is None:
                continue
            if shape == "fp32" and named == "tf32":
                seen["tf32 on fp32"] += 1
                continue
            assert named == shape, (rel, c.name, c.main_kernel)
            seen[named] += 1
    # cases are keyed by range, kernel signature and shape: one shape and kernel under two parent operators is one
    # case (trace_filter: 4 fewer than when the parent operator was part of the key; trace_diff: 3 more, one
    # shape run by both an _nn and an _nt kernel)
    assert seen == {"tf32 on fp32": 279, "bf16": 57, "fp32": 49, "fp8": 8}, seen


def _check(frames: dict[str, pl.DataFrame]) -> None:
    for c in cases(frames):
        ach, peak = c.timing.achieved_tflops, c.peak.tflops if c.peak else None
        pct = 100 * ach / peak if ach and peak else None
        assert pct is None or pct <= 100.0, (c.name, pct)
        for f in c.factors:
            assert f.value <= 1.0, (c.name, f.name, f.value)
            if f.name == "aux kernels":
                assert "(," not in f.sentence and ", ," not in f.sentence and ": ." not in f.sentence, (
                    f.sentence
                )
        main = classify_name(c.kernel.name) if c.kernel.name else None
        assert main is None or not main.known or main.kernel_class == "gemm", (c.name, c.kernel.name)


@pytest.mark.slow
@pytest.mark.parametrize("rel", SHARED_FILES)
def test_never_above_peak_on_shared_files(rel: str, shared_data: Path) -> None:
    _check(combine([read_file(shared_data / rel)]))


@pytest.mark.slow
@pytest.mark.parametrize("sample", SAMPLES)
def test_never_above_peak_on_samples(sample: str) -> None:
    _check(load_frames(open_run(ROOT / "samples" / sample)))


def test_every_shared_file_is_in_the_pinned_counts() -> None:
    if not SHARED_FILES:
        pytest.skip(f"{SHARED} is absent (it sits beside the checkout on project machines)")
    assert set(SHARED_FILES) == set(CLASS_COUNTS)
