"""PyTorch GEMM ops in Kineto traces: shapes from ``Input Dims``, and the kernels they launch.

Checked on every real trace in ../shared/data that records GEMM ops (TraceLens B200 / H100 model traces, HTA's
test traces, the 2021 TensorBoard-plugin traces, the H200 probe), against an independent reading of each file with
the stdlib ``json`` parser; a few ops by hand; and on a trace that PyTorch's profiler writes here on the CPU with
shapes we choose, where the profiler's own FLOP count (``with_flops``) is compared with 2 x M x N x K x batch.
"""

from __future__ import annotations

import functools
import gzip
import json
from pathlib import Path
from typing import Any

import polars as pl
import pytest

from tracekit.analyzers.importer import combine
from tracekit.analyzers.readers.kineto.reader import read_kineto
from tracekit.analyzers.readers.torch_ops import GEMM_OPS, op_shape

SHARED = Path(__file__).resolve().parents[3] / "shared" / "data"
PROBE = "h200-probe/torch_trace.json.gz"
B200 = "thirdparty/tracelens/b200__eager_trace.json.gz"
TIMESFORMER = "thirdparty/tracelens/h100__facebook_timesformer-base-finetuned-k400__1016002.json.gz"
LAUNCH_CATS = ("cuda_runtime", "cuda_driver", "Runtime", "Driver")


def _all_traces() -> list[str]:
    if not SHARED.is_dir():
        return [PROBE]
    return sorted(p.relative_to(SHARED).as_posix() for p in SHARED.rglob("*.json.gz"))


@functools.cache
def _raw(rel: str) -> list[dict[str, Any]]:
    with gzip.open(SHARED / rel) as f:
        data = json.load(f)
    events = data["traceEvents"] if isinstance(data, dict) else data
    return [e for e in events if isinstance(e, dict)]


@functools.cache
def _frames(rel: str) -> dict[str, pl.DataFrame]:
    return combine([read_kineto(SHARED / rel)])


def _raw_gemm_ops(rel: str) -> list[dict[str, Any]]:
    return [
        e
        for e in _raw(rel)
        if e.get("ph") == "X" and e.get("cat") in ("cpu_op", "Operator") and e.get("name") in GEMM_OPS
    ]


def coverage(frames: dict[str, pl.DataFrame]) -> dict[str, float]:
    """Per trace: GEMM ops, the share with a shape, the share with a GPU kernel joined to the op or to a range
    nested in it, and the share of leaf GEMM ops (no GEMM op inside) with a kernel joined to the op itself."""
    r, k = frames["ranges"], frames["kernels"]
    ops = r.filter(pl.col("range_kind") == "gemm-op")
    parent = dict(zip(r["range_id"].to_list(), r["parent_id"].to_list(), strict=True))
    own = set(k["range_id"].drop_nulls().to_list())
    under: set[int] = set()
    for rid in own:
        cur, depth = rid, 0
        while cur is not None and depth < 256:
            under.add(cur)
            cur, depth = parent.get(cur), depth + 1
    op_ids = set(ops["range_id"].to_list())
    has_gemm_child = {parent[i] for i in op_ids if parent.get(i) in op_ids}
    leaves = [i for i in op_ids if i not in has_gemm_child]
    n = max(ops.height, 1)
    return {
        "ops": ops.height,
        "shaped_pct": 100.0 * ops.filter(pl.col("shape_source") == "kineto-input-dims").height / n,
        "kernel_pct": 100.0 * len(op_ids & under) / n,
        "leaf_own_kernel_pct": 100.0 * sum(1 for i in leaves if i in own) / max(len(leaves), 1),
    }


@pytest.mark.parametrize("rel", _all_traces())
def test_every_gemm_op_is_a_range(shared_data: Path, rel: str) -> None:
    """Every GEMM cpu_op of the file is one gemm-op range (and nothing else is); with Input Dims at least 90% get
    a shape and at least 90% a joined kernel."""
    raw = _raw_gemm_ops(rel)
    frames = _frames(rel)
    ops = frames["ranges"].filter(pl.col("range_kind") == "gemm-op")
    assert ops.height == len(raw)
    assert (ops["kind"] == "op").all() and ops.filter(pl.col("kind") == "op").height == ops.height
    assert sorted(ops["name"].to_list()) == sorted(e["name"] for e in raw)
    with_dims = [e for e in raw if (e.get("args") or {}).get("Input Dims")]
    if not with_dims:  # recorded without record_shapes: ranges without a shape, and nothing invented
        assert ops["m"].null_count() == ops.height and ops["shape_source"].null_count() == ops.height
        return
    cov = coverage(frames)
    assert cov["shaped_pct"] >= 90.0, cov
    if frames["kernels"].height:
        assert cov["kernel_pct"] >= 90.0, cov
        assert cov["leaf_own_kernel_pct"] >= 90.0, cov


def _launch_kernel(rel: str, op: dict[str, Any]) -> list[str]:
    """Names of the kernels launched inside ``op`` on its thread, from the raw JSON (launch -> correlation)."""
    t0, t1 = float(op["ts"]), float(op["ts"]) + float(op["dur"])
    corr = {
        e["args"]["correlation"]
        for e in _raw(rel)
        if e.get("cat") in LAUNCH_CATS
        and e.get("tid") == op["tid"]
        and t0 <= float(e["ts"]) <= t1
        and "correlation" in (e.get("args") or {})
    }
    return [
        e["name"]
        for e in _raw(rel)
        if e.get("cat") in ("kernel", "Kernel") and (e.get("args") or {}).get("correlation") in corr
    ]


def _joined(frames: dict[str, pl.DataFrame], op_row: dict[str, Any]) -> list[str]:
    return frames["kernels"].filter(pl.col("range_id") == op_row["range_id"])["name"].to_list()


def test_b200_linear_by_hand(shared_data: Path) -> None:
    """The first aten::linear of the B200 trace: input [888, 2880], weight [640, 2880] -> aten::addmm(bias [640],
    [888, 2880], [2880, 640]): M=888, N=640, K=2880 bf16; its cuBLAS kernel joins to the addmm, not the linear."""
    raw = _raw_gemm_ops(B200)
    linear = next(e for e in raw if e["name"] == "aten::linear")
    addmm = next(e for e in raw if e["name"] == "aten::addmm")
    assert linear["args"]["Input Dims"] == [[888, 2880], [640, 2880], [640]]
    assert addmm["args"]["Input Dims"][:3] == [[640], [888, 2880], [2880, 640]]
    frames = _frames(B200)
    ops = frames["ranges"].filter(pl.col("range_kind") == "gemm-op").sort("start_ns")
    first_linear = ops.filter(pl.col("name") == "aten::linear").row(0, named=True)
    first_addmm = ops.filter(pl.col("name") == "aten::addmm").row(0, named=True)
    for row in (first_linear, first_addmm):
        assert (row["m"], row["n"], row["k"], row["batch"]) == (888, 640, 2880, 1)
        assert (row["dtype_a"], row["dtype_b"], row["dtype_out"]) == ("bf16", "bf16", "bf16")
    assert first_addmm["parent_id"] == first_linear["range_id"]
    expected = _launch_kernel(B200, addmm)
    assert expected and "nvjet_tst_64x64_64x16_2x1_2cta_v_bz_bias_TNT" in expected[0]
    assert _joined(frames, first_addmm) == expected
    assert _joined(frames, first_linear) == []
    # innermost everywhere: no kernel of this trace is left on an aten::linear that holds an addmm
    linear_ids = ops.filter(pl.col("name") == "aten::linear")["range_id"]
    assert frames["kernels"].filter(pl.col("range_id").is_in(linear_ids.implode())).height == 0


def test_h200_probe_by_hand(shared_data: Path) -> None:
    """The probe's bf16 matmul and fp8 _scaled_mm (out_dtype 15 = bf16, PyTorch's ScalarType numbering)."""
    raw = _raw_gemm_ops(PROBE)
    mm = next(e for e in raw if e["name"] == "aten::mm")
    scaled = next(e for e in raw if e["name"] == "aten::_scaled_mm")
    assert mm["args"]["Input Dims"] == [[1024, 6144], [6144, 2048]]
    assert scaled["args"]["Input type"][:2] == ["c10::Float8_e4m3fn", "c10::Float8_e4m3fn"]
    assert scaled["args"]["Concrete Inputs"][6] == "15"
    frames = _frames(PROBE)
    ops = frames["ranges"].filter(pl.col("range_kind") == "gemm-op").sort("start_ns")
    row = ops.filter(pl.col("name") == "aten::mm").row(0, named=True)
    assert (row["op"], row["m"], row["n"], row["k"], row["dtype_a"]) == ("mm", 1024, 2048, 6144, "bf16")
    assert _joined(frames, row) == _launch_kernel(PROBE, mm)
    assert _joined(frames, row)[0].startswith("nvjet_sm90_tst_128x128_64x6")
    row = ops.filter(pl.col("name") == "aten::_scaled_mm").row(0, named=True)
    assert (row["op"], row["m"], row["n"], row["k"]) == ("_scaled_mm", 1024, 2048, 6144)
    assert (row["dtype_a"], row["dtype_b"], row["dtype_out"]) == ("e4m3", "e4m3", "bf16")
    assert _joined(frames, row)[0].startswith("nvjet_sm90_qqtst_128x128_128x6")
    # the probe's own range names the same GEMM: the op sits inside it
    parent = frames["ranges"].filter(pl.col("range_id") == row["parent_id"]).row(0, named=True)
    assert parent["name"] == "gemm/fp8/M=1024,N=2048,K=6144" and parent["range_kind"] == "gemm"


def test_timesformer_batched_matmul_by_hand(shared_data: Path) -> None:
    """A 4-D attention matmul [3136, 12, 8, 64] x [3136, 12, 64, 8]: batch 3136 x 12 = 37632, M=N=8, K=64, and
    the aten::bmm it calls ([37632, 8, 64] x [37632, 64, 8]) gets the same numbers and the GEMM kernel."""
    raw = _raw_gemm_ops(TIMESFORMER)
    mat = next(e for e in raw if e["name"] == "aten::matmul")
    assert mat["args"]["Input Dims"] == [[3136, 12, 8, 64], [3136, 12, 64, 8]]
    frames = _frames(TIMESFORMER)
    ops = frames["ranges"].filter(pl.col("range_kind") == "gemm-op").sort("start_ns")
    m = ops.filter(pl.col("name") == "aten::matmul").row(0, named=True)
    b = ops.filter((pl.col("name") == "aten::bmm") & (pl.col("parent_id") == m["range_id"])).row(
        0, named=True
    )
    for row in (m, b):
        assert (row["m"], row["n"], row["k"], row["batch"]) == (8, 8, 64, 37632)
    bmm_raw = next(e for e in raw if e["name"] == "aten::bmm")
    assert _joined(frames, b) == _launch_kernel(TIMESFORMER, bmm_raw)


# --- shapes PyTorch wrote here, and its own FLOP count ------------------------------------------------------------
CASES = [
    # (call, op, M, N, K, batch)
    ("mm", "mm", 64, 16, 32, 1),
    ("addmm", "addmm", 64, 16, 32, 1),
    ("bmm", "bmm", 64, 16, 32, 4),
    ("baddbmm", "baddbmm", 64, 16, 32, 4),
    ("addbmm", "addbmm", 64, 16, 32, 4),
    ("linear3d", "linear", 3 * 64, 16, 32, 1),
    ("matmul_fold", "matmul", 4 * 64, 16, 32, 1),
    ("matmul_broadcast", "matmul", 64, 16, 32, 4),
]


def _cpu_trace(tmp_path: Path) -> tuple[Path, dict[int, int]]:
    """A real Kineto trace from torch.profiler on the CPU (record_shapes, with_flops); returns it and
    PyTorch's own FLOP count per op (by External id) from the profiler's event list."""
    torch = pytest.importorskip("torch")
    from torch.profiler import ProfilerActivity, profile

    a, b, bias = torch.randn(64, 32), torch.randn(32, 16), torch.randn(16)
    x, y = torch.randn(4, 64, 32), torch.randn(4, 32, 16)
    calls = {
        "mm": lambda: torch.mm(a, b),
        "addmm": lambda: torch.addmm(bias, a, b),
        "bmm": lambda: torch.bmm(x, y),
        "baddbmm": lambda: torch.baddbmm(torch.zeros(4, 64, 16), x, y),
        "addbmm": lambda: torch.addbmm(torch.zeros(64, 16), x, y),
        "linear3d": lambda: torch.nn.functional.linear(torch.randn(3, 64, 32), torch.randn(16, 32)),
        "matmul_fold": lambda: torch.matmul(x, b),
        "matmul_broadcast": lambda: torch.matmul(x, torch.randn(1, 32, 16)),
    }
    with profile(activities=[ProfilerActivity.CPU], record_shapes=True, with_flops=True) as prof:
        for name, call in calls.items():
            with torch.profiler.record_function(f"case {name}"):
                call()
    out = tmp_path / "cpu_trace.json"
    prof.export_chrome_trace(str(out))
    flops = {e.id: int(e.flops) for e in prof.events() if e.name in GEMM_OPS and e.flops}
    return out, flops


def test_shapes_and_profiler_flops(tmp_path: Path) -> None:
    """Each call's M, N, K and batch are the ones we chose; where PyTorch counts FLOPs (mm, addmm, bmm, baddbmm)
    2 x M x N x K x batch equals its count.

    Disagreements, kept here on purpose: PyTorch counts nothing for linear, matmul and addbmm (its
    ``computeFlops`` knows only mm, addmm, bmm, baddbmm, conv2d, mul, add), so their FLOPs come from the shape
    alone; and this PyTorch (2.13) no longer writes ``flops`` into the trace JSON, so the count is put back into
    each op's args (by External id) the way older profilers wrote it, to read it through tracekit."""
    trace, flops = _cpu_trace(tmp_path)
    data = json.loads(trace.read_text())
    written = [e for e in data["traceEvents"] if "flops" in (e.get("args") or {})]
    for e in data["traceEvents"]:
        ext = (e.get("args") or {}).get("External id")
        if e.get("cat") == "cpu_op" and ext in flops:
            e["args"]["flops"] = flops[ext]
    trace.write_text(json.dumps(data))
    frames = combine([read_kineto(trace)])
    r = frames["ranges"]
    cases = r.filter(pl.col("name").str.starts_with("case ")).select("range_id", "name")
    ops = r.filter(pl.col("range_kind") == "gemm-op")
    counted = {"mm", "addmm", "bmm", "baddbmm"}
    for call, op, m, n, k, batch in CASES:
        rid = cases.filter(pl.col("name") == f"case {call}")["range_id"][0]
        row = ops.filter((pl.col("parent_id") == rid) & (pl.col("op") == op)).row(0, named=True)
        assert (row["m"], row["n"], row["k"], row["batch"]) == (m, n, k, batch), call
        assert row["dtype_a"] == "fp32" and row["shape_source"] == "kineto-input-dims"
        shape_flops = 2.0 * m * n * k * batch
        if op in counted:
            assert row["flops"] == shape_flops, call
        else:
            assert row["flops"] is None, call  # PyTorch's count is 0: the shape is the only source
    assert not written  # the day PyTorch writes flops again, this test should read them as written


def test_nested_calls_keep_the_inner_shape(tmp_path: Path) -> None:
    """linear on a 3-D input calls matmul -> mm on the folded input: every level says M = 3 x 64."""
    trace, _ = _cpu_trace(tmp_path)
    r = combine([read_kineto(trace)])["ranges"]
    rid = r.filter(pl.col("name") == "case linear3d")["range_id"][0]
    inner = r.filter(pl.col("range_kind") == "gemm-op")
    chain = inner.filter(pl.col("parent_id") == rid)
    assert chain["op"].to_list() == ["linear"]
    below = inner.filter(pl.col("parent_id").is_in(chain["range_id"].implode()))
    assert below.height >= 1 and (below["m"] == 3 * 64).all() and (below["k"] == 32).all()


@pytest.mark.parametrize(
    ("name", "dims", "types", "expected"),
    [
        # MoE grouped GEMM: 2-D activations of every expert against 3-D expert weights
        ("aten::_grouped_mm", [[96, 512], [8, 512, 256], [8]], ["c10::BFloat16"] * 3, (96, 256, 512, 1)),
        ("aten::_grouped_mm", [[8, 12, 512], [8, 512, 256]], None, (12, 256, 512, 8)),
        ("aten::mm", [[4, 5], [6, 7]], None, (None, None, None, None)),  # K does not match: no shape
        ("aten::linear", [[5], [7, 5]], None, (1, 7, 5, 1)),
        ("aten::matmul", [[3, 4, 5], [2, 1, 5, 6]], None, (4, 6, 5, 6)),
    ],
)
def test_signatures(name: str, dims: list, types: list | None, expected: tuple) -> None:
    """Operand layouts that the shared traces do not hold (PyTorch's signatures, analyzers/readers/torch_ops.py)."""
    shape = op_shape(name, dims, types)
    assert shape is not None
    assert (shape.m, shape.n, shape.k, shape.batch) == expected


def test_damaged_op_args_keep_the_op(shared_data: Path, tmp_path: Path) -> None:
    """The probe's trace with its GEMM ops' args damaged (sizes that are not lists, sizes past 64 bits, a flops
    that is text, args that are not an object): every op is still a range, with no shape, and nothing raises."""
    with gzip.open(SHARED / PROBE) as f:
        data = json.load(f)
    damage = [
        {"Input Dims": "1024x6144", "Input type": 5},
        {"Input Dims": [[1 << 40, 1 << 40, 4], [8, 4]], "flops": "many"},
        [1, 2, 3],
        {"Input Dims": [[2, "k"], ["k", 3]], "Input type": [None, None]},
    ]
    ops = [e for e in data["traceEvents"] if e.get("name") in GEMM_OPS]
    for i, e in enumerate(ops):
        e["args"] = damage[i % len(damage)]
    out = tmp_path / "damaged.json"
    out.write_text(json.dumps(data))
    r = combine([read_kineto(out)])["ranges"].filter(pl.col("range_kind") == "gemm-op")
    assert r.height == len(ops) == 8
    assert r["m"].null_count() == r.height and r["flops"].null_count() == r.height
