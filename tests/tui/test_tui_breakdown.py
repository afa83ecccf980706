"""The step breakdown in ``tracekit view``: a line per GPU in the overview's header and, behind ``b``, the table
of every slice, on a run imported from a real trace."""

from __future__ import annotations

import asyncio
from pathlib import Path

import pytest

from tests.tui.test_tui import table_text, wait_loaded
from tracekit.analyzers.breakdown.steps import STEPS

TRACE_DIFF = "thirdparty/hta/trace_diff__control__control.json.gz"


@pytest.fixture(scope="module")
def trace_diff_run(shared_data: Path, tmp_path_factory: pytest.TempPathFactory) -> Path:
    from tracekit.analyzers.importer import import_files

    out = tmp_path_factory.mktemp("bk") / "trace-diff"
    import_files([shared_data / TRACE_DIFF], out)
    return out


def test_overview_header_and_breakdown_screen(trace_diff_run: Path) -> None:
    async def drive() -> None:
        from tracekit.tui.app import make_app
        from tracekit.tui.screens.breakdown import BreakdownScreen
        from tracekit.tui.screens.overview import OverviewScreen

        app = make_app(trace_diff_run)
        async with app.run_test(size=(120, 30)) as pilot:
            await wait_loaded(pilot)
            screen = app.screen
            assert isinstance(screen, OverviewScreen) and screen.analysis is not None
            b = screen.steps
            assert b is not None and b is screen.analysis.breakdown  # the Analysis' own, as show holds it
            (gpu,) = b.devices
            lines = str(screen.info.render()).split("\n")
            # the Analysis' headline: over the user's steps (ProfilerStep), saying so
            timeline = [ln for ln in lines if ln.startswith("time ")]
            assert b.headline is not None and len(timeline) == 1
            assert timeline[0].startswith(f"time {STEPS} (×6): GPU r3:3, ")
            assert "idle 16%, layout 22%, communication 19% (46% hidden under compute)" in timeline[0]
            assert b.headline.startswith(timeline[0].removeprefix("time ").rstrip("…"))
            assert all(len(ln) <= 118 for ln in lines)
            await pilot.press("b")
            await wait_loaded(pilot)
            bk = app.screen
            assert isinstance(bk, BreakdownScreen) and bk.breakdown is not None
            assert bk.breakdown is b  # drawn, not computed again
            assert bk.table.row_count == 1 + len(bk.breakdown.ranges) == 21
            first = bk.table.row(0)
            assert first["scope"] == "(whole run)" and first["idle"] == pytest.approx(gpu.pct(gpu.idle_ns))
            bk.sort_by("communication")
            await wait_loaded(pilot)
            if not bk.descending:
                bk.action_sort_reverse()
                await wait_loaded(pilot)
            top = bk.table.row(0)
            assert top["communication"] == max(
                bk.table.row(i)["communication"] for i in range(bk.table.row_count)
            )
            # the all-to-all's own ranges (two names, one window): 73% communication, the name drawn first
            assert top["scope"] in {"## alltoall_fwd_single ##", "## forward:all2all_global_emb ##"}
            assert top["communication"] == pytest.approx(73.3, abs=0.1)
            assert top["scope"][:10] in table_text(bk.table, 1)

    asyncio.run(drive())
