"""Every grouped / MoE entry point of ``instrument()`` names its ``moe`` range byte for byte as the hand-written
readers did, and hands the routing sidecar the same counts: each row of the target table is called through
``TARGETS`` on the argument sets those readers handled (2D x 3D and 3D x 3D grouped GEMMs, fp8 / mx / fp4
scales, packed FP4 weights, the older and newer sgl-kernel signatures, keyword and positional arguments), and on
the shapes they left alone. The expected names were produced by the readers before the table replaced them."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest

from tracekit.collectors import moe_ranges as MR
from tracekit.collectors.instrument import TARGETS
from tracekit.collectors.instrument_targets import Arg


class FakeTensor:
    """Shape, dtype and (CPU) values: what the entry readers and the recorder read (torch is not a dev
    dependency)."""

    def __init__(self, shape: tuple[int, ...], dtype: str = "torch.bfloat16", values: Any = None) -> None:
        self.shape = tuple(shape)
        self.dtype = dtype
        self.is_cuda = False
        self._values = values

    def tolist(self) -> Any:
        return self._values


T = FakeTensor
BF16, FP8, F32, U8, I32 = (
    "torch.bfloat16",
    "torch.float8_e4m3fn",
    "torch.float32",
    "torch.uint8",
    "torch.int32",
)
E8M0, FP4 = "torch.float8_e8m0fnu", "torch.float4_e2m1fn_x2"
OFFS = T((4,), I32, [5, 5, 17, 20])
IDS = T((3, 2), I32, [[0, 1], [0, 3], [-1, 2]])
SIZES = T((4, 3), I32, [[5, 64, 32], [0, 64, 32], [7, 64, 32], [1, 64, 32]])


def _case(label: str, args: tuple[Any, ...], kwargs: dict[str, Any], name: str | None, counts: Any = None):
    return pytest.param(
        label, args, kwargs, name, counts, id=f"{label}:{name and name.split(' op=')[1][:40]}"
    )


CASES = [
    # torch._grouped_mm: 2D x 3D with offsets, 3D x 3D batched, out_dtype, ragged-K 2D x 2D left alone
    _case(
        "torch._grouped_mm",
        (T((20, 64)), T((4, 64, 32))),
        {"offs": OFFS},
        "moe backend=torch-bf16 op=grouped_mm E=4 M=20 N=32 K=64 a=bf16 b=bf16 out=bf16",
        ("offsets", [5, 0, 12, 3]),
    ),
    _case(
        "torch._grouped_mm",
        (T((20, 64), "torch.float16"), T((4, 64, 32), "torch.float16"), OFFS, None, F32),
        {},
        "moe backend=torch-fp16 op=grouped_mm E=4 M=20 N=32 K=64 a=fp16 b=fp16 out=fp32",
        ("offsets", [5, 0, 12, 3]),
    ),
    _case(
        "torch._grouped_mm",
        (T((3, 8, 64)), T((3, 64, 32))),
        {},
        "moe backend=torch-bf16 op=grouped_mm E=3 M=24 N=32 K=64 a=bf16 b=bf16 out=bf16",
        ("counts", [8, 8, 8]),
    ),
    _case("torch._grouped_mm", (T((20, 64)), T((64, 32))), {"offs": OFFS}, None),
    # torch._scaled_grouped_mm: fp8 rowwise, mxfp8, nvfp4 / mxfp4 (packed), batched, out_dtype
    _case(
        "torch._scaled_grouped_mm",
        (T((20, 64), FP8), T((4, 64, 32), FP8), T((20,), F32), T((4, 32), F32), OFFS),
        {},
        "moe backend=torch-fp8 op=scaled_grouped_mm E=4 M=20 N=32 K=64 a=e4m3 b=e4m3 out=bf16 scale=rowwise",
        ("offsets", [5, 0, 12, 3]),
    ),
    _case(
        "torch._scaled_grouped_mm",
        (T((20, 64), FP8), T((4, 64, 32), FP8), T((20, 2), E8M0), T((4, 2, 32), E8M0)),
        {"offs": OFFS, "out_dtype": F32},
        "moe backend=torch-fp8 op=scaled_grouped_mm E=4 M=20 N=32 K=64 a=e4m3 b=e4m3 out=fp32 scale=mxfp8-1x32",
        ("offsets", [5, 0, 12, 3]),
    ),
    _case(
        "torch._scaled_grouped_mm",
        (T((20, 32), FP4), T((4, 32, 32), FP4), T((20, 4), FP8), T((4, 4, 32), FP8), OFFS),
        {},
        "moe backend=torch-fp4 op=scaled_grouped_mm E=4 M=20 N=32 K=64 a=e2m1 b=e2m1 out=bf16 scale=nvfp4-1x16",
        ("offsets", [5, 0, 12, 3]),
    ),
    _case(
        "torch._scaled_grouped_mm",
        (T((20, 32), FP4), T((4, 32, 32), FP4), T((20, 2), E8M0), T((4, 2, 32), E8M0), OFFS),
        {},
        "moe backend=torch-fp4 op=scaled_grouped_mm E=4 M=20 N=32 K=64 a=e2m1 b=e2m1 out=bf16 scale=mxfp4-1x32",
        ("offsets", [5, 0, 12, 3]),
    ),
    _case(
        "torch._scaled_grouped_mm",
        (T((3, 8, 64), FP8), T((3, 64, 32), FP8), None, T((3, 32), F32)),
        {},
        "moe backend=torch-fp8 op=scaled_grouped_mm E=3 M=24 N=32 K=64 a=e4m3 b=e4m3 out=bf16 scale=rowwise",
        ("counts", [8, 8, 8]),
    ),
    _case(
        "torch._scaled_grouped_mm",
        (T((20, 64), BF16), T((4, 64, 32), BF16), T((20,), F32), T((4, 32), F32), OFFS),
        {},
        "moe backend=torch-bf16 op=scaled_grouped_mm E=4 M=20 N=32 K=64 a=bf16 b=bf16 out=bf16 scale=rowwise",
        ("offsets", [5, 0, 12, 3]),
    ),
    _case("torch._scaled_grouped_mm", (T((20, 64), FP8), T((64, 32), FP8), T((20,), F32)), {}, None),
    # FlashInfer cutlass_fused_moe: bf16 weights, packed FP4 weights with uint8 input, both of its names
    _case(
        "flashinfer.cutlass_fused_moe",
        (T((3, 64)), IDS, None, T((4, 96, 64)), T((4, 64, 48))),
        {"output_dtype": BF16},
        "moe backend=flashinfer-cutlass op=cutlass_fused_moe E=4 M=6 N=96 K=64 a=bf16 b=bf16 out=bf16 "
        "T=3 topk=2 I=48",
        ("ids", [2, 1, 1, 1]),
    ),
    _case(
        "flashinfer.fused_moe.cutlass_fused_moe",
        (T((3, 32), U8), IDS, None, T((4, 96, 32), U8), T((4, 64, 24), U8), F32),
        {},
        "moe backend=flashinfer-cutlass op=cutlass_fused_moe E=4 M=6 N=96 K=64 a=e2m1 b=e2m1 out=fp32 "
        "T=3 topk=2 I=48",
        ("ids", [2, 1, 1, 1]),
    ),
    _case(
        "flashinfer.cutlass_fused_moe",
        (),
        {
            "input": T((3, 64), FP8),
            "token_selected_experts": IDS,
            "fc1_expert_weights": T((4, 96, 64), FP8),
            "fc2_expert_weights": T((4, 64, 48), FP8),
        },
        "moe backend=flashinfer-cutlass op=cutlass_fused_moe E=4 M=6 N=96 K=64 a=e4m3 b=e4m3 out=bf16 "
        "T=3 topk=2 I=48",
        ("ids", [2, 1, 1, 1]),
    ),
    _case("flashinfer.cutlass_fused_moe", (T((3, 64)), IDS, None, T((96, 64)), T((4, 64, 48))), {}, None),
    # FlashInfer trtllm_fp4_block_scale_moe: top_k by keyword (M known) or not, num_experts overriding E
    _case(
        "flashinfer.trtllm_fp4_block_scale_moe",
        (T((3, 8), F32), None, T((3, 32), U8), None, T((8, 96, 32), U8)),
        {"top_k": 2},
        "moe backend=flashinfer-trtllm op=trtllm_fp4_block_scale_moe E=8 M=6 N=96 K=64 a=e2m1 b=e2m1 out=bf16 "
        "scale=nvfp4-1x16 T=3 topk=2 I=48",
        ("unknown", None),
    ),
    _case(
        "flashinfer.fused_moe.trtllm_fp4_block_scale_moe",
        (T((3, 8), F32), None, T((3, 64), BF16), None, T((8, 96, 32), U8)),
        {"num_experts": 16},
        "moe backend=flashinfer-trtllm op=trtllm_fp4_block_scale_moe E=16 N=96 K=64 a=bf16 b=e2m1 out=bf16 "
        "scale=nvfp4-1x16 T=3 I=48",
        ("unknown", None),
    ),
    _case(
        "flashinfer.trtllm_fp4_block_scale_moe",
        (T((24,), F32), None, T((3, 32), U8), None, T((8, 96, 32), U8)),
        {"top_k": 2},
        None,
    ),
    # sgl-kernel fp8_blockwise_scaled_grouped_mm: the older signature (a at 1) and the newer (a at 6), B [E, K, N]
    # or [E, N, K]
    _case(
        "sgl_kernel.fp8_blockwise_scaled_grouped_mm",
        (T((13, 64), BF16), T((13, 64), FP8), T((4, 32, 64), FP8), *[None] * 7, SIZES, None),
        {},
        "moe backend=sgl-fp8 op=fp8_blockwise_scaled_grouped_mm E=4 M=13 N=32 K=64 a=e4m3 b=e4m3 out=bf16 "
        "scale=blockwise-1x128.128x128",
        ("sizes", [5, 0, 7, 1]),
    ),
    _case(
        "sgl_kernel.fp8_blockwise_scaled_grouped_mm",
        (T((13, 64), BF16), *[None] * 5, T((13, 64), FP8), T((4, 64, 32), FP8), *[None] * 7, SIZES, None),
        {},
        "moe backend=sgl-fp8 op=fp8_blockwise_scaled_grouped_mm E=4 M=13 N=32 K=64 a=e4m3 b=e4m3 out=bf16 "
        "scale=blockwise-1x128.128x128",
        ("sizes", [5, 0, 7, 1]),
    ),
    _case(
        "sgl_kernel.fp8_blockwise_scaled_grouped_mm",
        (T((13, 64), BF16),),
        {"a_ptrs": None, "a": T((13, 64), FP8), "b": T((4, 32, 64), FP8), "problem_sizes": SIZES},
        "moe backend=sgl-fp8 op=fp8_blockwise_scaled_grouped_mm E=4 M=13 N=32 K=64 a=e4m3 b=e4m3 out=bf16 "
        "scale=blockwise-1x128.128x128",
        ("sizes", [5, 0, 7, 1]),
    ),
    _case(
        "sgl_kernel.fp8_blockwise_scaled_grouped_mm",
        (T((13, 64), BF16), T((13, 64), FP8), T((32, 64), FP8), *[None] * 7, SIZES),
        {},
        None,
    ),
    # sgl-kernel cutlass_fp4_group_mm: params positional (with or without device) or by keyword, or absent
    _case(
        "sgl_kernel.cutlass_fp4_group_mm",
        (T((13, 32), U8), T((4, 96, 32), U8), None, None, None, BF16, "cuda", {"problem_sizes": SIZES}),
        {},
        "moe backend=sgl-fp4 op=cutlass_fp4_group_mm E=4 M=13 N=96 K=64 a=e2m1 b=e2m1 out=bf16 scale=nvfp4-1x16",
        ("sizes", [5, 0, 7, 1]),
    ),
    _case(
        "sgl_kernel.cutlass_fp4_group_mm",
        (T((13, 32), U8), T((4, 96, 32), U8), None, None, None, "torch.float16", {"problem_sizes": SIZES}),
        {},
        "moe backend=sgl-fp4 op=cutlass_fp4_group_mm E=4 M=13 N=96 K=64 a=e2m1 b=e2m1 out=fp16 scale=nvfp4-1x16",
        ("sizes", [5, 0, 7, 1]),
    ),
    _case(
        "sgl_kernel.cutlass_fp4_group_mm",
        (T((13, 32), U8), T((4, 96, 32), U8)),
        {"params": {"problem_sizes": SIZES}},
        "moe backend=sgl-fp4 op=cutlass_fp4_group_mm E=4 M=13 N=96 K=64 a=e2m1 b=e2m1 out=bf16 scale=nvfp4-1x16",
        ("sizes", [5, 0, 7, 1]),
    ),
    _case(
        "sgl_kernel.cutlass_fp4_group_mm",
        (T((13, 32), U8), T((4, 96, 32), U8)),
        {},
        "moe backend=sgl-fp4 op=cutlass_fp4_group_mm E=4 M=13 N=96 K=64 a=e2m1 b=e2m1 out=bf16 scale=nvfp4-1x16",
        ("unknown", None),
    ),
    _case("sgl_kernel.cutlass_fp4_group_mm", (T((4, 13, 32), U8), T((4, 96, 32), U8)), {}, None),
]


class _Scope:
    def __init__(self, name: str) -> None:
        self.name = name


@pytest.mark.parametrize(("label", "args", "kwargs", "name", "counts"), CASES)
def test_moe_row_names_and_counts(tmp_path: Path, label, args, kwargs, name, counts) -> None:
    target = next(t for t in TARGETS if t.label == label)
    described = target.describe(args, kwargs)
    if name is None:
        assert described is None
        return
    assert described is not None
    assert described[1]() == name
    again = target.describe(args, kwargs)
    assert again is not None and again[0] == described[0]  # one cache key per call shape
    assert target.record is not None
    recorder = MR.RoutingRecorder(tmp_path / "routing.jsonl", "nsys")
    previous = MR.set_recorder(recorder)
    try:
        target.record(args, kwargs, _Scope(name))
    finally:
        MR.set_recorder(previous)
        recorder.close()
    (line,) = [json.loads(x) for x in (tmp_path / "routing.jsonl").read_text().splitlines()]
    kind, values = counts
    assert (line["range"], line["counts_from"], line["counts"]) == (name, kind, values)


def test_every_moe_row_is_covered() -> None:
    """A new MoE row gets argument sets here: every ``moe`` target label appears among the cases."""
    covered = {p.values[0] for p in CASES}
    moe = {t.label for t in TARGETS if t.record is not None}
    assert moe == covered


def test_a_new_moe_entry_point_is_one_row(tmp_path: Path) -> None:
    """A made-up grouped GEMM ``toy.grouped(x [M, K], w [E, N, K], sizes)`` named by one :class:`Grouped` row:
    the name, the cache key and the sidecar's counts all come from the row."""
    row = MR.moe_entry(
        "toy",
        "grouped",
        MR.Grouped(
            "toy-{family}",
            "toy_grouped",
            (("a", Arg(0, "x")), ("b", Arg(1, "w"))),
            "mk,enk",
            MR.Counts("sizes", Arg(2, "sizes")),
            out=Arg(None, "out_dtype"),
            scale="blockwise-1x128.128x128",
        ),
    )
    args = (T((13, 64), FP8), T((4, 32, 64), FP8), SIZES)
    described = row.describe(args, {"out_dtype": F32})
    assert described is not None
    name = described[1]()
    assert name == (
        "moe backend=toy-fp8 op=toy_grouped E=4 M=13 N=32 K=64 a=e4m3 b=e4m3 out=fp32 scale=blockwise-1x128.128x128"
    )
    recorder = MR.RoutingRecorder(tmp_path / "routing.jsonl", "nsys")
    previous = MR.set_recorder(recorder)
    try:
        assert row.record is not None
        row.record(args, {}, _Scope(name))
    finally:
        MR.set_recorder(previous)
        recorder.close()
    (line,) = [json.loads(x) for x in (tmp_path / "routing.jsonl").read_text().splitlines()]
    assert (line["counts_from"], line["counts"], line["experts"]) == ("sizes", [5, 0, 7, 1], 4)
    with pytest.raises(ValueError, match="unknown layout"):
        MR.Grouped("toy", "toy", (("a", Arg(0, "x")), ("b", Arg(1, "w"))), "mk,xyz", MR.Counts("unknown"))
