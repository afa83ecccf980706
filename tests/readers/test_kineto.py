"""The Kineto (PyTorch profiler) reader against every real trace in shared/data, plus broken inputs.

Counts are cross-checked against an independent reading of each file with the stdlib ``json`` parser.
"""

from __future__ import annotations

import functools
import gc
import gzip
import json
from decimal import Decimal
from pathlib import Path
from typing import Any

import polars as pl
import pytest

from tracekit.analyzers.readers.base import Extract
from tracekit.analyzers.readers.kineto.reader import is_kineto_trace, read_kineto, short_kernel_name
from tracekit.errors import UnreadableFileError
from tracekit.frames import DEVICES, KERNELS, RANGES

PROBE = "h200-probe/torch_trace.json.gz"
DF_INDEX = "thirdparty/hta/df_index_resolver__df_index_resolver.json.gz"
TB0 = "thirdparty/kineto-tbplugin/resnet50_num_workers_0__worker0.1623143089861.pt.trace.json.gz"
TB4 = "thirdparty/kineto-tbplugin/resnet50_num_workers_4__worker0.1623212756351.pt.trace.json.gz"
NS_RES = "thirdparty/hta/ns_resolution_trace__rank-0.Apr_03_18_51_38.1102.pt.trace.json.gz"
AMD = "thirdparty/hta/amd_trace__mi250_minitoy_train_ROCm6_2_kineto.json.gz"
LARGE_INT = "thirdparty/hta/large_integer_trace__rank-70.Mar_25_20_48_12.2861.pt.trace.json.gz"


def _all_traces() -> list[str]:
    """Names the cases only; the ``shared_data`` fixture skips them where the folder is absent."""
    shared = Path(__file__).resolve().parents[3] / "shared" / "data"
    if not shared.is_dir():
        return [PROBE]
    return sorted(p.relative_to(shared).as_posix() for p in shared.rglob("*.json.gz"))


@functools.cache
def _read(path: Path) -> Extract:
    return read_kineto(path)


@functools.cache
def _plain(path: Path) -> dict[str, Any]:
    """Independent counts from the stdlib parser."""
    gc.disable()  # millions of dicts: the cyclic collector only slows this down
    try:
        obj = json.loads(gzip.decompress(path.read_bytes()))
    finally:
        gc.enable()
    events = obj["traceEvents"] if isinstance(obj, dict) else obj
    cats: dict[str, int] = {}
    launch_corr = set()
    kernel_corr = []
    steps_other = 0
    for e in events:
        cat = e.get("cat")
        if e.get("ph") != "X":
            continue
        cats[cat] = cats.get(cat, 0) + 1
        args = e.get("args") or {}
        if cat in ("cuda_runtime", "Runtime", "cuda_driver", "Driver") and "correlation" in args:
            launch_corr.add(args["correlation"])
        if cat in ("kernel", "Kernel"):
            kernel_corr.append(args.get("correlation"))
        if cat in ("Operator", "cpu_op") and str(e.get("name", "")).startswith("ProfilerStep#"):
            steps_other += 1
    return {
        "kernels": cats.get("kernel", 0) + cats.get("Kernel", 0),
        "annotations": cats.get("user_annotation", 0) + steps_other,
        "gpu_annotations": cats.get("gpu_user_annotation", 0),
        "launched": sum(1 for c in kernel_corr if c in launch_corr),
        "devices": len(obj.get("deviceProperties") or []) if isinstance(obj, dict) else 0,
    }


# -- every real trace ----------------------------------------------------------------------------------------
@pytest.mark.parametrize("rel", _all_traces())
def test_every_trace_reads_and_counts_match(shared_data: Path, rel: str) -> None:
    path = shared_data / rel
    assert is_kineto_trace(path)
    ex = _read(path)
    assert ex.kind == "kineto" and not ex.partial and ex.warnings == []
    want = _plain(path)
    k, r, d = ex.frame("kernels"), ex.frame("ranges"), ex.frame("devices")
    assert k.height == want["kernels"]
    assert r.filter(pl.col("kind") == "annotation").height == want["annotations"]
    assert r.filter(pl.col("kind") == "gpu_annotation").height == want["gpu_annotations"]
    assert d.height == want["devices"]
    # every kernel with a launch event in the file got its launching thread, and only those
    assert k["launch_tid"].is_not_null().sum() == want["launched"]
    assert k["launch_start_ns"].is_not_null().sum() == want["launched"]
    assert k["kernel_id"].to_list() == list(range(k.height))
    assert k["start_ns"].is_sorted()
    if k.height:
        assert (k["end_ns"] - k["start_ns"] == k["duration_ns"]).all()
        assert k["duration_ns"].min() >= 0
        assert k["start_ns"].null_count() == 0


@pytest.mark.parametrize(
    ("rel", "kernels"), [(DF_INDEX, 19370), (TB0, 8772), (TB4, 8868), (PROBE, 5), (NS_RES, 4350), (AMD, 14)]
)
def test_known_kernel_counts(shared_data: Path, rel: str, kernels: int) -> None:
    """All kernels are kept, including the 15,496 of df_index_resolver that HTA drops outside complete steps."""
    assert _read(shared_data / rel).frame("kernels").height == kernels


def test_schemas_pinned(shared_data: Path) -> None:
    ex = _read(shared_data / PROBE)
    assert ex.frame("kernels").schema == KERNELS.schema
    assert ex.frame("ranges").schema == RANGES.schema
    assert ex.frame("devices").schema == DEVICES.schema
    assert set(ex.frames) == {"kernels", "memops", "ranges", "devices"}
    assert ex.frame("kernels").columns[:3] == ["kernel_id", "source", "rank"]


# -- the H200 probe: exact values ----------------------------------------------------------------------------
def test_probe_kernels(shared_data: Path) -> None:
    k = _read(shared_data / PROBE).frame("kernels")
    first = k.row(0, named=True)
    # ts 5370240640914.225 us relative to baseTimeNanoseconds 1790857026000000000
    assert first["start_ns"] == 1790857026000000000 + 5370240640914225
    assert first["duration_ns"] == 34336
    assert first["name"] == "nvjet_sm90_tst_128x128_64x6_2x1_v_bz_TNT"
    assert (first["grid_x"], first["grid_y"], first["grid_z"]) == (2, 64, 1)
    assert (first["block_x"], first["block_y"], first["block_z"]) == (384, 1, 1)
    assert first["registers_per_thread"] == 168
    assert first["smem_bytes"] == 213220
    assert first["static_smem_bytes"] is None and first["dynamic_smem_bytes"] is None
    assert (first["device"], first["context"], first["stream"], first["correlation_id"]) == (0, 1, 7, 14)
    # the kernel event says pid 0 (the GPU); the launching cuLaunchKernelEx ran in process/thread 1751
    assert k["pid"].to_list() == [1751] * 5
    assert k["launch_tid"].to_list() == [1751] * 5
    assert first["launch_start_ns"] == 1790857026000000000 + 5370240640857978
    assert (k["launch_start_ns"] < k["start_ns"]).all()
    assert k["correlation_id"].to_list() == [14, 46, 62, 99, 116]


def test_probe_ranges(shared_data: Path) -> None:
    r = _read(shared_data / PROBE).frame("ranges")
    cpu = r.filter(pl.col("kind") == "annotation")
    gpu = r.filter(pl.col("kind") == "gpu_annotation")
    names = [
        "gemm/bf16/M=1024,N=2048,K=6144",
        "gemm/fp8/M=1024,N=2048,K=6144",
        "gemm/bf16/M=16,N=6144,K=6144",
        "gemm/fp8/M=16384,N=6144,K=6144",
        "gemm/bf16/M=8192,N=8192,K=8192",
    ]
    assert cpu["name"].to_list() == names
    assert gpu["name"].to_list() == names
    assert cpu["pid"].to_list() == [1751] * 5 and cpu["tid"].to_list() == [1751] * 5
    assert gpu["device"].to_list() == [0] * 5 and gpu["tid"].to_list() == [7] * 5
    assert gpu["pid"].to_list() == [1751] * 5  # through the CPU annotation's External id
    assert r["range_id"].to_list() == list(range(r.height))
    # 10 annotations and the trace's 8 GEMM ops (3 matmul, 3 mm, 2 _scaled_mm: tests/analysis/test_gemm_ops.py)
    assert r.height == 18 and r.filter(pl.col("kind") == "op").height == 8
    notes = pl.concat([cpu, gpu])
    assert notes["parent_id"].null_count() == 10 and notes["m"].null_count() == 10
    # each GPU annotation covers its kernel (Kineto widens it by 1 ns before and after)
    k = _read(shared_data / PROBE).frame("kernels").sort("start_ns")
    assert (gpu["start_ns"] <= k["start_ns"]).all() and (gpu["end_ns"] >= k["end_ns"]).all()


def test_probe_device(shared_data: Path) -> None:
    d = _read(shared_data / PROBE).frame("devices").row(0, named=True)
    assert d["name"] == "NVIDIA H200"
    assert d["compute_capability"] == "9.0"
    assert d["sm_count"] == 132
    assert d["memory_bytes"] == 150109880320
    assert d["smem_per_block_optin_bytes"] == 232448
    assert d["smem_per_sm_bytes"] == 233472
    assert d["regs_per_sm"] == 65536


# -- other real traces ---------------------------------------------------------------------------------------
def test_old_capitalised_categories(shared_data: Path) -> None:
    ex = _read(shared_data / TB0)
    k = ex.frame("kernels")
    assert k["stream"].null_count() == 0 and set(k["stream"].unique()) >= {7}
    assert k["pid"].unique().to_list() == [25738]  # from the "Runtime" launches, tid written as a string
    steps = ex.frame("ranges").filter(pl.col("name").str.starts_with("ProfilerStep#"))
    assert steps.height > 0 and steps["kind"].unique().to_list() == ["annotation"]


def test_ns_resolution_times_exact(shared_data: Path) -> None:
    """Absolute microsecond timestamps with a fraction (1.7e15 us) exceed float precision; the text is exact."""
    path = shared_data / NS_RES
    obj = json.loads(gzip.decompress(path.read_bytes()), parse_float=Decimal)
    want = sorted(int(Decimal(e["ts"]) * 1000) for e in obj["traceEvents"] if e.get("cat") == "kernel")
    got = _read(path).frame("kernels")["start_ns"].to_list()
    assert got == want
    assert any(v % 1000 for v in got)  # the file really has sub-microsecond digits


def test_amd_and_rank(shared_data: Path) -> None:
    ex = _read(shared_data / AMD)
    assert ex.frame("devices")["name"].unique().to_list() == ["AMD Radeon Graphics"]
    assert ex.frame("kernels")["device"].unique().to_list() == [2]
    df = _read(shared_data / DF_INDEX)
    assert df.frame("kernels")["rank"].unique().to_list() == [1]  # distributedInfo.rank


def test_large_integer_trace(shared_data: Path) -> None:
    ex = _read(shared_data / LARGE_INT)
    k = ex.frame("kernels")
    assert k.height == 1 and k["name"][0] == "ncclKernel_AllReduce"
    assert k["pid"][0] is None and k["launch_tid"][0] is None  # no launch event, no single CPU process
    assert k["start_ns"][0] == 100_000 and k["duration_ns"][0] == 50_000


def test_not_traces_are_rejected_by_sniff(shared_data: Path) -> None:
    for rel in ("h200-probe/probe.ncu-rep", "h200-probe/probe.sqlite", "h200-probe/gemm_bench.csv"):
        assert not is_kineto_trace(shared_data / rel)


# -- broken and odd inputs (files made here) -----------------------------------------------------------------
def _trace(events: list[dict[str, Any]], **top: Any) -> dict[str, Any]:
    return {"schemaVersion": 1, **top, "traceEvents": events}


KERNEL = {
    "ph": "X",
    "cat": "kernel",
    "name": "void f<int>(int)",
    "pid": 0,
    "tid": 7,
    "ts": 10.5,
    "dur": 2.25,
    "args": {"device": 0, "stream": 7, "correlation": 3, "grid": [1, 2, 3], "block": [4, 5, 6]},
}
LAUNCH = {
    "ph": "X",
    "cat": "cuda_runtime",
    "name": "cudaLaunchKernel",
    "pid": 42,
    "tid": 43,
    "ts": 9,
    "dur": 1,
    "args": {"correlation": 3},
}


def test_empty_file(tmp_path: Path) -> None:
    p = tmp_path / "t.json"
    p.write_bytes(b"")
    with pytest.raises(UnreadableFileError, match="empty"):
        read_kineto(p)
    assert not is_kineto_trace(p)


@pytest.mark.parametrize(
    ("content", "match"),
    [
        (b"hello world", "not JSON"),
        (b'{"a": 1}', "no traceEvents"),
        (b'{"traceEvents": 5}', "not a PyTorch profiler trace"),
        (b"\x1f\x8b\x08\x00garbage-not-deflate", "gzip"),
        (b"{{{{", "no complete events"),
    ],
)
def test_unreadable(tmp_path: Path, content: bytes, match: str) -> None:
    p = tmp_path / "bad.json.gz"
    p.write_bytes(content)
    with pytest.raises(UnreadableFileError, match=match) as info:
        read_kineto(p)
    assert "\n" not in info.value.one_line()


def test_gzip_detected_by_magic_not_extension(tmp_path: Path) -> None:
    p = tmp_path / "trace.json"  # gzip inside, no .gz
    p.write_bytes(gzip.compress(json.dumps(_trace([KERNEL, LAUNCH])).encode()))
    assert is_kineto_trace(p)
    k = read_kineto(p).frame("kernels")
    assert k.height == 1 and k["pid"][0] == 42 and k["launch_tid"][0] == 43
    assert k["start_ns"][0] == 10_500 and k["duration_ns"][0] == 2_250 and k["launch_start_ns"][0] == 9_000
    assert k["short_name"][0] == "f"


def test_truncated_gzip_is_partial(shared_data: Path, tmp_path: Path) -> None:
    whole = (shared_data / DF_INDEX).read_bytes()
    p = tmp_path / "cut.json.gz"
    p.write_bytes(whole[: len(whole) // 2])
    ex = read_kineto(p)
    assert ex.partial
    assert any("truncated" in w for w in ex.warnings)
    k = ex.frame("kernels")
    assert 0 < k.height < 19370
    assert k.schema == KERNELS.schema


def test_truncated_plain_json_is_partial(tmp_path: Path) -> None:
    text = json.dumps(_trace([KERNEL, LAUNCH, {**KERNEL, "ts": 20}, {**KERNEL, "ts": 30}]), indent=1)
    p = tmp_path / "cut.json"
    p.write_text(text[: text.rindex('"ts": 30') - 10])
    ex = read_kineto(p)
    assert ex.partial and ex.warnings
    assert ex.frame("kernels").height == 2


def test_nan_and_huge_integers(tmp_path: Path) -> None:
    k2 = {**KERNEL, "dur": float("nan"), "args": {**KERNEL["args"], "correlation": 2**70, "stream": "0x0"}}
    p = tmp_path / "nan.json"
    p.write_text(json.dumps(_trace([KERNEL, k2, LAUNCH], bigint=10**30)))  # json writes NaN
    ex = read_kineto(p)
    assert not ex.partial
    k = ex.frame("kernels").sort("kernel_id")
    assert k.height == 2
    assert k["duration_ns"].null_count() == 1
    assert k["correlation_id"].to_list().count(None) == 1
    assert k["stream"].to_list() == [7, 7]  # "0x0" is no stream id: falls back to the tid


def test_missing_fields_and_list_form(tmp_path: Path) -> None:
    bare = {"cat": "kernel", "name": "k", "ph": "X", "ts": 1}
    p = tmp_path / "list.json"
    p.write_text(
        json.dumps([bare, {"cat": "user_annotation", "ph": "X", "name": "r", "pid": 5, "tid": 6, "ts": 0}])
    )
    ex = read_kineto(p)
    k = ex.frame("kernels")
    assert k.height == 1 and k["start_ns"][0] == 1000 and k["duration_ns"][0] is None
    assert k["pid"][0] == 5  # no launch, but the trace has a single CPU process
    r = ex.frame("ranges")
    assert r.height == 1 and r["end_ns"][0] is None


def test_ambiguous_correlation_left_null(tmp_path: Path) -> None:
    other = {**LAUNCH, "pid": 99}
    p = tmp_path / "two.json"
    p.write_text(json.dumps(_trace([KERNEL, LAUNCH, other])))
    ex = read_kineto(p)
    assert ex.frame("kernels")["pid"][0] is None
    assert any("more than one process" in w for w in ex.warnings)


@pytest.mark.parametrize(
    ("name", "short"),
    [
        (
            "void at::native::vectorized_elementwise_kernel<4, at::native::FillFunctor<float>>(int, float)",
            "vectorized_elementwise_kernel",
        ),
        ("nvjet_sm90_tst_128x128_64x6_2x1_v_bz_TNT", "nvjet_sm90_tst_128x128_64x6_2x1_v_bz_TNT"),
        ("cask_cudnn::computeOffsetsKernel(cask_cudnn::ComputeOffsetsParams)", "computeOffsetsKernel"),
        (
            "void cutlass::Kernel<cutlass_80_tensorop_s1688gemm_64x64_16x6_nn_align4>(cutlass_80_tensorop_s1688gemm_64x64_16x6_nn_align4::Params)",
            "Kernel",
        ),
    ],
)
def test_short_name(name: str, short: str) -> None:
    assert short_kernel_name(name) == short
