"""Planted causes in raw Nsight Compute reports made with ncu's default sections, no tracekit metrics and ncu's
default clock control (samples/h100-ncu-default, made on an H100 around benchmarks/foreign's programs; the facts in
its expected.json): each report is read raw, as a user opens it (``tracekit.load(path).analyze()``), and each
planted cause is named without tracekit's counters, while its control is not given it. docs/CASES.md's table of
these verdicts is what today's code gives (``benchmarks/verdict_kinds.py --ncu-default``)."""

from __future__ import annotations

import functools
import importlib.util
import json
import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest

import tracekit
from tests.analysis.test_verdict_policy import _agree
from tracekit.analyzers.analysis.model import Case, VerdictKind

ROOT = Path(__file__).resolve().parents[2]
FOLDER = ROOT / "samples" / "h100-ncu-default"
FACTS: dict[str, Any] = {
    k: v for k, v in json.loads((FOLDER / "expected.json").read_text()).items() if not k.startswith("_")
}
DEFAULT_SECTIONS = {"LaunchStats", "Occupancy", "SpeedOfLight", "WorkloadDistribution"}
"""Nsight Compute's default section set ("basic") whose sections tracekit reads."""


def _verdict_kinds() -> Any:
    spec = importlib.util.spec_from_file_location("verdict_kinds", ROOT / "benchmarks" / "verdict_kinds.py")
    assert spec is not None and spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


VK = _verdict_kinds()


@functools.cache
def _analysis(report: str) -> Any:
    return tracekit.load(FOLDER / report).analyze()


def _case(report: str, rng: str) -> Case:
    [case] = [c for c in _analysis(report).cases if c.range == rng]
    return case


@pytest.mark.parametrize("report", sorted(FACTS))
def test_each_report_is_raw_with_the_default_sections_and_no_tracekit_counters(report: str) -> None:
    """The reports hold what a user's plain `ncu` run gives: the default sections, no FLOP counters, clocks
    locked to base; each of the program's ranges is one case."""
    analysis = _analysis(report)
    assert sorted(c.range for c in analysis.cases) == sorted(r["range"] for r in FACTS[report]["ranges"])
    for case in analysis.cases:
        assert case.ncu is not None and set(case.ncu.sections) <= DEFAULT_SECTIONS, case.ncu.sections
        assert case.flops.source == "none" and not case.flops.counters and case.flops.per_call is None
        assert case.ncu.clock_control == "base"
    _agree(analysis)  # the summary's largest losses and each case's verdict agree


PLANTED = [(report, r) for report in sorted(FACTS) for r in FACTS[report]["ranges"] if "verdict" in r]
CONTROLS = [(report, r) for report in sorted(FACTS) for r in FACTS[report]["ranges"] if "not" in r]


@pytest.mark.parametrize(("report", "fact"), PLANTED, ids=[r["range"] for _, r in PLANTED])
def test_the_planted_cause_is_the_verdict(report: str, fact: dict[str, Any]) -> None:
    case = _case(report, fact["range"])
    v = case.verdict
    assert VK.names(v, fact["verdict"]), (
        v.kind,
        v.factor,
        v.cause,
        [(f.name, f.lost_ns_total) for f in case.factors],
    )
    assert v.kind != VerdictKind.CANNOT_EXPLAIN and v.lost_ns_total and v.lost_ns_total > 0


@pytest.mark.parametrize(("report", "fact"), CONTROLS, ids=[r["range"] for _, r in CONTROLS])
def test_the_control_is_not_given_the_planted_cause(report: str, fact: dict[str, Any]) -> None:
    case = _case(report, fact["range"])
    assert not VK.names(case.verdict, fact["not"]), case.verdict


def test_the_wave_tail_is_the_verdict_and_ncus_occupancy_estimate_is_held_to_the_tensor_pipe() -> None:
    """Triton's 133 tiles on 132 SMs: Nsight Compute's Tail Effect (LaunchConfiguration, est. 50%) is the waves
    factor (0.504, half the kernel's time). Its TheoreticalOccupancy rule says 88% for the planted GEMM and for its
    control alike (1 CTA/SM by design), but a tensor pipe busy 77% of the time the waves fill leaves at most 23%
    inside the kernel: the occupancy estimate is held to that, so it does not outweigh the tail."""
    report = "ncu-default-triton_waves.ncu-rep"
    bad, control = _case(report, "triton_waves_bad"), _case(report, "triton_waves_control")
    assert any(r.rule == "LaunchConfiguration" and (r.speedup_pct or 0) >= 49 for r in bad.ncu.rules)
    waves = next(f for f in bad.factors if f.name == "waves")
    assert waves.value == pytest.approx(133 / 264, abs=1e-3)
    for case in (bad, control):
        inside = next(f for f in case.factors if f.name == "in-kernel")
        assert inside.evidence["ncu_rule_speedup_pct"] == 87.5
        assert inside.evidence["ncu_speedup_pct"] == pytest.approx(23, abs=2)
        assert "allows at most" in inside.sentence
    assert (waves.lost_ns_total or 0) > 2 * next(
        f.lost_ns_total or 0 for f in bad.factors if f.name == "in-kernel"
    )
    assert next(f for f in control.factors if f.name == "waves").value == pytest.approx(1.0)


def test_the_shared_memory_cap_keeps_ncus_full_estimate_on_a_simt_kernel() -> None:
    """The fp32 SIMT SGEMM barely uses the tensor pipe: nothing holds Nsight Compute's occupancy estimate (87.5%)
    back, and the limiter it names is the planted one."""
    case = _case("ncu-default-simt_smem.ncu-rep", "sgemm_smem_capped")
    inside = next(f for f in case.factors if f.name == "in-kernel")
    assert inside.evidence["ncu_speedup_pct"] == 87.5 and "ncu_rule_speedup_pct" not in inside.evidence
    assert "limited by shared memory" in inside.sentence


def test_the_cli_gives_the_same_verdicts_after_import(tmp_path: Path) -> None:
    """`tracekit import` of the four reports into one run, then `tracekit explain --json`: every range's verdict is
    the one the raw reports give."""

    def tk(*args: str | Path) -> subprocess.CompletedProcess[str]:
        cmd = [sys.executable, "-m", "tracekit", *map(str, args)]
        return subprocess.run(cmd, capture_output=True, text=True, timeout=600)

    run = tmp_path / "run"
    proc = tk("import", *(FOLDER / r for r in sorted(FACTS)), "-o", run)
    assert proc.returncode == 0, proc.stderr
    proc = tk("explain", run, "--json")
    assert proc.returncode == 0, proc.stderr
    got = {c["range"]: c["verdict"] for c in json.loads(proc.stdout)["cases"]}
    for report, fact in FACTS.items():
        for r in fact["ranges"]:
            raw = _case(report, r["range"]).verdict
            assert (got[r["range"]]["kind"], got[r["range"]]["factor"], got[r["range"]]["cause"]) == (
                str(raw.kind),
                raw.factor,
                raw.cause,
            ), r["range"]


def test_the_docs_table_of_planted_verdicts_is_todays() -> None:
    """docs/CASES.md's table of these reports is what `benchmarks/verdict_kinds.py --ncu-default` prints now."""
    text = (ROOT / "docs" / "CASES.md").read_text()
    part = text.split("\n### Planted causes in default-section ncu reports\n", 1)[1].split("\n#", 1)[0]
    table = "\n".join(line for line in part.splitlines() if line.startswith("|"))
    assert table == VK.ncu_default_table(ROOT, {r: _analysis(r) for r in FACTS})
