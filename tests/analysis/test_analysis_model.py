"""The typed analysis model (analyzers/analysis): an explained GEMM's one Case (its evidence and Waterfall), its
JSON round trip and its flat frame, on the committed H200 samples; the case builders use the model's parts."""

from __future__ import annotations

from pathlib import Path

import msgspec
import polars as pl
import pytest

from tracekit.analyzers.analysis import ANALYSIS_SCHEMA_VERSION, Analysis, Case, RunInfo, Summary, case_of
from tracekit.analyzers.explain import explain_case, verdict_of
from tracekit.analyzers.gemm import build_cases
from tracekit.analyzers.store import load_frames, open_run


def _cases(sample: Path) -> list[tuple[object, object, Case]]:
    run = open_run(sample)
    frames = load_frames(run)
    out = []
    for gc in build_cases(frames, environment=run.manifest.get("environment")):
        wf = explain_case(gc)
        out.append((wf.case, wf, case_of(wf)))
    return out


def test_the_case_keeps_the_waterfall_numbers(samples_dir: Path) -> None:
    triples = _cases(samples_dir / "h200-capture-gemm")
    assert triples
    for gc, wf, case in triples:
        assert case.timing.achieved_tflops == pytest.approx(gc.achieved_tflops)  # type: ignore[attr-defined]
        assert case.timing.kernel_tflops == pytest.approx(gc.kernel_tflops)  # type: ignore[attr-defined]
        assert [f.name for f in case.factors] == [f.name for f in wf.factors]  # type: ignore[attr-defined]
        t = case.timing
        # one formula: the span is GEMM + aux + gap, summed over the calls (not a median times the calls)
        assert t.span_ns_total == pytest.approx(t.gemm_ns_total + t.aux_ns_total + t.gap_ns_total)
        assert t.span_ns_total == pytest.approx(gc.timing.span_ns_total)  # type: ignore[attr-defined]
        assert t.achieved_tflops == pytest.approx(case.flops.total / t.span_ns_total / 1e3)  # type: ignore[operator]
        assert t.kernel_tflops == pytest.approx(case.flops.total / t.gemm_ns_total / 1e3)  # type: ignore[operator]
        mid = t.median_call
        assert mid is not None and mid.span_ns == pytest.approx(mid.gemm_ns + mid.aux_ns + mid.gap_ns)
        if t.calls > 1:  # one real call, between the 10th and 90th percentile of the spans
            assert t.span_ns.p10 <= mid.span_ns <= t.span_ns.p90  # type: ignore[operator]
        if case.peak is not None and case.timing.achieved_tflops:
            assert case.pct_of_peak == pytest.approx(
                min(100.0, 100 * case.timing.achieved_tflops / case.peak.tflops)
            )
        assert case.verdict == verdict_of(wf)  # type: ignore[arg-type]


def test_no_remedy_for_a_factor_that_costs_nothing(samples_dir: Path) -> None:
    factors = [f for *_, c in _cases(samples_dir / "h200-bench-gemm") for f in c.factors]
    assert any(f.value >= 0.995 for f in factors)
    assert all(f.remedy is None for f in factors if f.value >= 0.995)
    assert any(f.remedy for f in factors if f.value < 0.995)


def test_analysis_json_round_trip_and_frame(samples_dir: Path) -> None:
    cases = [c for *_, c in _cases(samples_dir / "h200-planted-b-waves")]
    a = Analysis(run=RunInfo(path="x"), summary=Summary(cases=len(cases)), cases=cases)
    data = a.to_json()
    assert Analysis.from_json(data) == a
    assert msgspec.json.decode(data)["schema_version"] == ANALYSIS_SCHEMA_VERSION
    frame = a.cases_frame()
    assert frame.height == len(cases)
    assert frame["id"].to_list() == [c.id for c in cases]
    assert frame["achieved_tflops"].to_list() == [c.timing.achieved_tflops for c in cases]
    # no empty strings anywhere: None means unknown
    texts = [v for col in frame.iter_columns() if col.dtype == pl.String for v in col]
    assert texts and "" not in texts


def test_the_documented_json_schema_is_current() -> None:
    """docs/analysis.schema.json is the model's JSON Schema: a field added, renamed or retyped in the model
    without the file written again (and docs/ANALYSIS.md read again) fails here."""
    import json

    from tracekit.analyzers.analysis.model import ANALYSIS_SCHEMA_VERSION, json_schema

    path = Path(__file__).resolve().parents[2] / "docs" / "analysis.schema.json"
    assert json.loads(path.read_text()) == json.loads(json.dumps(json_schema())), (
        'regenerate: python -c "import json; from tracekit.analyzers.analysis.model import json_schema; '
        "open('docs/analysis.schema.json', 'w').write(json.dumps(json_schema(), indent=1, sort_keys=True) + '\\n')\""
    )
    doc = (path.parent / "ANALYSIS.md").read_text()
    assert f"schema_version {ANALYSIS_SCHEMA_VERSION}" in doc


TWINS = ("KernelInfo", "Call", "AuxUse", "FusionUse", "Timing", "GemmCase")
"""Classes the case builders once had beside the Analysis model's own (a kernel, a call, an auxiliary kernel, a
fusion candidate, a timing, the case): none may come back."""


def test_the_case_builders_use_the_model_parts(samples_dir: Path) -> None:
    """One case model: the modules that find and explain cases define none of :data:`TWINS`, and the parts of a
    case built from a real sample are the Analysis model's own classes (a part added to the model is the part the
    builders fill)."""
    import importlib
    import inspect
    import pkgutil

    from tracekit.analyzers import analysis, explain, gemm, rules
    from tracekit.analyzers.analysis import model

    modules = [explain] + [
        importlib.import_module(f"{pkg.__name__}.{info.name}")
        for pkg in (gemm, rules, analysis)
        for info in pkgutil.iter_modules(pkg.__path__)
    ]
    for mod in modules:
        if mod is model:  # where the parts are defined, once
            continue
        own = {n for n, v in vars(mod).items() if inspect.isclass(v) and v.__module__ == mod.__name__}
        assert not own & set(TWINS), (mod.__name__, own & set(TWINS))
    cases = build_cases(load_frames(open_run(samples_dir / "h100-serve-torchprof")))
    assert cases
    with pytest.raises(AttributeError):  # frozen: a step that learns more makes a new one
        cases[0].name = "renamed"  # type: ignore[misc]
    for c in cases:
        assert type(c.kernel) is model.KernelRef and type(c.timing) is model.Timing
        assert all(type(u) is model.AuxKernel for u in c.aux)
        assert all(type(u) is model.FusionCandidate for u in c.fusion)
        assert c.timing.median_call is None or type(c.timing.median_call) is model.CallParts


FAILURE_NOT_IN_THE_MODEL = frozenset({"time_unix"})
"""Columns of the failures frame the Analysis' Failure leaves out (when it failed is the run's, not the GEMM's)."""


def test_the_failure_records_hold_the_failures_frame_column_for_column() -> None:
    """Three hand-kept field lists describe one failure: the failures frame's schema, the raw record
    (``records.Failure``: the frame's columns but ``failure_id``, in order) and the Analysis model's ``Failure``
    (the frame's columns, ``failure_id`` as ``id``, without :data:`FAILURE_NOT_IN_THE_MODEL`). The model is
    filled from the frame by name (analysis/build.py ``_failures``), so a column added to the frame and not to
    the model would be dropped from every JSON output, silently."""
    from tracekit.analyzers.analysis import model
    from tracekit.frames import FAILURES
    from tracekit.records import Failure as RecordFailure

    columns = list(FAILURES.schema)
    assert list(RecordFailure.__struct_fields__) == [c for c in columns if c != "failure_id"]
    expected = {"id" if c == "failure_id" else c for c in columns} - FAILURE_NOT_IN_THE_MODEL
    assert set(model.Failure.__struct_fields__) == expected
    assert set(columns) >= FAILURE_NOT_IN_THE_MODEL
