"""The explainer on captures tracekit did not instrument: the user's own NVTX ranges are the cases, FLOPs and
dtype come from Nsight Compute's counters (or the profiler) when no shape is known, and verdicts hold without a
shape. Real files first (the H200 counter probe, the H200 probe with its range names made foreign, SM120 CUTLASS
exports); small timelines only for what no real file holds."""

from __future__ import annotations

import re
from pathlib import Path

import msgspec
import polars as pl
import pytest

from tests.support.explain_data import frames
from tracekit.analyzers.explain import Waterfall, explain_case
from tracekit.analyzers.gemm import Shape, build_cases
from tracekit.analyzers.importer import combine, read_file
from tracekit.analyzers.readers.ncu.csv_export import read_ncu_csv
from tracekit.devices import match_device


def explain(frames: dict, *, gemm_filter: str | None = None, **kw: object) -> list[Waterfall]:
    """The explainer's waterfall of every case the builders find in ``frames`` (those whose name contains
    ``gemm_filter``), in the order they are built: these tests read the case model and the waterfall behind the
    Analysis."""
    return [explain_case(c) for c in build_cases(frames, **kw) if not gemm_filter or gemm_filter in c.name]


ROOT = Path(__file__).resolve().parents[2]
PROBE_CSV = ROOT / "samples" / "h200-counter-probe" / "raw" / "ncu_details.csv"
H200 = match_device("NVIDIA H200")
_SHAPE = re.compile(r"probe_(?P<dtype>[a-z0-9]+)_M(?P<m>\d+)_N(?P<n>\d+)_K(?P<k>\d+)$")


# --- Nsight Compute only: the counter probe (cuBLAS in the user's own NVTX ranges) ----------------------------------
def test_counter_probe_ranges_are_the_cases_with_counted_flops() -> None:
    wfs = explain(combine([read_ncu_csv(PROBE_CSV)]), device=H200)
    assert len(wfs) == 16  # 4 dtypes x 4 shapes; the split-K reduce kernels are no cases of their own
    for wf in wfs:
        c = wf.case
        shape = _SHAPE.match(c.name)
        assert shape, c.name
        m, n, k = (int(shape[x]) for x in "mnk")
        assert c.user_range and c.origin == "ncu" and c.m is None
        assert c.flops_source == "ncu-counters" and c.dtype_source == "ncu-counters"
        assert c.dtype_class == shape["dtype"]
        assert wf.peak_tflops == pytest.approx(H200.peak_tflops(shape["dtype"]))  # type: ignore[union-attr]
        if m >= 1024:  # shapes that fit the tiles: counted == 2MNK
            assert c.flops == pytest.approx(2 * m * n * k, rel=0.02), c.name
        t = c.timing
        assert wf.achieved_tflops == pytest.approx(c.flops * t.calls / t.span_ns_total / 1e3)
        assert t.source == "ncu-replay" and t.gap_ns_total == 0
        assert wf.verdict is not None
    reduce_cases = [w for w in wfs if "splitKreduce" in (w.case.main_kernel or "")]
    assert not reduce_cases
    # the split-K reduce is the GEMM's time (the kernel rate includes it), said by its own factor
    bf16_16 = next(w for w in wfs if w.case.name == "probe_bf16_M16_N2048_K6144")
    t = bf16_16.case.timing
    assert t.splitk_ns_total > 0 and t.aux_ns_total == 0
    assert bf16_16.case.kernel_tflops == pytest.approx(bf16_16.case.flops * t.calls / t.gemm_ns_total / 1e3)
    split = next(f for f in bf16_16.factors if f.name == "split-K reduce")
    assert split.evidence["aux_class"] == "splitk-reduce" and "Split-K" in (split.remedy or "")


def test_sm120_cutlass_exports_get_achieved_tflops_from_counters_with_a_device(shared_data: Path) -> None:
    folder = shared_data / "thirdparty" / "llm-perf-opt-rtx50"
    files = sorted(folder.glob("kernel_*_ncu.details.csv"))
    if not files:
        pytest.skip(f"{folder} holds no details exports")
    dev = match_device("NVIDIA GeForce RTX 5090")
    assert dev is not None
    for path in files:
        fr = combine([read_ncu_csv(path)])
        bare = explain(fr)  # a CSV names no GPU: no peak without a device
        assert len(bare) == 1 and bare[0].peak_tflops is None
        (wf,) = explain(fr, device=dev)
        c = wf.case
        counter = fr["ncu_metrics"].filter(pl.col("metric") == "sm__ops_path_tensor_src_bf16_dst_fp32.sum")
        assert c.flops == counter["value"][0] and c.flops_source == "ncu-counters"
        assert c.dtype_class == "bf16" and wf.peak_tflops == pytest.approx(dev.peak_tflops("bf16"))
        assert wf.achieved_tflops == pytest.approx(c.flops * c.timing.calls / c.timing.gemm_ns_total / 1e3)
        assert 0 < wf.achieved_tflops < wf.peak_tflops
        assert wf.verdict is not None and wf.complete


# --- the H200 probe with its range names made foreign (no shape anywhere) -------------------------------------------
_FOREIGN = {
    "gemm/bf16/M=1024,N=2048,K=6144": "my_proj",
    "gemm/fp8/M=1024,N=2048,K=6144": "my_proj_fp8",
    "gemm/bf16/M=16,N=6144,K=6144": "decode_step_linear",
    "gemm/fp8/M=16384,N=6144,K=6144": "prefill_fp8",
    "gemm/bf16/M=8192,N=8192,K=8192": "big_one",
}
_PARSED = ("range_kind", "backend", "op", "m", "n", "k", "dtype_a", "dtype_b", "dtype_out", "scale")


def _foreign(fr: dict[str, pl.DataFrame], keep_shape: bool = False) -> dict[str, pl.DataFrame]:
    """The same real frames as if the user had named the ranges: no tracekit names, no parsed fields."""
    out = dict(fr)
    if fr["ranges"].height:
        drop = [c for c in _PARSED if c in fr["ranges"].columns and not (keep_shape and c in ("m", "n", "k"))]
        out["ranges"] = fr["ranges"].with_columns(
            pl.col("name").replace(_FOREIGN),
            *[pl.lit(None).cast(fr["ranges"].schema[c]).alias(c) for c in drop],
        )
        if keep_shape:
            out["ranges"] = out["ranges"].with_columns(dtype_a=pl.lit("bf16"), dtype_b=pl.lit("bf16"))
    if fr["ncu"].height:
        out["ncu"] = fr["ncu"].with_columns(pl.col("nvtx_range").replace(_FOREIGN), nvtx_stack=pl.lit(None))
    return out


def test_ncu_only_without_shapes_small_m_is_memory_bound_and_large_gemms_are_not(shared_data: Path) -> None:
    fr = _foreign(combine([read_file(shared_data / "h200-probe" / "probe.ncu-rep")]))
    wfs = {w.case.name: w for w in explain(fr)}
    assert set(wfs) == set(_FOREIGN.values())
    assert all(w.case.user_range and w.case.flops_source == "none" for w in wfs.values())
    small = wfs["decode_step_linear"]
    assert small.verdict is not None and small.verdict.name == "memory"
    assert small.verdict.evidence["dram_throughput_pct"] > 50
    for name in ("my_proj", "prefill_fp8", "big_one"):  # controls: well-fed GEMMs
        v = wfs[name].verdict
        assert v is None or v.name not in ("memory", "launch gaps"), (name, v and v.name)


def test_timeline_only_user_ranges_are_cases(shared_data: Path) -> None:
    fr = _foreign(combine([read_file(shared_data / "h200-probe" / "probe.sqlite")]))
    every = build_cases(fr)
    cases = {c.name: c for c in every if c.user_range}
    assert set(cases) == set(_FOREIGN.values())
    # GEMM kernels outside any range (the probe's warm-up launches) are explained too, named by kernel
    loose = [c for c in every if not c.user_range]
    assert loose and all(
        c.origin == "kernel" and c.name == c.main_kernel and "nvjet" in c.name for c in loose
    )
    for c in cases.values():
        assert c.user_range and c.origin == "range" and c.flops is None and c.main_kernel.startswith("nvjet")
    # the profiler's shape on a user range (Kineto Input Dims, emit_nvtx) gives FLOPs from the shape
    shaped = {
        c.name: c
        for c in build_cases(
            _foreign(combine([read_file(shared_data / "h200-probe/probe.sqlite")]), keep_shape=True)
        )
    }
    big = shaped["big_one M=8192 N=8192 K=8192"]
    assert big.flops_source == "shape" and big.flops == 2 * 8192**3


def test_timeline_and_ncu_join_on_the_user_range(shared_data: Path) -> None:
    probe = shared_data / "h200-probe"
    fr = _foreign(combine([read_file(probe / "probe.sqlite"), read_file(probe / "probe.ncu-rep")]))
    wfs = {w.case.name: w for w in explain(fr)}
    assert set(wfs) == set(_FOREIGN.values())
    for w in wfs.values():
        assert w.case.origin == "range" and w.case.ncu is not None  # timeline times, ncu evidence
        assert w.case.ncu.row["nvtx_range"] == w.case.name
    assert wfs["decode_step_linear"].verdict.name == "memory"  # type: ignore[union-attr]


# --- small timelines for cases no real file holds yet ---------------------------------------------------------------
def _user_timeline(
    instances: list[list[tuple[str, int, int]]], name: str, parent: str | None = None
) -> dict[str, pl.DataFrame]:
    """User ranges (no tracekit kind) named ``name``, each holding (kernel, start, end) launches."""
    ranges, kernels = [], []
    rid = 0
    parent_id = None
    if parent:
        lo = min(s for inst in instances for _, s, _ in inst) - 10
        hi = max(e for inst in instances for _, _, e in inst) + 10
        ranges.append({"range_id": 0, "parent_id": None, "name": parent, "start_ns": lo, "end_ns": hi})
        parent_id, rid = 0, 1
    for inst in instances:
        lo, hi = min(s for _, s, _ in inst) - 5, max(e for _, _, e in inst) + 5
        ranges.append({"range_id": rid, "parent_id": parent_id, "name": name, "start_ns": lo, "end_ns": hi})
        for kname, s, e in inst:
            kernels.append(
                {
                    "kernel_id": len(kernels),
                    "device": 0,
                    "name": kname,
                    "start_ns": s,
                    "end_ns": e,
                    "duration_ns": e - s,
                    "range_id": rid,
                    "grid_x": 132,
                    "grid_y": 1,
                    "grid_z": 1,
                    "block_x": 384,
                    "block_y": 1,
                    "block_z": 1,
                }
            )
        rid += 1
    return frames(ranges=ranges, kernels=kernels)


GEMM = "nvjet_sm90_tst_128x128_64x6_2x1_v_bz_TNT"


def test_eager_loop_with_host_work_in_one_user_range_is_launch_bound() -> None:
    # 200 eager GEMMs of 20 us with 60 us of host work between them, all inside one range "eager_loop"
    loop = [(GEMM, i * 80_000, i * 80_000 + 20_000) for i in range(200)]
    (c,) = build_cases(_user_timeline([loop], "eager_loop"))
    t = c.timing
    assert t.calls == c.launches == 200 and t.gemm_ns_total == pytest.approx(200 * 20_000)
    assert t.gap_ns_total == pytest.approx(
        60_000 * 199
    )  # every call but the first, 60 us after the one before
    (wf,) = explain(_user_timeline([loop], "eager_loop"))
    assert wf.verdict is not None and wf.verdict.name == "launch gaps"
    assert "host does not launch fast enough" in wf.verdict.sentence
    # control: the same GEMMs back to back (1 us apart) never get the launch-gap sentence
    tight = [(GEMM, i * 21_000, i * 21_000 + 20_000) for i in range(200)]
    (ctl,) = explain(_user_timeline([tight], "eager_loop"))
    assert ctl.verdict is None or ctl.verdict.name != "launch gaps"
    assert all("host does not launch" not in f.sentence for f in ctl.factors)


_AMAX = (
    "void at::native::reduce_kernel<512, 1, at::native::ReduceOp<float, at::native::MaxNanFunctor<float>>>"
)
_DIV = "void at::native::vectorized_elementwise_kernel<4, at::native::BinaryFunctor<float, float, float, DivFunctor>>"
_CAST = (
    "void at::native::unrolled_elementwise_kernel<at::native::direct_copy_kernel_cuda, c10::Float8_e4m3fn>"
)
_FP8 = "nvjet_sm90_qqtst_128x128_128x6_2x1_v_bz_coopA_algo2_TNT"
_SOFTMAX = "void at::native::cunn_SoftMaxForward<4, float>"


def test_quantizer_kernels_are_auxiliary_with_a_quantize_remedy_and_outer_ranges_are_context() -> None:
    insts = []
    for i in range(3):
        t = i * 200_000
        insts.append(
            [
                (_AMAX, t, t + 4000),
                (_DIV, t + 5000, t + 7000),
                (_CAST, t + 8000, t + 11000),
                (_FP8, t + 12000, t + 40000),
            ]
        )
    fr = _user_timeline(insts, "fp8_linear", parent="model_forward")
    cases = build_cases(fr)
    assert [c.name for c in cases] == ["fp8_linear"]  # the outer range is context, the quantizers no cases
    (c,) = cases
    assert c.context == "model_forward" and c.main_kernel == _FP8 and len(c.aux) == 3
    (wf,) = explain(fr)
    aux = next(f for f in wf.factors if f.name == "aux kernels")
    assert aux.evidence["aux_class"] == "quantize" and set(aux.evidence["aux_classes"].values()) == {
        "quantize"
    }
    assert "split-K" not in (aux.remedy or "") and "quantiz" in (aux.remedy or "")


def test_a_range_of_only_elementwise_kernels_is_no_case_but_a_simt_kernel_its_range_names_is() -> None:
    soft = _user_timeline([[(_SOFTMAX, 0, 5000)]], "attention_softmax")
    assert build_cases(soft) == []
    assert (
        build_cases(_user_timeline([[(_SOFTMAX, 0, 5000)]], "nonlinear_act")) == []
    )  # "linear" inside a word
    simt = _user_timeline([[("simt_kernel", 0, 90_000)], [("simt_kernel", 200_000, 290_000)]], "sgemm_smem")
    (c,) = build_cases(simt)
    assert c.name == "sgemm_smem" and c.main_kernel == "simt_kernel" and c.launches == 2


def _nested(shape: dict | None = None) -> dict[str, pl.DataFrame]:
    """emit_nvtx-style op ranges inside the user's range: fp8_linear > aten::copy_ (cast), aten::_scaled_mm (GEMM)."""
    ranges, kernels = [], []
    for i in range(3):
        t, base = i * 100_000, i * 3
        ranges += [
            {"range_id": base, "parent_id": None, "name": "fp8_linear", "start_ns": t, "end_ns": t + 50_000},
            {"range_id": base + 1, "parent_id": base, "name": f"aten::copy_, seq = {10 + i}, op_id = {20 + i}",
             "start_ns": t + 1, "end_ns": t + 9_000},
            {"range_id": base + 2, "parent_id": base, "name": f"aten::_scaled_mm, seq = {30 + i}, op_id = {40 + i}",
             "start_ns": t + 9_001, "end_ns": t + 49_000, **(shape or {})},
        ]  # fmt: skip
        kernels += [
            {"kernel_id": 2 * i, "device": 0, "name": _CAST, "start_ns": t + 2_000, "end_ns": t + 8_000,
             "duration_ns": 6_000, "range_id": base + 1},
            {"kernel_id": 2 * i + 1, "device": 0, "name": _FP8, "start_ns": t + 10_000, "end_ns": t + 40_000,
             "duration_ns": 30_000, "range_id": base + 2},
        ]  # fmt: skip
    return frames(ranges=ranges, kernels=kernels)


def test_profiler_op_ranges_without_shapes_are_transparent_and_with_shapes_are_cases() -> None:
    (c,) = build_cases(_nested())
    assert c.name == "fp8_linear" and c.user_range and c.launches == 3
    # the cast is aten::copy_'s (the op that launched it), not the GEMM op's: a fusion candidate before the GEMM
    assert c.main_kernel == _FP8 and not c.aux and c.timing.aux_ns_total == 0
    (cast,) = c.fusion
    assert (cast.op, cast.kernels, cast.side, cast.count) == ("aten::copy_", [_CAST], "before", 3)
    assert cast.kernel_class == "quantize" and cast.time_ns_total == pytest.approx(3 * 6_000)
    shaped = build_cases(_nested({"m": 16, "n": 2048, "k": 6144, "dtype_a": "e4m3", "dtype_b": "e4m3"}))
    (s,) = shaped  # every call of the op is one case (the per-call seq / op_id counters dropped)
    assert s.name == "aten::_scaled_mm M=16 N=2048 K=6144" and s.context == "fp8_linear" and s.launches == 3
    assert s.flops_source == "shape" and s.dtype_class == "fp8" and s.dtype_source == "shape"


def test_a_capture_with_only_op_ranges_and_no_shapes_explains_gemm_kernels_by_name(shared_data: Path) -> None:
    path = shared_data / "thirdparty" / "nsys-ai" / "mfu_2gpu_before.sqlite"
    if not path.exists():
        pytest.skip(f"{path} is absent")
    cases = build_cases(combine([read_file(path)]))
    assert cases and {c.origin for c in cases} == {"kernel"}
    assert not any("seq =" in c.name or c.name.startswith("aten::") for c in cases)
    names = [c.name for c in cases]
    assert len(names) == len(set(names)) and "nvjet_tst_192x192_64x4_2x1_v_bz_coopB_bias_TNN" in names


def test_counted_flops_over_measured_dram_bytes_place_a_gemm_on_the_roofline(shared_data: Path) -> None:
    """probe.ncu-rep holds DRAM throughput but no tensor counters: give each foreign-named case the FLOPs the
    counters measure for a shape that fits its tiles (2*M*N*K, tests/analysis/test_flops.py) and the roofline decides."""
    from tracekit.analyzers.explain import explain_case
    from tracekit.analyzers.flops import CountedFlops

    fr = _foreign(combine([read_file(shared_data / "h200-probe" / "probe.ncu-rep")]))
    cases = {c.name: c for c in build_cases(fr)}
    shapes = {"decode_step_linear": (16, 6144, 6144, "bf16"), "big_one": (8192, 8192, 8192, "bf16")}
    for name, (m, n, k, cls) in shapes.items():
        counted = CountedFlops(2.0 * m * n * k, cls, ["sm__ops_path_tensor_src_bf16_dst_fp32.sum"])
        c = cases[name] = msgspec.structs.replace(cases[name], counted=counted)
        assert c.flops_source == "ncu-counters" and c.dram_bytes and c.bytes_source.startswith("ncu dram")
        assert c.dram_bytes == pytest.approx(c.ncu.row["dram_bytes_per_s"] * c.ncu.row["duration_ns"] * 1e-9)
    small, big = explain_case(cases["decode_step_linear"]), explain_case(cases["big_one"])
    assert small.verdict is not None and small.verdict.name == "memory" and small.complete
    assert "moved (DRAM, measured)" in small.verdict.sentence
    assert big.verdict is not None and big.verdict.name not in ("memory", "launch gaps") and big.complete


def test_tile_padding_from_counted_over_useful_flops() -> None:
    """tf32 M=16 on cuBLAS's 128x64 tile: the counters executed 4.0x the shape's 2*M*N*K."""
    from tracekit.analyzers.explain import explain_case

    cases = {c.name: c for c in build_cases(combine([read_ncu_csv(PROBE_CSV)]), device=H200)}
    shape = Shape(m=16, n=2048, k=6144, dtype_a="tf32", dtype_b="tf32")
    c = msgspec.structs.replace(cases["probe_tf32_M16_N2048_K6144"], shape=shape)
    assert c.flops_source == "shape" and c.flops == 2 * 16 * 2048 * 6144
    assert c.padding_ratio == pytest.approx(4.0, rel=0.01)
    wf = explain_case(c)
    # memory-bound at M=16: no waves factor sets its ceiling, so the padding is a note beside the waterfall
    assert wf.verdict is not None and wf.verdict.name == "memory"
    assert any("executed 4.0x the useful FLOPs" in n and "128x64" in n for n in wf.notes), wf.notes
    fits = msgspec.structs.replace(
        cases["probe_bf16_M1024_N2048_K6144"],
        shape=Shape(m=1024, n=2048, k=6144, dtype_a="bf16", dtype_b="bf16"),
    )
    fit_wf = explain_case(fits)
    assert fits.padding_ratio == pytest.approx(1.0)
    assert all("useful FLOPs" not in t for t in [*fit_wf.notes, *(f.sentence for f in fit_wf.factors)])


def test_occupancy_limiter_is_named_with_its_amount(samples_dir: Path) -> None:
    from tracekit.analyzers.store import load_frames, open_run

    run = open_run(samples_dir / "h200-planted-d-smem-occupancy")
    (wf,) = explain(load_frames(run), gemm_filter="triton-bf16", environment=run.manifest.get("environment"))
    v = wf.verdict
    assert v is not None and v.cause == "occupancy limited by shared memory"
    assert re.fullmatch(r"shared memory: \d+ KB per block", v.evidence["occupancy_limited_by"])


def test_profiler_flop_count_on_a_range_is_used_when_there_is_no_shape() -> None:
    """A ``flops`` column on the ranges frame (the profiler's own count, Kineto ``flops``) makes the op range a case
    whose FLOPs come from it; read only where the column exists."""
    fr = _nested()
    ranges = fr["ranges"]
    fr["ranges"] = ranges.with_columns(
        flops=pl.when(pl.col("name").str.starts_with("aten::_scaled_mm")).then(pl.lit(4.0e8)).otherwise(None)
    )
    (c,) = build_cases(fr)
    assert c.name == "aten::_scaled_mm" and c.context == "fp8_linear"
    assert c.flops_source == "profiler-flops" and c.flops == 4.0e8 and c.m is None
    assert c.kernel_tflops == pytest.approx(4.0e8 / 30_000 / 1e3)


def test_a_gemm_range_named_by_someone_else_keeps_the_shape_its_row_carries() -> None:
    """A reader may mark a profiler's shaped op as a ``gemm`` range: its M, N, K and dtypes come from the row."""
    fr = _nested()
    fr["ranges"] = fr["ranges"].with_columns(
        range_kind=pl.when(pl.col("name").str.starts_with("aten::_scaled_mm")).then(pl.lit("gemm")),
        m=pl.when(pl.col("name").str.starts_with("aten::_scaled_mm")).then(pl.lit(16, pl.Int64)),
        n=pl.lit(2048, pl.Int64),
        k=pl.lit(6144, pl.Int64),
        dtype_a=pl.lit("e4m3"),
        dtype_b=pl.lit("e4m3"),
    )
    (c,) = [c for c in build_cases(fr) if c.m]
    assert c.name == "aten::_scaled_mm" and c.launches == 3
    assert c.flops_source == "shape" and c.flops == 2 * 16 * 2048 * 6144 and c.dtype_class == "fp8"


def test_gemms_launched_before_the_trace_window_say_so_not_record_shapes(shared_data: Path) -> None:
    """TraceLens's Qwen1.5 H100 trace records every op's shapes, yet two of its GEMM kernel groups have none:
    their correlation ids match no launch event (they ran in the trace's first 14 ms, the tail of the step before
    the window opened). The remedy for them is an earlier window, not record_shapes=True, which was on."""
    import tracekit

    path = shared_data / "thirdparty" / "tracelens" / "h100__Qwen_Qwen1.5-0.5B-Chat__1016005.json.gz"
    run = tracekit.load(path)
    analysis = run.analyze()
    kernels = run.frames["kernels"]
    unshaped = [c for c in analysis.cases if not c.flops.per_call]
    assert len(unshaped) == 2
    for c in unshaped:
        # said by the verdict itself, or by what its measured loss (waves, gaps) leaves unknown
        assert c.verdict.kind in ("cannot-explain", "explained", "no-measured-loss")
        assert (c.verdict.unknown or c.verdict.sentence).startswith("no launch event in the trace")
        assert "record_shapes" not in (c.verdict.capture_hint or "")
        # independently: every kernel of that name and grid has no launch linked, and the trace links others'
        mine = kernels.filter((pl.col("name") == c.kernel.name) & (pl.col("launch_start_ns").is_null()))
        assert mine.height >= c.timing.calls
    assert kernels["launch_start_ns"].null_count() < kernels.height
    unknown = " ".join(u.what + " " + u.how for u in analysis.summary.unknowns)
    assert "record_shapes" not in unknown and "no launch event in the trace" in unknown
