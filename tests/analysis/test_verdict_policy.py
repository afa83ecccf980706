"""One verdict policy from measured evidence (docs/CASES.md, "Verdicts that need their evidence"): the verdict
names the largest measured loss with its cost, with or without a FLOP count; ``cannot-explain`` only where no
factor is measured; the summary's largest losses and each case's verdict agree. Checked on every committed sample
and (slow) on every shared profiling file."""

from __future__ import annotations

from pathlib import Path

import pytest

from tests.support.views import sample_analysis
from tracekit.analyzers.analysis import Analysis
from tracekit.analyzers.analysis.build import analyze_frames
from tracekit.analyzers.analysis.model import VerdictKind
from tracekit.analyzers.importer import combine, detect_kind, read_file
from tracekit.analyzers.rules import NO_LOSS
from tracekit.analyzers.store import load_frames, open_run
from tracekit.errors import TracekitError

ROOT = Path(__file__).resolve().parents[2]
SHARED = ROOT.parent / "shared" / "data"


def _readable(path: Path) -> bool:
    try:
        return detect_kind(path) != "nsys-rep"
    except TracekitError:
        return False


SHARED_FILES = (
    sorted(p.relative_to(SHARED).as_posix() for p in SHARED.rglob("*") if p.is_file() and _readable(p))
    if SHARED.is_dir()
    else []
)
SAMPLES = sorted(d.name for d in (ROOT / "samples").iterdir() if (d / "run.json").is_file())


def _agree(analysis: Analysis) -> None:
    for case in analysis.cases:
        losing = [
            f
            for f in case.factors
            if f.value < NO_LOSS and f.evidence.get("blamed") is not False and (f.lost_ns_total or 0) > 0
        ]
        v = case.verdict
        if not losing:
            continue
        # a measured loss is never "cannot-explain": the largest one is the verdict, with its cost
        assert v.kind != VerdictKind.CANNOT_EXPLAIN, (case.name, v.sentence)
        top = max(losing, key=lambda f: f.lost_ns_total or 0.0)
        if v.kind == VerdictKind.FUSION:
            # the operators around the GEMM cost more than any loss inside its calls: the verdict names the
            # fusion candidates' time, larger than the largest measured factor
            assert v.factor is None and (v.lost_ns_total or 0.0) > (top.lost_ns_total or 0.0), (case.name, v)
            # the side (before or after the GEMM) whose candidates take the most time
            sides = [
                sum(f.time_ns_total for f in case.fusion if f.side == side) for side in ("before", "after")
            ]
            assert v.lost_ns_total == pytest.approx(max(sides)), (case.name, v, sides)
            continue
        assert v.factor is not None and v.lost_ns_total == pytest.approx(top.lost_ns_total), (case.name, v)
        if (
            case.timing.kernel_tflops is None or case.peak is None
        ):  # no rate (not even an estimate) or no peak:
            # what stays unknown, and how to learn it
            assert v.unknown and v.capture_hint, (case.name, v)
    for loss in analysis.summary.top_losses:
        v = analysis.case(loss.case_id).verdict
        # a fusion verdict is listed as the loss "fusion candidates", with the candidates' time
        named = "fusion candidates" if v.kind == VerdictKind.FUSION else v.factor
        assert named is not None and (v.lost_ns_total or 0) >= loss.lost_ns_total * (1 - 1e-9), (loss, v)
        if loss.factor != named:  # a second loss of a case the summary lists after its verdict
            assert any(x.case_id == loss.case_id and x.factor == named for x in analysis.summary.top_losses)


@pytest.mark.parametrize("name", SAMPLES)
def test_verdicts_and_summary_agree_on_every_sample(name: str) -> None:
    _agree(sample_analysis(name))


@pytest.mark.slow
@pytest.mark.parametrize("rel", SHARED_FILES)
def test_verdicts_and_summary_agree_on_every_shared_file(rel: str, shared_data: Path) -> None:
    frames = combine([read_file(shared_data / rel)])
    _agree(analyze_frames(frames, path=rel))


def test_a_wave_tail_without_flops_is_the_verdict_with_what_stays_unknown() -> None:
    """The Triton plant (133 CTAs of one per SM on 132 SMs) from its nsys timeline alone: no shape, no counters.
    Its wave tail is measured from the grid and the occupancy: the verdict names it with its cost and says the
    achieved rate stays unknown and how to learn it; its control (132 CTAs) loses nothing measured."""
    from tests.support.cases import cases
    from tracekit.frames import SPECS

    run = open_run(ROOT / "samples" / "h200-foreign-triton_waves")
    frames = dict(load_frames(run))
    for name in ("ncu", "ncu_metrics", "ncu_rules"):
        frames[name] = SPECS[name].empty()
    by_name = {c.name: c for c in cases(frames, environment=run.manifest.get("environment"))}
    bad, control = by_name["triton_waves_bad"], by_name["triton_waves_control"]
    assert bad.flops.per_call is None
    assert bad.verdict.kind == VerdictKind.EXPLAINED and bad.verdict.factor == "waves"
    assert bad.verdict.lost_ns_total and bad.verdict.lost_ns_total > 0.4 * bad.timing.gemm_ns_total
    assert "achieved TFLOP/s" in (bad.verdict.unknown or "") and "--ncu" in (bad.verdict.capture_hint or "")
    assert control.verdict.factor != "waves"


def _short_case(main_ns: float) -> object:
    from tests.support.explain_data import make_case
    from tracekit.devices import match_device

    return make_case(
        m=32, n=128, k=128, dtype_a="fp32", dtype_b="fp32", main_kernel="volta_sgemm_32x32_sliced1x4_nn",
        device=match_device("NVIDIA H200", "9.0", 132), grid=264, block=256, main_ns=main_ns, calls=20,
        ncu={"compute_throughput_pct": 1.5, "dram_throughput_pct": 0.8},
    )  # fmt: skip


def test_a_few_microsecond_kernel_is_latency_bound_not_stalled() -> None:
    """A 3.1 us fp32 SIMT GEMM (a decoder's rotary-embedding bmm) with SMs and DRAM nearly idle is launch- and
    latency-bound before anything else, said with its duration; the same kernel at 50 us is stalled."""
    from tracekit.analyzers.explain import explain_case, verdict_of

    wf = explain_case(_short_case(3_100.0))
    v = verdict_of(wf)
    assert v.kind == VerdictKind.LATENCY_BOUND and v.factor == "in-kernel"
    assert "3.1 µs kernel" in v.sentence and "stalled" not in v.sentence
    assert "grouped or batched GEMM" in (v.remedy or "")
    assert wf.factors[-1].cause == "short kernel: launch- and latency-bound"
    long = verdict_of(explain_case(_short_case(50_000.0)))
    assert long.kind == VerdictKind.STALLED


def test_occupancy_without_flops_is_the_verdict_where_ncu_measured_it() -> None:
    """The SIMT SGEMM capped at one CTA per SM by 200 KB of shared memory, its Nsight Compute report without
    the counters that count its FLOPs (as ncu's default sections leave it): the occupancy limit is the verdict,
    with the limiter, the achieved occupancy and ncu's estimated speed-up; its control (full occupancy) is not."""
    import polars as pl

    from tests.support.cases import cases
    from tracekit.analyzers.flops import COUNTER_PREFIXES

    run = open_run(ROOT / "samples" / "h200-foreign-simt_smem")
    frames = dict(load_frames(run))
    counters = pl.lit(False)
    for prefix in (*COUNTER_PREFIXES, "smsp__sass_thread_inst_executed_op_ffma"):
        counters = counters | pl.col("metric").str.starts_with(prefix)
    frames["ncu_metrics"] = frames["ncu_metrics"].filter(~counters)
    by_name = {c.name: c for c in cases(frames, environment=run.manifest.get("environment"))}
    capped, control = by_name["sgemm_smem_capped"], by_name["sgemm_smem_control"]
    assert capped.flops.per_call is None and capped.timing.kernel_tflops is None
    v = capped.verdict
    assert v.kind == VerdictKind.EXPLAINED and v.factor == "in-kernel"
    assert v.cause == "occupancy limited by shared memory" and v.lost_ns_total
    f = next(f for f in capped.factors if f.name == "in-kernel")
    assert f.evidence["occupancy_limited_by"] == "shared memory: 200 KB per block"
    assert f.evidence["achieved_occupancy_pct"] == pytest.approx(12.6, abs=0.2)
    assert f.value == pytest.approx(1 - f.evidence["ncu_speedup_pct"] / 100)
    assert "Nsight Compute's" in f.sentence and "estimates the kernel" in f.sentence
    assert "Nsight Compute's estimate" in (v.unknown or "")
    assert not any(f.name == "in-kernel" for f in control.factors)
