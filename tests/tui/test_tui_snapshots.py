"""Appearance of ``tracekit view``, pinned as SVG snapshots (pytest-textual-snapshot), one group per screen.

``TestSamples`` runs on the committed H200 samples (samples/, no ../shared needed: these run in CI), every screen
at 80x24 and the overview at 200x50. The other groups use the H200 probe imported from ../shared (skipped where
absent) and the runs built in test_tui.py from tracekit's JSONL records. Creation times are fixed (the samples'
are in their run.json), so the snapshots are stable. Update after a deliberate change, or after the GEMM
analysis changes a number, with ``pytest tests/tui/test_tui_snapshots.py --snapshot-update`` and look at the report
before committing.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest
from test_tui import make_measured_run, make_nasty_run, probe_run, wait_loaded  # noqa: F401  (fixtures)

from tracekit.tui.app import make_app

SAMPLES = Path(__file__).resolve().parents[2] / "samples"


@pytest.fixture(scope="module")
def bench_run(tmp_path_factory: pytest.TempPathFactory) -> Path:
    return make_measured_run(tmp_path_factory.mktemp("snap") / "h200-bench")


@pytest.fixture(scope="module")
def names_run(tmp_path_factory: pytest.TempPathFactory) -> Path:
    return make_nasty_run(tmp_path_factory.mktemp("snap") / "nasty-names")


def keys(*presses: str) -> Any:
    async def run_before(pilot: Any) -> None:
        await wait_loaded(pilot)
        for key in presses:
            await pilot.press(key)
            await wait_loaded(pilot)

    return run_before


class TestOverview:
    def test_probe_80x24(self, snap_compare: Any, probe_run: Path) -> None:  # noqa: F811
        assert snap_compare(make_app(probe_run), terminal_size=(80, 24), run_before=keys())

    def test_bench_wide_light(self, snap_compare: Any, bench_run: Path) -> None:
        assert snap_compare(make_app(bench_run, theme="light"), terminal_size=(160, 40), run_before=keys())

    def test_no_color(self, snap_compare: Any, bench_run: Path, monkeypatch: pytest.MonkeyPatch) -> None:
        monkeypatch.setenv("NO_COLOR", "1")
        assert snap_compare(make_app(bench_run), terminal_size=(80, 24), run_before=keys())


class TestGemmDetail:
    def test_probe_waterfall(self, snap_compare: Any, probe_run: Path) -> None:  # noqa: F811
        assert snap_compare(make_app(probe_run), terminal_size=(100, 40), run_before=keys("enter"))


class TestKernels:
    def test_hostile_names(self, snap_compare: Any, names_run: Path) -> None:
        assert snap_compare(make_app(names_run), terminal_size=(80, 24), run_before=keys("k"))


class TestFailures:
    def test_matrix_and_text(self, snap_compare: Any, bench_run: Path) -> None:
        assert snap_compare(
            make_app(bench_run), terminal_size=(100, 30), run_before=keys("f", "down", "down", "down")
        )


class TestPlot:
    def test_tflops_vs_m(self, snap_compare: Any, bench_run: Path) -> None:
        assert snap_compare(make_app(bench_run), terminal_size=(100, 30), run_before=keys("p"))


class TestHelp:
    def test_help_80x24(self, snap_compare: Any, bench_run: Path) -> None:
        assert snap_compare(make_app(bench_run), terminal_size=(80, 24), run_before=keys("question_mark"))


class TestSamples:
    """The committed samples: what a user sees first, at 80x24 unless said."""

    def test_bench_overview_80x24(self, snap_compare: Any) -> None:
        assert snap_compare(make_app(SAMPLES / "h200-bench-gemm"), terminal_size=(80, 24), run_before=keys())

    def test_capture_overview_200x50(self, snap_compare: Any) -> None:
        app = make_app(SAMPLES / "h200-capture-gemm")
        assert snap_compare(app, terminal_size=(200, 50), run_before=keys())

    def test_capture_overview_light_no_color(
        self, snap_compare: Any, monkeypatch: pytest.MonkeyPatch
    ) -> None:
        monkeypatch.setenv("NO_COLOR", "1")
        app = make_app(SAMPLES / "h200-capture-gemm", theme="light")
        assert snap_compare(app, terminal_size=(80, 24), run_before=keys())

    def test_capture_gemm_detail_80x24(self, snap_compare: Any) -> None:
        app = make_app(SAMPLES / "h200-capture-gemm")
        assert snap_compare(app, terminal_size=(80, 24), run_before=keys("down", "enter"))

    def test_capture_gemm_detail_ncu_findings(self, snap_compare: Any) -> None:
        app = make_app(SAMPLES / "h200-capture-gemm")
        assert snap_compare(app, terminal_size=(100, 40), run_before=keys("down", "enter", "end"))

    def test_capture_kernels_80x24(self, snap_compare: Any) -> None:
        app = make_app(SAMPLES / "h200-capture-gemm")
        assert snap_compare(app, terminal_size=(80, 24), run_before=keys("k"))

    def test_bench_failures_80x24(self, snap_compare: Any) -> None:
        app = make_app(SAMPLES / "h200-bench-gemm")
        assert snap_compare(app, terminal_size=(80, 24), run_before=keys("f"))

    def test_bench_plot_80x24(self, snap_compare: Any) -> None:
        app = make_app(SAMPLES / "h200-bench-gemm")
        assert snap_compare(app, terminal_size=(80, 24), run_before=keys("p"))

    def test_compare_capture_probe_80x24(self, snap_compare: Any) -> None:
        app = make_app(SAMPLES / "h200-capture-gemm", compare=SAMPLES / "h200-gemm-probe")
        assert snap_compare(app, terminal_size=(80, 24), run_before=keys())

    def test_picker_80x24(self, snap_compare: Any, monkeypatch: pytest.MonkeyPatch) -> None:
        monkeypatch.chdir(SAMPLES.parent)  # the title names the folder as given: the same in every checkout
        assert snap_compare(make_app(Path("samples")), terminal_size=(80, 24), run_before=keys())

    def test_help_200x50(self, snap_compare: Any) -> None:
        app = make_app(SAMPLES / "h200-gemm-probe")
        assert snap_compare(app, terminal_size=(200, 50), run_before=keys("question_mark"))
