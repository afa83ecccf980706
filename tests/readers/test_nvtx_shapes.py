"""NVTX ranges that ``torch.autograd.profiler.emit_nvtx`` writes around PyTorch GEMM ops, in Nsight Systems
exports: op and (with ``record_shapes=True``) M, N, K from the range text.

The text format is PyTorch's ``getNvtxStr`` / ``shapesToStr`` (torch/csrc/profiler/util.cpp):
``"<op>, seq = <n>, op_id = <id>, sizes = [[1024, 6144], [6144, 2048]], input_op_ids = [(3,0), (4,0)]"``.

Two real files: nsys-ai's H100 export (emit_nvtx without record_shapes: ``"aten::bmm, op_id = 314541"``), and the
H200 probe's export with its five NVTX range texts rewritten into that format for the same GEMMs (no export with
``record_shapes=True`` exists in ../shared/data yet; benchmarks/foreign/emit_nvtx_shapes.py captures one on a GPU).
Everything else in the copy (kernels, launches, threads, times) is the probe's own.
"""

from __future__ import annotations

import shutil
import sqlite3
from pathlib import Path

import polars as pl
import pytest

from tracekit.analyzers.importer import combine
from tracekit.analyzers.readers.nsys.reader import read_nsys_sqlite
from tracekit.analyzers.readers.torch_ops import nvtx_op_shape

NSYS_AI = "thirdparty/nsys-ai/h100_2gpu_1s.sqlite"
PROBE = "h200-probe/probe.sqlite"

# the probe's range texts -> what emit_nvtx(record_shapes=True) writes for the same torch call
REWRITE = {
    "gemm/bf16/M=1024,N=2048,K=6144": "aten::mm, seq = 0, op_id = 11, sizes = [[1024, 6144], [6144, 2048]], "
    "input_op_ids = [(9,0), (10,0)]",
    "gemm/fp8/M=1024,N=2048,K=6144": "aten::_scaled_mm, seq = 1, op_id = 15, sizes = [[1024, 6144], "
    "[6144, 2048], [], [], [], [], [], []], input_op_ids = [(12,0), (13,0), (14,0), (14,1)]",
    "gemm/bf16/M=16,N=6144,K=6144": "aten::matmul, op_id = 19, sizes = [[16, 6144], [6144, 6144]]",
    "gemm/fp8/M=16384,N=6144,K=6144": "aten::_scaled_mm, seq = 3, sizes = [[16384, 6144], [6144, 6144], [], [], "
    "[], [], [], []]",
    "gemm/bf16/M=8192,N=8192,K=8192": "aten::bmm, seq = 4, op_id = 23, sizes = [[1, 8192, 8192], [1, 8192, 8192]]",
}
EXPECTED = {  # text -> (op, M, N, K, batch)
    "gemm/bf16/M=1024,N=2048,K=6144": ("mm", 1024, 2048, 6144, 1),
    "gemm/fp8/M=1024,N=2048,K=6144": ("_scaled_mm", 1024, 2048, 6144, 1),
    "gemm/bf16/M=16,N=6144,K=6144": ("matmul", 16, 6144, 6144, 1),
    "gemm/fp8/M=16384,N=6144,K=6144": ("_scaled_mm", 16384, 6144, 6144, 1),
    "gemm/bf16/M=8192,N=8192,K=8192": ("bmm", 8192, 8192, 8192, 1),
}


def test_emit_nvtx_without_shapes(shared_data: Path) -> None:
    """Real emit_nvtx ranges without record_shapes: every GEMM op range is a gemm-op with no invented shape, and
    the cuBLAS kernels launched inside aten::mm / aten::bmm join to those ranges (the innermost)."""
    path = shared_data / NSYS_AI
    with sqlite3.connect(f"file:{path}?mode=ro", uri=True) as con:
        texts = [t for (t,) in con.execute("SELECT text FROM NVTX_EVENTS WHERE eventType = 59")]
    gemm_texts = [
        t for t in texts if t.split(",")[0] in ("aten::mm", "aten::bmm", "aten::matmul", "aten::linear")
    ]
    assert gemm_texts and all(", sizes = " not in t for t in gemm_texts)
    frames = combine([read_nsys_sqlite(path)])
    r, k = frames["ranges"], frames["kernels"]
    ops = r.filter(pl.col("range_kind") == "gemm-op")
    assert ops.height == len(gemm_texts)
    assert ops["m"].null_count() == ops.height and ops["shape_source"].null_count() == ops.height
    assert sorted(ops["op"].unique().to_list()) == ["bmm", "linear", "matmul", "mm"]
    joined = k.join(ops.select("range_id", "op"), on="range_id")
    assert joined.height > 0 and set(joined["op"].unique().to_list()) == {"bmm", "mm"}
    assert joined["short_name"].str.contains("gemm").all()
    # no kernel stays on an aten::linear whose aten::mm holds it
    assert joined.filter(pl.col("op") == "linear").height == 0


@pytest.fixture
def probe_as_emit_nvtx(shared_data: Path, tmp_path: Path) -> Path:
    out = tmp_path / "probe-emit-nvtx.sqlite"
    shutil.copyfile(shared_data / PROBE, out)
    out.chmod(0o644)
    with sqlite3.connect(out) as con:
        for old, new in REWRITE.items():
            assert con.execute("UPDATE NVTX_EVENTS SET text = ? WHERE text = ?", (new, old)).rowcount == 1
    return out


def test_emit_nvtx_record_shapes(probe_as_emit_nvtx: Path, shared_data: Path) -> None:
    """With record_shapes the ranges carry M, N, K, and each still holds the probe's own GEMM kernel."""
    frames = combine([read_nsys_sqlite(probe_as_emit_nvtx)])
    original = combine([read_nsys_sqlite(shared_data / PROBE)])
    r, k = frames["ranges"], frames["kernels"]
    for old, (op, m, n, kk, batch) in EXPECTED.items():
        row = r.filter(pl.col("name") == REWRITE[old]).row(0, named=True)
        assert (row["range_kind"], row["op"], row["m"], row["n"], row["k"], row["batch"]) == (
            "gemm-op",
            op,
            m,
            n,
            kk,
            batch,
        ), old
        assert row["shape_source"] == "nvtx-record-shapes" and row["dtype_a"] is None
        mine = k.filter(pl.col("range_id") == row["range_id"])["name"].to_list()
        orig_id = original["ranges"].filter(pl.col("name") == old)["range_id"][0]
        theirs = original["kernels"].filter(pl.col("range_id") == orig_id)["name"].to_list()
        assert mine == theirs and len(mine) >= 1


@pytest.mark.parametrize(
    ("text", "expected"),
    [
        (
            "aten::addmm, seq = 2, op_id = 8, sizes = [[640], [888, 2880], [2880, 640], [], []]",
            (888, 640, 2880),
        ),
        ("aten::linear, op_id = 5, sizes = [[4, 197, 768], [768, 768], [768]]", (4 * 197, 768, 768)),
        ("aten::mm, seq = 4", (None, None, None)),
        ("aten::mm, sizes = [[2, 3], [3", (None, None, None)),  # cut short: no shape, no error
    ],
)
def test_text_forms(text: str, expected: tuple) -> None:
    shape = nvtx_op_shape(text)
    assert shape is not None and (shape.m, shape.n, shape.k) == expected


def test_other_ranges_untouched() -> None:
    assert nvtx_op_shape("aten::add, seq = 2, sizes = [[2, 3], [2, 3]]") is None
    assert nvtx_op_shape("gemm bf16 mm M=16 N=6144 K=6144") is None
