"""Appearance of ``tracekit view``, pinned as SVG snapshots (pytest-textual-snapshot), one group per screen.

Runs are the H200 probe imported from real files and the benchmark run built in test_tui.py from tracekit's
JSONL records; their creation time is fixed so the snapshots are stable. Update after a deliberate change with
``pytest tests/test_tui_snapshots.py --snapshot-update`` and look at the report before committing.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest
from test_tui import make_measured_run, make_nasty_run, probe_run, wait_loaded  # noqa: F401  (fixtures)

from tracekit.tui.app import make_app


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
