"""The plateau at a glance: TFLOP/s against M per backend, with the datasheet and measured peaks as lines."""

from __future__ import annotations

from typing import ClassVar

import polars as pl
from textual.app import ComposeResult
from textual.binding import Binding, BindingType
from textual.content import Content
from textual.screen import Screen
from textual.widgets import Static

from tracekit.tui.tables import plot_series
from tracekit.tui.text import clean
from tracekit.tui.widgets.footer import KeyFooter
from tracekit.tui.widgets.plot import TflopsPlot


class PlotScreen(Screen[None]):
    """TFLOP/s vs M; ``n`` steps through the N x K shapes of the run, then all of them together. It opens on the
    N x K with the most GEMMs (all of them when the run has one)."""

    BINDINGS: ClassVar[list[BindingType]] = [Binding("n", "next_shape", "Next N×K")]

    def __init__(self, gemms: pl.DataFrame, run_name: str) -> None:
        super().__init__()
        self.gemms = gemms
        self.run_name = run_name
        self.data = plot_series(gemms)
        self.choice = -1  # -1: every shape
        if len(self.data.nk_choices) > 1:
            # Start on the N×K with the most points: one line per backend reads as the plateau; "all N×K"
            # puts several shapes at one M and is one press of n away.
            counts = self.data.nk_counts
            self.choice = max(range(len(self.data.nk_choices)), key=lambda i: (counts[i], -i))
            self.data = plot_series(gemms, self.data.nk_choices[self.choice])
        self.plot = TflopsPlot(self.data, id="plot")
        self.title_bar = Static(self._title(), id="screen-title")

    def _title(self) -> Content:
        nk = self.data.nk
        shape = "all N×K" if nk is None else f"N={nk[0]:,} K={nk[1]:,}"
        return Content.assemble(
            ("TFLOP/s vs M", "bold $accent"),
            f" of {clean(self.run_name)} · {shape} · {len(self.data.nk_choices)} N×K shape(s) (n: next)",
        )

    def compose(self) -> ComposeResult:
        yield self.title_bar
        yield self.plot
        yield KeyFooter()

    def action_next_shape(self) -> None:
        choices = self.data.nk_choices
        if not choices:
            return
        self.choice = self.choice + 1 if self.choice + 1 < len(choices) else -1
        self.data = plot_series(self.gemms, None if self.choice < 0 else choices[self.choice])
        self.plot.set_data(self.data)
        self.title_bar.update(self._title())
