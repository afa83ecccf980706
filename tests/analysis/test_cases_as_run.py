"""Issue 26 items 2-5 on real files: cases as the user ran them, calls summed by one formula, verdicts that need
their evidence. Each test names the bullet of the issue it checks and the file it was seen on; the expected
numbers are derived here from the frames (or read from the file by hand, said where)."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import polars as pl
import pytest

import tracekit
from tests.support.explain_data import frames
from tracekit.analyzers.gemm import build_cases
from tracekit.analyzers.gemm.ranges import resolve_ranges
from tracekit.analyzers.importer import combine, read_file

SAMPLES = Path(__file__).resolve().parents[2] / "samples"


def _frames(shared: Path, rel: str) -> dict[str, pl.DataFrame]:
    return combine([read_file(shared / rel)])


def _analysis(path: Path) -> Any:
    if not path.exists():
        pytest.skip(f"{path} is absent")
    return tracekit.load(path).analyze()


# --- item 2: repeated instances are one case ------------------------------------------------------------------------
STEPS, LAYERS = 64, 8


def _layer_loop(shared: Path) -> tuple[dict[str, pl.DataFrame], dict[str, dict[str, float]]]:
    """benchmarks/foreign/layer_loop.py's structure (64 ``step`` ranges, each through ``layer0`` ... ``layer7``
    holding one bf16 GEMM and a GELU) built from real launches: the nvjet GEMM and GELU kernels of nsys-ai's
    H100 export ``mfu_2gpu_before`` (name, grid, block, registers, shared memory and duration of each launch, in
    their order, reused in turn). Returns the frames and, per layer, what its calls sum to."""
    ks = _frames(shared, "thirdparty/nsys-ai/mfu_2gpu_before.sqlite")["kernels"].sort("start_ns")
    gemm = ks.filter(pl.col("name") == "nvjet_tst_192x192_64x4_2x1_v_bz_coopB_bias_TNN").to_dicts()
    gelu = ks.filter(pl.col("kernel_class") == "activation").to_dicts()
    assert len(gemm) > 200 and len(gelu) > 30
    launch = ("grid_x", "grid_y", "grid_z", "block_x", "block_y", "block_z", "registers_per_thread")
    kernels: list[dict[str, Any]] = []
    ranges: list[dict[str, Any]] = []
    want = {f"layer{i}": {"gemm": 0.0, "aux": 0.0} for i in range(LAYERS)}
    t = 1_000_000
    for s in range(STEPS):
        step_id = len(ranges)
        ranges.append({"range_id": step_id, "parent_id": None, "name": "step", "start_ns": t})
        t += 2_000
        for i in range(LAYERS):
            g, a = gemm[(s * LAYERS + i) % len(gemm)], gelu[(s * LAYERS + i) % len(gelu)]
            rid = len(ranges)
            start = t
            for row, wait in ((g, 1_500), (a, 600)):
                t += wait  # the host's launch latency before each kernel
                kernels.append(
                    {
                        "kernel_id": len(kernels),
                        "device": 0,
                        "stream": 7,
                        "name": row["name"],
                        "start_ns": t,
                        "end_ns": t + row["duration_ns"],
                        "duration_ns": row["duration_ns"],
                        "range_id": rid,
                        **{k: row[k] for k in launch},
                    }
                )
                t += row["duration_ns"]
            ranges.append(
                {
                    "range_id": rid,
                    "parent_id": step_id,
                    "name": f"layer{i}",
                    "start_ns": start,
                    "end_ns": t + 100,
                }
            )
            want[f"layer{i}"]["gemm"] += g["duration_ns"]
            want[f"layer{i}"]["aux"] += a["duration_ns"]
        ranges[step_id]["end_ns"] = t + 1_000
        t += 50_000
    return frames(kernels=kernels, ranges=ranges), want


def test_a_loop_of_64_steps_through_8_layer_ranges_is_8_cases_not_512(shared_data: Path) -> None:
    """Issue 26, "Repeated instances are separate cases": an nsys export of an inference loop with 8 layer ranges
    x 64 steps gave 512 GEMM panels. Keyed by the innermost range and the GEMM kernel's signature, it is 8 cases
    (one per layer range), each of 64 calls, its GELU the epilogue candidate of each call, the step a parent."""
    f, want = _layer_loop(shared_data)
    cases = build_cases(f)
    assert sorted(c.name for c in cases) == sorted(want)
    for c in cases:
        t = c.timing
        assert (t.calls, t.launches, t.calls_without_kernel) == (STEPS, STEPS, 0), c.name
        assert c.range == c.name and c.parents == ("step",) and c.position is None and c.user_range
        assert c.kernel.name == "nvjet_tst_192x192_64x4_2x1_v_bz_coopB_bias_TNN"
        assert t.gemm_ns_total == want[c.name]["gemm"] and t.aux_ns_total == want[c.name]["aux"]
        assert [u.role for u in c.aux] == ["activation"]
        # the 600 ns between the GEMM kernel and its GELU is each call's gap; the step's own idle is no call's
        assert t.gap_ns_total == pytest.approx(STEPS * 600)


def test_the_layer_loop_capture_is_8_cases_not_512() -> None:
    """The same on the GPU capture of benchmarks/foreign/layer_loop.py (64 steps x 8 layers, bf16 256x4096x4096
    and a GELU per layer; its 3 warm-up steps run outside any range), made on an H100 with

        tracekit capture --nsys -o samples/h100-layer-loop -- python3 benchmarks/foreign/layer_loop.py"""
    a = _analysis(SAMPLES / "h100-layer-loop")
    ranged = [c for c in a.cases if c.range is not None]
    assert sorted(c.name for c in ranged) == [f"layer{i}" for i in range(LAYERS)]
    for c in ranged:
        assert c.timing.calls == STEPS and c.parents == ["step"] and c.shape is None
        assert [x.role for x in c.aux] == ["activation"]
    # the warm-up's launches in no range: one case per launch configuration, named by kernel
    loose = [c for c in a.cases if c.range is None]
    assert loose and all(c.origin == "kernel" for c in loose)
    assert sum(c.timing.calls for c in loose) == 3 * LAYERS


# --- item 4: one formula -------------------------------------------------------------------------------------------
def _calls_of(f: dict[str, pl.DataFrame], m: int, n: int, k: int) -> list[dict[str, Any]]:
    """Each innermost GEMM operator call of shape (m, n, k) in the frames, in time order: its GEMM kernels' time,
    its first kernel start and last kernel end, its span and busy time, read from the frames without the case
    model."""
    r = f["ranges"]
    ops = r.filter(
        (pl.col("range_kind") == "gemm-op") & (pl.col("m") == m) & (pl.col("n") == n) & (pl.col("k") == k)
    )
    inner = ops.filter(~pl.col("range_id").is_in(r["parent_id"].drop_nulls().implode()))
    res = resolve_ranges(r)
    out = []
    for rid in inner["range_id"].to_list():
        call = res.filter(pl.col("range_id") == rid)["call"].item()
        under = res.filter(pl.col("call") == call)["range_id"].implode()
        ks = f["kernels"].filter(pl.col("range_id").is_in(under))
        g = ks.filter(pl.col("kernel_class") == "gemm")
        out.append(
            {
                "gemm_ns": g["duration_ns"].sum() if g.height else None,
                "first": ks["start_ns"].min(),
                "last": ks["end_ns"].max(),
                "span_ns": (ks["end_ns"].max() - ks["start_ns"].min()) if ks.height else None,
                "busy_ns": ks["duration_ns"].sum(),
            }
        )
    return sorted(out, key=lambda c: c["first"] or 0)


def test_calls_whose_gemm_kernel_was_sampled_out_are_counted_not_entered_as_zero(shared_data: Path) -> None:
    """HTA's ``trace_filter`` (a sampled trace): ``addmm 2048x160x32`` has 6 operator calls, 3 of them without
    their GEMM kernel. They entered the median as 0 (main 11 us instead of 28); now they are left out of every
    number and counted."""
    f = _frames(shared_data, "thirdparty/hta/trace_filter__sampled_rank-0.json.gz")
    calls = _calls_of(f, 2048, 160, 32)
    timed = sorted(c["gemm_ns"] for c in calls if c["gemm_ns"])
    (c,) = [c for c in build_cases(f) if (c.m, c.n, c.k) == (2048, 160, 32)]
    t = c.timing
    assert (t.calls, t.calls_without_kernel) == (len(timed), len(calls) - len(timed)) == (3, 3)
    assert t.gemm_ns_total == sum(timed) and t.gemm_ns.median == timed[1] == 28_000
    assert c.kernel_tflops == pytest.approx(c.flops * 3 / sum(timed) / 1e3)


def test_a_sigmoid_523_us_after_the_gemm_is_its_own_operators_not_the_calls_gap(shared_data: Path) -> None:
    """Issue 26, "achieved matches no call", then issue 44 item 3. HTA's ``trace_filter`` ``addmm 2048x160x120``:
    two calls. The first one's GEMM kernel is followed on its stream by a sigmoid 523 us later; the second is its
    GEMM kernel alone (read from the trace). Launch order gave the sigmoid and the 523 us before it to the first
    call; the profiler recorded ``aten::sigmoid`` launching it, so it is a fusion candidate of the case (an
    activation after the GEMM, with its time) and neither it nor the idle before it is in the call. The totals
    are the sums of the calls' own parts; achieved is FLOPs over the sum of spans, the kernel rate FLOPs over the
    GEMM time."""
    f = _frames(shared_data, "thirdparty/hta/trace_filter__sampled_rank-0.json.gz")
    one, two = _calls_of(f, 2048, 160, 120)
    ks = f["kernels"].sort("start_ns")
    after = ks.filter((pl.col("start_ns") >= one["last"]) & (pl.col("stream") == 7)).row(0, named=True)
    assert after["kernel_class"] == "activation" and "sigmoid" in after["name"]
    assert after["launch_op"] == "aten::sigmoid" and after["start_ns"] - one["last"] == 523_000
    spans = [one["span_ns"], two["span_ns"]]
    (c,) = [c for c in build_cases(f) if (c.m, c.n, c.k) == (2048, 160, 120)]
    t = c.timing
    assert t.calls == 2 and t.gap_ns_total == 0 and t.aux_ns_total == 0 and not c.aux
    (fused,) = c.fusion
    assert (fused.op, fused.kernel_class, fused.side, fused.count) == (
        "aten::sigmoid",
        "activation",
        "after",
        1,
    )
    assert fused.time_ns_total == after["duration_ns"] and fused.kernels == [after["name"]]
    assert t.span_ns_total == sum(spans) and t.gemm_ns_total == one["gemm_ns"] + two["gemm_ns"]
    mid = t.median_call
    assert mid is not None and mid.gemm_ns + mid.aux_ns + mid.gap_ns in spans
    assert c.achieved_tflops == pytest.approx(c.flops * 2 / sum(spans) / 1e3)
    assert c.kernel_tflops == pytest.approx(c.flops * 2 / t.gemm_ns_total / 1e3)


# --- item 5: verdicts that need their evidence ------------------------------------------------------------------
def test_the_first_card_and_the_losses_are_ranked_by_gpu_time_not_percent(shared_data: Path) -> None:
    """TraceLens H100 Qwen: the first card was a K=1 ``bmm`` of 36 KFLOP with "+15853%". Cases are ordered by
    GPU time and the headline's losses by the GPU time they cost; the bmm is neither first nor a top loss."""
    a = _analysis(shared_data / "thirdparty/tracelens/h100__Qwen_Qwen1.5-0.5B-Chat__1016005.json.gz")
    spans = [c.timing.span_ns_total for c in a.cases]
    assert spans == sorted(spans, reverse=True)
    (bmm,) = [c for c in a.cases if c.shape and c.shape.k == 1]
    assert bmm.flops.per_call == pytest.approx(2 * 32 * 559 * 1, rel=0.01) and bmm is not a.cases[0]
    assert max(f.gain_pct or 0 for f in bmm.factors) > 10_000  # the percentage the old headline led with
    lost = [loss.lost_ns_total for loss in a.summary.top_losses]
    assert lost == sorted(lost, reverse=True) and bmm.id not in {
        loss.case_id for loss in a.summary.top_losses
    }
    assert min(lost) > 100 * (bmm.verdict.lost_ns_total or 0)


def test_a_report_of_launch_statistics_only_cannot_explain(shared_data: Path) -> None:
    """esmm-research's SGEMM ladder on an A10G (``profile_049ec61``: launch statistics only): the naive SGEMM,
    72x slower than cuBLAS, got "waves (x0.98; +2%)" as if that were all. A case whose launch configuration
    measures a wave loss names it with its cost, and says the rest stays unknown because the report has only
    launch statistics, and what to capture; a case whose measured factors lose nothing says so (cuBLAS's
    ampere_sgemm_128x64_nn: two whole waves), with the same unknown and hint."""
    a = _analysis(shared_data / "thirdparty/esmm-research/profile_049ec61.ncu-rep")
    assert len(a.cases) == 11
    hint = "capture with the SpeedOfLight and Occupancy sections (tracekit capture --ncu does)"
    kinds = set()
    for c in a.cases:
        v = c.verdict
        kinds.add(v.kind)
        assert v.capture_hint == hint, c.name
        assert (v.unknown or "").startswith("the report has only launch statistics: the achieved TFLOP/s")
        if v.kind == "no-measured-loss":
            assert v.remedy is None and v.factor is None and "waves x1.000" in v.sentence
        else:
            assert v.kind == "explained" and v.factor == "waves" and v.lost_ns_total, c.name
            assert (v.unknown or "").startswith("the report has only launch statistics: the achieved TFLOP/s")
    assert kinds == {"explained", "no-measured-loss"}


def test_one_fixed_clock_well_below_boost_is_clocks_locked_not_power(shared_data: Path) -> None:
    """An ncu report whose kernels all ran at one clock far below boost was blamed on power ("check throttle
    reasons"). esmm-research ``profile_17f278c`` (A10G: every kernel at 1.29-1.32 GHz of a 1.71 GHz boost) and
    the H200 capture under ``--clock-control base`` are clocks locked, remedy ``--clock-control none``; the same
    GEMM captured with ``--clock-control none`` (1551 MHz under a sustained 700 W load) is not locked."""
    for path in (
        shared_data / "thirdparty/esmm-research/profile_17f278c.ncu-rep",
        SAMPLES / "h200-foreign-base_clock",
    ):
        a = _analysis(path)
        locked = [c for c in a.cases if c.verdict.kind == "clocks-locked"]
        assert locked, path
        for c in a.cases:
            clock = next((f for f in c.factors if f.name == "clock"), None)
            if clock is not None and clock.value < 0.995:
                assert clock.cause == "clocks locked" and "--clock-control none" in (clock.remedy or ""), (
                    c.name
                )
                assert "throttle" not in (clock.remedy or "") and "power" not in (clock.remedy or "")
        for c in locked:
            assert c.verdict.sentence.startswith(
                "clocks locked (Nsight Compute's default --clock-control base, or an application clock)"
            )
            assert "--clock-control none" in (c.verdict.remedy or "")
    free = _analysis(SAMPLES / "h200-foreign-base_clock_none")
    (big,) = [c for c in free.cases if c.name == "big_gemm"]
    clock = next(f for f in big.factors if f.name == "clock")
    assert big.verdict.kind != "clocks-locked" and clock.cause != "clocks locked"
    assert clock.value < 0.9 and "clock-control" not in (clock.remedy or "")


def test_a_stalled_gemm_is_not_blamed_on_occupancy(shared_data: Path) -> None:
    """A GEMM whose SMs are almost idle was blamed on "occupancy limited by registers" with a __launch_bounds__
    remedy. CUTLASS's int8 ``Gemm`` in panjd123's ``report-s8`` (A100: SM throughput 3.9%, DRAM 1.9%): after its
    36 CTAs on 108 SMs (waves 36 / 108: the 1/4-SM slot model's 36 / 432 is said, not taken, docs/CASES.md), what
    is left inside the kernel is "stalled", with its warp-state stall reasons, and no occupancy remedy; it is the
    larger loss, so the verdict."""
    a = _analysis(shared_data / "thirdparty/panjd123-cutlass/report-s8.ncu-rep")
    (gemm,) = [c for c in a.cases if c.name.endswith("(Gemm)")]
    waves = next(f for f in gemm.factors if f.name == "waves")
    assert waves.value == pytest.approx(36 / 108) and waves.evidence["slot_model"] == pytest.approx(
        36 / 432, 1e-3
    )
    assert gemm.verdict.factor == "in-kernel" and gemm.verdict.cause == "stalled"
    inside = next(f for f in gemm.factors if f.name == "in-kernel")
    assert inside.cause == "stalled" and "the kernel waits" in inside.sentence
    assert "long_scoreboard" in (inside.remedy or "") and "__launch_bounds__" not in (inside.remedy or "")
    assert "occupancy" not in (inside.cause or "")


def test_a_smem_capped_simt_kernel_is_not_told_to_use_more_ctas() -> None:
    """A SIMT kernel 4.8x slower than its control because 200 KB of dynamic shared memory caps it at one CTA per
    SM got "memory bandwidth not saturated: use more CTAs (split-K)", with 16,384 CTAs (65,536 unprofiled):
    occupancy limited by shared memory, which holds it latency-bound, is the cause, and the remedy is about the
    shared memory."""
    a = _analysis(SAMPLES / "h200-foreign-simt_smem")
    capped = next(c for c in a.cases if c.name == "sgemm_smem_capped")
    assert capped.kernel.grid and capped.kernel.grid > 10_000
    assert capped.verdict.cause == "occupancy limited by shared memory"
    for f in capped.factors:
        assert f.name == "waves" or (
            "more CTAs" not in (f.remedy or "") and "split-K" not in (f.remedy or "")
        )
    assert "200 KiB" in (capped.verdict.remedy or "")


@pytest.mark.parametrize(
    "rel",
    [
        "thirdparty/tracelens/h100__Qwen_Qwen1.5-0.5B-Chat__1016005.json.gz",
        "thirdparty/hta/trace_filter__sampled_rank-0.json.gz",
        "thirdparty/panjd123-cutlass/report.ncu-rep",
        "thirdparty/esmm-research/profile_output_a62323b.ncu-rep",
        "samples:h200-foreign-simt_smem",
        "samples:h200-foreign-eager_host_gaps",
        "samples:h200-capture-gemm",
    ],
)
def test_no_remedy_for_a_factor_that_costs_nothing(shared_data: Path, rel: str) -> None:
    """Factors of x1.000 still got remedies. A factor that loses less than 0.5% has none, nor a verdict blaming
    it; no factor is above 1 and no case above 100% of its peak (issue 25)."""
    path = SAMPLES / rel.removeprefix("samples:") if rel.startswith("samples:") else shared_data / rel
    a = _analysis(path)
    assert a.cases
    for c in a.cases:
        for f in c.factors:
            assert f.value <= 1.0, (c.name, f.name)
            if f.value >= 0.995:
                assert f.remedy is None, (c.name, f.name, f.value)
        if c.verdict.factor is not None:
            blamed = next(f for f in c.factors if f.name == c.verdict.factor)
            assert blamed.value < 0.995, c.name
        assert c.pct_of_peak is None or c.pct_of_peak <= 100.0
