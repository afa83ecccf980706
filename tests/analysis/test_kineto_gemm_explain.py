"""GEMM operators of other people's PyTorch-profiler traces are explained with achieved TFLOP/s (issue 17).

The Kineto reader turns each ``aten::mm / addmm / linear / bmm ...`` call into a range with the M, N, K its
``Input Dims`` give (analyzers/readers/torch_ops.py); the explainer makes the innermost such range holding a GEMM kernel a
case. Checked on every shared trace with GEMM ops: at least 90% of the innermost GEMM ops belong to a case with
achieved TFLOP/s, and a few cases against shapes read by hand from the raw JSON."""

from __future__ import annotations

from pathlib import Path

import polars as pl
import pytest

from tracekit.analyzers.gemm import build_cases, is_gemm_kernel
from tracekit.analyzers.importer import combine, read_file

DATA = Path(__file__).resolve().parents[2].parent / "shared" / "data"
TRACES = [
    "thirdparty/tracelens/b200__eager_trace.json.gz",
    "thirdparty/tracelens/h100__Falconsai_nsfw_image_detection__1016002.json.gz",
    "thirdparty/tracelens/h100__Qwen_Qwen1.5-0.5B-Chat__1016005.json.gz",
    "thirdparty/tracelens/h100__facebook_timesformer-base-finetuned-k400__1016002.json.gz",
    "thirdparty/tracelens/h100__gaunernst_bert-small-uncased__1016001.json.gz",
    "thirdparty/tracelens/h100__google_owlv2-large-patch14-ensemble__1016001.json.gz",
    "thirdparty/hta/trace_diff__control__control.json.gz",
    "thirdparty/hta/trace_filter__sampled_rank-0.json.gz",
    "h200-probe/torch_trace.json.gz",
]


def _frames(rel: str) -> dict[str, pl.DataFrame]:
    path = DATA / rel
    if not path.is_file():
        pytest.skip(f"{path} is absent (../shared/data is not beside this checkout)")
    return combine([read_file(path)])


def _coverage(frames: dict[str, pl.DataFrame]) -> tuple[int, int]:
    """(innermost GEMM op calls, those inside a case with achieved TFLOP/s)."""
    cases = build_cases(frames)
    covered = {rid for c in cases if c.achieved_tflops for rid in c.range_ids}
    r = frames["ranges"]
    ops = r.filter(pl.col("range_kind") == "gemm-op")
    inner = ops.filter(~pl.col("range_id").is_in(ops["parent_id"].drop_nulls().to_list()))
    parent = dict(zip(r["range_id"].to_list(), r["parent_id"].to_list(), strict=True))

    def in_case(rid: int | None) -> bool:
        depth = 0
        while rid is not None and depth < 64:
            if rid in covered:
                return True
            rid, depth = parent.get(rid), depth + 1
        return False

    return inner.height, sum(in_case(rid) for rid in inner["range_id"].to_list())


@pytest.mark.parametrize("rel", TRACES, ids=lambda t: Path(t).name.split("__")[0])
def test_at_least_90_percent_of_gemm_ops_get_achieved_tflops(rel: str) -> None:
    total, covered = _coverage(_frames(rel))
    assert total > 0
    assert covered >= 0.9 * total, f"{covered} of {total} GEMM ops explained with achieved TFLOP/s"


def test_b200_addmm_cases_by_hand() -> None:
    """b200__eager_trace: 36 calls each of three ``aten::addmm`` shapes (Input Dims [[888, 2880], [2880, 640]] and
    so on, read from the JSON) and one ``aten::mm`` [[1, 2880], [2880, 25136]]; bf16 on the B200's dense bf16
    peak; achieved = 2MNK over the kernel time."""
    cases = {c.name: c for c in build_cases(_frames(TRACES[0]))}
    c = cases["aten::addmm M=888 N=640 K=2880"]
    assert (c.m, c.n, c.k, c.launches, c.dtype_class) == (888, 640, 2880, 36, "bf16")
    assert c.flops == 2 * 888 * 640 * 2880 and c.flops_source == "shape"
    assert c.achieved_tflops == pytest.approx(c.flops * c.timing.calls / c.timing.span_ns_total / 1e3)
    assert c.peak_tflops and c.device is not None and "B200" in c.device.name
    mm = cases["aten::mm M=1 N=25136 K=2880"]
    assert mm.launches == 1 and mm.flops == 2 * 1 * 25136 * 2880
    # the MoE finalize kernel names cutlass only in its template arguments: not a GEMM
    assert not any("finalizeKernel" in name for name in cases)


def test_bert_small_addmm_by_hand() -> None:
    """h100 bert-small: ``aten::addmm`` of a [141, 512] x [512, 2048] linear, 4 calls; the attention kernel
    (``pytorch_flash::flash_fwd_kernel<... cutlass::bfloat16_t ...>``) is no GEMM case."""
    cases = build_cases(_frames(TRACES[4]))
    (c,) = [c for c in cases if (c.m, c.n, c.k) == (141, 2048, 512)]
    assert c.launches == 4 and c.dtype_class == "bf16" and c.flops == 2 * 141 * 2048 * 512
    assert not any(c.main_kernel and "flash_fwd" in c.main_kernel for c in cases)
    assert not is_gemm_kernel("void pytorch_flash::flash_fwd_kernel<Traits<64, cutlass::bfloat16_t>>(Params)")
