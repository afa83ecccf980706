"""The planted-cause captures (benchmarks/planted, captured on the H200 with `tracekit capture`, committed under
samples/h200-planted-*): the explainer names each planted cause (benchmarks/planted/expected.json)."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from tests.support.cases import blamed, cases, factor
from tracekit.analyzers.rules.registry import kernel_limit
from tracekit.analyzers.store import load_frames, open_run

ROOT = Path(__file__).resolve().parents[2]
EXPECTED = json.loads((ROOT / "benchmarks" / "planted" / "expected.json").read_text())
RUNS = {
    "a_clock": "h200-planted-a-clock",
    "b_waves": "h200-planted-b-waves",
    "b_waves_cublas": "h200-planted-b-waves-cublas",
    "c_memory": "h200-planted-c-memory",
    "d_smem_occupancy": "h200-planted-d-smem-occupancy",
    "e_launch_gaps": "h200-planted-e-launch-gaps",
    "f_aux_quantize": "h200-planted-f-aux-quantize",
}


def _waterfalls(script: str, gemm: str) -> list:
    """The cases of the planted script's run whose name contains ``gemm``."""
    run = open_run(ROOT / "samples" / RUNS[script])
    return [c for c in cases(load_frames(run), environment=run.manifest.get("environment")) if gemm in c.name]


@pytest.mark.parametrize("script", sorted(EXPECTED))
def test_planted_cause_is_the_verdict(script: str) -> None:
    want = EXPECTED[script]
    wfs = _waterfalls(script, want["gemm"])
    assert wfs, f"no GEMM matching {want['gemm']!r} in {RUNS[script]}"
    for wf in wfs:
        v = blamed(wf)
        assert v is not None and v.name == want["verdict"], [(f.name, round(f.value, 3)) for f in wf.factors]
        if "cause" in want:
            assert v.cause == want["cause"]
        if "sentence_contains" in want:
            assert want["sentence_contains"] in v.sentence
        if "kernel" in want:  # the plant inside the kernel, where the call's verdict is something else
            limit = kernel_limit(wf.factors)
            assert limit is not None and limit.name == want["kernel"], [
                (f.name, round(f.value, 3)) for f in wf.factors
            ]
        assert wf.complete


def test_the_memory_plant_is_memory_bound_in_a_launch_bound_loop() -> None:
    """The memory plant (c) times each of its 400 M=16 GEMMs with CUDA events in an eager loop: 33 us kernels
    with 40 us of idle between them. The memory roof takes its kernels to 7.7% of the peak rate (the smallest
    factor), but the loop's idle time costs more of the calls' time than the roof does: the verdict is launch
    gaps, the kernel's limit memory."""
    (wf,) = _waterfalls("c_memory", "M=16 ")
    lost = {f.name: f.lost_ns_total for f in wf.factors}
    memory = factor(wf, "memory")
    assert memory is not None and memory.value == min(f.value for f in wf.factors) < 0.1
    assert lost["launch gaps"] > lost["memory"] > 0.5 * wf.timing.gemm_ns_total
    assert wf.verdict.factor == "launch gaps"


def test_first_wave_plant_shows_why_it_failed() -> None:
    """The first b capture (torch.mm, 1024 x 2176 x 4096, kept as h200-planted-b-waves-cublas): cuBLAS's
    persistent 132-CTA kernel left no wave tail to see, and 26 us kernels in an eager loop under nsys were
    launch-bound. tracekit says so."""
    (wf,) = _waterfalls("b_waves_cublas", "N=2176")
    waves = factor(wf, "waves")
    assert wf.kernel.grid == 132 and waves is not None and waves.value > 0.9
    assert wf.verdict.factor == "launch gaps"


def test_wave_plant_and_its_control() -> None:
    """The Triton plant: 136 tiles of 128x256 (one CTA per SM: 192 KiB of shared memory) on 132 SMs run two waves
    for 1.03 waves of work; the 132-tile control runs one full wave at about 1.8x the throughput."""
    (tail,) = _waterfalls("b_waves", "N=4352")
    (whole,) = _waterfalls("b_waves", "N=2816")
    w_tail, w_whole = factor(tail, "waves"), factor(whole, "waves")
    assert tail.kernel.grid == 136 and whole.kernel.grid == 132
    assert w_tail is not None and w_whole is not None
    assert 0.45 < w_tail.value < 0.6 and w_whole.value == pytest.approx(1.0)
    assert 1.5 < whole.timing.achieved_tflops / tail.timing.achieved_tflops < 2.0  # type: ignore[operator]
    assert whole.verdict.factor != "waves"


def test_h200_plateau_is_the_power_capped_clock() -> None:
    """DEVICE.md's plateau: a sustained 8192^3 bf16 loop settles near 665 TFLOP/s, 67% of 989, with the SM clock
    near 1470 MHz of 1980 under the 700 W cap. The a_clock capture's sustained phase shows the same."""
    (wf,) = _waterfalls("a_clock", "phase=sustained")
    assert 600 < wf.timing.achieved_tflops < 720
    clock = factor(wf, "clock")
    assert clock is not None and clock.value < 0.85 and "power cap" in clock.sentence
    assert 1.35e9 < wf.sm_clock_hz < 1.6e9


def test_h200_calibration_profile_matches_the_plateau() -> None:
    """samples/calibration-h200.json (`tracekit calibrate` on the H200): the sustained 8192^3 rates sit on the
    power-capped plateau, and the a_clock sustained GEMM is ~100% of that measured peak."""
    from tracekit.devices import load_calibration

    cal = load_calibration(ROOT / "samples" / "calibration-h200.json")
    bf16, fp8 = cal["gemm"]["bf16"], cal["gemm"]["fp8"]
    assert 600 < bf16["sustained_tflops"] < 720 and bf16["sustained_tflops"] < bf16["first_tflops"]
    assert bf16["throttle_reasons"] & 0x4 and bf16["sm_clock_hz"] < 1.6e9  # software power cap
    assert 1.6 < fp8["sustained_tflops"] / bf16["sustained_tflops"] < 2.0
    assert "gemm fp4" in {f["what"] for f in cal["failures"]}
    run = open_run(ROOT / "samples" / RUNS["a_clock"])
    frames = load_frames(run)
    rated = cases(frames, calibration=cal, environment=run.manifest.get("environment"))
    sustained = [c.peak for c in rated if "phase=sustained" in c.name]
    assert len(sustained) == 1 and sustained[0] is not None and 90 < sustained[0].pct_of_calibrated < 110
