"""The TUI's backend and kernel columns show the part that tells rows apart: a fixed column grows to its longest
name where the table has room (``torch-fp8-tensorwise`` was cut to ``torch-fp8-t…`` even at 160 columns), and a
name too long for its column is cut in the middle, so kernels that share a prefix (``sm80_xmma_gemm_…``) differ.

The overview's real column set on the committed sample's cases (tracekit.tui.tables.gemm_view), drawn by the
FrameTable's own layout; no app is started.
"""

from __future__ import annotations

from pathlib import Path

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
