"""MoE: routing draws and files, ``moe`` range names and the routing sidecar, ``tracekit bench moe`` with real worker
processes, and the per-expert analysis on a realistic run (records made by the benchmark's own row builders, times
shaped like DEVICE.md's H200 measurements)."""

from __future__ import annotations

import json
import statistics
from pathlib import Path

import polars as pl
import pytest

from tests.support.moe_data import make_moe_run
from tracekit.analyzers.moe import analyze_moe, expert_histogram, tile_from_kernel, whatif
from tracekit.analyzers.store import load_frames
from tracekit.collectors import moe_ranges as MR
from tracekit.collectors import ranges
from tracekit.collectors.moe import GLM5, MOE_KEYS, build_cases, read_routing_file, route_counts
from tracekit.collectors.worker import MEASUREMENT_KEYS
from tracekit.errors import BadInputError
from tracekit.frames import SPECS

PLUGINS = Path(__file__).resolve().parents[1] / "support" / "bench_plugins.py"


# --- routing ------------------------------------------------------------------------------------------------------
@pytest.mark.parametrize("dist", ["uniform", "zipf:1.2", "zipf:3"])
def test_route_counts_each_token_picks_topk_distinct_experts(dist):
    counts = route_counts(64, 256, 8, dist, seed=1)
    assert len(counts) == 256 and sum(counts) == 64 * 8
    assert max(counts) <= 64  # distinct experts per token: an expert gets a token at most once
    assert counts == route_counts(64, 256, 8, dist, seed=1)  # seeded


def test_zipf_is_skewed_and_uniform_is_not():
    uni = route_counts(4096, 256, 8, "uniform")
    zipf = route_counts(4096, 256, 8, "zipf:1.2")
    active = [c for c in uni if c]
    assert max(uni) < 2 * statistics.fmean(active)
    assert zipf[0] == max(zipf) and zipf[0] > 0.9 * 4096  # expert 0 is the hottest: nearly every token
    assert sum(1 for c in zipf if c) == 256


def test_routing_file_counts_and_topk_ids(tmp_path):
    path = tmp_path / "routing.jsonl"
    ids = [[0, 1], [0, 2], [0, 3]]
    path.write_text(
        json.dumps({"format": "tracekit-moe-routing", "experts": 4, "topk": 2})
        + "\n"
        + json.dumps({"step": "a", "counts": [3, 1, 1, 1]})
        + "\n"
        + json.dumps({"step": "b", "topk_ids": ids})
        + "\n"
    )
    assert read_routing_file(path, 4, 2) == [("a", [3, 1, 1, 1]), ("b", [3, 1, 1, 1])]
    cfg = type(GLM5)(hidden=64, inter=32, experts=4, topk=2)
    cases = build_cases(cfg, [1], [f"file:{path}"])
    assert [(c.route, c.tokens, c.rows) for c in cases] == [
        ("file:routing#a", 3, 6),
        ("file:routing#b", 3, 6),
    ]
    with pytest.raises(BadInputError, match="captured with 4 experts"):
        read_routing_file(path, 256, 8)
    bad = tmp_path / "bad.jsonl"
    bad.write_text(json.dumps({"topk_ids": [[0, 9]]}) + "\n")
    with pytest.raises(BadInputError, match=r"outside 0\.\.3"):
        read_routing_file(bad, 4, 2)


# --- ranges and the routing sidecar ------------------------------------------------------------------------------
class FakeTensor:
    """Shape, dtype and device of a tensor: what the describe functions read (torch is not a dev dependency)."""

    def __init__(self, shape, dtype="torch.bfloat16", values=None):
        self.shape = tuple(shape)
        self.dtype = dtype
        self.is_cuda = False
        self._values = values

    def tolist(self):
        return self._values


def _read_row(op: str, args, kwargs):
    """(cache key, name builder, counts kind, counts tensor, experts) of a call, as the MoE table row reads it."""
    row = next(t for t in MR.MOE_TARGETS if t.spec.op == op)
    return MR.read_launch(row.spec)(args, kwargs)


def test_grouped_mm_name_and_offsets():
    x, w = FakeTensor((20, 6144)), FakeTensor((4, 6144, 4096))
    offs = FakeTensor((4,), "torch.int32", [5, 5, 17, 20])
    _key, build, kind, tensor, experts = _read_row("grouped_mm", (x, w), {"offs": offs})
    assert build() == "moe backend=torch-bf16 op=grouped_mm E=4 M=20 N=4096 K=6144 a=bf16 b=bf16 out=bf16"
    assert (kind, experts) == ("offsets", 4)
    assert MR.counts_from(kind, tensor.tolist(), experts) == [5, 0, 12, 3]


def test_scaled_grouped_mm_rowwise_and_fused_moe_names():
    x = FakeTensor((32, 6144), "torch.float8_e4m3fn")
    w = FakeTensor((256, 6144, 4096), "torch.float8_e4m3fn")
    sa = FakeTensor((32,), "torch.float32")
    _k, build, *_ = _read_row("scaled_grouped_mm", (x, w, sa, FakeTensor((256, 4096), "torch.float32")), {})
    assert build() == (
        "moe backend=torch-fp8 op=scaled_grouped_mm E=256 M=32 N=4096 K=6144 a=e4m3 b=e4m3 out=bf16 scale=rowwise"
    )
    ids = FakeTensor((3, 8), "torch.int32", [[0, 1, 2, 3, 4, 5, 6, 7]] * 3)
    args = (FakeTensor((3, 6144)), ids, None, FakeTensor((256, 4096, 6144)), FakeTensor((256, 6144, 2048)))
    _k, build, kind, tensor, e = _read_row("cutlass_fused_moe", args, {"output_dtype": "torch.bfloat16"})
    assert build() == (
        "moe backend=flashinfer-cutlass op=cutlass_fused_moe E=256 M=24 N=4096 K=6144 a=bf16 b=bf16 out=bf16 "
        "T=3 topk=8 I=2048"
    )
    assert MR.counts_from(kind, tensor.tolist(), e)[:9] == [3] * 8 + [0]


def test_sgl_fp4_group_mm_reads_problem_sizes():
    a, b = FakeTensor((40, 3072), "torch.uint8"), FakeTensor((8, 4096, 3072), "torch.uint8")
    sizes = FakeTensor((8, 3), "torch.int32", [[5, 4096, 6144]] * 8)
    args = (a, b, None, None, None, "torch.bfloat16", "cuda", {"problem_sizes": sizes})
    _k, build, kind, tensor, e = _read_row("cutlass_fp4_group_mm", args, {})
    assert build().startswith("moe backend=sgl-fp4 op=cutlass_fp4_group_mm E=8 M=40 N=4096 K=6144 a=e2m1")
    assert MR.counts_from(kind, tensor.tolist(), e) == [5] * 8


def test_wrapper_pushes_a_moe_range_and_writes_the_sidecar_line(tmp_path):
    from tracekit.collectors.instrument import TARGETS, make_wrapper

    target = next(t for t in TARGETS if t.label == "torch._grouped_mm")
    sink = ranges.RecordingSink()
    previous = ranges.set_sink(sink)
    recorder = MR.RoutingRecorder(tmp_path / "moe_routing-nsys-1.jsonl", "nsys")
    old = MR.set_recorder(recorder)
    try:
        calls = []
        wrapped = make_wrapper(lambda *a, **k: calls.append(a) or "out", target, object())
        x, w = FakeTensor((6, 64)), FakeTensor((3, 64, 32))
        for _ in range(2):
            assert wrapped(x, w, offs=FakeTensor((3,), "torch.int32", [2, 2, 6])) == "out"
    finally:
        ranges.set_sink(previous)
        MR.set_recorder(old)
        recorder.close()
    name = "moe backend=torch-bf16 op=grouped_mm E=3 M=6 N=32 K=64 a=bf16 b=bf16 out=bf16"
    assert sink.pushes() == [("tracekit", name)] * 2 and len(calls) == 2
    lines = [json.loads(line) for line in (tmp_path / "moe_routing-nsys-1.jsonl").read_text().splitlines()]
    assert [(r["range"], r["instance"], r["counts"], r["counts_from"], r["tool"]) for r in lines] == [
        (name, 1, [2, 0, 4], "offsets", "nsys"),
        (name, 2, [2, 0, 4], "offsets", "nsys"),
    ]


def test_moe_targets_listed_for_instrument():
    from tracekit.collectors.instrument import TARGETS

    labels = {t.label for t in TARGETS}
    assert {
        "torch._grouped_mm",
        "torch._scaled_grouped_mm",
        "flashinfer.fused_moe.cutlass_fused_moe",
        "flashinfer.fused_moe.trtllm_fp4_block_scale_moe",
        "sgl_kernel.fp8_blockwise_scaled_grouped_mm",
        "sgl_kernel.cutlass_fp4_group_mm",
    } <= labels


@pytest.mark.parametrize(
    ("name", "tile"),
    [
        (
            "void cutlass::device_kernel<cutlass::gemm::kernel::GemmUniversal<cutlass::gemm::GroupProblemShape<"
            "cute::tuple<int, int, int> >, cutlass::gemm::collective::CollectiveMma<cutlass::gemm::"
            "MainloopSm90ArrayTmaGmmaWarpSpecializedPingpong<7, cute::tuple<cute::C<2>, cute::C<1>, cute::C<1> >>, "
            "cute::tuple<cute::C<64>, cute::C<128>, cute::C<128> >, cutlass::bfloat16_t>>>(...)",
            (64, 128),
        ),
        ("sm90_gemm_grouped_Shape<_128,_256,_64>_cluster", (128, 256)),
        ("bmm_E4m3_tile128x8x512_cluster1x1x1", None),  # 8 is not a tile size this parser trusts
        ("nvjet_sm90_tst_64x8_64x16_4x1_v_bz_coopB_TNT", None),
    ],
)
def test_tile_from_kernel(name, tile):
    assert tile_from_kernel(name) == tile


# --- the sweep with real workers ----------------------------------------------------------------------------------
def test_bench_moe_cli_with_worker_processes(tmp_path, monkeypatch):
    from click.testing import CliRunner

    from tracekit.cli import cli

    monkeypatch.setenv("TRACEKIT_BACKEND_PLUGINS", str(PLUGINS))
    out = tmp_path / "run"
    args = ["bench", "moe", "--backends", "test-moe-grouped,test-moe-loop,test-moe-segv,test-moe-missing"]
    args += ["--tokens", "1,2,64", "--routing", "uniform,zipf:1.5", "--experts", "16", "--hidden", "64"]
    args += ["--inter", "32", "--repeats", "3", "--warmup", "1", "-o", str(out), "--json"]
    res = CliRunner().invoke(cli, args)
    assert res.exit_code == 0, res.output
    payload = json.loads(res.stdout)
    rows, curve, failures = payload["moe"], payload["curve"], payload["failures"]
    assert all(list(r) == list(MOE_KEYS) for r in rows)
    assert all(list(r) == list(MEASUREMENT_KEYS) for r in curve)
    by = {(r["backend"], r["route"], r["tokens"]): r for r in rows}
    assert len([b for b in by if b[0] == "test-moe-grouped"]) == 6
    g = by[("test-moe-grouped", "zipf1.5", 64)]
    assert g["rows"] == 64 * 8 == sum(g["counts"]) and g["tile_m"] == 64 and g["expert_time_us"] is None
    loop = by[("test-moe-loop", "uniform", 64)]
    assert [t is None for t in loop["expert_time_us"]] == [c == 0 for c in loop["counts"]]
    assert {r["m"] for r in curve} == {
        c for r in rows if r["backend"] == "test-moe-loop" for c in r["counts"] if c
    }
    # the segfault costs the cases with 16 rows (tokens=2); the worker restarts for the rest
    segv = {(r["route"], r["tokens"]) for r in rows if r["backend"] == "test-moe-segv"}
    assert ("uniform", 1) in segv and ("uniform", 64) in segv and ("uniform", 2) not in segv
    kinds = {(f["backend"], f["kind"]) for f in failures}
    assert ("test-moe-segv", "crashed") in kinds and ("test-moe-missing", "unavailable") in kinds
    frames = load_frames(__import__("tracekit.run", fromlist=["Run"]).Run.open(out))
    assert frames["moe"].height == len(rows) and frames["moe_curve"].height == len(curve)
    assert frames["measurements"].height == 0  # curve points are not GEMMs of the run


# --- analysis on a realistic run ----------------------------------------------------------------------------------
@pytest.fixture(scope="module")
def real(tmp_path_factory):
    run = make_moe_run(tmp_path_factory.mktemp("moe") / "run")
    frames = load_frames(run)
    return run, frames, analyze_moe(frames, environment=run.manifest["environment"])


def _launch(analysis, backend, route, tokens):
    rows = analysis.launches.filter(
        (pl.col("backend") == backend) & (pl.col("route") == route) & (pl.col("tokens") == tokens)
    ).to_dicts()
    assert len(rows) == 1
    return rows[0]


@pytest.mark.parametrize("backend", ["torch-bf16-loop", "torch-bf16-grouped", "torch-fp8-grouped"])
def test_skewed_case_is_flagged_hot_dominates_cold_memory_bound(real, backend):
    _run, _frames, a = real
    r = _launch(a, backend, "zipf1.2", 4096)
    assert r["skewed"] and r["hot_dominates"] and r["hot_expert"] == 0
    assert "skewed routing: expert 0" in r["verdict"] and "dominates" in r["verdict"]
    ex = a.experts.filter(pl.col("launch_id") == r["launch_id"])
    hot = ex.filter(pl.col("hot")).row(0, named=True)
    assert hot["time_ns"] == ex["time_ns"].max()  # the hot expert is the slowest
    cold = ex.filter(pl.col("m") <= 64)
    assert cold.height > 150 and (cold["roofline_bound"] == "memory").all()
    assert hot["roofline_bound"] == "compute"


def test_uniform_decode_is_memory_bound_padded_and_far_from_peak(real):
    _run, _frames, a = real
    r = _launch(a, "torch-bf16-grouped", "uniform", 16)
    assert not r["skewed"] and r["memory_bound_experts"] == r["active"] == 112
    assert r["pct_of_peak"] < 1.0 and r["padding_waste_pct"] > 95  # 1-2 rows in a 64-row tile
    assert r["tile_m"] == 64 and "dispatch rule" in r["tile_source"]
    assert "memory-bound" in r["verdict"] and "tile padding" in r["verdict"]
    # attributed by tiles: every expert has one 64-row tile, so each takes the same time
    ex = a.experts.filter(pl.col("launch_id") == r["launch_id"])
    assert ex["time_ns"].n_unique() == 1 and ex["time_ns"].sum() == pytest.approx(r["time_ns"])


def test_launch_efficiency_is_flop_weighted(real):
    _run, _frames, a = real
    r = _launch(a, "torch-bf16-loop", "zipf1.2", 1024)
    ex = a.experts.filter(pl.col("launch_id") == r["launch_id"])
    assert r["flops"] == pytest.approx(ex["flops"].sum())
    assert r["tflops"] == pytest.approx(r["flops"] / r["time_ns"] / 1e3)
    assert r["pct_of_peak"] == pytest.approx(100 * r["tflops"] / 989.4)


def test_whatif_from_the_measured_curve(real):
    _run, _frames, a = real
    w = a.whatif.filter((pl.col("backend") == "torch-bf16-loop") & (pl.col("target_pct") == 50.0)).row(
        0, named=True
    )
    assert w["how"] == "interpolated" and w["curve"] == "expert"
    assert 128 < w["m_needed"] < 512  # DEVICE.md: bf16 reaches ~47% of peak at M=256
    assert w["tokens_per_step"] == pytest.approx(w["m_needed"] * 256 / 8)
    assert w["ep_degree"] == pytest.approx(w["tokens_per_step"] / 64)
    assert whatif([(1, 1.0), (16, 4.0)], 8.0) == (pytest.approx(2 ** (4 + 4 / 0.75)), "extrapolated")
    assert whatif([(1, 1.0), (16, 1.0)], 8.0) == (None, "not reached")
    assert whatif([(16, 20.0)], 8.0) == (16, "below the curve")


def test_histogram_and_frames_pinned(real):
    _run, _frames, a = real
    r = _launch(a, "torch-bf16-loop", "zipf1.2", 4096)
    hist = expert_histogram(a.experts, r["launch_id"])
    assert sum(b["experts"] for b in hist) == r["active"]
    assert sum(b["rows_share_pct"] for b in hist) == pytest.approx(100)
    assert hist[-1]["hot"] and not hist[0]["hot"]
    for name in ("moe_launches", "moe_experts", "moe_whatif"):
        assert getattr(a, name.removeprefix("moe_")).schema == SPECS[name].schema
    pinned = {
        "moe": ["moe_id", *MOE_KEYS],
        "moe_curve": ["curve_id", *MEASUREMENT_KEYS],
        "moe_routing": ["routing_id", "range", "instance", "pid", "tool", "experts", "counts", "counts_from", "skipped"],
        "moe_experts": [
            "launch_id", "expert", "m", "padded_m", "tiles", "time_ns", "time_source", "time_share_pct", "flops",
            "tflops", "pct_of_peak", "min_bytes", "intensity_flops_per_byte", "roofline_bound", "roofline_tflops",
            "pct_of_roofline", "hot",
        ],
    }  # fmt: skip
    for name, cols in pinned.items():
        assert [c.name for c in SPECS[name].columns] == cols


def test_show_explain_report_carry_per_expert_rows(real):
    from click.testing import CliRunner

    from tracekit.cli import cli

    run, _frames, a = real
    show = json.loads(CliRunner().invoke(cli, ["show", str(run.path), "--json"]).stdout)
    explain = json.loads(CliRunner().invoke(cli, ["explain", str(run.path), "--json"]).stdout)
    for payload in (show, explain):
        launches = payload["moe"]["launches"]
        assert len(launches) == a.launches.height == 36
        skewed = next(r for r in launches if r["backend"] == "torch-bf16-loop" and r["route"] == "zipf1.2"
                      and r["tokens"] == 4096)  # fmt: skip
        assert len(skewed["per_expert"]) == skewed["active"] == 256 and skewed["experts"] == 256
        assert payload["moe"]["whatif"]
    res = CliRunner().invoke(cli, ["report", str(run.path), "-o", str(run.path.parent / "r.md")])
    assert res.exit_code == 0, res.output
    text = (run.path.parent / "r.md").read_text()
    assert "### Mixture of experts: grouped GEMMs per expert" in text
    assert "#### Expert histogram: torch-bf16-loop zipf1.2 tokens=4096" in text
    assert "| 2048-4095 (hot) |" in text and "rows per expert, from the measured curve" in text


# --- a timeline: moe ranges, their kernels and the routing sidecar ------------------------------------------------
def test_timeline_launches_use_kernel_tile_and_sidecar_counts():
    name = "moe backend=torch-bf16 op=grouped_mm E=4 M=130 N=256 K=512 a=bf16 b=bf16 out=bf16"
    kernel = "cutlass::device_kernel<... cute::tuple<cute::C<64>, cute::C<128>, cute::C<128> > ...>"
    ranges_rows, kernel_rows, routing_rows = [], [], []
    for i in range(2):
        ranges_rows.append({"range_id": i, "kind": "push_pop", "name": name, "pid": 7, "tid": 7, "start_ns": i * 1000,
                            "end_ns": i * 1000 + 900, "depth": 0, "range_kind": "moe"})  # fmt: skip
        kernel_rows += [
            {"kernel_id": 2 * i, "name": "prepare_grouped_gemm_data", "duration_ns": 2000, "range_id": i,
             "start_ns": i * 1000, "end_ns": i * 1000 + 2, "device": 0},
            {"kernel_id": 2 * i + 1, "name": kernel, "duration_ns": 64_000, "range_id": i,
             "start_ns": i * 1000 + 10, "end_ns": i * 1000 + 800, "device": 0},
        ]  # fmt: skip
        routing_rows.append({"routing_id": i, "range": name, "instance": i + 1, "pid": 7, "tool": "nsys",
                             "experts": 4, "counts": [128, 1, 1, 0], "counts_from": "offsets"})  # fmt: skip
    frames = {n: s.empty() for n, s in SPECS.items()}
    frames["ranges"] = SPECS["ranges"].conform(pl.DataFrame(ranges_rows))
    frames["kernels"] = SPECS["kernels"].conform(pl.DataFrame(kernel_rows))
    frames["moe_routing"] = SPECS["moe_routing"].conform(pl.DataFrame(routing_rows))
    a = analyze_moe(
        frames, environment={"gpu_name": "NVIDIA H200", "compute_capability": "9.0", "sm_count": 132}
    )
    r = a.launches.row(0, named=True)
    assert (r["origin"], r["launches"], r["tile_m"], r["tile_source"]) == ("range", 2, 64, "kernel name")
    assert r["time_ns"] == 64_000 and r["aux_time_ns"] == 2000 and r["rows"] == 130
    ex = {e["expert"]: e for e in a.experts.to_dicts()}
    # tiles: expert 0 has 2 (128 rows / 64) x 2 (256 / 128), experts 1 and 2 one row tile each x 2
    assert ex[0]["time_ns"] == pytest.approx(64_000 * 4 / 8) and ex[1]["time_ns"] == pytest.approx(
        64_000 * 2 / 8
    )
    assert r["padding_waste_pct"] == pytest.approx(100 * (256 - 130) / 256)


# --- the TUI: overview -> e -------------------------------------------------------------------------------------------
def test_tui_moe_screen_shows_histogram_of_the_highlighted_launch(real):
    import asyncio

    from tracekit.tui.app import make_app
    from tracekit.tui.screens.moe import MoeScreen

    run, _frames, _a = real

    async def drive() -> None:
        app = make_app(run.path)
        async with app.run_test(size=(160, 50)) as pilot:
            for _ in range(100):
                await pilot.app.workers.wait_for_complete()
                await pilot.pause()
                if getattr(app.screen, "analysis", None) is not None and not app.workers._workers:
                    break
            await pilot.press("e")
            for _ in range(100):
                await pilot.app.workers.wait_for_complete()
                await pilot.pause()
                if (
                    isinstance(app.screen, MoeScreen)
                    and app.screen.analysis is not None
                    and not app.workers._workers
                ):
                    break
            screen = app.screen
            assert isinstance(screen, MoeScreen) and screen.table.row_count == 36
            screen.table.focus()
            screen.filter_input.value = ""
            screen.filter_query = "zipf1.2 tokens=4096 torch-bf16-loop"
            screen.refresh_view()
            for _ in range(20):
                await pilot.app.workers.wait_for_complete()
                await pilot.pause()
            assert screen.table.row_count == 1
            text = str(screen.detail.render())
            assert "torch-bf16-loop zipf1.2 tokens=4096" in text and "dominates" in text
            assert "2048-4095*" in text and "what-if" in text

    asyncio.run(drive())


# --- the H200 capture (samples/h200-moe: `tracekit capture --nsys -- tracekit bench moe`, moe_phases.sh) ----------
@pytest.fixture(scope="module")
def h200():
    from tracekit.analyzers.store import open_run

    run = open_run(Path(__file__).resolve().parents[2] / "samples" / "h200-moe")
    frames = load_frames(run)
    return run, frames, analyze_moe(frames, environment=run.manifest["environment"])


@pytest.mark.parametrize("backend", ["torch-bf16-grouped", "torch-fp8-grouped"])
def test_h200_skewed_grouped_launch_names_the_hot_expert(h200, backend):
    _run, _frames, a = h200
    r = _launch(a, backend, "zipf1.2", 4096)
    assert r["skewed"] and r["hot_dominates"] and r["hot_expert"] == 0
    assert r["verdict"].startswith("skewed routing: expert 0")
    ex = a.experts.filter(pl.col("launch_id") == r["launch_id"])
    cold = ex.filter(pl.col("m") <= 64)
    assert cold.height > 100 and (cold["roofline_bound"] == "memory").all()
    assert ex.filter(pl.col("hot"))["roofline_bound"].to_list() == ["compute"]
    even = _launch(a, backend, "uniform", 4096)
    assert not even["skewed"] and r["hot_vs_median"] > 10 * even["hot_vs_median"]


def test_h200_skewed_loop_measures_the_hot_expert_slowest(h200):
    _run, _frames, a = h200
    r = _launch(a, "torch-bf16-loop", "zipf1.2", 4096)
    assert (
        r["skewed"]
        and r["hot_dominates"]
        and r["hot_expert"] == 0
        and r["time_source"] == "measured per expert"
    )
    ex = a.experts.filter(pl.col("launch_id") == r["launch_id"])
    assert ex.filter(pl.col("hot"))["time_ns"][0] == ex["time_ns"].max()


def test_h200_decode_is_memory_bound_and_fp8_pays_off_only_at_large_m(h200):
    _run, frames, a = h200
    decode = _launch(a, "torch-bf16-grouped", "uniform", 16)
    assert decode["memory_bound_experts"] == decode["active"] and decode["pct_of_peak"] < 1
    big_bf16 = _launch(a, "torch-bf16-grouped", "uniform", 4096)
    big_fp8 = _launch(a, "torch-fp8-grouped", "uniform", 4096)
    assert 1.5 < big_fp8["tflops"] / big_bf16["tflops"] < 3
    assert frames["kernels"].height > 10_000  # the nsys timeline, every expert launch of the loop included
