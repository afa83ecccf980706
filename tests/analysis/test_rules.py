"""Each rule on a case whose cause is known: the probe report's real kernels, and small synthetic cases for the
branches the probe does not reach."""

from __future__ import annotations

from dataclasses import replace as dc_replace
from pathlib import Path

import pytest
from msgspec.structs import replace

from tests.support.explain_data import make_case, ncu_row, probe_frames
from tracekit.analyzers.analysis.model import AuxKernel
from tracekit.analyzers.gemm import CaseEvidence, build_cases, classify_kernel, dtype_class, min_bytes
from tracekit.analyzers.rules.aux import aux
from tracekit.analyzers.rules.clock import clock, throttle_names
from tracekit.analyzers.rules.gaps import gaps
from tracekit.analyzers.rules.kernel import kernel, stages_fit, top_stalls
from tracekit.analyzers.rules.memory import memory
from tracekit.analyzers.rules.occupancy import ctas_per_sm, theoretical_occupancy_pct
from tracekit.analyzers.rules.splitk import splitk
from tracekit.analyzers.rules.tiles import parse_tile, tile_count
from tracekit.analyzers.rules.waves import waves
from tracekit.devices import match_device

BIG = "gemm/bf16/M=8192,N=8192,K=8192"
SMALL_M = "gemm/bf16/M=16,N=6144,K=6144"
MID = "gemm/bf16/M=1024,N=2048,K=6144"
H200 = match_device("NVIDIA H200", "9.0", 132)


def probe_case(shared: Path, name: str) -> CaseEvidence:
    cases = {c.name: c for c in build_cases(probe_frames(shared))}
    return cases[name]


# --- tiles -------------------------------------------------------------------------------------------------------
def test_tiles_from_real_kernel_names(shared_data: Path) -> None:
    big = parse_tile(ncu_row(shared_data, BIG)["name"])  # nvjet_sm90_tst_320x128_64x3_1x2_h_bz_coopB_TNT
    assert (big.tm, big.tn, big.tk, big.stages, big.cluster) == (320, 128, 64, 3, (1, 2))
    mid = parse_tile(ncu_row(shared_data, MID)["name"])
    assert (mid.tm, mid.tn, mid.tk, mid.stages) == (128, 128, 64, 6)
    # names from the third-party files (llm-perf-opt RTX 50 CSV, TraceLens H100 trace, ESMM A10G report)
    c2 = parse_tile("cutlass_80_tensorop_bf16_s16816gemm_relu_bf16_256x128_32x3_tn")
    assert (c2.tm, c2.tn, c2.tk, c2.stages) == (256, 128, 32, 3)
    x = parse_tile("sm90_xmma_gemm_bf16bf16_bf16f32_f32_tn_n_tilesize128x128x64_warpgroupsize1x1x1")
    assert (x.tm, x.tn, x.tk) == (128, 128, 64)
    assert (parse_tile("ampere_sgemm_128x64_nn").tm, parse_tile("ampere_sgemm_128x64_nn").tn) == (128, 64)
    assert parse_tile("matmul_kernel") is None


def test_tile_orientation_follows_the_grid(shared_data: Path) -> None:
    # M=16, N=6144 with a 64x16 tile: cuBLAS runs the 64 along N (C^T), 96 CTAs, which the grid confirms.
    row = ncu_row(shared_data, SMALL_M)
    tiles, useful = tile_count(parse_tile(row["name"]), 16, 6144, row["grid_size"])
    assert (tiles, useful) == (row["grid_size"], 1.0) == (96, 1.0)


# --- clock -------------------------------------------------------------------------------------------------------
def test_clock_from_ncu_against_the_quoted_peak_clock(shared_data: Path) -> None:
    case = probe_case(shared_data, BIG)
    f = clock(case)
    assert f.value == pytest.approx(ncu_row(shared_data, BIG)["sm_clock_hz"] / 1.83e9)
    assert f.value == pytest.approx(0.85, abs=0.005)  # 1555 MHz of 1830
    assert "1555 MHz" in f.sentence and "1980" in f.sentence


def test_clock_names_the_power_cap() -> None:
    # DEVICE.md: sustained 8192^3 bf16 settles near 1470 MHz at 691 W of a 700 W cap, throttle reason 0x4.
    case = make_case(
        "measurement", "gemm", m=8192, n=8192, k=8192, dtype_a="bf16", dtype_b="bf16", device=H200,
        sm_clock_hz=1.47e9, power_w=691.0, power_limit_w=700.0, throttle_reasons=0x4,
    )  # fmt: skip
    f = clock(case)
    assert f.value == pytest.approx(1470 / 1830)
    assert "software power cap" in f.sentence and "691 W" in f.sentence
    assert throttle_names(0x5) == ["software power cap"]  # idle is not a cause
    case = replace(
        case, clock=dc_replace(case.clock, throttle_reasons=None)
    )  # no NVML reasons, power alone at the limit
    assert "power cap" in clock(case).sentence


def test_clock_at_base_points_at_ncu_clock_control() -> None:
    a100 = match_device("NVIDIA A100 80GB PCIe", "8.0", 108)
    case = make_case(
        "ncu-kernel",
        "k",
        device=a100,
        sm_clock_hz=1.05e9,
        clock_source="ncu gpc__cycles_elapsed.avg.per_second",
    )
    f = clock(case)
    assert "--clock-control none" in f.remedy and "clocks locked" in f.sentence and "power" not in f.remedy
    case = replace(case, clock=dc_replace(case.clock, sm_clock_hz=None))
    assert clock(case) is None


# --- waves -------------------------------------------------------------------------------------------------------
def test_waves_partial_single_wave(shared_data: Path) -> None:
    f = waves(probe_case(shared_data, MID))  # 128 CTAs (cluster 2x1, 66 active clusters) on 132 SMs
    assert f.evidence["slots"] == 132 and f.evidence["grid_size"] == 128
    assert f.value == pytest.approx(128 / 132)


def test_waves_persistent_kernel_counts_tiles(shared_data: Path) -> None:
    f = waves(probe_case(shared_data, BIG))  # 132 persistent CTAs, 320x128 tiles over 8192x8192
    assert f.evidence["persistent"] is True
    assert f.evidence["tiles"] == 26 * 64
    assert f.value == pytest.approx((1664 / (13 * 132)) * (8192 * 8192 / (1664 * 320 * 128)))


def test_waves_just_over_a_whole_number() -> None:
    case = make_case(
        m=4096, n=4096, k=4096, dtype_a="bf16", device=H200, grid=133, block=384, registers=168, smem=213_220
    )  # the probe kernels' launch
    assert ctas_per_sm(case) == (1, "registers and shared_mem")
    f = waves(case)
    assert f.value == pytest.approx(133 / 264)
    assert "264 work units for 2 waves" in f.remedy and "%" not in f.remedy  # no percentage: GPU time ranks
    case = replace(case, kernel=replace(case.kernel, grid=264))
    full = waves(case)
    assert full.value == 1.0 and full.remedy is None  # a factor of x1.000 gets no remedy


# --- memory ------------------------------------------------------------------------------------------------------
def test_memory_bound_small_m(shared_data: Path) -> None:
    case = probe_case(shared_data, SMALL_M)
    assert case.bytes_min == 2 * (16 * 6144 + 6144 * 6144 + 16 * 6144)
    f = memory(case, case.peak_tflops)
    assert f.value == pytest.approx(case.intensity * 4.8e12 / 989.4e12)
    assert f.value < 0.08 and "4.80 TB/s" in f.sentence
    big = probe_case(shared_data, BIG)
    assert memory(big, big.peak_tflops).value == 1.0


def test_min_bytes_counts_scales_at_real_width() -> None:
    m, n, k = 1024, 2048, 6144
    nvfp4 = min_bytes(m, n, k, "e2m1", "e2m1", "bf16", "nvfp4-1x16")
    assert nvfp4 == (m * k + k * n) / 2 + m * n * 2 + (m * k + k * n) / 16 + 8
    mx = min_bytes(m, n, k, "e2m1", "e2m1", "bf16", "mxfp4-1x32")
    assert mx == (m * k + k * n) / 2 + m * n * 2 + (m * k + k * n) / 32
    assert min_bytes(m, n, k, "e4m3", "e4m3", "bf16", "tensorwise") == m * k + k * n + 2 * m * n + 8
    assert min_bytes(m, n, k, "e4m3", "e4m3", "bf16", "rowwise") == m * k + k * n + 2 * m * n + 4 * (m + n)
    assert dtype_class("bf16", "e2m1") == "bf16"  # weight-only FP4 runs at the BF16 rate


# --- occupancy / in-kernel ---------------------------------------------------------------------------------------
def test_top_stalls_from_the_probe(shared_data: Path) -> None:
    stalls = top_stalls(probe_case(shared_data, MID))
    assert [s[0] for s in stalls[:2]] == ["long_scoreboard", "barrier"]
    assert stalls[0][1] == pytest.approx(9.4179, abs=1e-3)


def test_in_kernel_near_tensor_limit(shared_data: Path) -> None:
    case = probe_case(shared_data, BIG)
    f = kernel(case, 0.96)
    assert f.cause == "near the tensor-pipe limit"
    assert f.evidence["tensor_pipe_active_pct"] == pytest.approx(96.9, abs=0.05)
    assert f.evidence["occupancy_limiter"] == "registers and shared_mem"
    # nvjet_sm90_tst_320x128_64x3: 3 stages of 57,344 B in 188,636 B, so 16,604 B beside them; a fourth stage
    # would need 245,980 B of the 232,448 allowed: 3 fit, not the 4 that the limit alone gives
    stage = 64 * (320 + 128) * 2
    assert f.evidence["non_stage_smem_bytes"] == 188_636 - 3 * stage == 16_604
    assert f.evidence["stages_that_fit"] == (232_448 - 16_604) // stage == 3
    assert "; 3 stages of a 320x128x64 tile fit (the kernel uses 3)" in f.sentence
    assert stages_fit(232_448, "320x128x64") == 4  # the report helper: the limit alone, no kernel


def test_in_kernel_shared_memory_limits_occupancy() -> None:
    # A Triton-style GEMM: 4 warps per CTA and 200 KiB of shared memory, on the H200: one CTA, 4 of 64 warps.
    latency_bound = {"compute_throughput_pct": 30.0, "dram_throughput_pct": 20.0}
    case = make_case(
        m=4096, n=4096, k=4096, dtype_a="bf16", main_kernel="matmul_kernel", device=H200, grid=1024, block=128,
        registers=128, smem=200 * 1024, ncu=latency_bound,
    )  # fmt: skip
    assert ctas_per_sm(case) == (1, "shared_mem")
    assert theoretical_occupancy_pct(case) == pytest.approx(100 * 4 / 64)
    f = kernel(case, 0.5)
    assert f.cause == "occupancy limited by shared memory"
    assert "200 KiB" in f.remedy
    # the same launch with DRAM near its peak is not latency-bound: occupancy is not what limits it
    case = replace(
        case, ncu=dc_replace(case.ncu, row={"compute_throughput_pct": 30.0, "dram_throughput_pct": 91.0})
    )
    assert kernel(case, 0.5).cause != "occupancy limited by shared memory"


def test_stages_that_fit_without_the_kernels_stage_count_is_a_bound() -> None:
    """A tile without a stage count in the name: what the kernel holds beside its stages is unknown, so the count
    from the limit alone is said as a bound; the same kernel with its count takes its other shared memory first."""
    latency_bound = {"compute_throughput_pct": 30.0, "dram_throughput_pct": 20.0}
    name = "sm90_xmma_gemm_bf16bf16_bf16f32_f32_tn_n_tilesize128x128x64_warpgroupsize1x1x1_execute_kernel"
    case = make_case(
        m=4096, n=4096, k=4096, dtype_a="bf16", main_kernel=name, device=H200, grid=1024, block=128,
        registers=128, smem=200 * 1024, ncu=latency_bound,
    )  # fmt: skip
    stage = 64 * (128 + 128) * 2
    ev = kernel(case, 0.5).evidence
    assert ev["stage_bytes"] == stage and ev["stages_that_fit_is_bound"] is True
    assert (
        ev["stages_that_fit"] == ev["smem_per_block_limit_bytes"] // stage
        and "non_stage_smem_bytes" not in ev
    )
    assert f"at most {ev['stages_that_fit']} stages of a 128x128x64 tile fit" in kernel(case, 0.5).sentence
    stage5 = name.replace("tilesize128x128x64_", "tilesize128x128x64_stage5_")
    case = replace(case, kernel=replace(case.kernel, name=stage5))
    ev = kernel(case, 0.5).evidence
    assert ev["stages"] == 5 and ev["non_stage_smem_bytes"] == 200 * 1024 - 5 * stage
    assert ev["stages_that_fit"] == (ev["smem_per_block_limit_bytes"] - (200 * 1024 - 5 * stage)) // stage
    assert "stages_that_fit_is_bound" not in ev


def test_in_kernel_register_limit_and_no_profile() -> None:
    case = make_case(
        m=4096, n=4096, k=4096, dtype_a="bf16", main_kernel="my_gemm", device=H200, grid=1024, block=256,
        registers=255, ncu={"compute_throughput_pct": 40.0, "dram_throughput_pct": 10.0},
    )  # fmt: skip
    assert ctas_per_sm(case) == (1, "registers")
    assert kernel(case, 0.5).cause == "occupancy limited by registers"
    # SMs almost idle (0.25%) and DRAM idle: the kernel waits, whatever its occupancy (issue 26 item 5)
    case = replace(
        case,
        ncu=dc_replace(
            case.ncu, row={"compute_throughput_pct": 0.25, "dram_throughput_pct": 0.0, "tensor_pipe_pct": 0.0}
        ),
    )
    f = kernel(case, 0.5)
    assert f.cause == "stalled" and "__launch_bounds__" not in (f.remedy or "")
    # without a profile the launch configuration alone cannot say occupancy costs time
    case = replace(case, ncu=None)
    assert kernel(case, 0.5).cause == "unexplained without a profile"
    case = replace(case, kernel=replace(case.kernel, block=256, registers=64))
    assert kernel(case, 0.5).cause == "unexplained without a profile"


# --- aux / gaps --------------------------------------------------------------------------------------------------
def test_aux_split_k_and_quantize() -> None:
    reduce = "void cublasLt::splitKreduce_kernel<32, 16, int, float>(cublasLt::cublasSplitKParams<float>)"
    # a split-K reduce is GEMM time (the kernel rate includes it): its own factor, not an auxiliary one
    case = make_case(main_ns=8_000.0, splitk_ns=4_000.0, aux_kernels=[reduce])
    f = splitk(case)
    assert f.value == pytest.approx(2 / 3) and "split-K" in f.remedy and "splitKreduce_kernel" in f.sentence
    assert aux(case) is None
    q = make_case(main_ns=8_000.0, aux_ns=4_000.0, aux_kernels=["triton_poi_fused__to_copy_quantize_0"])
    assert aux(q).value == pytest.approx(2 / 3) and "Fuse the activation quantize" in aux(q).remedy
    assert aux(make_case(main_ns=1.0)) is None
    assert classify_kernel("void cublasLt::splitKreduce_kernel<32, 16>") == "aux"
    assert classify_kernel("nvjet_sm90_tst_64x16_64x16_4x1_v_bz_splitK_TNT") == "main"


def test_gaps() -> None:
    # DEVICE.md: an eager small-M _scaled_mm costs 23-58 us of host time against 8-13 us of kernel time.
    case = make_case(main_ns=8_000.0, gap_ns=23_000.0, calls=20)
    f = gaps(case)
    assert f.value == pytest.approx(8 / 31)
    assert "CUDA graph" in f.remedy and "host does not launch fast enough" in f.sentence
    # one call: the same idle cannot tell slow launching from a first call's setup
    one = gaps(make_case(main_ns=8_000.0, gap_ns=23_000.0))
    assert one.value == pytest.approx(8 / 31) and one.evidence["too_few_calls"] is True
    assert "host does not launch" not in one.sentence and "warm-up" in one.remedy
    # calls replayed from a CUDA graph: the idle is between the graph's kernels, not the host's
    graph = make_case(main_ns=8_000.0, gap_ns=2_000.0, calls=20, graph_replay=True, aux_ns=4_000.0)
    quant = AuxKernel(
        name="quant", kernel_class="quantize", role="quantize", time_ns_total=80_000.0, count=80
    )
    graph = replace(graph, aux=(*graph.aux, quant))
    g = gaps(graph)
    assert g.evidence["graph_replay"] is True and g.evidence["idle_ns_per_boundary"] == pytest.approx(500.0)
    assert "host does not launch" not in g.sentence and "capture the loop" not in g.remedy
    assert gaps(make_case(main_ns=8_000.0)) is None
    # two calls with gaps of 0 and 33 us: the totals say 33 us lost, no "16.5 us" median of parts
    from tracekit.analyzers.gemm import call, timing_from_calls

    two = make_case(main_ns=10_000.0)
    two = replace(two, timing=timing_from_calls([call(10_000.0, 0.0, 0.0), call(10_000.0, 0.0, 33_000.0)]))
    f = gaps(two)
    assert f.evidence["idle_ns_total"] == 33_000.0 and f.value == pytest.approx(20 / 53)
    assert "33.0 µs over 2 calls" in f.sentence and "16.5" not in f.sentence
    assert "idle_in_few_calls" not in f.evidence  # two calls: too few to tell


def test_gaps_in_a_few_calls_are_not_launch_overhead() -> None:
    """Most calls back to back, the idle in a few (the H200 capture sample's bf16 M=4096 GEMM: median gap 1.2 us,
    775 us of idle over 40 calls): a synchronisation or host work, not launch overhead; every call slow: still
    launch-bound."""
    from tracekit.analyzers.gemm import call, timing_from_calls

    few = make_case(main_ns=125_000.0)
    few = replace(
        few,
        timing=timing_from_calls(
            [call(125_000.0, 0.0, 1_200.0)] * 36 + [call(125_000.0, 0.0, 180_000.0)] * 4
        ),
    )
    f = gaps(few)
    assert f.value < 0.9 and f.evidence["idle_in_few_calls"] is True
    assert "median gap 1.2 µs" in f.sentence and "a few calls" in f.sentence
    assert "synchronize" in f.remedy and "Launch-bound" not in f.remedy
    every = make_case(main_ns=8_000.0, gap_ns=23_000.0, calls=40)
    f = gaps(every)
    assert "idle_in_few_calls" not in f.evidence and "Launch-bound" in f.remedy
