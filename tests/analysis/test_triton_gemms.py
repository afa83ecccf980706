"""torch.compile's GEMMs under the PyTorch profiler: Inductor launches a Triton template from no aten op, and
records the launch as a ``cpu_op`` of the kernel's name with its arguments' ``Input Dims`` (as
../shared/data/thirdparty/hta/triton_example records ``triton_poi_fused_add_cos_sin_0``). The kernel is a GEMM by
its name alone (the name table's ``triton-template-mm``), and its shape, dtype and FLOPs come from that op's
arguments, found by their sizes wherever the template put them."""

from __future__ import annotations

import gzip
import json
from pathlib import Path

import pytest

from tracekit.analyzers.gemm import build_cases
from tracekit.analyzers.importer import combine, read_file
from tracekit.analyzers.readers.torch_ops import op_shape

GATE = "triton_tem_fused__unsafe_view_mm_mul_silu_t_view_6"
QKV = "triton_tem_fused_mm_t_transpose_view_2"
NORM = "triton_red_fused__to_copy_add_mean_mul_pow_rsqrt_0"


def _trace(path: Path) -> Path:
    """A Kineto trace of one compiled step, three times: an RMSNorm reduction and two GEMM templates (the gate
    GEMM with its SiLU epilogue reading the weight as stored [N, K], the qkv GEMM with the weight transposed),
    inside a ``record_function`` range ``block/compiled``."""
    events: list[dict] = []
    corr = 100
    t = 1000.0
    bf16 = "c10::BFloat16"
    ops = [
        (NORM, [[4096, 6144], [6144], [4096, 6144]], [bf16] * 3, 40.0),
        (GATE, [[4096, 6144], [2048, 6144], [4096, 2048], [4096, 2048]], [bf16] * 4, 180.0),
        (QKV, [[4096, 6144], [6144, 7168], [4096, 7168]], [bf16] * 3, 420.0),
    ]
    for step in range(3):
        start = t
        for name, dims, types, dur in ops:
            corr += 1
            args = {"External id": corr, "kernel_backend": "triton", "Input Dims": dims, "Input type": types}
            events.append(
                {
                    "ph": "X",
                    "cat": "cpu_op",
                    "name": name,
                    "pid": 1,
                    "tid": 1,
                    "ts": t,
                    "dur": 8.0,
                    "args": args,
                }
            )
            events.append(
                {
                    "ph": "X",
                    "cat": "cuda_runtime",
                    "name": "cuLaunchKernel",
                    "pid": 1,
                    "tid": 1,
                    "ts": t + 2.0,
                    "dur": 4.0,
                    "args": {"correlation": corr, "External id": corr},
                }
            )
            events.append({"ph": "X", "cat": "kernel", "name": name, "pid": 0, "tid": 7, "ts": t + 20.0, "dur": dur,
                           "args": {"correlation": corr, "External id": corr, "device": 0, "stream": 7,
                                    "grid": [132, 1, 1], "block": [256, 1, 1]}})  # fmt: skip
            t += dur + 30.0
        events.append({"ph": "X", "cat": "user_annotation", "name": "block/compiled", "pid": 1, "tid": 1,
                       "ts": start - 1.0, "dur": t - start, "args": {}})  # fmt: skip
        t += 100.0
        _ = step
    trace = path / "compiled.pt.trace.json.gz"
    trace.write_bytes(gzip.compress(json.dumps({"traceEvents": events}).encode()))
    return trace


def test_template_shapes_are_found_by_their_sizes() -> None:
    gate = op_shape(GATE, [[4096, 6144], [2048, 6144], [4096, 2048], [4096, 2048]], ["c10::BFloat16"] * 4)
    assert gate is not None and (gate.op, gate.m, gate.n, gate.k, gate.dtype_a) == (
        "mm",
        4096,
        2048,
        6144,
        "bf16",
    )
    bmm = op_shape("triton_tem_fused_bmm_1", [[8, 128, 64], [8, 64, 256], [8, 128, 256]], ["float"] * 3)
    assert bmm is not None and (bmm.m, bmm.n, bmm.k, bmm.batch) == (128, 256, 64, 8)
    # no output of the product's size among the arguments: no shape guessed
    odd = op_shape("triton_tem_fused_mm_0", [[4096, 6144], [6144, 7168]], ["float"] * 2)
    assert odd is not None and odd.m is None
    assert op_shape(NORM, [[4096, 6144]], ["float"]) is None  # a reduction is no GEMM op


def test_each_template_gemm_is_a_case_with_its_dtype_and_flops(tmp_path: Path) -> None:
    frames = combine([read_file(_trace(tmp_path))])
    k = frames["kernels"]
    classes = dict(zip(k["name"].to_list(), k["kernel_class"].to_list(), strict=True))
    assert classes[GATE] == classes[QKV] == "gemm" and classes[NORM] == "normalization"
    cases = {c.kernel.name: c for c in build_cases(frames)}
    assert set(cases) == {GATE, QKV}
    gate, qkv = cases[GATE], cases[QKV]
    assert (gate.shape.m, gate.shape.n, gate.shape.k) == (4096, 2048, 6144)
    assert (qkv.shape.m, qkv.shape.n, qkv.shape.k) == (4096, 7168, 6144)
    assert gate.flops == pytest.approx(2 * 4096 * 2048 * 6144)
    assert qkv.flops == pytest.approx(2 * 4096 * 7168 * 6144)
    assert gate.shape.dtype_a == qkv.shape.dtype_a == "bf16"
    assert gate.timing.calls == qkv.timing.calls == 3
    assert gate.range == "block/compiled"
