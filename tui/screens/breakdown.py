"""The step breakdown of a run (analyzers/breakdown): one row per GPU for the whole run, then per range name and
GPU, with the % of the span each kernel class and idle take and how much communication ran under compute.

The breakdown is the run's Analysis' own (per GPU and the range names with the longest GPU windows): the screen
draws it, computes nothing; :class:`BreakdownScreen.Computed` hands it to the table once mounted.
"""

from __future__ import annotations

from typing import Any

from textual.app import ComposeResult
from textual.content import Content
from textual.message import Message
from textual.widgets import Footer, Static

from tracekit.analyzers.breakdown import Breakdown
from tracekit.analyzers.breakdown.table import breakdown_frame
from tracekit.tui.data import Analysis, RunData
from tracekit.tui.screens.base import FrameScreen
from tracekit.tui.text import clean
from tracekit.tui.widgets.frame_table import Col

_FIXED = [
    Col("scope", "range", None, min_width=16),
    Col("gpu", "GPU", 5),
    Col("n", "n", 5, "right"),
    Col("span_ms", "span ms", 9, "right", fmt=lambda v, r: "–" if v is None else f"{v:,.2f}"),
]


def _pct(value: Any, row: dict[str, Any]) -> str:
    return "–" if value is None else f"{value:.1f}"


def _columns(names: list[str]) -> list[Col]:
    """The fixed columns, then one per percent column of :func:`breakdown_frame` (idle, the classes present,
    communication hidden under compute)."""
    fixed = {c.key for c in _FIXED}
    cols = list(_FIXED)
    for c in names:
        if c not in fixed:
            label = "comm hid" if c == "comm_hidden" else c
            cols.append(Col(c, label, max(5, len(label)), "right", fmt=_pct))
    return cols


class BreakdownScreen(FrameScreen):
    """Every slice of the breakdown as a sortable, filterable table; its notes below."""

    class Computed(Message):
        """The breakdown with every range name's windows is known."""

        def __init__(self, breakdown: Breakdown) -> None:
            super().__init__()
            self.breakdown = breakdown
            """The run's breakdown, per GPU and per range name."""

    class Failed(Message):
        """Computing the breakdown failed."""

        def __init__(self, message: str) -> None:
            super().__init__()
            self.message = message
            """What went wrong."""

    def __init__(self, data: RunData, analysis: Analysis) -> None:
        super().__init__(list(_FIXED), empty_text="breaking the run's GPU time down…")
        self.data = data
        self.analysis = analysis
        self.breakdown: Breakdown | None = None
        self.notes = Static(Content(""), id="breakdown-notes")

    def compose(self) -> ComposeResult:
        title: list[Any] = [("step breakdown", "bold $accent"), f" of {clean(self.data.name)}"]
        title.append(" · % of each GPU's span (range rows: the sum of their instances' GPU windows)")
        yield Static(Content.assemble(*title), id="screen-title")
        yield from self.compose_table()
        yield self.notes
        yield Footer()

    def on_mount(self) -> None:
        self.table.focus()
        self.compute()

    def compute(self) -> None:
        b = self.analysis.breakdown
        self.post_message(self.Computed(b if b is not None else Breakdown()))

    def on_breakdown_screen_computed(self, message: BreakdownScreen.Computed) -> None:
        self.breakdown = b = message.breakdown
        frame = breakdown_frame(b)
        self.columns = _columns(frame.columns)
        self.table.set_columns(self.columns)
        self.table.empty_text = "no kernels on a timeline in this run"
        self.set_base(frame)
        notes = list(b.notes)
        if b.ranges_total > len({s.range for s in b.ranges}):
            notes.append(
                f"{b.ranges_total} range names hold GPU work; the longest are shown "
                "(`tracekit show RUN --json --all` breaks every one down)"
            )
        self.notes.update(Content("\n".join(clean(n) for n in notes)))

    def on_breakdown_screen_failed(self, message: BreakdownScreen.Failed) -> None:
        self.table.empty_text = "the breakdown could not be computed"
        self.table.refresh()
        self.notes.update(Content.assemble(("breakdown failed: ", "bold $error"), clean(message.message)))
