"""One verdict policy from measured evidence (docs/CASES.md, "Verdicts that need their evidence"): the verdict
names the largest measured loss with its cost, with or without a FLOP count; ``cannot-explain`` only where no
factor is measured; the summary's largest losses and each case's verdict agree. Checked on every committed sample
and (slow) on every shared profiling file tracekit reads, and on the shared files users import together."""

from __future__ import annotations

import math
from pathlib import Path

import pytest

from tests.support.views import sample_analysis
from tracekit.analyzers.analysis import Analysis
from tracekit.analyzers.analysis.build import analyze_frames, analyze_run
from tracekit.analyzers.analysis.model import Case, VerdictKind
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


def _ncu_finding_exact(case: Case) -> None:
    """Nsight Compute's finding, where a case with a rate has one: a finding that counts (never the launch
    configuration's Tail Effect or Small Grid, which the waves measure), at most as large as ncu estimates and at
    most the in-kernel loss, and the waterfall still exact: peak x every factor = achieved."""
    found = [f for f in case.factors if f.name == "ncu finding"]
    if not found:
        return
    [f] = found
    ev = f.evidence
    assert ev["ncu_rule"] != "LaunchConfiguration", (case.name, ev)
    assert f.value >= 1 - ev["ncu_speedup_pct"] / 100 - 5e-4, (case.name, f.value, ev["ncu_speedup_pct"])
    rule = next(r for r in case.ncu.rules if r.rule == ev["ncu_rule"] and (r.speedup_pct or 0) > 0)
    assert rule is not None
    inside = next(x for x in case.factors if x.name == "in-kernel")
    assert inside.value <= 1.0
    product = case.peak.tflops * math.prod(x.value for x in case.factors)
    assert product == pytest.approx(case.timing.achieved_tflops, rel=1e-9), (case.name, product)


def _agree(analysis: Analysis) -> None:
    for case in analysis.cases:
        losing = [
            f
            for f in case.factors
            if f.value < NO_LOSS and f.evidence.get("blamed") is not False and (f.lost_ns_total or 0) > 0
        ]
        v = case.verdict
        if v.kind == VerdictKind.CANNOT_EXPLAIN:
            # only where nothing is measured: no factor, and no timeline whose calls show their split-K, aux, gaps
            assert not case.factors, (case.name, v.sentence, [f.name for f in case.factors])
            assert not (case.timing.source == "timeline" and case.timing.gemm_ns_total), (
                case.name,
                v.sentence,
            )
        if v.kind == VerdictKind.NO_MEASURED_LOSS:
            # measured without a rate, losing nothing: what stays unknown and how to learn it
            assert not losing and v.factor is None and v.unknown and v.capture_hint, (case.name, v)
            assert v.unknown in v.sentence, (case.name, v)
        _ncu_finding_exact(case)
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


def test_every_shared_file_tracekit_reads_is_checked(shared_data: Path) -> None:
    """The shared files left out of the check are only those tracekit does not read (notes, peers' numbers,
    metric lists) or reads only through Nsight Systems (``.nsys-rep``): a file a detection bug drops would
    otherwise leave the check silently."""
    left_out = [
        p
        for p in shared_data.rglob("*")
        if p.is_file() and p.relative_to(shared_data).as_posix() not in SHARED_FILES
    ]
    for path in left_out:
        try:
            assert detect_kind(path) == "nsys-rep", path
        except TracekitError as exc:
            assert "is not a file tracekit reads" in str(exc), (path, str(exc))
    folders = {rel.split("/")[1] for rel in SHARED_FILES if rel.startswith("thirdparty/")}
    assert folders == {p.name for p in (shared_data / "thirdparty").iterdir() if p.is_dir()}


TOGETHER = {
    "h200-probe nsys + ncu": (("h200-probe/probe.ncu-rep", "h200-probe/probe.sqlite"), None),
    "rtx50 csv": (tuple(f"thirdparty/llm-perf-opt-rtx50/kernel_{k}_ncu.{p}.csv" for k in ("0003", "0005", "0016") for p in ("details", "metrics")), None),
    "rtx50 csv --device rtx-pro-6000": (tuple(f"thirdparty/llm-perf-opt-rtx50/kernel_{k}_ncu.{p}.csv" for k in ("0003", "0005", "0016") for p in ("details", "metrics")), "rtx-pro-6000"),
}  # fmt: skip
"""Shared files imported together, as users import them (a timeline with its Nsight Compute report; an ncu CSV
export's details with its metrics, with and without the GPU named), where the verdicts differ from each file's."""


@pytest.mark.slow
@pytest.mark.parametrize("name", sorted(TOGETHER))
def test_verdicts_and_summary_agree_on_shared_files_imported_together(name: str, shared_data: Path) -> None:
    from tracekit.devices import lookup_device

    rels, device = TOGETHER[name]
    frames = combine([read_file(shared_data / rel) for rel in rels])
    analysis = analyze_frames(frames, path=name, device=lookup_device(device) if device else None)
    assert analysis.cases
    _agree(analysis)


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


def test_a_control_without_flops_says_what_was_measured_not_cannot_explain() -> None:
    """The Triton plant's control (132 CTAs of one per SM on 132 SMs: one full wave, no split-K, no aux, no
    gaps) from its nsys timeline alone, no shape, no counters: every factor measured without a FLOP count loses
    nothing, so its verdict says what was measured and found not losing, what stays unknown and how to learn it,
    never "cannot-explain"."""
    from tests.support.cases import cases
    from tracekit.frames import SPECS

    run = open_run(ROOT / "samples" / "h200-foreign-triton_waves")
    frames = dict(load_frames(run))
    for name in ("ncu", "ncu_metrics", "ncu_rules"):
        frames[name] = SPECS[name].empty()
    by_name = {c.name: c for c in cases(frames, environment=run.manifest.get("environment"))}
    control = by_name["triton_waves_control"]
    assert control.flops.per_call is None and control.timing.source == "timeline"
    v = control.verdict
    assert v.kind == VerdictKind.NO_MEASURED_LOSS and v.factor is None and v.lost_ns_total is None
    waves = next(f for f in control.factors if f.name == "waves")
    assert waves.value >= NO_LOSS and "waves x1.000 (132 CTAs, 1 wave)" in v.sentence
    calls = control.timing.calls
    assert f"in its {calls} calls no split-K reduce" in v.sentence, v.sentence
    assert "achieved TFLOP/s" in (v.unknown or "") and "--ncu" in (v.capture_hint or "")


def test_a_launch_statistics_report_with_a_full_wave_is_measured_not_cannot_explain(
    shared_data: Path,
) -> None:
    """esmm-research's report of launch statistics only: cuBLAS's ampere_sgemm_128x64_nn fills two whole waves
    (640 CTAs), measured from its grid and occupancy; nothing else is in the report. Its verdict says the waves
    lose nothing and which sections to capture, and only its profiling-failed kernel in another report (no
    factor at all) stays "cannot-explain"."""
    rel = "thirdparty/esmm-research/profile_049ec61.ncu-rep"
    a = analyze_frames(combine([read_file(shared_data / rel)]), path=rel)
    sgemm = next(c for c in a.cases if c.name.startswith("ampere_sgemm_128x64_nn"))
    v = sgemm.verdict
    assert v.kind == VerdictKind.NO_MEASURED_LOSS, v.sentence
    assert "waves x1.000 (640 CTAs, 2 waves)" in v.sentence
    assert "only launch statistics" in (v.unknown or "") and "SpeedOfLight" in (v.capture_hint or "")
    assert VerdictKind.CANNOT_EXPLAIN not in {c.verdict.kind for c in a.cases}
    rel = "thirdparty/esmm-research/profile_e22c00d.ncu-rep"
    failed = analyze_frames(combine([read_file(shared_data / rel)]), path=rel)
    [v] = [c.verdict for c in failed.cases if c.verdict.kind == VerdictKind.CANNOT_EXPLAIN]
    assert "profiling failed" in v.sentence


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


def test_nsight_computes_finding_is_the_verdict_where_it_is_the_largest_loss_of_a_rated_case() -> None:
    """The SIMT SGEMM capped at one CTA per SM by 200 KB of shared memory, with the counters that count its FLOPs:
    Nsight Compute's TheoreticalOccupancy finding (est. speed-up 87.5%) is a measured loss carved out of the
    in-kernel loss; it is the largest, so the verdict names it with its cost in time, the limiter, the achieved
    occupancy and ncu's estimate, and the factors still multiply to the achieved rate. Its control (full
    occupancy) is named by its stalls, never by occupancy."""
    a = analyze_run(open_run(ROOT / "samples" / "h200-foreign-simt_smem"))
    by_name = {c.name: c for c in a.cases}
    capped, control = by_name["sgemm_smem_capped"], by_name["sgemm_smem_control"]
    assert capped.timing.kernel_tflops is not None and capped.peak is not None
    v = capped.verdict
    assert v.kind == VerdictKind.EXPLAINED and v.factor == "ncu finding"
    assert v.cause == "occupancy limited by shared memory"
    f = next(f for f in capped.factors if f.name == "ncu finding")
    assert f.evidence["ncu_rule"] == "TheoreticalOccupancy" and f.evidence["ncu_speedup_pct"] == 87.5
    assert f.value == pytest.approx(0.125)
    assert f.evidence["occupancy_limited_by"] == "shared memory: 200 KB per block"
    assert f.evidence["achieved_occupancy_pct"] == pytest.approx(12.66, abs=0.05)
    assert (
        "estimates the kernel 88% faster" in f.sentence and "1 CTA/SM, limited by shared memory" in f.sentence
    )
    assert (
        v.lost_ns_total == pytest.approx(f.lost_ns_total)
        and v.lost_ns_total > 0.5 * capped.timing.gemm_ns_total
    )
    _ncu_finding_exact(capped)
    g = next(f for f in control.factors if f.name == "ncu finding")
    assert g.evidence["ncu_rule"] == "CPIStall" and "occupancy" not in (g.cause or "")


def test_a_tail_effect_finding_is_the_waves_factor_not_counted_twice() -> None:
    """The Triton plant of 133 CTAs on 132 SMs: Nsight Compute's LaunchConfiguration rule says "Tail Effect"
    (est. speed-up 50%), which the waves factor measures from the grid. The verdict is waves, and the finding is
    no factor of its own."""
    a = analyze_run(open_run(ROOT / "samples" / "h200-foreign-triton_waves"))
    bad = next(c for c in a.cases if c.name == "triton_waves_bad")
    assert any(r.rule == "LaunchConfiguration" and (r.speedup_pct or 0) >= 49 for r in bad.ncu.rules)
    assert bad.verdict.factor == "waves"
    assert all(f.evidence.get("ncu_rule") != "LaunchConfiguration" for f in bad.factors)


def test_the_planted_shared_memory_occupancy_is_named_by_nsight_computes_finding() -> None:
    """The planted Triton GEMM whose 192 KiB of shared memory per CTA leaves one CTA per SM: Nsight Compute's
    occupancy finding, within the in-kernel loss the kernel's rate measures, is the verdict, with its limiter."""
    [c] = analyze_run(open_run(ROOT / "samples" / "h200-planted-d-smem-occupancy")).cases
    v = c.verdict
    assert v.factor == "ncu finding" and v.cause == "occupancy limited by shared memory", v
    f = next(f for f in c.factors if f.name == "ncu finding")
    assert f.evidence["occupancy_limited_by"].startswith("shared memory: 192 KB")
    assert "capped_to_in_kernel_loss" in f.evidence and f.value == pytest.approx(
        f.evidence["capped_to_in_kernel_loss"], abs=1e-4
    )
    assert next(f for f in c.factors if f.name == "in-kernel").value == pytest.approx(1.0)


NCU_REPORTS = ("esmm-research", "yzwang2000-cudacode", "panjd123-cutlass", "sglang-fork")
"""The shared Nsight Compute reports of SIMT and CUTLASS kernels, made with default-ish sections."""


def test_occupancy_and_stalls_name_the_in_kernel_loss_on_the_shared_ncu_reports(shared_data: Path) -> None:
    """Wherever Nsight Compute measured a latency-bound kernel (SMs and DRAM both below 80% of peak) and its
    occupancy limiter, the in-kernel loss names what holds it (occupancy with its limiter, the stall, too few
    CTAs, or latency at its occupancy), never the catch-all "kernel inefficiency". esmm-research's SIMT ladder
    (an A10G report with no stall reasons and no speed-up estimates): two_blocktiling is latency-bound at 17%
    occupancy, limited by registers and shared memory."""
    seen = 0
    for folder in NCU_REPORTS:
        for path in sorted((shared_data / "thirdparty" / folder).glob("*.ncu-rep")):
            rel = path.relative_to(shared_data).as_posix()
            for c in analyze_frames(combine([read_file(path)]), path=rel).cases:
                f = next((f for f in c.factors if f.name == "in-kernel"), None)
                ev = f.evidence if f is not None else {}
                if f is None or f.value >= NO_LOSS or ev.get("theoretical_occupancy_pct") is None:
                    continue
                sm, dram = ev.get("sm_throughput_pct"), ev.get("dram_throughput_pct")
                if sm is None or dram is None or max(sm, dram) >= 80 or not ev.get("occupancy_limiter"):
                    continue
                seen += 1
                assert f.cause != "kernel inefficiency", (rel, c.name, f.remedy)
    assert seen >= 10  # esmm-research's ladder and panjd123's CUTLASS GEMMs
    rel = "thirdparty/esmm-research/profile_output_a62323b.ncu-rep"
    a = analyze_frames(combine([read_file(shared_data / rel)]), path=rel)
    v = next(c.verdict for c in a.cases if c.name.startswith("void two_blocktiling"))
    assert v.factor == "in-kernel"
    assert v.cause == "latency-bound at 17% occupancy (limited by registers / shared memory)"
    assert "SMs (33% of peak)" in (v.remedy or "") and "__launch_bounds__" in (v.remedy or "")


@pytest.mark.slow
def test_the_docs_table_of_verdict_kinds_is_todays(shared_data: Path) -> None:
    """docs/CASES.md's verdict kinds per shared file ("now") are what today's code gives: a change of verdict
    policy regenerates the table (benchmarks/verdict_kinds.py)."""
    import importlib.util
    from collections import Counter

    spec = importlib.util.spec_from_file_location("verdict_kinds", ROOT / "benchmarks" / "verdict_kinds.py")
    assert spec is not None and spec.loader is not None
    vk = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(vk)
    text = (ROOT / "docs" / "CASES.md").read_text()
    part = text.split("\n### Verdict kinds per shared file\n", 1)[1].split("\n#", 1)[0]
    rows = [line.strip("|").split("|") for line in part.splitlines() if line.startswith("| ")][1:]
    checked = 0
    for cells in rows:
        name, now = cells[0].strip(), cells[3].strip()
        if name.startswith("**"):
            continue
        key = next((k for k in vk.TOGETHER if k.removeprefix("thirdparty/") == name), None)
        rels = (
            vk.TOGETHER[key] if key else ((name if name.startswith("h200-probe/") else f"thirdparty/{name}"),)
        )
        analysis = analyze_frames(combine([read_file(shared_data / r) for r in rels]), path=name)
        kinds = Counter(str(c.verdict.kind) for c in analysis.cases)
        assert vk._kinds(dict(kinds)) == now, (name, now)
        checked += 1
    assert checked == len(SHARED_FILES) + len(vk.TOGETHER)


def test_every_view_renders_a_no_measured_loss_verdict() -> None:
    """The H200 gloo ranks' unshaped nvjet GEMM (one full wave, no split-K or aux, 1% gaps): explain's card,
    show --json's row and the report's waterfall all render the stored verdict, its sentence and how to learn the
    rest (the TUI's case screen is checked on every shared file by tests/tui/test_cross_view.py)."""
    import json

    from click.testing import CliRunner

    from tracekit.cli import cli

    run = ROOT / "samples" / "h200-ranks-gloo"
    [case] = [c for c in analyze_run(open_run(run)).cases if c.verdict.kind == VerdictKind.NO_MEASURED_LOSS]
    runner = CliRunner()
    res = runner.invoke(cli, ["explain", str(run), "--all"], env={"COLUMNS": "400"})
    assert res.exit_code == 0, res.output
    flat = " ".join(res.output.replace("│", " ").split())
    assert "verdict: no-measured-loss — measured, and losing nothing: waves x1.000 (132 CTAs, 1 wave)" in flat
    assert "to learn it: capture with `tracekit capture --ncu`" in flat
    res = runner.invoke(cli, ["show", str(run), "--json"])
    assert res.exit_code == 0, res.output
    [row] = [g for g in json.loads(res.stdout)["gemms"] if g["id"] == case.id]
    assert row["verdict"] == row["verdict_kind"] == "no-measured-loss"
    res = runner.invoke(cli, ["report", str(run), "--all"])
    assert res.exit_code == 0, res.output
    assert f"**Verdict: no-measured-loss.** {case.verdict.sentence}" in res.output
