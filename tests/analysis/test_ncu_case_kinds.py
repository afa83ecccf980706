"""Which kernels of an Nsight Compute report become GEMM cases, what they are rated against, and what a card and the
"Unknown, and how to learn it" section say where the report cannot tell. Real third-party reports; the expected
numbers are read from the reports' own metrics here."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import polars as pl
import pytest

import tracekit
from tracekit.analyzers.explain import LAUNCH_STATS_ONLY
from tracekit.analyzers.gemm.names import cannot_be_gemm, pointer_arguments
from tracekit.analyzers.importer import combine, read_file


def _need(path: Path) -> Path:
    if not path.exists():
        pytest.skip(f"{path} is absent")
    return path


def _analysis(path: Path) -> Any:
    return tracekit.load(_need(path)).analyze()


def test_kernels_whose_arguments_cannot_hold_a_gemm_are_no_cases(shared_data: Path) -> None:
    """yzwang2000's report holds ``kernel_A(double *, int, int)`` and ``kernel_C(double *, const double *, int)``:
    class other, tensor pipe 0, one and two pointers (a GEMM reads A and B and writes C). They were "2 GEMMs"."""
    path = _need(shared_data / "thirdparty/yzwang2000-cudacode/profile.ncu-rep")
    rows = combine([read_file(path)])["ncu"].to_dicts()
    assert {r["kernel_class"] for r in rows} == {"other"} and all(r["tensor_pipe_pct"] == 0 for r in rows)
    assert sorted(pointer_arguments(r["demangled_name"]) for r in rows) == [1, 2]
    assert _analysis(path).cases == []


def test_sgemm_kernels_of_unknown_class_stay_cases(shared_data: Path) -> None:
    """The control: esmm-research's SGEMM kernels (``(int, int, int, const float *, const float *, float *)``) are
    of no class the table knows, and keep their cases; a CUTLASS ``(T1::Params)`` kernel is not judged by it."""
    a = _analysis(shared_data / "thirdparty/esmm-research/profile_output_a62323b.ncu-rep")
    assert len(a.cases) == 4
    assert not cannot_be_gemm("void cutlass::Kernel<cutlass::gemm::kernel::Gemm<int>>(T1::Params)")
    assert not cannot_be_gemm("sgemm(int, int, int, const float * __restrict__, const float *, float *)")


def test_a_gemm_named_simt_kernel_is_rated_as_fp32_from_its_counted_ffmas(shared_data: Path) -> None:
    """panjd123's ``report-s8``: CUTLASS's ``ReferenceGemm_kernel`` (int8 by its name) issued no IMMA (tensor pipe
    0.012%) and 56,623,104 = 384^3 thread FFMAs: an FP32 SIMT kernel at 0.349 TFLOP/s, rated against the fp32
    peak (A100: 19.5), not "peak 624.0 (int8)" with ceilings of 471.3 / 418.9 TFLOP/s. The report records the
    FFMA rate per elapsed cycle, not the sum: rate x smsp__cycles_elapsed.avg is the count."""
    path = shared_data / "thirdparty/panjd123-cutlass/report-s8.ncu-rep"
    a = _analysis(path)
    f = combine([read_file(path)])
    (ref_id,) = f["ncu"].filter(pl.col("name") == "ReferenceGemm_kernel")["ncu_id"].to_list()
    m = dict(f["ncu_metrics"].filter(pl.col("ncu_id") == ref_id).select("metric", "value").iter_rows())
    ffma = (
        m["smsp__sass_thread_inst_executed_op_ffma_pred_on.sum.per_cycle_elapsed"]
        * m["smsp__cycles_elapsed.avg"]
    )
    assert round(ffma) == 384**3
    assert m["sm__inst_executed_pipe_tensor_op_imma.sum.pct_of_peak_sustained_active"] == 0
    ref = next(c for c in a.cases if "ReferenceGemm_kernel" in c.name)
    assert ref.rate.dtype_class == "fp32" and ref.peak is not None and ref.peak.tflops == 19.5
    assert ref.flops.per_call == 2 * 384**3
    assert ref.timing.kernel_tflops == pytest.approx(2 * 384**3 / 324_096 / 1e3, rel=1e-3)  # 0.349 TFLOP/s
    gemm = next(c for c in a.cases if c.name.endswith("(Gemm)"))  # the tensor-core GEMM keeps its int8 rating
    assert gemm.rate.dtype_class == "int8" and gemm.flops.per_call is None


def test_a_kernel_with_no_metrics_says_its_profiling_failed(shared_data: Path) -> None:
    """esmm-research's ``profile_e22c00d``: ``vectorized_blocktiling`` has no duration, no launch configuration and
    every metric NaN, and Nsight Compute's rules errored ("Metric launch__block_size not found"). It said "the
    report has only launch statistics"; it has none: the profiling failed, and the hint is to re-profile."""
    path = shared_data / "thirdparty/esmm-research/profile_e22c00d.ncu-rep"
    a = _analysis(path)
    row = combine([read_file(path)])["ncu"].filter(pl.col("name") == "vectorized_blocktiling").to_dicts()[0]
    assert row["duration_ns"] is None and row["grid_size"] is None and row["block_size"] is None
    case = next(c for c in a.cases if "vectorized_blocktiling" in c.name)
    v = case.verdict
    assert (
        v.kind == "cannot-explain"
        and "profiling failed" in v.sentence
        and LAUNCH_STATS_ONLY not in v.sentence
    )
    assert "launch__block_size not found" in v.sentence and "re-profile" in (v.capture_hint or "")
    unknown = [u.what for u in a.summary.unknowns]
    assert any("profiling failed" in w for w in unknown)
    assert not any(w.startswith("SM clock not measured") for w in unknown)
    assert any(w.startswith("3 case(s) without shape or FLOP count") for w in unknown)


def test_a_report_of_launch_statistics_keeps_its_verdict(shared_data: Path) -> None:
    """The control: esmm-research's ``profile_049ec61`` has launch statistics (grid, block, duration) and nothing
    else for its 11 kernels: still "the report has only launch statistics"."""
    a = _analysis(shared_data / "thirdparty/esmm-research/profile_049ec61.ncu-rep")
    assert len(a.cases) == 11
    # said by the verdict itself, or by what a measured wave loss leaves unknown
    assert all(LAUNCH_STATS_ONLY in (c.verdict.unknown or c.verdict.sentence) for c in a.cases)


@pytest.mark.parametrize(
    "rel",
    [
        "thirdparty/esmm-research/profile_output_a62323b.ncu-rep",
        "thirdparty/panjd123-cutlass/384.ncu-rep",
        "thirdparty/panjd123-cutlass/report.ncu-rep",
        "thirdparty/panjd123-cutlass/report75.ncu-rep",
    ],
)
def test_the_unknown_line_agrees_with_cards_that_print_an_estimate(shared_data: Path, rel: str) -> None:
    """Every card of these reports prints an estimated TFLOP/s (no FLOP count); the Unknown section said "N case(s)
    without shape or FLOP count have no TFLOP/s". It now says their TFLOP/s are estimated, for as many cases."""
    a = _analysis(shared_data / rel)
    assert a.cases and all(c.flops.per_call is None for c in a.cases)
    estimated = [c for c in a.cases if c.timing.kernel_tflops is not None and c.timing.achieved_estimate]
    assert len(estimated) == len(a.cases)
    unknown = [u for u in a.summary.unknowns if "without shape or FLOP count" in u.what]
    assert [u.what for u in unknown] == [
        f"{len(a.cases)} case(s) without shape or FLOP count: TFLOP/s estimated from pipe activity"
    ]
    assert unknown[0].cases == len(a.cases)
