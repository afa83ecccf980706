"""What a factor costs in time (``Waterfall.losses``, ``Factor.lost_ns_total``), on the committed samples' real
timelines: each factor costs the time of the part of the call it acts on. Launch gaps cost the idle time inside
the calls, aux kernels their own time, a split-K reduce its time, and each of the kernel's own factors a share of
the GEMM kernel's time, never more than all of it. Before, every factor cost ``span x (1 - value)``: a
launch-bound loop's in-kernel loss was 7.59 ms in 5.22 ms of kernels (samples/h200-planted-e-launch-gaps)."""

from __future__ import annotations

from pathlib import Path

import pytest

import tracekit
from tracekit.analyzers.explain import explain_case
from tracekit.analyzers.gemm import build_cases
from tracekit.analyzers.rules import NO_LOSS
from tracekit.analyzers.store import load_frames, open_run

SAMPLES = Path(__file__).resolve().parents[2] / "samples"
CALL = {"launch gaps", "aux kernels", "split-K reduce"}

TIMELINE_SAMPLES = [
    "h200-planted-e-launch-gaps",  # an eager loop: idle 78% of the span
    "h200-planted-f-aux-quantize",  # a quantize kernel beside each FP8 GEMM
    "h200-capture-gemm",  # nsys timeline and ncu replays
    "h200-moe",  # expert loops, grouped GEMMs, split-K reduces
    "h100-serve-torchprof",  # a serving step under the PyTorch profiler
]


@pytest.mark.parametrize("name", TIMELINE_SAMPLES)
def test_each_factor_costs_the_time_of_the_part_it_acts_on(name: str) -> None:
    checked = set()
    for wf in map(explain_case, build_cases(load_frames(open_run(SAMPLES / name)))):
        t = wf.case.timing
        span, kernel = t.span_ns_total, t.gemm_ns_total - t.splitk_ns_total
        losses = wf.losses()
        assert len(losses) == len(wf.factors)
        for f, (lost, gain) in zip(wf.factors, losses, strict=True):
            assert 0 <= lost <= span * (1 + 1e-9), (wf.case.name, f.name, lost, span)
            if f.name == "launch gaps":
                assert lost == pytest.approx(t.gap_ns_total, rel=1e-6)
            elif f.name == "aux kernels":
                assert lost == pytest.approx(t.aux_ns_total, rel=1e-6)
            elif f.name == "split-K reduce":
                assert lost == pytest.approx(t.splitk_ns_total, rel=1e-6)
            else:  # the kernel's own factors: a share of its time
                assert lost == pytest.approx(kernel * (1 - f.value), rel=1e-6, abs=1e-3)
                assert lost <= kernel * (1 + 1e-9)
            if span > lost and gain is not None:
                assert gain == pytest.approx(100 * lost / (span - lost), rel=1e-9)
            checked.add(f.name if f.name in CALL else "kernel")
        # the verdict is the factor that costs the most time
        losing = [
            (lost, f)
            for f, (lost, _) in zip(wf.factors, losses, strict=True)
            if f.value < NO_LOSS and f.evidence.get("blamed") is not False
        ]
        if losing and span:
            assert wf.verdict is not None and max(lost for lost, _ in losing) == next(
                lost for lost, f in losing if f is wf.verdict
            )
    assert "kernel" in checked


def test_the_launch_bound_loop_loses_its_gaps_not_its_kernels_twice() -> None:
    """The launch-gap sample: 400 calls, 5.22 ms of GEMM kernels in 24.19 ms of calls. Its losses add up to less
    than the calls' time, the in-kernel loss is under the kernels' time, and the Analysis carries the same."""
    a = tracekit.analyze(SAMPLES / "h200-planted-e-launch-gaps")
    (case,) = a.cases
    t = case.timing
    lost = {f.name: f.lost_ns_total or 0.0 for f in case.factors}
    assert lost["launch gaps"] == pytest.approx(t.gap_ns_total, rel=1e-6)
    assert lost["in-kernel"] < t.gemm_ns_total
    assert sum(lost.values()) < t.span_ns_total
    assert case.verdict.factor == "launch gaps" and case.verdict.lost_ns_total == lost["launch gaps"]
    # removing the gaps: the calls would take their busy time, span / busy - 1 faster
    busy = t.gemm_ns_total + t.aux_ns_total
    assert case.verdict.gain_pct == pytest.approx(100 * (t.span_ns_total / busy - 1), rel=1e-6)
    assert [x.lost_ns_total for x in a.summary.top_losses] == sorted(lost.values(), reverse=True)[:3]
