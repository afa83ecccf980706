"""The typed analysis model (analyzers/analysis): the case model's GemmCase + Waterfall converted to a Case, its
JSON round trip and its flat frame, on the committed H200 samples."""

from __future__ import annotations

from pathlib import Path

import msgspec
import polars as pl
import pytest

from tracekit.analyzers.analysis import Analysis, Case, RunInfo, Summary, case_from_gemm
from tracekit.analyzers.explain import explain_case, verdict_of
from tracekit.analyzers.gemm import build_cases
from tracekit.analyzers.store import load_frames, open_run


def _cases(sample: Path) -> list[tuple[object, object, Case]]:
    run = open_run(sample)
    frames = load_frames(run)
    out = []
    for gc in build_cases(frames, environment=run.manifest.get("environment")):
        wf = explain_case(gc)
        out.append((gc, wf, case_from_gemm(gc, wf)))
    return out


def test_converted_case_keeps_the_waterfall_numbers(samples_dir: Path) -> None:
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
    assert msgspec.json.decode(data)["schema_version"] == 3
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


KERNEL_NOT_IN_THE_MODEL = {"blocks_per_sm", "est_occupancy_pct"}
"""What the case model knows of a kernel that the Analysis does not carry (the in-kernel factor's evidence does)."""


def _every_field_set(cls: type) -> object:
    """An instance of a dataclass with every field set to a value of its type, no two alike."""
    from dataclasses import fields

    values: dict[str, object] = {}
    for i, f in enumerate(fields(cls)):
        kind = str(f.type)
        values[f.name] = i + 2 if kind.startswith("int") else i + 0.5 if kind.startswith("float") else f"v{i}"
    return cls(**values)


def test_the_model_kernel_is_the_case_parts_field_for_field() -> None:
    """The Analysis model's KernelRef holds the fields of the case model's KernelInfo, in the same order (the
    model imports without polars, so it is not built from it): a field added to one side only, or one the
    conversion leaves behind, fails here. The shape is one class, the model's."""
    from dataclasses import asdict, fields

    from tracekit.analyzers.analysis import model
    from tracekit.analyzers.analysis.convert import _kernel
    from tracekit.analyzers.gemm import KernelInfo, Shape

    assert Shape is model.Shape

    kept = [f.name for f in fields(KernelInfo) if f.name not in KERNEL_NOT_IN_THE_MODEL]
    assert kept == list(model.KernelRef.__struct_fields__)
    # a name listed here that left the case model fails too
    assert KERNEL_NOT_IN_THE_MODEL.issubset(f.name for f in fields(KernelInfo))
    kernel = _every_field_set(KernelInfo)
    want = {k: v for k, v in asdict(kernel).items() if k not in KERNEL_NOT_IN_THE_MODEL}  # type: ignore[call-overload]
    assert msgspec.structs.asdict(_kernel(kernel)) == want


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
