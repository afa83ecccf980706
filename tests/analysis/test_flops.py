"""FLOPs and dtype from Nsight Compute's math counters (analyzers/flops.py) on real exports: the H200 counter
probe (cuBLAS GEMMs of known shape, each in an NVTX range naming it) and third-party SM120 CUTLASS BF16 GEMMs."""

from __future__ import annotations

import re
from pathlib import Path

import polars as pl
import pytest

from tracekit.analyzers.flops import counted_flops, is_counter_metric
from tracekit.analyzers.readers.ncu.csv_export import read_ncu_csv

PROBE = Path(__file__).resolve().parents[2] / "samples" / "h200-counter-probe" / "raw" / "ncu_details.csv"
_SHAPE = re.compile(r"probe_(?P<dtype>[a-z0-9]+)_M(?P<m>\d+)_N(?P<n>\d+)_K(?P<k>\d+)/")


def _per_kernel(frames: dict[str, pl.DataFrame]) -> dict[int, dict[str, float | None]]:
    out: dict[int, dict[str, float | None]] = {}
    for r in frames["ncu_metrics"].iter_rows(named=True):
        out.setdefault(r["ncu_id"], {})[r["metric"]] = r["value"]
    return out


def _probe() -> list[tuple[dict, str, dict[str, float | None]]]:
    frames = read_ncu_csv(PROBE).frames
    metrics = _per_kernel(frames)
    out = []
    for r in frames["ncu"].iter_rows(named=True):
        shape = _SHAPE.match(r["demangled_name"] or "")
        if shape:
            out.append((shape.groupdict(), r["demangled_name"], metrics[r["ncu_id"]]))
    return out


def _main_per_gemm() -> dict[tuple[str, int, int, int], tuple[str, object]]:
    """Per probe GEMM, the kernel with the most counted FLOPs (split-K reduce kernels sit beside it)."""
    best: dict[tuple[str, int, int, int], tuple[str, object]] = {}
    for shape, name, metrics in _probe():
        key = (shape["dtype"], int(shape["m"]), int(shape["n"]), int(shape["k"]))
        c = counted_flops(metrics, name)
        if c is not None and (key not in best or c.flops > best[key][1].flops):  # type: ignore[attr-defined]
            best[key] = (name, c)
    return best


def test_tensor_counters_count_2mnk_on_shapes_that_fit_the_tiles() -> None:
    best = _main_per_gemm()
    fitting = {k: v for k, v in best.items() if k[1] >= 1024}
    assert len(fitting) == 8  # bf16, fp8, fp32, tf32 at M=1024 and M=4096
    for (dtype, m, n, k), (name, c) in fitting.items():
        assert c.flops == pytest.approx(2 * m * n * k, rel=0.02), (dtype, m, name)  # type: ignore[attr-defined]
        assert c.dtype_class == dtype, name  # type: ignore[attr-defined]
        assert c.simt == (dtype == "fp32"), name  # type: ignore[attr-defined]


def test_tile_padding_shows_as_excess_over_2mnk() -> None:
    best = _main_per_gemm()
    _, tf32 = best[("tf32", 16, 2048, 6144)]
    assert tf32.flops / (2 * 16 * 2048 * 6144) == pytest.approx(4.0, rel=0.01)  # type: ignore[attr-defined]
    _, fp8 = best[("fp8", 128, 2048, 6144)]
    assert fp8.flops / (2 * 128 * 2048 * 6144) == pytest.approx(1.031, rel=0.005)  # type: ignore[attr-defined]


def test_instruction_variants_are_not_counted_twice() -> None:
    for _, name, metrics in _probe():
        c = counted_flops(metrics, name)
        if c is None or c.simt:
            continue
        assert all("_op_" not in n for n in c.counter_names), c.counter_names
        hgmma = sum(v or 0 for k, v in metrics.items() if "_op_hgmma_" in k)
        if hgmma:
            assert c.flops == hgmma  # the hgmma variant repeats the same count


def test_split_k_reduce_and_empty_metrics_count_nothing_on_the_tensor_path() -> None:
    reduce = [(n, m) for _, n, m in _probe() if "splitKreduce" in n]
    assert reduce
    for name, metrics in reduce:
        c = counted_flops(metrics, name)
        assert c is None or c.simt  # FADD/FMUL of the reduction only, never a tensor class
    assert counted_flops({}) is None
    assert counted_flops({"sm__ops_path_tensor_src_bf16_dst_fp32.sum": 0.0}) is None


def test_chip_specific_names_parse_by_pattern() -> None:
    """Names as gb202 / gb100 spell them (shared/data/ncu-metrics); variants ignored, multi-type counters resolved."""
    gb202 = {
        "sm__ops_path_tensor_src_fp8_dst_fp32.sum": 1e9,
        "sm__ops_path_tensor_src_fp8_dst_fp32_realtime.sum": 1e9,
        "sm__ops_path_tensor_src_fp8_dst_fp32_sparsity_off.sum": 1e9,
        "sm__ops_path_tensor_src_fp16_dst_fp32.sum": 0.0,
    }
    c = counted_flops(gb202)
    assert c is not None and c.flops == 1e9 and c.dtype_class == "fp8"
    gb100 = {"sm__ops_path_tensor_src_fp4_fp6_fp8_dst_fp32.sum": 4e9}
    named = counted_flops(gb100, "sm100_gemm_e2m1_e2m1_nvf4")
    assert (
        named is not None
        and named.dtype_class == "fp4"
        and "kernel name says fp4" in (named.dtype_note or "")
    )
    unnamed = counted_flops(gb100, "cutlass_kernel")
    assert unnamed is not None and unnamed.dtype_class == "fp8" and "assumed" in (unnamed.dtype_note or "")
    assert is_counter_metric("sm__ops_path_tensor_src_fp4_fp6_dst_fp16.sum")
    assert not is_counter_metric("sm__ops_path_tensor_op_hgmma_src_bf16_dst_fp32.sum")
    assert not is_counter_metric("sm__ops_path_tensor_src_fp8_dst_fp32_realtime.sum")


def test_sm120_cutlass_bf16_gemms_count_bf16_flops(shared_data: Path) -> None:
    folder = shared_data / "thirdparty" / "llm-perf-opt-rtx50"
    files = sorted(folder.glob("kernel_*_ncu.details.csv"))
    if not files:
        pytest.skip(f"{folder} holds no details exports")
    for path in files:
        frames = read_ncu_csv(path).frames
        metrics = _per_kernel(frames)
        row = frames["ncu"].row(0, named=True)
        c = counted_flops(metrics[row["ncu_id"]], row["demangled_name"])
        assert c is not None, path.name
        assert c.dtype_class == "bf16" and not c.simt
        assert c.counter_names == ["sm__ops_path_tensor_src_bf16_dst_fp32.sum"]
        assert c.flops == metrics[row["ncu_id"]]["sm__ops_path_tensor_src_bf16_dst_fp32.sum"]
        assert c.flops > 1e9
