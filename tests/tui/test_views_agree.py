"""One analysis, every view: ``show --json``, ``explain --json``, ``report --format json``, the explain text and
the TUI give the same numbers for the same case (issue 26: ``show --json`` once said 596 TFLOP/s, kernel only,
where ``explain`` and ``view`` said 529, with gaps, unlabelled).

Each view is run as a user runs it (the CLI's entry point, the Textual app under a pilot) on committed H200
samples, and the cases are matched by their id: achieved and kernel rate, time in calls, calls, % of peak and the
verdict must agree to the last digit the view keeps."""

from __future__ import annotations

import json

import pytest
from test_tui import run_async, wait_loaded

from tests.support.views import SAMPLES, cli, verdict_label

RUNS = ["h200-capture-gemm", "h200-foreign-simt_smem", "h200-foreign-eager_host_gaps"]


@pytest.mark.parametrize("name", RUNS)
def test_show_explain_report_and_text_agree(
    name: str, capsys: pytest.CaptureFixture[str], monkeypatch: pytest.MonkeyPatch
) -> None:
    run = str(SAMPLES / name)
    explained = json.loads(cli(capsys, monkeypatch, "explain", run, "--json"))
    shown = json.loads(cli(capsys, monkeypatch, "show", run, "--json"))
    reported = json.loads(cli(capsys, monkeypatch, "report", run, "--format", "json"))
    cases = explained["cases"]
    assert cases, name
    # the same cases in the same order (most time in calls first) everywhere
    assert (
        [g["id"] for g in shown["gemms"]] == [c["id"] for c in cases] == [c["id"] for c in reported["cases"]]
    )
    spans = [c["timing"]["span_ns_total"] for c in cases]
    assert spans == sorted(spans, reverse=True)
    assert reported["summary"] == explained["summary"] == shown["summary"]
    for c, g, r in zip(cases, shown["gemms"], reported["cases"], strict=True):
        t = c["timing"]
        assert r == c  # the report carries the Analysis' case itself
        assert g["achieved_tflops"] == t["achieved_tflops"] and g["kernel_tflops"] == t["kernel_tflops"]
        assert g["gpu_time_us"] == pytest.approx(t["span_ns_total"] / 1e3, rel=1e-12)
        assert g["time_us"] == pytest.approx(t["median_call"]["span_ns"] / 1e3, rel=1e-12)
        assert g["calls"] == t["calls"] and g["pct_of_peak"] == c["pct_of_peak"]
        assert g["verdict"] == verdict_label(c["verdict"])
        # "achieved" and "kernel rate" are both there and differ where the call has more than its GEMM kernel
        if t["aux_ns_total"] + t["gap_ns_total"] > 0.01 * t["span_ns_total"] and t["achieved_tflops"]:
            assert t["achieved_tflops"] < t["kernel_tflops"]
    # the text card of the top case prints the same two rates, named
    text = cli(capsys, monkeypatch, "explain", run, "--top", "1")
    top = cases[0]["timing"]
    if top["achieved_tflops"] is not None:
        assert f"achieved {top['achieved_tflops']:,.1f} TFLOP/s" in text
        assert f"kernel rate {top['kernel_tflops']:,.1f} TFLOP/s" in text
    assert text.count("╭─ #") == 1


@pytest.mark.parametrize("name", RUNS[:2])
@run_async
async def test_the_tui_shows_the_same_numbers(
    name: str, capsys: pytest.CaptureFixture[str], monkeypatch: pytest.MonkeyPatch
) -> None:
    from tracekit.tui.app import make_app
    from tracekit.tui.screens.gemm import GemmScreen

    explained = json.loads(cli(capsys, monkeypatch, "explain", str(SAMPLES / name), "--json"))
    by_id = {c["id"]: c for c in explained["cases"]}
    app = make_app(SAMPLES / name)
    async with app.run_test(size=(160, 40)) as pilot:
        await wait_loaded(pilot)
        screen = app.screen
        analysis = screen.analysis
        assert [c.id for c in analysis.cases] == list(by_id)
        table = screen.table
        assert table.row_count == len(by_id)
        for i in range(table.row_count):
            row = table.row(i)
            c = by_id[analysis.cases[row["gemm_id"]].id]
            assert row["tflops"] == c["timing"]["achieved_tflops"]
            assert row["kernel_tflops"] == c["timing"]["kernel_tflops"]
            assert row["gpu_ns"] == c["timing"]["span_ns_total"] and row["calls"] == c["timing"]["calls"]
            assert row["pct_of_peak"] == c["pct_of_peak"] and row["verdict"] == verdict_label(c["verdict"])
        await pilot.press("enter")  # the first row: the case with the most time in calls
        await wait_loaded(pilot)
        detail = app.screen
        assert isinstance(detail, GemmScreen)
        first = explained["cases"][0]
        assert detail.case.id == first["id"]
        assert detail.case.timing.achieved_tflops == first["timing"]["achieved_tflops"]
        summary = str(detail.query_one("#gemm-summary").render())
        if first["timing"]["achieved_tflops"] is not None:
            assert f"achieved {first['timing']['achieved_tflops']:,.0f} TFLOP/s" in summary
            assert f"kernel rate {first['timing']['kernel_tflops']:,.0f} TFLOP/s" in summary
