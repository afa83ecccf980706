"""The run picker: runs under ./runs and the bundled samples (or the folders given), newest first."""

from __future__ import annotations

from pathlib import Path
from typing import ClassVar

import polars as pl
from textual import work
from textual.app import ComposeResult
from textual.binding import Binding, BindingType
from textual.content import Content
from textual.message import Message
from textual.widgets import Static

from tracekit.tui.runs import RunEntry, default_run_dirs, find_runs
from tracekit.tui.screens.base import FrameScreen
from tracekit.tui.text import clean
from tracekit.tui.widgets.footer import KeyFooter
from tracekit.tui.widgets.frame_table import Col, FrameTable

RUN_COLUMNS = [
    Col("name", "run", None, min_width=16),
    Col("where", "in", 8, hide_below=100),
    Col("created", "created", 16, fmt=lambda v, r: (v or "–").replace("T", " ")[:16]),
    Col("status", "status", 10, tone=lambda v, r: None if v == "complete" else "warn"),
    Col("gpu", "GPU", 14),
]


class RunPickerScreen(FrameScreen):
    """Choose a run to open (or, with ``compare_to``, the run B of a comparison)."""

    BINDINGS: ClassVar[list[BindingType]] = [
        Binding("m", "mark", "Mark as A"),
        Binding("c", "compare", "Compare"),
    ]

    class RunsFound(Message):
        """The run folders were listed."""

        def __init__(self, entries: list[RunEntry]) -> None:
            super().__init__()
            self.entries = entries
            """Runs found, newest first."""

    def __init__(self, dirs: list[Path] | None = None, *, compare_to: Path | None = None) -> None:
        super().__init__(RUN_COLUMNS, empty_text="looking for runs…")
        self.dirs = dirs or default_run_dirs()
        self.compare_to = compare_to
        self.marked: Path | None = compare_to

    def compose(self) -> ComposeResult:
        where = ", ".join(clean(d) for d in self.dirs)
        what = "choose run B to compare with the open run" if self.compare_to else "choose a run"
        yield Static(
            Content.assemble(("tracekit runs", "bold $accent"), f" · {what} · in {where}"), id="screen-title"
        )
        yield from self.compose_table()
        yield KeyFooter()

    def on_mount(self) -> None:
        self.table.focus()
        self.scan()

    @work(thread=True, exclusive=True, group="scan")
    def scan(self) -> None:
        self.post_message(self.RunsFound(find_runs(self.dirs)))

    def on_run_picker_screen_runs_found(self, message: RunPickerScreen.RunsFound) -> None:
        self.table.empty_text = (
            "no runs here: make one with `tracekit import FILE.ncu-rep FILE.sqlite -o runs/NAME`, "
            "`tracekit bench gemm` or `tracekit capture`"
        )
        rows = [
            {
                "name": e.name,
                "where": e.where,
                "created": e.created,
                "status": e.status,
                "gpu": e.gpu,
                "path": str(e.path),
            }
            for e in message.entries
        ]
        schema = {k: pl.String for k in ("name", "where", "created", "status", "gpu", "path")}
        self.set_base(pl.DataFrame(rows, schema=schema))

    def _selected(self) -> Path | None:
        row = self.table.cursor_row
        return Path(row["path"]) if row else None

    def on_frame_table_row_selected(self, message: FrameTable.RowSelected) -> None:
        path = Path(message.row["path"])
        if self.compare_to is not None:
            self._compare(path)
            return
        from tracekit.tui.screens.overview import OverviewScreen

        self.app.push_screen(OverviewScreen(path))

    def action_mark(self) -> None:
        self.marked = self._selected()
        if self.marked:
            self.notify(f"A = {clean(self.marked.name)}; now pick B and press c")

    def action_compare(self) -> None:
        path = self._selected()
        if path is not None:
            self._compare(path)

    def _compare(self, path: Path) -> None:
        from tracekit.tui.screens.overview import OverviewScreen

        base = self.marked
        if base is None or base == path:
            self.notify("mark run A with m first (then pick B and press c)", severity="warning")
            return
        stack = self.app.screen_stack
        below = stack[-2] if len(stack) >= 2 else None
        if self.compare_to is not None and isinstance(below, OverviewScreen) and below.data is not None:
            # came from the open run's overview: its frames are loaded already, compare against them
            self.app.pop_screen()
            below.compare(path)
            return
        self.app.push_screen(OverviewScreen(base, compare_with=path))
