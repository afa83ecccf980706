"""The run overview: device, counts and failures at the top, the GEMM table below (sortable, filterable).

The run is read in a thread worker in two steps, each posting a message named as what happened: the frames
(:class:`OverviewScreen.RunLoaded`, enough to paint the header and open the kernels screen) and then the
explainer's result (:class:`OverviewScreen.RunAnalyzed`, the GEMM table). A failure posts
:class:`OverviewScreen.RunLoadFailed` and is shown as a dialog with what to do.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any, ClassVar

from rich.cells import cell_len
from textual import work
from textual.app import ComposeResult
from textual.binding import Binding, BindingType
from textual.content import Content
from textual.message import Message
from textual.widgets import Static

from tracekit.errors import TracekitError
from tracekit.text import short_name
from tracekit.tui.data import (
    Analysis,
    Prefetch,
    RunData,
    analysis_devices_label,
    analyze,
    load_run,
    rank_count,
)
from tracekit.tui.screens.base import FrameScreen
from tracekit.tui.tables import gemm_view
from tracekit.tui.text import clean, fit, time_us
from tracekit.tui.widgets.footer import KeyFooter
from tracekit.tui.widgets.frame_table import Col


def _pct_tone(value: Any, row: dict[str, Any]) -> str | None:
    if value is None:
        return "dim"
    return "good" if value >= 70 else "warn" if value >= 40 else "bad"


def _ms(value: Any, row: dict[str, Any]) -> str:
    return "–" if not value else f"{value / 1e6:,.2f}"


GEMM_COLUMNS = [
    Col("gemm_id", "#", 3, "right", fmt=lambda v, r: str(v + 1)),
    # a backend (torch-fp8-tensorwise) or, for a case found by its kernel, the kernel's short name: wider where
    # the table has room, cut in the middle where not (sm80_xmma_gemm_… kernels differ at their end)
    Col("backend", "backend", 12, fmt=lambda v, r: short_name(v), grow_to=32, middle=True),
    Col("m", "M", 5, "right"),
    Col("n", "N", 5, "right"),
    Col("k", "K", 5, "right"),
    Col("dtype", "dtype", 5),
    Col("gpu_ns", "time ms", 7, "right", fmt=_ms),
    Col("calls", "calls", 5, "right", hide_below=110),
    Col("time_ns", "median call µs", 14, "right", fmt=lambda v, r: time_us(v), hide_below=100),
    Col("tflops", "TFLOP/s", 7, "right", fmt=lambda v, r: "–" if v is None else f"{v:,.0f}"),
    Col(
        "pct_of_peak", "%peak", 5, "right", fmt=lambda v, r: "–" if v is None else f"{v:.0f}%", tone=_pct_tone
    ),
    Col("verdict", "verdict", None, tone=lambda v, r: "dim" if v is None else None, min_width=10),
    Col("range", "range", None, min_width=20, hide_below=150),
]


def _short_created(created: Any) -> str:
    """``2026-12-02T19:09:06+00:00`` as ``2026-12-02 19:09 UTC`` (the seconds and offset say little here)."""
    text = clean(created or "")
    if len(text) >= 16 and text[10] == "T":
        return text[:10] + " " + text[11:16] + (" UTC" if text.endswith(("+00:00", "Z")) else "")
    return text


def _short_device(label: str) -> str:
    """``NVIDIA H200 (SM 9.0, 132 SMs)`` as ``H200 (SM 9.0, 132 SMs)``, for narrow terminals."""
    return label.replace("NVIDIA ", "")


def run_header(d: RunData, analysis: Analysis | None, width: int, steps: Any = None) -> Content:
    """The overview's header in lines that fit ``width`` cells: the run, its status and failure count (and when it
    was made, where room is left); then the device and the counts; then the step breakdown, a line per GPU once
    ``steps`` (the Analysis' step breakdown) is known; then the analysis' summary: the three
    largest losses in the calls' time (with the case's number in the table) and what is unknown (``tracekit explain`` says
    how to learn it); the calibration, when there is one. Parts are shortened before anything wraps: the date goes
    first, then ``NVIDIA``; the failure count always stays."""
    f = d.frames
    fails = d.failure_count
    sep = ("  ·  ", "$text-muted")
    status_tone = "$warning" if d.status != "complete" else "$success"
    fail_part = (f"{fails:,} failures" if fails else "no failures", "bold $error" if fails else "$text-muted")
    created = _short_created(d.record.created)
    name = clean(d.name)
    fixed = cell_len(d.status) + cell_len(fail_part[0]) + 2 * 5
    if created and fixed + cell_len(name) + 5 + cell_len(created) <= width:
        line1: list[Any] = [(name, "bold"), sep, (clean(d.status), status_tone), sep, fail_part, sep, created]
    else:
        room = max(8, width - fixed)
        line1 = [(fit(name, room) if cell_len(name) > room else name, "bold"), sep]
        line1 += [(clean(d.status), status_tone), sep, fail_part]
    n_gemms = len(analysis.cases) if analysis is not None else None
    counts = [f"{'…' if n_gemms is None else f'{n_gemms:,}'} GEMMs"]
    for name, label in (("kernels", "kernels"), ("ncu", "ncu"), ("measurements", "measured")):
        if rows := d.count(name):  # the manifest's count: no frame read for the header
            counts.append(f"{rows:,} {label}")
    ranks = d.ranks if d.ranks is not None else rank_count(f)
    if ranks > 1:
        counts.append(f"{ranks} ranks (d)")
    counts_text = " · ".join(counts)
    device = clean(analysis_devices_label(d, analysis))
    if cell_len(device) + 5 + cell_len(counts_text) > width:
        device = _short_device(device)
    parts: list[Any] = [*line1, "\n", (device, "bold $accent"), sep, counts_text]
    parts += breakdown_lines(steps, width)
    if analysis is not None:
        parts += summary_lines(analysis, width)
    if analysis is not None and analysis.run.calibration:
        parts += ["\n", ("calibrated: ", "$text-muted"), clean(analysis.run.calibration)]
    return Content.assemble(*parts)


def _ms_text(ns: float) -> str:
    return f"{ns / 1e6:,.2f} ms" if ns >= 1e5 else f"{ns / 1e3:,.1f} µs"


def summary_lines(analysis: Analysis, width: int) -> list[Any]:
    """The analysis' summary as header lines, each cut to ``width``: GPU time in GEMM cases, the three largest
    losses in the calls' time, what is unknown."""
    s = analysis.summary
    order = {c.id: i for i, c in enumerate(analysis.cases, 1)}
    out: list[Any] = []
    if s.top_losses:
        items = [
            f"{_ms_text(loss.lost_ns_total)} {loss.factor} (#{order.get(loss.case_id, '?')})"
            for loss in s.top_losses
        ]
        out += ["\n", ("largest losses: ", "bold $error"), fit(" · ".join(items), max(8, width - 16))]
    if s.unknowns:
        what = " · ".join(u.what for u in s.unknowns)
        out += ["\n", ("unknown: ", "bold $warning"), (fit(what, max(8, width - 9)), "$text-muted")]
    return out


BREAKDOWN_LINES = 2
"""GPUs whose breakdown line the header shows; more are behind ``b``."""


def breakdown_lines(b: Any, width: int) -> list[Any]:
    """One line per GPU (at most :data:`BREAKDOWN_LINES`) of the breakdown ``b`` with its idle and largest kernel
    classes as % of its span, each cut to ``width``; ``b`` opens the table. The lines are the Analysis' headline:
    over the user's steps where the run has any, else the whole run, each saying which (the line explain, show and
    report print: analyzers/breakdown/steps.py)."""
    if b is None or b.empty:
        return []
    from tracekit.analyzers.breakdown.table import headline

    lines = b.headline.split("; ") if b.headline else [headline(s) for s in b.devices]
    out: list[Any] = []
    for line in lines[:BREAKDOWN_LINES]:
        out += ["\n", ("time ", "$text-muted"), fit(clean(line), max(8, width - 5))]
    if len(b.devices) > BREAKDOWN_LINES:
        out += ["\n", (f"+{len(b.devices) - BREAKDOWN_LINES} GPUs: b", "$text-muted")]
    return out


class OverviewScreen(FrameScreen):
    """One run: its GEMMs and the way to every other screen."""

    BINDINGS: ClassVar[list[BindingType]] = [
        Binding("k", "kernels", "Kernels"),
        Binding("f", "failures", "Failures"),
        Binding("p", "plot", "Plot"),
        Binding("e", "moe", "MoE", show=False),  # listed in the help (?); the footer stays as it was
        Binding("c", "compare", "Compare"),
        Binding("o", "open", "Open run", show=False),
        Binding("d", "ranks", "Ranks", show=False),
        Binding("b", "breakdown", "Breakdown", show=False),
        Binding("a", "backends", "Backends", show=False),
    ]

    class RunLoaded(Message):
        """The run's frames were read."""

        def __init__(self, data: RunData) -> None:
            super().__init__()
            self.data = data
            """The run and all its frames."""

    class RunAnalyzed(Message):
        """The analysis is built: every GEMM case with its waterfall, and the summary."""

        def __init__(self, analysis: Analysis) -> None:
            super().__init__()
            self.analysis = analysis
            """The run's Analysis (tracekit.analyzers.analysis)."""

    class RunLoadFailed(Message):
        """Reading or analysing the run failed."""

        def __init__(self, title: str, message: str, hint: str | None) -> None:
            super().__init__()
            self.title = title
            """Error title (the TracekitError's, or the exception type)."""
            self.message = message
            """What is wrong."""
            self.hint = hint
            """What to do about it."""

    def __init__(
        self, path: Path, *, compare_with: Path | None = None, prefetch: Prefetch | None = None
    ) -> None:
        super().__init__(GEMM_COLUMNS, empty_text="reading the run…")
        self.path = path
        self.prefetch = prefetch if prefetch is not None and prefetch.path == path else None
        self.compare_with = compare_with
        self.data: RunData | None = None
        self.analysis: Analysis | None = None
        self.info = Static(Content(f"reading {clean(path)} …"), id="run-info")

    def compose(self) -> ComposeResult:
        yield self.info
        yield from self.compose_table()
        yield KeyFooter()

    def on_mount(self) -> None:
        self.table.focus()
        self.load()

    @work(thread=True, exclusive=True, group="load")
    def load(self) -> None:
        try:
            if self.prefetch is not None:  # started by the CLI before Textual was imported
                data = self.prefetch.data.result()
                self.post_message(self.RunLoaded(data))
                self.post_message(self.RunAnalyzed(self.prefetch.analysis.result()))
            else:
                data = load_run(self.path)
                self.post_message(self.RunLoaded(data))
                self.post_message(self.RunAnalyzed(analyze(data, getattr(self.app, "device", None))))
        except TracekitError as exc:
            self.post_message(self.RunLoadFailed(exc.title, exc.message, exc.hint))
        except Exception as exc:  # a bug, or a file no reader guards against: show it, keep the app alive
            self.post_message(
                self.RunLoadFailed(
                    f"internal error: {type(exc).__name__}",
                    str(exc),
                    "run `tracekit show --debug RUN` and report it",
                )
            )

    # -- messages --------------------------------------------------------------------------------------------------
    def on_overview_screen_run_loaded(self, message: OverviewScreen.RunLoaded) -> None:
        self.data = message.data
        self.table.empty_text = "analysing GEMMs…"
        self._paint_info()

    def on_overview_screen_run_analyzed(self, message: OverviewScreen.RunAnalyzed) -> None:
        self.analysis = message.analysis
        self.table.empty_text = "no GEMMs in this run (no tracekit ranges, measurements or GEMM kernels)"
        self._paint_info()
        self.set_base(gemm_view(message.analysis.cases_frame()))
        if self.compare_with is not None:
            other, self.compare_with = self.compare_with, None
            self.compare(other)

    def on_overview_screen_run_load_failed(self, message: OverviewScreen.RunLoadFailed) -> None:
        from tracekit.tui.screens.dialogs import ErrorScreen

        self.table.empty_text = "this run could not be read (esc: back, o: open another run)"
        self.table.refresh()
        self.info.update(
            Content.assemble((f"{clean(message.title)}: ", "bold $error"), clean(message.message))
        )
        self.app.push_screen(ErrorScreen(message.title, message.message, message.hint))

    def _paint_info(self) -> None:
        if self.data is None:
            return
        width = (self.info.size.width or self.app.size.width or 80) - 2  # the header's padding
        self.info.update(run_header(self.data, self.analysis, width, self.steps))

    @property
    def steps(self) -> Any:
        """The step breakdown the header shows: the Analysis' own (None until it is built)."""
        return self.analysis.breakdown if self.analysis is not None else None

    def on_resize(self) -> None:
        self._paint_info()

    # -- navigation ------------------------------------------------------------------------------------------------
    def _ready(self) -> bool:
        if self.data is None:
            self.notify("the run is still being read", severity="warning")
            return False
        return True

    def _analysed(self) -> bool:
        if self.analysis is None:
            self.notify("the run is still being analysed", severity="warning")
            return False
        return True

    def on_frame_table_row_selected(self, message: Any) -> None:
        if message.table is not self.table or self.data is None or self.analysis is None:
            return
        from tracekit.tui.screens.gemm import GemmScreen

        gid = message.row["gemm_id"]
        self.app.push_screen(GemmScreen(self.data.frames, self.analysis.cases[gid], gid + 1))

    def action_kernels(self) -> None:
        if self._ready():
            from tracekit.tui.screens.kernels import KernelsScreen

            tables = self.analysis.tables if self.analysis is not None else None
            self.app.push_screen(KernelsScreen(self.data.frames["kernels"], self.data.name, tables))  # type: ignore[union-attr]

    def action_failures(self) -> None:
        if self._ready() and self._analysed():
            from tracekit.tui.screens.failures import FailuresScreen

            self.app.push_screen(FailuresScreen(self.analysis, self.data.name))  # type: ignore[union-attr]

    def action_moe(self) -> None:
        if self._ready() and self._analysed():
            from tracekit.tui.screens.moe import MoeScreen

            d = self.data
            self.app.push_screen(MoeScreen(self.analysis.moe, d.name))  # type: ignore[union-attr]

    def action_plot(self) -> None:
        if self._ready() and self.analysis is not None:
            from tracekit.tui.screens.plot import PlotScreen

            self.app.push_screen(PlotScreen(self.analysis.cases_frame(), self.data.name))  # type: ignore[union-attr]

    def action_compare(self) -> None:
        if not self._ready() or self.analysis is None:
            return
        target = getattr(self.app, "compare_path", None)
        if target is not None:
            self.compare(Path(target))
            return
        from tracekit.tui.screens.picker import RunPickerScreen

        self.app.push_screen(RunPickerScreen(compare_to=self.path))

    def compare(self, other: Path) -> None:
        """Open the comparison of this run (A) with ``other`` (B)."""
        from tracekit.tui.screens.compare import CompareScreen

        assert self.data is not None and self.analysis is not None
        self.app.push_screen(CompareScreen(self.data, self.analysis, other))

    def action_ranks(self) -> None:
        if self._ready():
            from tracekit.tui.screens.ranks import RanksScreen

            self.app.push_screen(RanksScreen(self.data, self.analysis))  # type: ignore[arg-type]

    def action_breakdown(self) -> None:
        if self._ready() and self._analysed():
            from tracekit.tui.screens.breakdown import BreakdownScreen

            self.app.push_screen(BreakdownScreen(self.data, self.analysis))  # type: ignore[arg-type]

    def action_backends(self) -> None:
        if self._ready() and self._analysed():
            from tracekit.tui.screens.recommend import RecommendScreen

            self.app.push_screen(RecommendScreen(self.analysis.recommendation, self.data.name))  # type: ignore[union-attr]

    def action_open(self) -> None:
        from tracekit.tui.screens.picker import RunPickerScreen

        self.app.push_screen(RunPickerScreen())
