"""The class columns of the ``kernels`` and ``ncu`` frames (analyzers/taxonomy/frames.py): the Kineto reader's
``launch_op`` against a plain scan of the raw JSON, the launching-op step for generic kernels, emit_nvtx op ranges
under Nsight Systems, Nsight Compute evidence (tensor counters, tensor-pipe activity) for kernels the table does not
know, and runs of an earlier schema classified on load without a byte of them changing."""

from __future__ import annotations

import gzip
import hashlib
import json
from pathlib import Path

import polars as pl
import pytest

from tests.support.kernel_rows import kernels as _kernels
from tracekit.analyzers.importer import combine, read_file
from tracekit.analyzers.store import load_frames, open_run
from tracekit.analyzers.taxonomy.frames import TENSOR_PIPE_MIN_PCT, classify_frames
from tracekit.frames import SPECS

ROOT = Path(__file__).resolve().parents[2]
SHARED = ROOT.parent / "shared" / "data"
ALEXNET = "thirdparty/hta/critical_path__alexnet__benchmark_result_2869224_1695835535_trace.json.gz"


def _shared(rel: str) -> Path:
    path = SHARED / rel
    if not path.is_file():
        pytest.skip(f"{path} is absent (../shared/data is not beside this checkout)")
    return path


def _naive_launch_ops(path: Path) -> dict[int, str | None]:
    """correlation id -> the name of the innermost cpu_op enclosing its runtime launch on the same thread, by a
    plain scan of every event (what the reader computes with a vectorised nesting join)."""
    events = json.loads(gzip.decompress(path.read_bytes()))["traceEvents"]
    ops: dict[tuple, list[tuple[float, float, str]]] = {}
    for e in events:
        if e.get("cat") in ("cpu_op", "Operator") and e.get("ph") == "X":
            ops.setdefault((e["pid"], e["tid"]), []).append((e["ts"], e["ts"] + e["dur"], e["name"]))
    out: dict[int, str | None] = {}
    for e in events:
        if e.get("cat") in ("cuda_runtime", "Runtime") and isinstance(
            (e.get("args") or {}).get("correlation"), int
        ):
            ts = e["ts"]
            inside = [o for o in ops.get((e["pid"], e["tid"]), []) if o[0] <= ts <= o[1]]
            out[e["args"]["correlation"]] = max(inside, key=lambda o: (o[0], -o[1]))[2] if inside else None
    return out


def test_kineto_launch_op_is_the_innermost_cpu_op_of_the_launch() -> None:
    path = _shared(ALEXNET)
    kernels = combine([read_file(path)])["kernels"]
    want = _naive_launch_ops(path)
    got = dict(zip(kernels["correlation_id"].to_list(), kernels["launch_op"].to_list(), strict=True))
    assert got and all(got[c] == want.get(c) for c in got), {c: (got[c], want.get(c)) for c in got}
    assert sum(v is not None for v in got.values()) >= 0.9 * len(got)
    assert {"aten::conv2d", "aten::cudnn_convolution"} & set(got.values()) or "aten::addmm" in got.values()


def test_generic_kernels_take_the_class_of_their_launching_op() -> None:
    mul = "void at::native::vectorized_elementwise_kernel<4, at::native::MulFunctor<float>>(int, T2, T3)"
    frames = {
        "kernels": _kernels(
            name=[mul, mul, "triton__0d1d2d", "nvjet_sm90_tst_64x64_64x13_2x1_v_bz_TNT", mul],
            launch_op=["aten::mul", "aten::layer_norm", "aten::silu", "aten::silu", None],
        )
    }
    k = classify_frames(frames)["kernels"]
    rows = k.select("kernel_class", "kernel_family", "class_source").rows()
    assert rows == [
        ("elementwise", "torch-elementwise", "name"),
        ("normalization", "torch-elementwise", "op"),
        ("activation", None, "op"),
        ("gemm", "cublas-nvjet", "name"),  # a known class is never overridden by the op
        ("elementwise", "torch-elementwise", "name"),
    ]


def test_emit_nvtx_op_ranges_are_the_launching_op_under_nsight_systems() -> None:
    frames = load_frames(open_run(ROOT / "samples" / "h200-emit-nvtx-shapes"))
    k, r = frames["kernels"], frames["ranges"]
    ranged = k.join(r.select("range_id", pl.col("name").alias("range")), on="range_id", how="left")
    for launch_op, rng in ranged.select("launch_op", "range").iter_rows():
        if launch_op is not None:
            assert rng.split(",")[0] == launch_op  # "aten::mm, seq = 3, op_id = 12" -> aten::mm
    ops = set(k["launch_op"].drop_nulls().to_list())
    assert {"aten::mm", "aten::addmm", "aten::bmm", "aten::_scaled_mm"} <= ops


def test_op_ranges_found_by_address_and_by_join_agree() -> None:
    """A kernel's op range is found by address where one file's ranges are numbered by row (as the import
    settles them), else by a join on the ids: the same launching ops either way, and each the op of the range
    the kernel runs in."""
    from tracekit.analyzers.importer import settle
    from tracekit.analyzers.taxonomy.frames import with_launch_ops

    settled = settle(
        read_file(ROOT / "samples" / "h200-emit-nvtx-shapes" / "raw" / "emit_nvtx_shapes.sqlite.xz")
    )
    kernels, ranges = settled["kernels"].drop("launch_op"), settled["ranges"]
    assert ranges["range_id"].to_list() == list(range(ranges.height))  # the address path's case
    by_address = with_launch_ops(kernels, ranges)["launch_op"]
    # the same ranges with ids that are not row numbers (shifted and listed backwards): the join's case
    far = 10**9
    shifted = with_launch_ops(
        kernels.with_columns(pl.col("range_id") + far),
        ranges.with_columns(pl.col("range_id") + far).reverse(),
    )["launch_op"]
    assert by_address.to_list() == shifted.to_list()
    ops = dict(zip(ranges["range_id"].to_list(), ranges["name"].to_list(), strict=True))
    want = [
        ops[r].split(",")[0] if r is not None and ops[r].startswith("aten::") else None
        for r in kernels["range_id"]
    ]
    assert by_address.to_list() == want
    assert {"aten::mm", "aten::addmm", "aten::bmm", "aten::_scaled_mm"} <= set(by_address.drop_nulls())


def _ncu(**cols: list) -> pl.DataFrame:
    n = len(next(iter(cols.values())))
    return SPECS["ncu"].conform(pl.DataFrame({"ncu_id": list(range(n)), **cols}))


def test_tensor_pipe_activity_makes_an_unknown_kernel_a_gemm_but_never_attention() -> None:
    fa3 = "void cutlass::device_kernel<flash::enable_sm90_or_later<flash::FlashAttnFwdSm90<128>>>(Params)"
    ncu = _ncu(
        name=["_mm", "fused_kernel", fa3, "triton__0d1d2d"],
        demangled_name=["_mm", "fused_kernel", fa3, "triton__0d1d2d"],
        tensor_pipe_pct=[90.0, TENSOR_PIPE_MIN_PCT - 3, 95.0, None],
    )
    frames = {"ncu": ncu, "kernels": _kernels(name=["_mm", "fused_kernel"])}
    out = classify_frames(frames)
    assert out["ncu"].select("kernel_class", "class_source").rows() == [
        ("gemm", "tensor-pipe"),
        ("other", None),
        ("attention", "template"),
        ("other", None),
    ]
    # the same kernel on the run's timeline takes the evidence of its profiled launch
    assert out["kernels"].select("kernel_class", "class_source").rows() == [
        ("gemm", "tensor-pipe"),
        ("other", None),
    ]


def test_tensor_counters_make_an_unknown_kernel_a_gemm(shared_data: Path) -> None:
    """The counter probe's kernels with their names taken away: those with tensor math by the counters
    (sm__ops_path_tensor_src_*) are GEMMs by ``counters``; the FP32 SIMT GEMMs (FFMA only) and the split-K
    reduces stay unknown. The esmm SGEMM ladder (FFMA only, unknown names) stays other; the CUTLASS int8 report's
    kernels are GEMMs by their template arguments."""
    from tracekit.analyzers.readers.ncu.csv_export import read_ncu_csv
    from tracekit.analyzers.readers.ncu.report import read_ncu_report

    probe = combine([read_ncu_csv(ROOT / "samples" / "h200-counter-probe" / "raw" / "ncu_details.csv")])
    named = probe["ncu"].select("kernel_class", "kernel_family", "demangled_name").rows()
    anon = pl.format("kernel_{}", pl.col("ncu_id"))
    unnamed = probe["ncu"].with_columns(anon.alias("name"), anon.alias("demangled_name"))
    got = classify_frames({**probe, "ncu": unnamed})["ncu"].select("kernel_class", "class_source").rows()
    for (cls, family, name), row in zip(named, got, strict=True):
        tensor = (cls == "gemm" and family != "cublas-xmma") or "tf32f32" in name
        assert row == (("gemm", "counters") if tensor else ("other", None)), name
    assert sum(r == ("gemm", "counters") for r in got) == 12

    esmm = combine([read_ncu_report(shared_data / "thirdparty/esmm-research/profile_output_a62323b.ncu-rep")])
    assert set(esmm["ncu"]["kernel_class"].to_list()) == {"other"}
    cutlass = combine([read_ncu_report(shared_data / "thirdparty/panjd123-cutlass/report.ncu-rep")])
    assert set(cutlass["ncu"].select("kernel_class", "class_source").rows()) == {("gemm", "template")}


def test_tensor_counters_make_a_kernel_a_gemm_whatever_its_name_but_attention_and_convolution() -> None:
    """The counter probe's tensor-op GEMMs renamed as the name table would class them otherwise (an Inductor
    template named for its epilogue's words, an activation, a copy), as attention and as a convolution: the
    counters make the first three GEMMs (``counters``, no family kept); attention and convolution keep their
    class, by name or by the convolution op that launched them."""
    from tracekit.analyzers.readers.ncu.csv_export import read_ncu_csv

    probe = combine([read_ncu_csv(ROOT / "samples" / "h200-counter-probe" / "raw" / "ncu_details.csv")])
    tensor = probe["ncu"].filter(pl.col("kernel_family") == "cublas-nvjet").head(6)
    assert tensor.height == 6
    names = [
        "triton_poi_fused_mul_silu_0",  # activation by name
        "my_silu_kernel",  # activation by name
        "void at::native::elementwise_kernel<128, 4, at::native::direct_copy_kernel_cuda(at::TensorIteratorBase&)>",
        "my_attention_kernel",  # attention by name
        "volta_scudnn_128x64_relu_interior_nn_v1",  # convolution by name
        "volta_sgemm_128x32_nt",  # a GEMM name, launched by a convolution op
    ]
    ranges = [None, None, None, None, None, "aten::cudnn_convolution, seq = 4"]
    ncu = tensor.with_columns(
        pl.Series("name", names), pl.Series("demangled_name", names), pl.Series("nvtx_range", ranges)
    )
    ids = set(ncu["ncu_id"].to_list())
    metrics = probe["ncu_metrics"].filter(pl.col("ncu_id").is_in(list(ids)))
    out = classify_frames({"ncu": ncu, "ncu_metrics": metrics})
    assert out["ncu"].select("kernel_class", "kernel_family", "class_source").rows() == [
        ("gemm", None, "counters"),
        ("gemm", None, "counters"),
        ("gemm", None, "counters"),
        ("attention", "named-attention", "name"),
        ("convolution", "cudnn-conv", "name"),
        ("convolution", "cudnn-conv", "op"),
    ]


def test_convolution_and_attention_ops_take_the_kernels_they_launched() -> None:
    softmax = "void at::native::(anonymous namespace)::cunn_SoftMaxForward<8, float, float, float, Epilogue>(float*)"
    scale = "void scalePackedTensor_kernel<float, float>(cudnnTensor4dStruct, float*, float)"
    frames = {
        "kernels": _kernels(
            name=["volta_sgemm_128x32_nt", scale, softmax, softmax, "Memset (Device)"],
            launch_op=[
                "aten::convolution_backward",
                "aten::cudnn_convolution",
                "aten::_softmax",
                "aten::_scaled_dot_product_attention_math",
                "aten::cudnn_convolution",
            ],
        )
    }
    rows = classify_frames(frames)["kernels"].select("kernel_class", "class_source").rows()
    assert rows == [
        ("convolution", "op"),
        ("convolution", "op"),
        ("softmax", "name"),
        ("attention", "op"),
        ("memory", "name"),  # a workspace memset stays memory
    ]


def test_runs_of_an_earlier_schema_are_classified_on_load_and_left_untouched(tmp_path: Path) -> None:
    sample = ROOT / "tests" / "data" / "schema4" / "h200-capture-gemm"  # the sample as schema 4 wrote it
    before = {p: hashlib.sha256(p.read_bytes()).hexdigest() for p in sorted(sample.rglob("*")) if p.is_file()}
    run = open_run(sample)
    assert run.manifest["frames"]["schema_version"] < 6
    frames = load_frames(run)
    for name in ("kernels", "ncu"):
        df = frames[name]
        assert df.schema == SPECS[name].schema
        assert df.height and df["kernel_class"].null_count() == 0, name
    assert {"gemm", "splitk-reduce", "quantize"} <= set(frames["kernels"]["kernel_class"].to_list())
    only = load_frames(
        open_run(sample), ["kernels"]
    )  # the frames the classes need are read behind the scenes
    assert only["kernels"]["kernel_class"].to_list() == frames["kernels"]["kernel_class"].to_list()
    after = {p: hashlib.sha256(p.read_bytes()).hexdigest() for p in sorted(sample.rglob("*")) if p.is_file()}
    assert before == after


def test_tensor_pipe_noise_never_makes_a_known_kernel_a_gemm() -> None:
    """The H100 serving sample's bf16 multiply reads up to 6.6% of tensor-pipe cycles with no tensor instruction
    executed: above the threshold for unknown names, no evidence against a name the table knows. Its GEMMs are the
    14 profiled nvjet kernels, on the timeline too, and no PyTorch elementwise kernel."""
    run = open_run(ROOT / "samples" / "h100-serve-nsys-ncu")
    frames = load_frames(run, ["ncu", "kernels"])
    ncu = frames["ncu"]
    noisy = ncu.filter(pl.col("demangled_name").str.contains("MulFunctor") & (pl.col("tensor_pipe_pct") >= 5))
    assert noisy.height >= 2  # the readings the rule must survive
    gemm = ncu.filter(pl.col("kernel_class") == "gemm")
    assert gemm.height == 14 and all(n.startswith("nvjet_") for n in gemm["name"].to_list())
    kernels = frames["kernels"].filter(pl.col("kernel_class") == "gemm")
    assert not kernels.filter(pl.col("name").str.contains("elementwise")).height
