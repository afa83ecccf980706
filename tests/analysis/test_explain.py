"""The waterfall on real files (the H200 probe, third-party reports) and on timelines / measurements built from
numbers measured on the H200 (DEVICE.md, probe.sqlite)."""

from __future__ import annotations

import json
from pathlib import Path

import polars as pl
import pytest
from click.testing import CliRunner

from tests.support.cases import blamed, cases, factor
from tests.support.explain_data import H200, frames, ncu_row, probe_frames, timeline
from tracekit.analyzers.analysis import ANALYSIS_SCHEMA_VERSION, Analysis, RunInfo, Summary
from tracekit.analyzers.explain import explain_case
from tracekit.analyzers.gemm import build_cases
from tracekit.frames import SPECS

BIG = "gemm/bf16/M=8192,N=8192,K=8192"
SMALL_M = "gemm/bf16/M=16,N=6144,K=6144"
FP8_BIG = "gemm/fp8/M=16384,N=6144,K=6144"
MID = "gemm/bf16/M=1024,N=2048,K=6144"


def by_name(found: list) -> dict:
    return {c.name: c for c in found}


def test_probe_waterfalls_multiply_to_the_achieved_figure(shared_data: Path) -> None:
    wfs = by_name(cases(probe_frames(shared_data)))
    assert len(wfs) == 5
    for name, c in wfs.items():
        row = ncu_row(shared_data, name)
        s = c.shape
        assert c.timing.achieved_tflops == pytest.approx(2 * s.m * s.n * s.k / row["duration_ns"] / 1e3)
        assert c.complete, name
        assert all(0 < f.value <= 1 for f in c.factors), name
    assert wfs[BIG].timing.achieved_tflops == pytest.approx(774.3, abs=0.1)  # 1.42 ms in the report
    assert [f.name for f in wfs[BIG].factors] == ["clock", "waves", "in-kernel"]


def test_probe_verdicts(shared_data: Path) -> None:
    wfs = by_name(cases(probe_frames(shared_data)))
    small = blamed(wfs[SMALL_M])
    assert small is not None and small.name == "memory"
    assert wfs[SMALL_M].factors[-1].cause == "memory bandwidth not saturated"
    # memory-bound: neither the clock nor the waves set its ceiling (said in the memory factor's evidence)
    assert {"sm_clock_hz_not_the_ceiling", "waves_not_the_ceiling"} <= set(small.evidence)
    # The minimum-bytes model agrees with what ncu measured: the fraction of the bandwidth roofline reached is
    # the DRAM throughput ncu reports (gpu__dram_throughput: 71.0% vs 68.9% of the roofline), within 3 points.
    inner = wfs[SMALL_M].factors[-1]
    assert inner.value * 100 == pytest.approx(inner.evidence["dram_throughput_pct"], abs=3.0)
    assert wfs[BIG].verdict.factor == "clock"
    assert wfs[BIG].verdict.gain_pct == pytest.approx((1830 / 1555 - 1) * 100, abs=0.5)
    assert wfs[FP8_BIG].verdict.factor == "clock"
    assert wfs[MID].verdict.factor == "in-kernel"
    # ncu's own findings ride along
    assert any(r.rule == "CPIStall" for r in wfs[MID].ncu.rules)


def test_measured_plateau_is_the_power_capped_clock() -> None:
    """DEVICE.md: sustained 8192^3 bf16 at 665 TFLOP/s, SM clock ~1470 MHz at 691 W of 700 W (reason 0x4)."""
    flops = 2 * 8192**3
    row = {
        "measurement_id": 0, "range": "gemm backend=torch-bf16 op=mm M=8192 N=8192 K=8192 a=bf16 b=bf16 out=bf16",
        "backend": "torch-bf16", "op": "mm", "m": 8192, "n": 8192, "k": 8192, "dtype": "bf16", "dtype_out": "bf16",
        "time_us": flops / 665e12 * 1e6, "tflops": 665.0, "status": "ok", "sm_clock_hz": 1.47e9, "power_w": 691.0,
        "power_limit_w": 700.0, "throttle_reasons": 4, "timing": "cuda-graph",
    }  # fmt: skip
    fr = frames(measurements=[row], devices=[H200])
    (wf,) = cases(fr)
    assert wf.timing.achieved_tflops == pytest.approx(665.0)
    assert wf.complete
    assert wf.verdict.factor == "clock" and "software power cap" in wf.verdict.sentence
    assert wf.verdict.value == pytest.approx(1470 / 1830)
    assert wf.factors[-1].name == "in-kernel" and wf.factors[-1].value == pytest.approx(
        665 / (989.4 * 1470 / 1830)
    )
    cal = {"format": "tracekit-calibration", "gemm": {"bf16": {"sustained_tflops": 665.0}}}
    (rated,) = cases(fr, calibration=cal)
    assert rated.peak is not None and rated.peak.pct_of_calibrated == pytest.approx(100.0)
    assert rated.pct_of_peak == pytest.approx(100 * 665 / 989.4)
    assert rated.verdict.factor == "clock"


def _kernel(
    start: int, dur: int, name: str = "nvjet_sm90_tst_128x128_64x6_2x1_v_bz_TNT", **kw: object
) -> dict:
    return {"name": name, "start_ns": start, "end_ns": start + dur, "grid_x": 2, "grid_y": 64, "grid_z": 1,
            "block_x": 384, "block_y": 1, "block_z": 1, "registers_per_thread": 168,
            "dynamic_smem_bytes": 213_220, **kw}  # fmt: skip


def test_launch_gaps_of_eager_small_gemms() -> None:
    """probe.sqlite: the 1024x2048x6144 bf16 kernel took 35,007 ns; an eager loop leaves ~60 us of host time
    between launches (DEVICE.md: 23-58 us per eager call). The first launch, cold, waits 13 ms inside its range
    (a lazily loaded module, as seen on the H200 capture sample): a pause of 1 ms or more is no launch gap, it is
    counted apart; every other call's idle time since the call before it is, summed over the calls."""
    dur, gap = 35_007, 60_000
    name = "gemm backend=torch-bf16 op=mm M=1024 N=2048 K=6144 a=bf16 b=bf16 out=bf16"
    cold = 13_000_000
    inst = [[_kernel(0, dur), _kernel(cold, dur, name="void cublasLt::splitKreduce_kernel")]]
    t0 = cold + dur + gap
    inst += [[_kernel(t0 + i * (dur + gap), dur)] for i in range(19)]
    (wf,) = cases(timeline(inst, name))
    t = wf.timing
    assert (t.calls, t.launches, t.pauses) == (20, 20, 1) and t.paused_ns_total == cold - dur
    assert t.gap_ns_total == pytest.approx(19 * gap) and t.gap_ns.median == pytest.approx(gap)
    busy = 21 * dur  # 20 GEMM kernels and the cold call's split-K reduce (GEMM time)
    assert t.gemm_ns_total == pytest.approx(busy) and t.gemm_ns.median == pytest.approx(dur)
    assert wf.verdict.factor == "launch gaps"
    assert wf.verdict.value == pytest.approx(busy / (busy + 19 * gap))
    assert wf.complete
    # A gap in which another kernel ran (outside any GEMM range: another stream's work) is not a launch gap.
    fr = timeline(inst, name)
    k = fr["kernels"]
    others = k.filter(pl.col("range_id").is_not_null()).select(
        (pl.col("kernel_id") + 1000).alias("kernel_id"),
        (pl.col("end_ns") + 1_000).alias("start_ns"),
        (pl.col("end_ns") + 6_000).alias("end_ns"),
        pl.lit(5_000, pl.Int64).alias("duration_ns"),
        pl.lit("void at::native::elementwise_kernel").alias("name"),
        "device",
    )
    fr["kernels"] = pl.concat([k, SPECS["kernels"].conform(others)], how="diagonal_relaxed")
    (wf2,) = cases(fr)
    assert wf2.timing.gap_ns_total == 0 and factor(wf2, "launch gaps") is None


def test_aux_quantize_kernel_in_the_range() -> None:
    """FP8 GEMM (probe.sqlite: 21,247 ns for 1024x2048x6144) behind a slow activation quantize in an aux range."""
    name = "gemm backend=torch-fp8 op=scaled_mm M=1024 N=2048 K=6144 a=e4m3 b=e4m3 out=bf16 scale=tensorwise"
    inst = []
    for i in range(3):
        t = i * 62_000  # back to back: 753 ns between launches
        q = _kernel(t, 40_000, name="void at::native::vectorized_elementwise_kernel<quantize>", aux=True)
        g = _kernel(t + 40_000, 21_247, name="nvjet_sm90_qqtst_128x128_128x6_2x1_v_bz_coopA_algo2_TNT")
        inst.append([q, g])
    (wf,) = cases(timeline(inst, name, parent="step name=prefill", aux_child=True))
    assert wf.label == f"{name} [step name=prefill]"
    t = wf.timing
    assert (
        t.calls == 3
        and t.aux_ns_total == pytest.approx(3 * 40_000)
        and t.aux_ns.median == pytest.approx(40_000)
    )
    f = factor(wf, "aux kernels")
    assert f is not None and f.value == pytest.approx(21_247 / 61_247)
    assert wf.verdict.factor == "aux kernels"
    # two calls follow the one before them 753 ns later (the first follows none): the totals say so
    assert t.gap_ns_total == pytest.approx(2 * 753) and t.gap_ns.median == pytest.approx(753)
    assert t.achieved_tflops == pytest.approx(3 * 2 * 1024 * 2048 * 6144 / (3 * 61_247 + 2 * 753) / 1e3)
    assert wf.complete


def test_imported_probe_run_and_cli(shared_data: Path, tmp_path: Path) -> None:
    from tracekit.analyzers.importer import import_files
    from tracekit.cli import cli

    probe = shared_data / "h200-probe"
    run, _ = import_files([probe / "probe.ncu-rep", probe / "probe.sqlite"], tmp_path / "run")
    runner = CliRunner()
    res = runner.invoke(cli, ["explain", str(run.path), "--json"])
    assert res.exit_code == 0, res.output
    data = json.loads(res.output)
    assert data["schema_version"] == ANALYSIS_SCHEMA_VERSION and len(data["cases"]) == 5
    spans = [c["timing"]["span_ns_total"] for c in data["cases"]]
    assert spans == sorted(spans, reverse=True)  # most time in calls first
    big = next(c for c in data["cases"] if c["range"] == BIG)
    assert big["origin"] == "timeline"  # timed on the nsys timeline, profiled by ncu
    assert big["ncu"]["kernels"] >= 1
    assert big["peak"]["tflops"] == pytest.approx(989.4)
    losing = {f["name"] for f in big["factors"] if f["value"] < 0.995}
    assert losing == {"clock", "waves", "in-kernel"}
    # cuBLAS's 0.8 µs memset in the range, before the 1.4 ms kernel: the call's aux time and the idle time after it
    # inside the call, each costing nothing worth a remedy
    for f in big["factors"]:
        if f["name"] not in losing:
            assert f["name"] in ("aux kernels", "launch gaps") and f["remedy"] is None, f
    for f in big["factors"]:
        assert set(f) >= {"name", "value", "sentence", "evidence", "lost_ns_total"}
    assert big["verdict"]["factor"] == "clock" and big["verdict"]["kind"] == "explained"
    product = big["peak"]["tflops"]
    for f in big["factors"]:
        product *= f["value"]
    assert product == pytest.approx(big["timing"]["achieved_tflops"], rel=0.01)
    res = runner.invoke(cli, ["explain", str(run.path), "--gemm", "M=16,", "--json"])
    assert [c["range"] for c in json.loads(res.output)["cases"]] == [SMALL_M]
    res = runner.invoke(cli, ["explain", str(run.path), "--gemm", "M=8192"])
    assert res.exit_code == 0 and "verdict: clock" in res.output
    cal = tmp_path / "cal.json"
    cal.write_text(
        json.dumps({"format": "tracekit-calibration", "gemm": {"bf16": {"sustained_tflops": 665.0}}})
    )
    res = runner.invoke(cli, ["explain", str(run.path), "--calibration", str(cal), "--json"])
    big = next(c for c in json.loads(res.output)["cases"] if c["range"] == BIG)
    assert big["peak"]["pct_of_calibrated"] == pytest.approx(100 * big["timing"]["achieved_tflops"] / 665.0)


def test_cases_frame_of_the_probe(shared_data: Path) -> None:
    found = cases(probe_frames(shared_data))
    frame = Analysis(run=RunInfo(path="x"), summary=Summary(cases=len(found)), cases=found).cases_frame()
    row = frame.filter(pl.col("range") == BIG).to_dicts()[0]
    assert row["verdict"] == "clock" and row["pct_of_peak"] == pytest.approx(100 * 774.3 / 989.4, abs=0.05)
    big = by_name(found)[BIG]
    assert big.peak is not None and big.peak.roofline_bound == "compute"


def test_third_party_reports_without_shapes(shared_data: Path) -> None:
    from tracekit.analyzers.importer import combine
    from tracekit.analyzers.readers.ncu.report import read_ncu_report

    # CUTLASS int8 GEMMs on an A100 80GB PCIe, profiled with ncu's default clock control (clocks near base).
    fr = combine([read_ncu_report(shared_data / "thirdparty/panjd123-cutlass/report.ncu-rep")])
    wfs = cases(fr)
    # the report's own NVTX ranges are the cases: two launches of "Kernel" in "Non-fused-GEMM", one in "Fused-GEMM"
    assert sorted((w.name, w.timing.launches) for w in wfs) == [("Fused-GEMM", 1), ("Non-fused-GEMM", 2)]
    for wf in wfs:
        assert wf.origin == "ncu" and wf.range == wf.name and wf.rate.dtype_class == "int8"
        assert wf.peak is not None and wf.peak.tflops == pytest.approx(624)
        assert wf.timing.achieved_estimate
        assert wf.complete and wf.verdict.factor is not None
        assert "--clock-control none" in (wf.factors[0].remedy or "")
    # ESMM SGEMM ladder on an A10G: achieved from the FP32 FMA count.
    fr = combine([read_ncu_report(shared_data / "thirdparty/esmm-research/profile_output_a62323b.ncu-rep")])
    built = build_cases(fr)
    warp = next(c for c in built if c.name.startswith("void warptiling"))
    ffma = warp.metric("smsp__sass_thread_inst_executed_op_ffma_pred_on.sum.per_cycle_elapsed")
    assert warp.kernel_tflops == pytest.approx(2 * ffma * warp.clock.sm_clock_hz / 1e12)
    assert explain_case(warp).peak_tflops == pytest.approx(35.0)


def test_planted_measurements_import_and_explain(tmp_path: Path) -> None:
    """The planted clock script's measurement rows (benchmarks/planted/_common.py) import into a run and explain
    as a power-capped clock; the numbers are DEVICE.md's sustained H200 plateau."""
    import importlib.util

    from tracekit.analyzers.store import load_frames
    from tracekit.collectors.nvml import NvmlSample
    from tracekit.collectors.ranges import gemm_name
    from tracekit.run import Run

    path = Path(__file__).resolve().parents[2] / "benchmarks" / "planted" / "_common.py"
    spec = importlib.util.spec_from_file_location("planted_common", path)
    common = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(common)
    run = Run.create(tmp_path / "run", environment={})
    import os

    os.environ["TRACEKIT_RUN_DIR"] = str(run.path)
    try:
        name = gemm_name("torch-bf16", "mm", 8192, 8192, 8192, "bf16", "bf16", "bf16", phase="sustained")
        sample = NvmlSample(sm_clock_hz=1.47e9, power_w=691.0, power_limit_w=700.0, throttle_reasons=4)
        common.record(common.measurement(name, 8192, 8192, 8192, "bf16", [2 * 8192**3 / 665e12] * 9, sample))
    finally:
        del os.environ["TRACEKIT_RUN_DIR"]
    fr = load_frames(Run.open(run.path))
    assert fr["measurements"].height == 1
    (wf,) = [c for c in cases(fr, environment={"gpu_name": "NVIDIA H200"}) if "phase=sustained" in c.name]
    assert wf.device is not None and wf.device.key == "h200"
    assert wf.verdict.factor == "clock" and "power cap" in wf.verdict.sentence
    assert wf.timing.achieved_tflops == pytest.approx(665.0)


def _explain_cli(run: Path, columns: int, *extra: str) -> str:
    import os
    import subprocess
    import sys

    env = {**os.environ, "COLUMNS": str(columns), "NO_COLOR": "1"}
    res = subprocess.run(
        [sys.executable, "-m", "tracekit", "explain", str(run), *extra],
        capture_output=True,
        text=True,
        env=env,
        timeout=120,
    )
    assert res.returncode == 0, res.stderr
    return res.stdout


def test_explain_reads_at_80_columns_and_json_ignores_the_width(samples_dir: Path) -> None:
    """At 80 columns the sentence of each factor that loses 5% or more sits on whole lines under its row (not one
    or two words per line in a squeezed column); from 180 columns every sentence sits in the 'why' column;
    --json is the same at any width."""
    import re

    run = samples_dir / "h200-capture-gemm"
    sentences = [
        f["sentence"]
        for c in json.loads(_explain_cli(run, 200, "--json"))["cases"]
        for f in c["factors"]
        if len(f["sentence"]) > 60 and f["value"] < 0.95
    ]
    assert sentences
    narrow = _explain_cli(run, 80)
    lines = narrow.splitlines()
    assert all(len(line) <= 80 for line in lines)
    assert "why" not in {w for line in lines[:8] for w in line.split()}

    def words_per_line(text: str) -> float:
        bodies = [re.sub(r"^│\s*|\s*│$", "", ln).strip() for ln in text.splitlines()]
        counts = [len(b.split()) for b in bodies if b and not set(b) <= set("─╭╮╰╯│ ")]
        return sum(counts) / len(counts)

    assert words_per_line(narrow) > 6  # was about 2 with the squeezed column
    # every long sentence is there, reflowed: its words in order, at most a panel border between them
    flat = " ".join(re.sub(r"^│\s*|\s*│$", "", ln).strip() for ln in lines)
    for s in sentences:
        assert " ".join(s.split()) in flat, s
    wide = _explain_cli(run, 200)
    assert any(re.search(r"\bfactor\b.*\bwhy\b", ln) for ln in wide.splitlines())
    assert _explain_cli(run, 80, "--json") == _explain_cli(run, 200, "--json")


def test_show_reads_at_80_columns(samples_dir: Path) -> None:
    """`tracekit show` at 80 columns: one line per row (numbers whole, names elided, never folded over several
    lines), the least important columns left out and named; at 200 columns they are all there."""
    import os
    import subprocess
    import sys

    def show(columns: int) -> str:
        env = {**os.environ, "COLUMNS": str(columns), "NO_COLOR": "1"}
        res = subprocess.run(
            [sys.executable, "-m", "tracekit", "show", str(samples_dir / "h200-bench-gemm"), "--all"],
            capture_output=True,
            text=True,
            env=env,
            timeout=120,
        )
        assert res.returncode == 0, res.stderr
        return res.stdout

    narrow = show(80)
    lines = narrow.splitlines()
    assert all(len(line) <= 80 for line in lines)
    rows = [ln for ln in lines if ln.startswith("│ torch-bf16")]
    assert len(rows) == 12  # the 12 glm5 shapes of bf16, one line each, every shape whole
    for m, n in ((16, 768), (4096, 2048)):
        assert any(f"│ {m:>4} │ {n:>4} │ 6144 │" in r for r in rows), (m, n)
    assert "left out at this width: dtype, calls, median_call_us, kernel_rate, %peak" in " ".join(
        narrow.split()
    )
    i = next(i for i, ln in enumerate(lines) if ln.split()[:1] == ["torch-nvfp4"])  # failures: grouped
    assert "×12" in lines[i] and "CUDA error: CUBLAS" in lines[i + 1]
    wide = show(200)
    assert "left out" not in wide and "kernel_rate" in wide


@pytest.mark.parametrize(
    ("parent", "key"),
    [
        ("step i=7", "step"),
        ("step i=0", "step"),
        ("ProfilerStep#12", "ProfilerStep"),
        ("layer i=3 part=up", "layer i=3 part=up"),  # not a step: each layer stays its own case
        ("moe backend=torch-bf16-grouped tokens=16", "moe backend=torch-bf16-grouped tokens=16"),
        (None, None),
    ],
)
def test_gemm_context_drops_only_the_step_counter(parent: str | None, key: str | None) -> None:
    from tracekit.analyzers.gemm import context_key

    assert context_key(parent) == key
