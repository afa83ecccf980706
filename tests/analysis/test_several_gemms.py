"""Cases whose calls are several GEMMs under one kernel and grid, and the Nsight Compute findings a case shows.

samples/h100-serve-nsys-ncu (benchmarks/foreign/serve_step.py on an H100): every prefill step runs one nvjet kernel
on grid 132 for six bf16 GEMMs of 4096 tokens (qkv and o of both layers, gate_up and down of the bf16 layer); the
bounded ncu pass profiled two of them. Their counters are exact (2*M*N*K, samples/h200-counter-probe), so the
script's shapes say which two were profiled, and the timeline's durations say the other calls are other GEMMs.
The mean of the two counts (335 GFLOP) rated the one case at 997 TFLOP/s, above the 989.4 bf16 peak, and gave it a
'clock' verdict; the calls' real mean is 274.9 GFLOP. The two profiled places are now cases of their own
(tests/analysis/test_positions.py); the four places never profiled stay one case of several GEMMs, with no count."""

from __future__ import annotations

import glob
import os
from pathlib import Path

import polars as pl
import pytest
from click.testing import CliRunner

import tracekit
from tracekit.analyzers.gemm import build_cases
from tracekit.analyzers.importer import combine, read_file
from tracekit.cli import cli

SAMPLES = Path(__file__).resolve().parents[2] / "samples"
SERVE = SAMPLES / "h100-serve-nsys-ncu"
CAPTURE = SAMPLES / "h200-capture-gemm"
PREFILL_KERNEL = "nvjet_sm90_tst_256x128_64x4_1x2_h_bz_coopA_TNT"

# serve_step.py: hidden 6144, 48 query + 2 x 4 KV heads of 128, intermediate 2048, 4096 prefill tokens
TOKENS, HIDDEN, QKV, INTER = 4096, 6144, (48 + 2 * 4) * 128, 2048
QKV_FLOPS = 2 * TOKENS * QKV * HIDDEN  # 360.8 GFLOP
O_FLOPS = 2 * TOKENS * HIDDEN * HIDDEN  # 309.2 GFLOP
GATE_UP_FLOPS = 2 * TOKENS * 2 * INTER * HIDDEN  # 206.2 GFLOP
DOWN_FLOPS = 2 * TOKENS * HIDDEN * INTER  # 103.1 GFLOP


def _frames(run: Path) -> dict[str, pl.DataFrame]:
    if not (run / "run.json").is_file():
        pytest.skip(f"{run.name} is not in this checkout (samples/)")
    return {
        os.path.basename(f)[: -len(".parquet")]: pl.read_parquet(f)
        for f in glob.glob(f"{run}/frames/*.parquet")
    }


def _prefill(cases: list, tail: str = "3, 4, 5, 6 of 8)") -> object:
    """The prefill kernel's case whose name ends in ``tail``: by default the places no launch was profiled for
    (GEMM launches 3 to 6 of 8)."""
    (case,) = [
        c
        for c in cases
        if c.range == "serve/prefill" and c.kernel.name == PREFILL_KERNEL and c.name.endswith(tail)
    ]
    return case


def test_the_profiled_prefill_launches_are_qkv_and_o_and_the_calls_hold_four_gemms() -> None:
    """The evidence, from the frames alone: the two profiled launches counted exactly the qkv and o projections'
    2*M*N*K, and the timeline's 180 calls come in four durations, one per GEMM of the step (qkv and o twice)."""
    fr = _frames(SERVE)
    ncu = fr["ncu"].filter((pl.col("name") == PREFILL_KERNEL) & (pl.col("nvtx_range") == "serve/prefill"))
    counted = (
        fr["ncu_metrics"]
        .filter(
            pl.col("ncu_id").is_in(ncu["ncu_id"].to_list())
            & pl.col("metric").str.starts_with("sm__ops_path_tensor_src_bf16")
        )
        .sort("ncu_id")["value"]
        .to_list()
    )
    assert counted == [QKV_FLOPS, O_FLOPS]
    k = fr["kernels"].filter(pl.col("name") == PREFILL_KERNEL).sort("start_ns")["duration_ns"].to_list()
    modes = {round(d / 1e4) * 10 for d in k}  # 10 µs bins: ~440 (qkv), ~370 (o), ~250 (gate_up), ~130 (down)
    assert {130, 250, 370, 440} <= modes
    # the step's real mean per call is 274.9 GFLOP, 22% below the profiled launches' mean
    real = (2 * QKV_FLOPS + 2 * O_FLOPS + GATE_UP_FLOPS + DOWN_FLOPS) / 6
    assert real == pytest.approx(274.9e9, rel=1e-3)
    assert (QKV_FLOPS + O_FLOPS) / 2 / real == pytest.approx(1.22, abs=0.005)


def test_a_case_of_several_gemms_gets_no_flop_count_no_rate_and_no_clock_verdict() -> None:
    fr = _frames(SERVE)
    case = _prefill(build_cases(fr))
    assert case.flops is None and case.flops_source == "none"
    assert case.kernel_tflops is None and case.achieved_tflops is None
    assert case.counted is not None and case.counted.dtype_class == "bf16"  # the counters' class still holds
    # the profiled places' counts are not its
    assert case.counted.flops is None and not any(case.counted.spread or ())
    assert (
        case.peak_scale == 1.0 and case.peak_note is None
    )  # no rate above the datasheet peak to rescale for
    assert case.dram_bytes is None  # one profiled launch's bytes are not every call's
    assert (
        "several GEMMs" in (case.flops_note or "") and "132.4 µs (p10) to 443.4 µs (p90)" in case.flops_note
    )

    analysis = tracekit.load(SERVE).analyze()
    (c,) = [c for c in analysis.cases if c.name == case.name]
    assert c.flops.per_call is None and c.flops.counted_per_call is None
    assert c.timing.kernel_tflops is None and c.pct_of_peak is None
    # no FLOP count: a measured loss (aux kernels) may be the verdict, never the clock ncu locked while it
    # replayed; the verdict says the calls are several GEMMs (in what stays unknown)
    assert c.verdict.factor != "clock"
    assert "several GEMMs" in (c.verdict.unknown or c.verdict.sentence)
    assert any("several GEMMs" in u.what for u in analysis.summary.unknowns)
    for other in analysis.cases:  # nothing in the run is rated above its datasheet peak
        if other.timing.kernel_tflops and other.peak:
            assert other.timing.kernel_tflops <= other.peak.tflops


def test_cases_whose_profiled_launches_agree_keep_their_count() -> None:
    """The decode GEMMs profiled twice with one count (CUDA-graph replays of one GEMM) keep it: 0.805 GFLOP is
    2 x 16 tokens x 6144 x 4096 (the bf16 gate_up at decode); the FP8 prefill MLP's gate_up and down (206.2 and
    103.1 GFLOP on one kernel and grid) are a case each, by their place, with their own counts."""
    cases = build_cases(_frames(SERVE))
    decode = [c for c in cases if c.range == "serve/decode" and c.flops]
    assert decode and all(c.counted is not None and c.counted.spread is None for c in decode)
    assert any(c.flops == 2 * 16 * 6144 * 4096 for c in decode)
    fp8 = [c for c in cases if c.range == "serve/prefill" and "qqtst" in (c.kernel.name or "")]
    assert sorted(c.flops for c in fp8) == [DOWN_FLOPS, GATE_UP_FLOPS]
    assert all(c.counted.spread is None for c in fp8)


def test_a_timeline_case_of_several_gemms_says_so_on_its_card(shared_data: Path) -> None:
    """nsys-ai's mfu_2gpu_before: the nvjet 192x192 kernel's 235 calls on grid 132 run from 99 µs (p10) to
    524 µs (p90): more than one GEMM shape. No FLOP count to withhold, but the card says its times mix them."""
    path = shared_data / "thirdparty" / "nsys-ai" / "mfu_2gpu_before.sqlite"
    if not path.exists():
        pytest.skip(f"{path} is absent")
    cases = build_cases(combine([read_file(path)]))
    (case,) = [c for c in cases if c.name == "nvjet_tst_192x192_64x4_2x1_v_bz_coopB_bias_TNN"]
    assert case.timing.calls == 235
    g = case.timing.gemm_ns
    assert g.p10 == pytest.approx(98.9e3, rel=0.01) and g.p90 == pytest.approx(523.4e3, rel=0.01)
    (note,) = [n for n in case.notes if "several GEMMs" in n]
    assert "235 calls" in note and "98.9 µs (p10)" in note and "523.4 µs (p90)" in note


def test_ncu_findings_are_the_gemm_kernels_own_once_each() -> None:
    """h200-capture-gemm's bf16 M=16 GEMM: its range holds the nvjet GEMM (ncu_id 0) and cuBLAS's split-K reduce
    (ncu_id 1). 'HighPipeUtilization: Low Utilization' estimates a 96.1% speed-up for the GEMM and 98.6% for the
    reduce: the case shows the GEMM's. The serving step's prefill GEMM, profiled twice, shows each finding once."""
    fr = _frames(CAPTURE)
    rules = fr["ncu_rules"].filter(pl.col("title") == "Low Utilization")
    by_id = dict(zip(rules["ncu_id"].to_list(), rules["speedup_pct"].to_list(), strict=True))
    assert by_id[0] == pytest.approx(96.07, abs=0.01) and by_id[1] == pytest.approx(98.65, abs=0.01)
    (case,) = [c for c in build_cases(fr) if c.name.startswith("gemm backend=torch-bf16 op=mm M=16 ")]
    assert case.ncu is not None and {r["ncu_id"] for r in case.ncu.rules} == {0}
    (low,) = [r for r in case.ncu.rules if r.get("title") == "Low Utilization"]
    assert low["speedup_pct"] == pytest.approx(by_id[0])

    prefill = _prefill(build_cases(_frames(SERVE)), "launch 1 of 8)")
    assert prefill.ncu is not None and prefill.ncu.kernels == 1
    keys = [(r["rule"], r["kind"], r.get("title") or r.get("message")) for r in prefill.ncu.rules]
    assert len(keys) == len(set(keys)) and ("CPIStall", "OPTIMIZATION", "Barrier Stalls") in keys


def test_explain_labels_the_percentage_as_nsight_computes_estimated_speed_up() -> None:
    _frames(CAPTURE)
    out = CliRunner().invoke(cli, ["explain", str(CAPTURE), "--all"]).output
    text = " ".join(line.strip("│╭╰─ ") for line in out.splitlines())  # the cards' wrapped lines, joined
    said = [part.split(" note:")[0] for part in text.split("ncu says: ")[1:]]
    assert any("Low Utilization (est. speed-up ~96%)" in s for s in said)
    assert not any("(~" in s or "~99%" in s for s in said)
