"""The TUI's backend and kernel columns show the part that tells rows apart: a fixed column grows to its longest
name where the table has room (``torch-fp8-tensorwise`` was cut to ``torch-fp8-t…`` even at 160 columns), and a
name too long for its column is cut in the middle, so kernels that share a prefix (``sm80_xmma_gemm_…``) differ.

The overview's real column set on the committed sample's cases (tracekit.tui.tables.gemm_view), drawn by the
FrameTable's own layout; no app is started.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

import polars as pl
import pytest

from tracekit.tui.data import analyze, load_run
from tracekit.tui.screens.overview import GEMM_COLUMNS
from tracekit.tui.tables import gemm_view
from tracekit.tui.text import fit_middle
from tracekit.tui.widgets.frame_table import FrameTable


def _backend_cells(frame: pl.DataFrame, width: int) -> tuple[int, list[str]]:
    table = FrameTable(GEMM_COLUMNS, frame)
    layout = dict((c.key, w) for c, w in table._layout(width))
    col = next(c for c in GEMM_COLUMNS if c.key == "backend")
    w = layout["backend"]
    return w, [table._cell(col, col.text(r["backend"], r), w) for r in frame.to_dicts()]


@pytest.mark.parametrize("width", [80, 100, 160])
def test_backend_names_stay_apart(samples_dir: Path, width: int) -> None:
    data = load_run(samples_dir / "h200-bench-gemm")
    frame = gemm_view(analyze(data).cases_frame())
    names = frame["backend"].to_list()
    assert max(map(len, names)) > 12  # torch-fp8-tensorwise and the like
    w, cells = _backend_cells(frame, width)
    distinct = len(set(names))
    assert len({c.strip() for c in cells}) == distinct  # every backend still told apart
    if width >= 160:
        assert w >= max(map(len, names)) and all(c.strip() in names for c in cells)  # whole, not cut


def test_kernel_names_that_share_a_start_differ() -> None:
    """Every row of a 2-rank run read ``sm80_xmma_g…``: the shared start is dropped, the rest shown."""
    names = [
        "sm80_xmma_gemm_bf16bf16_bf16f32_f32_tn_n_tilesize128x128x64_stage3_warpsize2x2x1",
        "sm80_xmma_gemm_bf16bf16_bf16f32_f32_tn_n_tilesize64x64x64_stage4_warpsize2x2x1",
        "sm80_xmma_gemm_bf16bf16_bf16f32_f32_nn_n_tilesize256x128x32_stage3_warpsize4x2x1",
    ]
    columns = [c for c in GEMM_COLUMNS if c.key == "backend"]
    table = FrameTable(columns, pl.DataFrame({"backend": names}))
    for width in (16, 24):
        cells = [table._cell(columns[0], n, width) for n in names]
        assert len(set(cells)) == len(names), cells
        assert all(len(c) == width and c.startswith("…") for c in cells)
    assert fit_middle("short", 8) == "short   "


RANKS = Path(__file__).resolve().parents[2] / "samples" / "h200-ranks-gloo"


def _kernel_cells(screen: Any, rows: int) -> list[tuple[str, str]]:
    """(full name, visible kernel cell) of the first ``rows`` rows on screen."""
    table = screen.table
    layout = table._layout(table.size.width)
    col, w = layout[0]
    assert col.key == "name"
    out = []
    for y in range(1, min(rows, table.row_count) + 1):
        line = "".join(seg.text for seg in table.render_line(y))
        out.append((table.row(table.top + y - 1)["name"], line[1 : 1 + w]))
    return out


@pytest.mark.parametrize("width", [80, 120])
def test_kernels_screen_tells_a_2_rank_runs_kernels_apart(width: int) -> None:
    """The kernels screen of a real 2-rank run: the visible cells of different kernels differ, grouped by name and
    launch by launch (an end cut showed ``at::native::vectorized_elementwise_kernel<`` for three kernels), and a
    cell is the short name, not ``void …(…)``."""
    from test_tui import run_async, wait_loaded

    from tracekit.tui.app import make_app
    from tracekit.tui.screens.kernels import KernelsScreen

    @run_async
    async def run() -> None:
        app = make_app(RANKS)
        async with app.run_test(size=(width, 40)) as pilot:
            await wait_loaded(pilot)
            await pilot.press("k")
            await wait_loaded(pilot)
            screen = app.screen
            assert isinstance(screen, KernelsScreen)
            launches = _kernel_cells(screen, 38)
            await pilot.press("g")
            await wait_loaded(pilot)
            groups = _kernel_cells(screen, 38)
        names = [n for n, _ in groups]
        assert len(names) == len(set(names)) >= 8  # every kernel of the run, one row each
        assert len({c for _, c in groups}) == len(groups), groups
        assert not any(c.startswith("void ") for _, c in groups)
        by_cell: dict[str, set[str]] = {}
        for name, cell in launches:
            by_cell.setdefault(cell, set()).add(name)
        assert all(len(v) == 1 for v in by_cell.values()), by_cell
        assert len(by_cell) >= 2

    run()


def test_gemm_kernel_table_tells_kernels_apart() -> None:
    """The GEMM screen's kernel table (its column set, at its narrowest name column) over the 2-rank run's kernels:
    every name's cell differs."""
    from tracekit.analyzers.store import load_frames, open_run
    from tracekit.tui.screens.gemm import KERNEL_COLUMNS
    from tracekit.tui.screens.kernels import name_column
    from tracekit.tui.tables import kernel_groups, kernel_labels

    groups = kernel_groups(load_frames(open_run(RANKS))["kernels"])
    columns = [name_column(kernel_labels(groups["name"]), min_width=16), *KERNEL_COLUMNS[1:]]
    table = FrameTable(columns, groups)
    for width in (60, 80):
        (col, w), *_ = table._layout(width)
        cells = [table._cell(col, col.text(r["name"], r), w) for r in groups.to_dicts()]
        assert len(set(cells)) == groups.height >= 8, cells


def test_kernels_grouped_are_the_analysis_rows() -> None:
    """The kernels screen grouped by name (key g) shows the Analysis' kernel rows (``tables.kernels``, grouped
    once when the Analysis was built), in their order: the screen groups no launches itself."""
    from test_tui import run_async, wait_loaded

    from tracekit.analyzers.analysis import load_analysis
    from tracekit.analyzers.store import open_run
    from tracekit.tui.app import make_app
    from tracekit.tui.screens.kernels import KernelsScreen

    tables = load_analysis(open_run(RANKS)).tables
    assert tables is not None and tables.kernels

    @run_async
    async def run() -> None:
        app = make_app(RANKS)
        async with app.run_test(size=(160, 40)) as pilot:
            await wait_loaded(pilot)
            await pilot.press("k")
            await wait_loaded(pilot)
            screen = app.screen
            assert isinstance(screen, KernelsScreen) and screen.tables == tables
            await pilot.press("g")
            await wait_loaded(pilot)
            rows = [screen.table.row(i) for i in range(screen.table.row_count)]
        assert [(r["name"], r["launches"], r["total_ns"]) for r in rows] == [
            (k.name, k.launches, k.total_ns) for k in tables.kernels
        ]

    run()
