"""Convolutions are no GEMM cases, whatever cuDNN's kernels are named (analyzers/taxonomy/frames.py, the
convolution rule of tracekit/data/kernel_classes.json's ``ops``).

cuDNN runs a convolution as an implicit GEMM and often picks a kernel named like one (``volta_sgemm_128x32_nt``,
``ampere_gcgemm_64x64_nt``, ``cutlass_80_tensorop_s1688gemm_*``): the op that launched it (Kineto's innermost
``cpu_op``, an emit_nvtx op range) says it is a convolution's. The expected times are the audit's, checked here
against a plain scan of the raw trace (each kernel's launching op found by its correlation id, without the reader).
"""

from __future__ import annotations

import bisect
import gzip
import json
import re
from pathlib import Path

import polars as pl
import pytest

from tests.support.kernel_rows import kernels as _kernels
from tracekit.analyzers.gemm import build_cases
from tracekit.analyzers.importer import combine, read_file
from tracekit.analyzers.taxonomy import classify_name
from tracekit.analyzers.taxonomy.frames import classify_frames
from tracekit.frames import SPECS

_CONV_OP = re.compile(r"convolution")

FILES = {
    # file: (GEMM-named kernel time launched from convolution ops, time of the GEMM-class kernels left), ms
    "thirdparty/kineto-tbplugin/resnet50_num_workers_0__worker0.1623143089861.pt.trace.json.gz": (
        44.05,
        0.41,
    ),
    "thirdparty/hta/ns_resolution_trace__rank-0.Apr_03_18_51_38.1102.pt.trace.json.gz": (116.91, 0.34),
    "thirdparty/hta/nccl_parser_config__nccl_data.json.gz": (19.48, 0.17),
    "thirdparty/hta/critical_path__alexnet__benchmark_result_2869224_1695835535_trace.json.gz": (0.65, 2.62),
}


def _raw_gemm_named_ms(path: Path) -> tuple[float, float]:
    """(GEMM-named kernel time launched inside a convolution op, the rest) by a plain scan of the trace: each
    kernel's launching op is the innermost cpu_op open on its runtime launch's thread."""
    events = json.loads(gzip.decompress(path.read_bytes()))["traceEvents"]
    ops: dict[tuple, list[tuple[float, float, str]]] = {}
    for e in events:
        if e.get("cat") in ("cpu_op", "Operator") and e.get("ph") == "X":
            ops.setdefault((e["pid"], e["tid"]), []).append((e["ts"], e["ts"] + e["dur"], e["name"]))
    for spans in ops.values():
        spans.sort(key=lambda o: (o[0], -o[1]))
    starts = {key: [o[0] for o in spans] for key, spans in ops.items()}
    launch: dict[int, str | None] = {}
    for e in events:
        corr = (e.get("args") or {}).get("correlation")
        if e.get("cat") in ("cuda_runtime", "Runtime") and isinstance(corr, int):
            key, ts = (e["pid"], e["tid"]), e["ts"]
            spans = ops.get(key, [])
            # the innermost op holding ts: the latest-starting one (the shortest of a tie) that still runs
            i = bisect.bisect_right(starts.get(key, []), ts)
            launch[corr] = next((spans[j][2] for j in range(i - 1, -1, -1) if spans[j][1] >= ts), None)
    conv = rest = 0.0
    for e in events:
        if e.get("cat") in ("kernel", "Kernel") and e.get("ph") == "X":
            if classify_name(e["name"]).kernel_class != "gemm":
                continue
            op = launch.get((e.get("args") or {}).get("correlation"))
            if op and _CONV_OP.search(op):
                conv += e["dur"] / 1e3
            else:
                rest += e["dur"] / 1e3
    return conv, rest


@pytest.mark.parametrize("rel", sorted(FILES))
def test_gemm_named_kernels_of_convolutions_are_no_gemms(rel: str, shared_data: Path) -> None:
    path = shared_data / rel
    conv_ms, gemm_ms = FILES[rel]
    raw_conv, raw_rest = _raw_gemm_named_ms(path)
    assert (round(raw_conv, 2), round(raw_rest, 2)) == (conv_ms, gemm_ms)

    frames = combine([read_file(path)])
    k = frames["kernels"].with_columns(((pl.col("end_ns") - pl.col("start_ns")) / 1e6).alias("ms"))
    under_conv = pl.col("launch_op").fill_null("").str.contains("convolution")
    gemm = k.filter(pl.col("kernel_class") == "gemm")
    assert gemm.filter(under_conv).height == 0
    assert round(gemm["ms"].sum(), 2) == gemm_ms
    named = k.filter(
        under_conv & pl.col("name").map_elements(lambda n: classify_name(n).kernel_class == "gemm")
    )
    assert round(named["ms"].sum(), 2) == conv_ms
    assert set(named.select("kernel_class", "kernel_family", "class_source").rows()) == {
        ("convolution", "cudnn-conv", "op")
    }

    # the GEMM cases hold the real matmuls only: their GEMM time is at most the GEMM kernels' and the split-K
    # reduces they own (the audit saw 44.49 ms of "GEMM kernels" in ResNet-50's 12 cases, 0.41 ms are matmuls)
    cases = build_cases(frames)
    owned = k.filter(pl.col("kernel_class") == "splitk-reduce")["ms"].sum()
    assert cases and sum(c.timing.gemm_ns_total or 0 for c in cases) / 1e6 <= gemm_ms + owned + 0.005


def test_the_launching_op_decides_a_gemm_named_kernel_is_a_convolutions() -> None:
    sgemm = "volta_sgemm_128x32_nt"
    reduce = "void cutlass_cudnn_train::Kernel<cutlass_cudnn_train::reduction::kernel::ReduceSplitK<float>>(Params)"
    to_nhwc = (
        "void cudnn::ops::nchwToNhwcKernel<float, float, float, false, true, (cudnnKernelDataType_t)0>(int)"
    )
    frames = {
        "kernels": _kernels(
            name=[sgemm, sgemm, sgemm, sgemm, reduce, to_nhwc, "kernel_of_no_library"],
            launch_op=[
                "aten::cudnn_convolution",
                "aten::convolution_backward",
                "aten::mm",
                None,
                "aten::cudnn_convolution_backward_weight",
                "aten::cudnn_convolution",
                "aten::_slow_conv2d_forward",
            ],
        )
    }
    rows = classify_frames(frames)["kernels"].select("kernel_class", "kernel_family", "class_source").rows()
    assert rows == [
        ("convolution", "cudnn-conv", "op"),
        ("convolution", "cudnn-conv", "op"),
        ("gemm", "cublas-arch", "name"),  # a real matmul
        ("gemm", "cublas-arch", "name"),  # no op (an nsys export without emit_nvtx): the name decides
        ("convolution", "cudnn-conv", "op"),  # the convolution's own split-K reduce
        ("convolution", "cudnn-conv", "op"),  # its layout conversion is the convolution's too
        ("convolution", "cudnn-conv", "op"),
    ]


def test_tensor_math_of_a_convolutions_kernel_is_no_gemm_evidence() -> None:
    """A kernel the table does not know, profiled under an emit_nvtx convolution range with its tensor pipe
    busy, stays the convolution's; the same kernel under ``aten::mm`` is a GEMM by its tensor pipe."""
    ncu = SPECS["ncu"].conform(
        pl.DataFrame(
            {
                "ncu_id": [0, 1],
                "name": ["implicit_kernel", "implicit_kernel"],
                "demangled_name": ["implicit_kernel", "implicit_kernel"],
                "tensor_pipe_pct": [80.0, 80.0],
                "nvtx_range": ["aten::cudnn_convolution, seq = 7", "aten::mm, seq = 8"],
            }
        )
    )
    rows = classify_frames({"ncu": ncu})["ncu"].select("kernel_class", "kernel_family", "class_source").rows()
    assert rows == [("convolution", "cudnn-conv", "op"), ("gemm", None, "tensor-pipe")]


def test_a_profiled_convolution_kernel_is_no_gemm_case() -> None:
    """Nsight Compute rows under emit_nvtx op ranges (``ncu --nvtx``): the GEMM-named kernel profiled inside
    ``aten::cudnn_convolution`` is no case; the same kernel inside ``aten::mm`` is one."""
    sgemm = "volta_sgemm_128x32_nt"
    ncu = SPECS["ncu"].conform(
        pl.DataFrame(
            {
                "ncu_id": [0, 1, 2],
                "name": [sgemm] * 3,
                "demangled_name": [sgemm] * 3,
                "duration_ns": [1000.0, 1000.0, 1000.0],
                "grid_size": [72, 72, 64],
                "block_size": [256, 256, 256],
                "nvtx_range": [
                    "aten::cudnn_convolution, seq = 7",
                    "aten::cudnn_convolution, seq = 9",
                    "aten::mm, seq = 8",
                ],
            }
        )
    )
    cases = build_cases({"ncu": ncu})
    assert [(c.main_kernel, c.kernel.grid) for c in cases] == [(sgemm, 64)]
