"""Every kernel launch of a run: search, sort, group by name. Drawn by FrameTable, so a million launches cost
only the rows on screen; filtering and sorting run in a worker (FrameScreen)."""

from __future__ import annotations

from typing import Any, ClassVar

import polars as pl
from textual import work
from textual.app import ComposeResult
from textual.binding import Binding, BindingType
from textual.content import Content
from textual.message import Message
from textual.widgets import Static

from tracekit.text import short_name
from tracekit.tui.screens.base import FrameScreen
from tracekit.tui.screens.dialogs import TextScreen, fields_content, kernel_group_fields
from tracekit.tui.tables import kernel_groups, kernel_labels, kernel_view, tables_kernels
from tracekit.tui.text import clean, time_us
from tracekit.tui.widgets.footer import KeyFooter
from tracekit.tui.widgets.frame_table import Col, FrameTable


def _dims(row: dict[str, Any], prefix: str) -> str:
    vals = [row.get(f"{prefix}_{a}") for a in "xyz"]
    if all(v is None for v in vals):
        return "–"
    return ",".join("?" if v is None else str(v) for v in vals)


def name_column(labels: dict[str, str], min_width: int = 20) -> Col:
    """The kernel column: each name as :func:`tracekit.tui.tables.kernel_labels` shortens it, cut where it still
    differs from the other names (``Col.distinct``); the full name is in the row's dialog (Enter)."""
    return Col(
        "name",
        "kernel",
        None,
        min_width=min_width,
        fmt=lambda v, r: labels.get(v) or short_name(v),
        distinct=True,
    )


LAUNCH_COLUMNS = [
    Col("name", "kernel", None, min_width=20),
    Col("duration_ns", "µs", 8, "right", fmt=lambda v, r: time_us(v)),
    Col("grid_x", "grid", 11, fmt=lambda v, r: _dims(r, "grid")),
    Col("block_x", "block", 9, fmt=lambda v, r: _dims(r, "block")),
    Col("registers_per_thread", "regs", 4, "right"),
    Col("smem_bytes", "smem", 7, "right", hide_below=110),
    Col("stream", "strm", 4, "right", hide_below=110),
    Col("start_ns", "start ns", 16, "right", hide_below=140),
    Col("kernel_id", "id", 8, "right", hide_below=140),
]

GROUP_COLUMNS = [
    Col("name", "kernel", None, min_width=20),
    Col("launches", "launches", 8, "right"),
    Col("total_ns", "total µs", 10, "right", fmt=lambda v, r: time_us(v)),
    Col("mean_ns", "mean µs", 9, "right", fmt=lambda v, r: time_us(v)),
    Col("pct", "%GPU", 5, "right", fmt=lambda v, r: "–" if v is None else f"{v:.1f}"),
]


class KernelsScreen(FrameScreen):
    """All kernels (one row per launch), or grouped by name with ``g``."""

    BINDINGS: ClassVar[list[BindingType]] = [Binding("g", "group", "Group by name")]
    TEXT_COLUMNS: ClassVar[list[str] | None] = ["name"]

    class KernelsGrouped(Message):
        """The launches were grouped by kernel name."""

        def __init__(self, groups: pl.DataFrame) -> None:
            super().__init__()
            self.groups = groups
            """One row per kernel name (tracekit.tui.tables.kernel_groups)."""

    def __init__(self, kernels: pl.DataFrame, run_name: str, tables: Any = None) -> None:
        name = name_column(kernel_labels(kernels.get_column("name")))
        self.launch_columns = [name, *LAUNCH_COLUMNS[1:]]
        self.group_columns = [name, *GROUP_COLUMNS[1:]]
        super().__init__(
            self.launch_columns, kernel_view(kernels), empty_text="no kernels on a timeline in this run"
        )
        self.kernels = kernels
        self.run_name = run_name
        self.tables = tables
        """The Analysis' run tables (its kernels by name are the grouped view); None while the run is analysed."""
        self.grouped = False
        self._groups: pl.DataFrame | None = None

    def compose(self) -> ComposeResult:
        yield Static(self._title(), id="screen-title")
        yield from self.compose_table()
        yield KeyFooter()

    def _title(self) -> Content:
        mode = "grouped by name" if self.grouped else "every launch, in timeline order"
        t = self.tables
        if self.grouped and t is not None and t.kernels_total > len(t.kernels):
            mode += f" (the {len(t.kernels):,} of {t.kernels_total:,} names with the most time: show --all)"
        return Content.assemble(
            ("kernels", "bold $accent"),
            f" of {clean(self.run_name)} · {self.kernels.height:,} launches · {mode}",
        )

    def on_mount(self) -> None:
        self.table.focus()
        self.refresh_view()

    def action_group(self) -> None:
        self.grouped = not self.grouped
        self.query_one("#screen-title", Static).update(self._title())
        if not self.grouped:
            self._switch(self.launch_columns, kernel_view(self.kernels))
        elif self._groups is not None:
            self._switch(self.group_columns, self._groups)
        else:
            self.table.empty_text = "grouping…"
            self.group()

    @work(thread=True, exclusive=True, group="group")
    def group(self) -> None:
        # the Analysis' kernels by name (grouped once, when it was built); the launches grouped here only while
        # the run is still being analysed
        groups = kernel_groups(self.kernels) if self.tables is None else tables_kernels(self.tables)
        self.post_message(self.KernelsGrouped(groups))

    def on_kernels_screen_kernels_grouped(self, message: KernelsScreen.KernelsGrouped) -> None:
        self._groups = message.groups
        if self.grouped:
            self.table.empty_text = "no kernels"
            self._switch(self.group_columns, message.groups)

    def _switch(self, columns: list[Col], base: pl.DataFrame) -> None:
        self.columns = columns
        self.sort_key = None
        self.table.set_columns(columns)
        self.set_base(base)

    def on_frame_table_row_selected(self, message: FrameTable.RowSelected) -> None:
        r = message.row
        if self.grouped:
            pairs = [*kernel_group_fields(r), ("share of GPU time", f"{r.get('pct') or 0:.2f}%")]
        else:
            pairs = [
                ("name", r.get("name")),
                ("duration", f"{time_us(r.get('duration_ns'))} µs"),
                ("start", f"{r.get('start_ns')} ns"),
                ("grid", _dims(r, "grid")),
                ("block", _dims(r, "block")),
                ("registers per thread", r.get("registers_per_thread")),
                ("shared memory per block", r.get("smem_bytes")),
                ("device / stream", f"{r.get('device')} / {r.get('stream')}"),
                ("range id", r.get("range_id")),
                ("kernel id", r.get("kernel_id")),
            ]
        self.app.push_screen(TextScreen("kernel", fields_content(pairs, whole={"name"})))
