"""The step breakdown of a run (analyzers/breakdown): one row per GPU for the whole run, then per range name and
GPU, with the % of the span each kernel class and idle take and how much communication ran under compute."""

from __future__ import annotations

from typing import Any

from textual.app import ComposeResult
from textual.content import Content
from textual.widgets import Footer, Static

from tracekit.analyzers.breakdown import Breakdown
from tracekit.analyzers.breakdown.table import breakdown_frame
from tracekit.tui.screens.base import FrameScreen
from tracekit.tui.text import clean
from tracekit.tui.widgets.frame_table import Col


def _pct(value: Any, row: dict[str, Any]) -> str:
    return "–" if value is None else f"{value:.1f}"


def _columns(names: list[str]) -> list[Col]:
    fixed = {"scope", "gpu", "n", "span_ms"}
    cols = [
        Col("scope", "range", None, min_width=16),
        Col("gpu", "GPU", 5),
        Col("n", "n", 5, "right"),
        Col("span_ms", "span ms", 9, "right", fmt=lambda v, r: "–" if v is None else f"{v:,.2f}"),
    ]
    for c in names:
        if c not in fixed:
            label = "comm hid" if c == "comm_hidden" else c
            cols.append(Col(c, label, max(5, len(label)), "right", fmt=_pct))
    return cols


class BreakdownScreen(FrameScreen):
    """Every slice of the breakdown as a sortable, filterable table; its notes below."""

    def __init__(self, breakdown: Breakdown, run_name: str) -> None:
        frame = breakdown_frame(breakdown)
        super().__init__(_columns(frame.columns), frame, empty_text="no kernels on a timeline in this run")
        self.breakdown = breakdown
        self.run_name = run_name

    def compose(self) -> ComposeResult:
        title: list[Any] = [("step breakdown", "bold $accent"), f" of {clean(self.run_name)}"]
        title.append(" · % of each GPU's span (range rows: the sum of their instances' GPU windows)")
        yield Static(Content.assemble(*title), id="screen-title")
        yield from self.compose_table()
        notes = [*self.breakdown.notes]
        if self.breakdown.ranges_total > len({s.range for s in self.breakdown.ranges}):
            notes.append(
                f"{self.breakdown.ranges_total} range names hold GPU work; the longest are shown "
                "(`tracekit show RUN --json --all` breaks every one down)"
            )
        yield Static(Content("\n".join(clean(n) for n in notes)), id="breakdown-notes")
        yield Footer()

    def on_mount(self) -> None:
        self.table.focus()
        self.refresh_view()
