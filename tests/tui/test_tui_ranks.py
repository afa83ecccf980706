"""The ranks screen of ``tracekit view``, driven with Pilot on a real 2-GPU Nsight Systems export (nsys-ai's
mfu_2gpu_before, one process per GPU) and on a single-process run. Expected numbers come from SQL on the file."""

from __future__ import annotations

import asyncio
import functools
import sqlite3
from pathlib import Path
from typing import Any

import pytest

EXPORT = "thirdparty/nsys-ai/mfu_2gpu_before.sqlite"


def run_async(fn: Any) -> Any:
    @functools.wraps(fn)
    def wrapper(*args: Any, **kwargs: Any) -> Any:
        return asyncio.run(fn(*args, **kwargs))

    return wrapper


async def settle(pilot: Any) -> None:
    """Let the screen's workers finish and their messages land."""
    for _ in range(20):
        await pilot.app.workers.wait_for_complete()
        await pilot.pause()
        if not pilot.app.workers._workers:
            break
    await pilot.pause()


def table_text(table: Any, y: int) -> str:
    return "".join(seg.text for seg in table.render_line(y))


@pytest.fixture(scope="module")
def two_gpu_run(shared_data: Path, tmp_path_factory: pytest.TempPathFactory) -> Path:
    from tracekit.analyzers.importer import import_files

    run, _ = import_files([shared_data / EXPORT], tmp_path_factory.mktemp("ranks") / "mfu-before")
    return run.path


def _nccl_ns_by_device(path: Path) -> dict[int, int]:
    con = sqlite3.connect(f"{path.resolve().as_uri()}?mode=ro", uri=True)
    try:
        rows = con.execute(
            "SELECT k.deviceId, sum(k.end - k.start) FROM CUPTI_ACTIVITY_KIND_KERNEL k JOIN StringIds s "
            "ON s.id = k.shortName WHERE s.value LIKE 'nccl%' GROUP BY 1"
        ).fetchall()
    finally:
        con.close()
    return dict(rows)


@run_async
async def test_ranks_screen_side_by_side(shared_data: Path, two_gpu_run: Path) -> None:
    from tracekit.tui.app import make_app
    from tracekit.tui.screens.dialogs import TextScreen
    from tracekit.tui.screens.overview import OverviewScreen
    from tracekit.tui.screens.ranks import RanksScreen

    nccl = _nccl_ns_by_device(shared_data / EXPORT)  # one process per device here: device d is rank d
    waited_for = min(nccl, key=nccl.get)
    app = make_app(two_gpu_run)
    async with app.run_test(size=(120, 32)) as pilot:
        await settle(pilot)
        overview = app.screen
        assert isinstance(overview, OverviewScreen)
        assert "2 ranks" in str(overview.info.render())
        await pilot.press("d")
        await settle(pilot)
        screen = app.screen
        assert isinstance(screen, RanksScreen) and screen.analysis is not None
        assert screen.table.row_count == 2
        rows = [screen.table.row(i) for i in range(2)]
        assert [r["rank"] for r in rows] == [0, 1]
        assert [r["comm_ns"] for r in rows] == [nccl[0], nccl[1]]
        assert [r["straggler"] for r in rows] == [d == waited_for for d in (0, 1)]
        assert "◀ straggler" in table_text(screen.table, 1 + waited_for)
        title = str(screen.query_one("#screen-title").render())
        assert f"straggler: rank {waited_for}" in title
        reasons = str(screen.reasons.render())
        assert f"rank {waited_for} is the one the others wait for" in reasons
        # the same GEMM kernel on both ranks, largest difference first
        await pilot.press("g")
        await settle(pilot)
        n = screen.analysis.gemm_spread.height
        assert n > 0 and screen.table.row_count == n
        spreads = [screen.table.row(i)["spread_pct"] for i in range(n)]
        assert spreads == sorted(spreads, reverse=True)
        await pilot.press("enter")
        await settle(pilot)
        assert isinstance(app.screen, TextScreen)
        body = str(app.screen.query_one("#dialog-body").render())
        top = screen.analysis.gemm_spread.row(0, named=True)
        assert "rank 0" in body and "rank 1" in body and top["gemm"][:40] in body
        await pilot.press("escape")
        assert isinstance(app.screen, RanksScreen)
        # back to ranks; enter opens the rank's summary
        await pilot.press("g")
        await settle(pilot)
        assert screen.table.row_count == 2
        await pilot.press("enter")
        await settle(pilot)
        assert isinstance(app.screen, TextScreen)
        await pilot.press("escape", "escape")
        assert isinstance(app.screen, OverviewScreen)


@run_async
async def test_ranks_screen_on_a_single_process_run(shared_data: Path, tmp_path: Path) -> None:
    from tracekit.analyzers.importer import import_files
    from tracekit.tui.app import make_app
    from tracekit.tui.screens.ranks import RanksScreen

    run, _ = import_files([shared_data / "h200-probe/probe.sqlite"], tmp_path / "probe")
    app = make_app(run.path)
    async with app.run_test(size=(100, 24)) as pilot:
        await settle(pilot)
        assert "ranks" not in str(app.screen.info.render())
        await pilot.press("d")
        await settle(pilot)
        screen = app.screen
        assert isinstance(screen, RanksScreen)
        assert screen.analysis is None and screen.table.row_count == 0
        assert "single-process run" in screen.table.empty_text


class TestRanksSnapshot:
    """Appearance of the ranks screen (update with --snapshot-update after a deliberate change)."""

    @staticmethod
    def _keys(*presses: str) -> Any:
        async def run_before(pilot: Any) -> None:
            await settle(pilot)
            for key in presses:
                await pilot.press(key)
                await settle(pilot)

        return run_before

    def test_ranks_and_gemms(self, snap_compare: Any, two_gpu_run: Path) -> None:
        from tracekit.tui.app import make_app

        assert snap_compare(make_app(two_gpu_run), terminal_size=(120, 30), run_before=self._keys("d"))
        assert snap_compare(make_app(two_gpu_run), terminal_size=(120, 30), run_before=self._keys("d", "g"))
