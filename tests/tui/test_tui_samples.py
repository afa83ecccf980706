"""``tracekit view`` on the committed H200 sample runs (samples/), through ``App.run_test()`` and Pilot.

These need nothing outside the checkout, so they are the TUI's tests in CI (the ones in test_tui.py on the
imported probe skip without ../shared). Assertions hold what the samples' files hold (the capture's own
measurements, the FP4 error texts the H200 gave); where the GEMM analysis sets a number, they check relations
(the 4096 GEMMs are faster than the M=16 ones) rather than the figure, which analyzers/gemm/ may refine.
"""

from __future__ import annotations

import json
import zipfile
from pathlib import Path
from typing import Any

import polars as pl
import pytest
from test_tui import run_async, table_text, wait_loaded

from tracekit.analyzers.breakdown.steps import OUTERMOST
from tracekit.analyzers.store import load_frames, open_run
from tracekit.run import MANIFEST

SAMPLES = Path(__file__).resolve().parents[2] / "samples"
CAPTURE = SAMPLES / "h200-capture-gemm"
BENCH = SAMPLES / "h200-bench-gemm"
PROBE = SAMPLES / "h200-gemm-probe"


def _rows(table: Any) -> list[dict[str, Any]]:
    return [table.row(i) for i in range(table.row_count)]


def _info_lines(screen: Any) -> list[str]:
    return str(screen.info.render()).split("\n")


# --- overview ---------------------------------------------------------------------------------------------------
@run_async
async def test_capture_overview_header_fits_80_columns_then_gemm_detail() -> None:
    from tracekit.tui.app import make_app
    from tracekit.tui.screens.gemm import GemmScreen
    from tracekit.tui.screens.overview import OverviewScreen

    app = make_app(CAPTURE)
    async with app.run_test(size=(80, 24)) as pilot:
        await wait_loaded(pilot)
        screen = app.screen
        assert isinstance(screen, OverviewScreen)
        # the header: run, status, failures (line 1); device and counts (line 2); the GPU's time by kernel class
        # (line 3: analyzers/breakdown); the summary: the largest losses in the calls' time (line 4) and what is unknown
        # (line 5, when anything is); each within 78 cells
        lines = _info_lines(screen)
        assert 4 <= len(lines) <= 5 and all(len(line) <= 78 for line in lines), lines
        # line 3 is the Analysis' headline: over the outermost ranges (the capture has no step ranges), saying so
        assert lines[2].startswith(f"time {OUTERMOST} (×401): GPU 0, 146.0 ms: idle 86%, gemm 6.4%")
        assert screen.analysis.breakdown.headline.startswith(lines[2].removeprefix("time ").rstrip("…"))
        assert lines[3].startswith("largest losses: ") and "(#1)" in lines[3]
        assert lines[0].startswith("h200-capture-gemm") and "no failures" in lines[0]
        assert "H200" in lines[1] and "1,982 kernels" in lines[1] and "30 ncu" in lines[1]
        assert "4 measured" in lines[1]
        rows = _rows(screen.table)
        measured = {(r["backend"], r["m"]) for r in rows if r["backend"].startswith("torch-")}
        assert measured == {(b, m) for b in ("torch-bf16", "torch-fp8-tensorwise") for m in (16, 4096)}
        # sort by TFLOP/s: a 4096-row GEMM leads, well ahead of M=16
        screen.sort_by("tflops")
        await wait_loaded(pilot)
        top = screen.table.row(0)
        assert top["m"] == 4096
        # filter to the bf16 GEMMs and open the large one
        await pilot.press("slash", *"torch-bf16 m>1000", "enter")
        await wait_loaded(pilot)
        assert [(r["backend"], r["m"]) for r in _rows(screen.table)] == [("torch-bf16", 4096)]
        await pilot.press("enter")
        await wait_loaded(pilot)
        detail = app.screen
        assert isinstance(detail, GemmScreen)
        assert detail.case.shape.m == 4096 and detail.case.backend == "torch-bf16"
        assert "in-kernel" in [f.name for f in detail.case.factors]
        assert "nvjet_sm90_tst_256x128" in table_text(detail.kernels_table, 1)
        # ncu's findings: link markup as words, no optional-metric notes, each distinct finding once
        rules = str(detail.rules_text.render())
        assert "CPIStall" in rules and "@section:" not in rules and "@url:" not in rules
        assert "optional metric" not in rules
        heads = [ln for ln in rules.split("\n") if ln.startswith(("OPTIMIZATION", "WARNING"))]
        assert len(heads) == len(set(heads))
        await pilot.press("escape")
        assert isinstance(app.screen, OverviewScreen)


@run_async
async def test_bench_overview_header_keeps_the_failure_count_in_view() -> None:
    from tracekit.tui.app import make_app

    app = make_app(BENCH)
    async with app.run_test(size=(80, 24)) as pilot:
        await wait_loaded(pilot)
        lines = _info_lines(app.screen)
        assert len(lines) == 4 and all(len(line) <= 78 for line in lines), lines
        assert "120 failures" in lines[0] and "48 GEMMs" in lines[1] and "48 measured" in lines[1]
        assert app.screen.table.row_count == 48


# --- failures ---------------------------------------------------------------------------------------------------
@run_async
async def test_bench_failures_matrix_holds_the_h200_fp4_errors_in_full() -> None:
    from textual.widgets import DataTable

    from tracekit.tui.app import make_app
    from tracekit.tui.screens.failures import FailuresScreen

    failures = load_frames(open_run(BENCH))["failures"]
    app = make_app(BENCH)
    async with app.run_test(size=(100, 30)) as pilot:
        await wait_loaded(pilot)
        await pilot.press("f")
        await pilot.pause()
        screen = app.screen
        assert isinstance(screen, FailuresScreen)
        m = screen.matrix
        assert {"torch-nvfp4", "flashinfer-fp4-cutlass", "sgl-fp4", "torch-bf16"} <= set(m.backends)
        assert len(m.shapes) == 12  # the glm5 shapes
        table = screen.query_one("#matrix", DataTable)
        # go to torch-nvfp4 at the first shape: the whole cuBLAS message and its traceback
        row = m.backends.index("torch-nvfp4")
        table.move_cursor(row=row, column=1)
        await pilot.pause()
        text = str(screen.detail.render())
        nvfp4 = failures.filter(pl.col("backend") == "torch-nvfp4").row(0, named=True)
        assert nvfp4["message"] in text and "CUBLAS_STATUS_NOT_SUPPORTED" in text
        assert nvfp4["traceback"].strip().splitlines()[-1] in text
        # FlashInfer's JIT failure: the chained ninja error is there, not cut
        table.move_cursor(row=m.backends.index("flashinfer-fp8"), column=1)
        await pilot.pause()
        text = str(screen.detail.render())
        assert "ninja: error:" in text and "caused by subprocess.CalledProcessError" in text
        # a measured cell shows its TFLOP/s
        table.move_cursor(row=m.backends.index("torch-bf16"), column=1)
        await pilot.pause()
        assert "TFLOP/s" in str(screen.detail.render())


# --- kernels, plot ----------------------------------------------------------------------------------------------
@run_async
async def test_capture_kernels_search_and_group() -> None:
    from tracekit.tui.app import make_app
    from tracekit.tui.screens.kernels import KernelsScreen

    kernels = load_frames(open_run(CAPTURE))["kernels"]
    nvjet = kernels.filter(pl.col("name").str.contains("nvjet")).height
    app = make_app(CAPTURE)
    async with app.run_test(size=(80, 24)) as pilot:
        await wait_loaded(pilot)
        await pilot.press("k")
        await wait_loaded(pilot)
        screen = app.screen
        assert isinstance(screen, KernelsScreen)
        assert screen.table.row_count == kernels.height == 1982
        await pilot.press("slash", *"nvjet", "enter")
        await wait_loaded(pilot)
        assert screen.table.row_count == nvjet > 0
        await pilot.press("escape", "g")
        await wait_loaded(pilot)
        groups = _rows(screen.table)
        assert len(groups) == kernels["name"].n_unique()
        assert sum(g["launches"] for g in groups) == kernels.height


@run_async
async def test_bench_plot_opens_on_one_n_by_k() -> None:
    from tracekit.tui.app import make_app
    from tracekit.tui.screens.plot import PlotScreen

    app = make_app(BENCH)
    async with app.run_test(size=(80, 24)) as pilot:
        await wait_loaded(pilot)
        await pilot.press("p")
        await pilot.pause()
        screen = app.screen
        assert isinstance(screen, PlotScreen)
        assert screen.data.nk_choices == [(768, 6144), (2048, 6144)]
        assert screen.data.nk in screen.data.nk_choices  # one N×K, not all mixed
        assert {b for b in screen.data.series} >= {"torch-bf16", "torch-fp8-tensorwise"}
        ms = [m for m, _ in screen.data.series["torch-bf16"]]
        assert ms == sorted(set(ms))  # one point per M
        text = str(screen.plot.render())
        assert "bf16 datasheet 989" in text and "torch-fp8-tensorwise" in text
        assert all(len(line) <= 80 for line in text.split("\n"))
        await pilot.press("n", "n")  # the other N×K, then all of them
        assert screen.data.nk is None


# --- compare ----------------------------------------------------------------------------------------------------
@run_async
async def test_compare_sample_with_itself_passes() -> None:
    from tracekit.tui.app import make_app
    from tracekit.tui.screens.compare import CompareScreen

    app = make_app(CAPTURE, compare=CAPTURE)
    async with app.run_test(size=(80, 24)) as pilot:
        await wait_loaded(pilot)
        await wait_loaded(pilot)
        screen = app.screen
        assert isinstance(screen, CompareScreen)
        rows = _rows(screen.table)
        assert rows and {r["status"] for r in rows} == {"unchanged"}
        assert "passes the gate" in str(screen.title_bar.render())


@run_async
async def test_compare_capture_with_probe_lists_only_in_and_details() -> None:
    from tracekit.tui.app import make_app
    from tracekit.tui.screens.compare import CompareScreen
    from tracekit.tui.screens.dialogs import TextScreen

    app = make_app(CAPTURE, compare=PROBE)
    async with app.run_test(size=(80, 24)) as pilot:
        await wait_loaded(pilot)
        await wait_loaded(pilot)
        screen = app.screen
        assert isinstance(screen, CompareScreen)
        rows = _rows(screen.table)
        both = {(r["backend"], r["m"]) for r in rows if not r["status"].startswith("only")}
        assert ("torch-bf16", 4096) in both and ("torch-fp8-tensorwise", 16) in both
        # the probe also ran M=256, which the capture did not
        assert {(r["backend"], r["m"]) for r in rows if r["status"] == "only in B"} >= {("torch-bf16", 256)}
        # each row stays one 80-column line
        assert all(len(table_text(screen.table, y)) == 80 for y in range(1, min(8, len(rows) + 1)))
        await pilot.press("enter")
        await pilot.pause()
        assert isinstance(app.screen, TextScreen)
        body = str(app.screen.query_one("#dialog-body").render())
        assert "h200-capture-gemm" in body and "h200-gemm-probe" in body and "µs" in body


# --- picker, help, the sample opened with no argument -------------------------------------------------------------
@run_async
async def test_picker_over_samples_and_help() -> None:
    from tracekit.tui.app import make_app
    from tracekit.tui.screens.dialogs import HelpScreen
    from tracekit.tui.screens.overview import OverviewScreen
    from tracekit.tui.screens.picker import RunPickerScreen

    app = make_app(SAMPLES)
    async with app.run_test(size=(80, 24)) as pilot:
        await wait_loaded(pilot)
        screen = app.screen
        assert isinstance(screen, RunPickerScreen)
        names = {r["name"] for r in _rows(screen.table)}
        assert names == {p.parent.name for p in SAMPLES.glob(f"*/{MANIFEST}")}
        await pilot.press("question_mark")
        assert isinstance(app.screen, HelpScreen)
        await pilot.press("escape")
        await pilot.press("slash", *"h200-bench", "enter", "enter")
        await wait_loaded(pilot)
        assert isinstance(app.screen, OverviewScreen) and app.screen.data.name == "h200-bench-gemm"


def test_no_argument_and_no_runs_opens_the_probe_sample(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    from tracekit.tui.app import first_screen
    from tracekit.tui.screens.overview import OverviewScreen

    monkeypatch.chdir(tmp_path)  # no ./runs here
    screen = first_screen(None)
    assert isinstance(screen, OverviewScreen) and screen.path.resolve() == PROBE.resolve()


def test_packaged_sample_is_the_committed_probe(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """An install without samples/ opens the copy inside the package: the committed run.json and frames."""
    from tracekit.tui import data, runs
    from tracekit.tui.app import first_screen
    from tracekit.tui.screens.overview import OverviewScreen

    bundled = data.packaged_sample()
    with zipfile.ZipFile(bundled) as z:
        members = {n: z.read(n) for n in z.namelist()}
    committed = {p.relative_to(PROBE).as_posix(): p.read_bytes() for p in PROBE.glob("frames/*.parquet")}
    manifest = json.loads(members.pop(MANIFEST))
    assert manifest.pop("bundle") == {"from": "h200-gemm-probe", "raw": False}
    assert manifest == json.loads((PROBE / MANIFEST).read_text())
    assert members == committed, (
        "tracekit/data/h200-gemm-probe.zip differs from samples/h200-gemm-probe: rebuild it with "
        "`tracekit bundle samples/h200-gemm-probe -o tracekit/data/h200-gemm-probe.zip`"
    )
    monkeypatch.setattr(runs, "samples_dir", lambda: tmp_path / "no-samples")
    monkeypatch.setenv("TRACEKIT_CACHE_DIR", str(tmp_path / "cache"))
    monkeypatch.chdir(tmp_path)
    screen = first_screen(None)
    assert isinstance(screen, OverviewScreen) and screen.path == bundled
    run = data.load_run(bundled)
    assert run.name == "h200-gemm-probe" and run.frames["kernels"].height == 99


@run_async
async def test_view_with_no_argument_paints_the_sample(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    from tracekit.tui.app import make_app
    from tracekit.tui.screens.overview import OverviewScreen

    monkeypatch.chdir(tmp_path)
    app = make_app(None)
    async with app.run_test(size=(80, 24)) as pilot:
        await wait_loaded(pilot)
        assert isinstance(app.screen, OverviewScreen)
        assert _info_lines(app.screen)[0].startswith("h200-gemm-probe")
        assert app.screen.table.row_count >= 6


@run_async
async def test_mouse_sorts_by_header_scrolls_and_opens_a_row() -> None:
    from tracekit.tui.app import make_app
    from tracekit.tui.screens.gemm import GemmScreen

    app = make_app(BENCH)
    async with app.run_test(size=(80, 24)) as pilot:
        await wait_loaded(pilot)
        screen = app.screen
        table = screen.table
        x = 0
        for col, w in table._layout(table.size.width):
            if col.key == "tflops":
                break
            x += w + 1
        await pilot.click("#table", offset=(x + 2, 0))  # the TFLOP/s header
        await wait_loaded(pilot)
        assert screen.sort_key == "tflops" and screen.descending
        tf = [table.row(i)["tflops"] for i in range(table.row_count)]
        assert tf == sorted(tf, reverse=True)
        from textual import events

        table.post_message(events.MouseScrollDown(table, 5, 5, 0, 1, 0, False, False, False))  # the wheel
        await pilot.pause()
        assert table.top == 3  # the wheel scrolls three rows
        await pilot.click("#table", offset=(5, 2))  # the second row on screen: the cursor moves there
        await pilot.pause()
        assert table.cursor == table.top + 1
        picked = table.cursor_row
        await pilot.click("#table", offset=(5, 2))  # a click on the highlighted row opens it
        await wait_loaded(pilot)
        assert isinstance(app.screen, GemmScreen) and app.screen.case.shape.m == picked["m"]


def test_run_header_fits_any_width_and_keeps_the_failure_count() -> None:
    from dataclasses import replace

    from tracekit.tui.data import analyze, load_run
    from tracekit.tui.screens.overview import run_header

    data = load_run(BENCH)
    analysis = analyze(data)
    long = replace(data, name="a-run-whose-name-is-far-too-long-" * 4)
    for width in (78, 100, 198):
        for d in (data, long):
            lines = str(run_header(d, analysis, width)).split("\n")
            assert 2 <= len(lines) <= 4 and all(len(line) <= width for line in lines), (width, lines)
            assert "120 failures" in lines[0] and "48 GEMMs" in lines[1]
            assert lines[2].startswith("largest losses: ")
    wide = str(run_header(data, analysis, 198)).split("\n")
    assert "NVIDIA H200" in wide[1] and "2026-12-02 18:48 UTC" in wide[0]
    assert "…" in str(run_header(long, analysis, 78)).split("\n")[0]
