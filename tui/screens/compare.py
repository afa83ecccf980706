"""Two runs side by side: GEMMs matched on backend + shape (+ input dtype), with the change in time and TFLOP/s.

Run B is read and analysed in a worker (:class:`CompareScreen.RunCompared`); run A comes from the overview."""

from __future__ import annotations

from pathlib import Path
from typing import Any

from textual import work
from textual.app import ComposeResult
from textual.content import Content
from textual.message import Message
from textual.widgets import Footer, Static

from tracekit.errors import TracekitError
from tracekit.tui.data import Analysis, RunData, analyze, compare_gemms, load_run
from tracekit.tui.screens.base import FrameScreen
from tracekit.tui.text import clean, time_us
from tracekit.tui.widgets.frame_table import Col


def _change(v: Any, r: dict[str, Any]) -> str:
    return "–" if v is None else f"{v:+.1f}%"


def _time_tone(v: Any, r: dict[str, Any]) -> str | None:
    if v is None:
        return "dim"
    return "good" if v <= -2 else "bad" if v >= 2 else None


def _tflops_tone(v: Any, r: dict[str, Any]) -> str | None:
    if v is None:
        return "dim"
    return "good" if v >= 2 else "bad" if v <= -2 else None


COMPARE_COLUMNS = [
    Col("backend", "backend", None, min_width=10),
    Col("m", "M", 6, "right"),
    Col("n", "N", 5, "right"),
    Col("k", "K", 5, "right"),
    Col("dtype", "dtype", 5),
    Col("time_a_ns", "A µs", 7, "right", fmt=lambda v, r: time_us(v)),
    Col("time_b_ns", "B µs", 7, "right", fmt=lambda v, r: time_us(v)),
    Col("time_change_pct", "Δtime", 7, "right", fmt=_change, tone=_time_tone),
    Col("tflops_a", "A TF/s", 6, "right", fmt=lambda v, r: "–" if v is None else f"{v:,.0f}"),
    Col("tflops_b", "B TF/s", 6, "right", fmt=lambda v, r: "–" if v is None else f"{v:,.0f}"),
    Col("tflops_change_pct", "ΔTF/s", 7, "right", fmt=_change, tone=_tflops_tone),
]


class CompareScreen(FrameScreen):
    """Run A (the open run) against run B."""

    class RunCompared(Message):
        """Run B was read and analysed, and its GEMMs matched with run A's."""

        def __init__(self, other: RunData | None, frame: Any, error: TracekitError | None = None) -> None:
            super().__init__()
            self.other = other
            """Run B (None when it could not be read)."""
            self.frame = frame
            """The matched GEMMs (tracekit.tui.data.compare_gemms), or None on error."""
            self.error = error
            """Why run B could not be read."""

    def __init__(self, data: RunData, analysis: Analysis, other: Path) -> None:
        super().__init__(COMPARE_COLUMNS, empty_text=f"reading {other} …")
        self.data, self.analysis, self.other_path = data, analysis, other
        self.title_bar = Static(self._title(None), id="screen-title")

    def _title(self, other: RunData | None) -> Content:
        b = clean(other.name if other else self.other_path)
        return Content.assemble(
            ("compare", "bold $accent"),
            ("  A ", "bold"),
            clean(self.data.name),
            ("  B ", "bold"),
            b,
            ("  · Δ = B vs A; matched on backend, M, N, K, dtype", "$text-muted"),
        )

    def compose(self) -> ComposeResult:
        yield self.title_bar
        yield from self.compose_table()
        yield Footer()

    def on_mount(self) -> None:
        self.table.focus()
        self.load_other()

    @work(thread=True, exclusive=True, group="compare")
    def load_other(self) -> None:
        try:
            other = load_run(self.other_path)
            frame = compare_gemms(self.analysis.gemms, analyze(other).gemms)
        except TracekitError as exc:
            self.post_message(self.RunCompared(None, None, exc))
            return
        self.post_message(self.RunCompared(other, frame))

    def on_compare_screen_run_compared(self, message: CompareScreen.RunCompared) -> None:
        if message.error is not None:
            from tracekit.tui.screens.dialogs import ErrorScreen

            self.table.empty_text = "run B could not be read"
            self.table.refresh()
            e = message.error
            self.app.push_screen(ErrorScreen(e.title, e.message, e.hint))
            return
        self.title_bar.update(self._title(message.other))
        self.table.empty_text = "no GEMMs in either run"
        self.set_base(message.frame)
