"""One GEMM: why it stops short of peak.

The waterfall (bars), then each factor's sentence, what to try and its evidence, the GEMM's kernels (from the
timeline, or from Nsight Compute) and Nsight Compute's own findings. The kernels and findings are picked out of
the run's frames in a worker (:class:`GemmScreen.DetailLoaded`): on a run of a million kernels that is a filter
over a million rows.
"""

from __future__ import annotations

import json
import math
from typing import Any, ClassVar

import polars as pl
from textual import work
from textual.app import ComposeResult
from textual.binding import Binding, BindingType
from textual.containers import VerticalScroll
from textual.content import Content
from textual.message import Message
from textual.screen import Screen
from textual.widgets import Static

from tracekit.analyzers.analysis.figures import median_call_text
from tracekit.analyzers.gemm.fusion import beside_lines
from tracekit.tui.screens.dialogs import TextScreen, fields_content, kernel_group_fields
from tracekit.tui.screens.kernels import name_column
from tracekit.tui.tables import case_ref, gemm_kernels, gemm_rules, kernel_labels
from tracekit.tui.text import clean, time_us
from tracekit.tui.widgets.footer import KeyFooter
from tracekit.tui.widgets.frame_table import Col, FrameTable
from tracekit.tui.widgets.waterfall import Waterfall

KERNEL_COLUMNS = [
    Col("name", "kernel", None, min_width=16),
    Col("launches", "n", 5, "right"),
    Col("mean_ns", "mean µs", 9, "right", fmt=lambda v, r: time_us(v)),
    Col("pct", "%time", 6, "right", fmt=lambda v, r: "–" if v is None else f"{v:.0f}%"),
    Col("source", "from", 8),
]


def _evidence_text(value: Any, key: str = "") -> str:
    if isinstance(value, int | float) and not isinstance(value, bool) and math.isfinite(value):
        if key.endswith("_hz"):
            return f"{value / 1e6:,.0f} MHz"
        if key.endswith("_bytes") and abs(value) >= 1024:
            return f"{value / 1024:,.1f} KiB"
        if key.endswith("_bytes_per_s"):
            return f"{value / 1e12:.2f} TB/s" if abs(value) >= 1e11 else f"{value / 1e9:.1f} GB/s"
        if key.endswith("_per_s"):
            return f"{value:.3g}/s"
    if isinstance(value, float):
        if not math.isfinite(value):
            return "–"
        return f"{value:,.4g}" if abs(value) < 1000 else f"{value:,.0f}"
    if isinstance(value, dict | list):
        return json.dumps(value, default=str)
    return str(value)


def factor_content(f: Any, verdict: str | None) -> Content:
    """One factor (:class:`tracekit.analyzers.analysis.Factor`): heading with its value, the calls' time it costs
    and the gain if removed, the sentence, the remedy, the evidence."""
    name = clean(f.name)
    value = f.value
    gain = f.gain_pct
    head: list[Any] = [(f"{name}", "bold $warning" if name == verdict else "bold")]
    if isinstance(value, int | float):
        head.append(f"  ×{value:.3f}")
    if isinstance(gain, int | float) and math.isfinite(gain) and gain >= 0.5:
        lost = f"costs {time_us(f.lost_ns_total)} µs of the calls' time; " if f.lost_ns_total else ""
        head.append((f"  ({lost}+{gain:.0f}% if removed)", "$text-muted"))
    if name == verdict:
        head.append(("  ◀ verdict", "bold $warning"))
    if f.cause:
        head.append((f"  {clean(f.cause)}", "italic"))
    parts: list[Any] = [*head, "\n", clean(f.sentence or "")]
    if f.remedy:
        parts += [("\ntry: ", "bold $success"), clean(f.remedy)]
    ev = f.evidence or {}
    if ev:
        parts.append(("\nevidence: ", "$text-muted"))
        items = [f"{clean(k)}={clean(_evidence_text(v, str(k)))}" for k, v in ev.items()]
        parts.append(("  ".join(items), "$text-muted"))
    return Content.assemble(*parts)


class GemmScreen(Screen[None]):
    """The reason one GEMM stops short of peak."""

    BINDINGS: ClassVar[list[BindingType]] = [Binding("n", "name", "Whole name", show=False)]

    class DetailLoaded(Message):
        """The GEMM's kernels and Nsight Compute findings were picked out of the run."""

        def __init__(self, kernels: pl.DataFrame, rules: pl.DataFrame) -> None:
            super().__init__()
            self.kernels = kernels
            """Kernels of the GEMM grouped by name (tracekit.tui.tables.gemm_kernels)."""
            self.rules = rules
            """Distinct Nsight Compute findings for its profiled kernels (tracekit.tui.tables.gemm_rules)."""

    def __init__(self, frames: dict[str, pl.DataFrame], case: Any, number: int | None = None) -> None:
        super().__init__()
        self.frames = frames
        self.case = case
        """The GEMM case (tracekit.analyzers.analysis.Case)."""
        self.number = number
        """Its place in the run's GPU-time order (1 = the most), as the overview numbers it."""
        self.kernels_table = FrameTable(KERNEL_COLUMNS, empty_text="finding the kernels…", id="gemm-kernels")
        self.rules_text = Static("", id="gemm-rules")

    def compose(self) -> ComposeResult:
        c = self.case
        title = (f"#{self.number} " if self.number else "") + clean(c.label)
        with VerticalScroll(id="gemm-detail"):
            yield Static(Content(title).stylize("bold $accent"), id="gemm-title")
            yield Static(self._summary(), id="gemm-summary")
            if c.factors:
                yield Waterfall(c, id="waterfall")
                for f in c.factors:
                    yield Static(factor_content(f, c.verdict.factor), classes="factor")
            yield Static(self._verdict(), classes="note")
            for line in beside_lines(c):
                yield Static(Content(clean(line)).stylize("$text-muted"), classes="note")
            for note in c.notes:
                yield Static(Content(clean(note)).stylize("$text-muted italic"), classes="note")
            yield Static(Content("Kernels in this GEMM's range").stylize("bold"), classes="section")
            yield self.kernels_table
            yield Static(Content("Nsight Compute findings").stylize("bold"), classes="section")
            yield self.rules_text
        yield KeyFooter()

    def _verdict(self) -> Content:
        v = self.case.verdict
        if v.factor:  # the blamed factor names the verdict in every view
            return Content.assemble(
                ("verdict: ", "bold $warning"),
                clean(v.factor + (f" ({v.cause})" if v.cause else "")),
                (
                    f"  costs {time_us(v.lost_ns_total)} µs of the calls' time" if v.lost_ns_total else "",
                    "$text-muted",
                ),
                f"\n{clean(v.sentence)}" if v.kind != "explained" else "",
            )
        parts: list[Any] = [(f"verdict: {v.kind}", "bold $warning"), "  ", clean(v.sentence)]
        if v.remedy:  # a fusion verdict names no factor but has a remedy
            parts += [("\ntry: ", "bold"), clean(v.remedy)]
        if v.capture_hint:
            parts += [("\nto learn more: ", "bold"), clean(v.capture_hint)]
        return Content.assemble(*parts)

    def _summary(self) -> Content:
        c = self.case
        t = c.timing
        shape = c.shape_text or "shape unknown"
        s = c.shape
        dtype = "/".join(clean(d) for d in ((s.dtype_a, s.dtype_b, s.dtype_out) if s else ()) if d)
        parts: list[Any] = [
            (clean(c.backend or c.origin), "bold"),
            f"  {shape}  {dtype or clean(c.rate.dtype_class or '')}",
            f"  {t.calls:,} call(s) · from {clean(c.origin)}" + _times_from(t.source) + "\n",
            ("achieved ", "$text-muted"),
            ("–" if t.achieved_tflops is None else f"{t.achieved_tflops:,.0f} TFLOP/s", "bold"),
            ("  kernel rate ", "$text-muted"),
            "–" if t.kernel_tflops is None else f"{t.kernel_tflops:,.0f} TFLOP/s",
        ]
        if c.peak is not None:
            parts += [("  of peak ", "$text-muted"), f"{c.peak.tflops:,.0f} ({clean(c.peak.source)})"]
            if c.pct_of_peak is not None:
                parts.append((f"  = {c.pct_of_peak:.0f}%", "bold"))
            if c.peak.calibrated_tflops:
                parts.append(
                    f"  · {c.peak.pct_of_calibrated or 0:.0f}% of calibrated {c.peak.calibrated_tflops:,.0f}"
                )
        parts += [
            ("\ntime in calls ", "$text-muted"),
            f"{time_us(t.span_ns_total)} µs",
            ("  ·  ", "$text-muted"),
            median_call_text(t) or "no calls",
            ("  · main kernel ", "$text-muted"),
            clean(c.kernel.name or "–"),
        ]
        return Content.assemble(*parts)

    def on_mount(self) -> None:
        self.query_one("#gemm-detail", VerticalScroll).focus()
        self.load_detail()

    @work(thread=True, exclusive=True, group="detail")
    def load_detail(self) -> None:
        ref = case_ref(self.case)
        self.post_message(self.DetailLoaded(gemm_kernels(self.frames, ref), gemm_rules(self.frames, ref)))

    def on_gemm_screen_detail_loaded(self, message: GemmScreen.DetailLoaded) -> None:
        self.kernels_table.empty_text = "no kernels recorded for this GEMM"
        self.kernels_table.styles.height = min(12, max(2, message.kernels.height + 1))
        name = name_column(kernel_labels(message.kernels.get_column("name")), min_width=16)
        self.kernels_table.set_columns([name, *KERNEL_COLUMNS[1:]])
        self.kernels_table.set_frame(message.kernels)
        rules = message.rules
        if rules.height == 0:
            self.rules_text.update(
                Content(
                    "none (the GEMM was not profiled by Nsight Compute, or ncu found nothing to say)"
                ).stylize("$text-muted")
            )
            return
        parts: list[Any] = []
        for r in rules.iter_rows(named=True):
            kind = clean(r.get("kind") or "")
            tone = {"OPTIMIZATION": "$warning", "WARNING": "$error", "ERROR": "$error"}.get(
                kind, "$text-muted"
            )
            parts.append((f"{kind:<13}", f"bold {tone}"))
            parts.append((clean(r.get("rule") or ""), "bold"))
            if r.get("title"):
                parts.append(f" — {clean(r['title'])}")
            if (r.get("kernels") or 0) > 1:
                parts.append((f"  ({r['kernels']} kernels)", "$text-muted"))
            if r.get("speedup_pct") is not None:
                parts.append(
                    (
                        f"  est. speed-up {r['speedup_pct']:.0f}% ({clean(r.get('speedup_type') or '')})",
                        "$success",
                    )
                )
            parts += ["\n", (clean(r.get("message") or ""), "$text-muted"), "\n"]
        self.rules_text.update(Content.assemble(*parts))

    def on_frame_table_row_selected(self, message: FrameTable.RowSelected) -> None:
        r = message.row
        body = fields_content([*kernel_group_fields(r), ("from", r.get("source"))], whole={"name"})
        self.app.push_screen(TextScreen("kernel", body))

    def action_name(self) -> None:
        self.app.push_screen(TextScreen("range", Content(clean(self.case.range or self.case.name))))


def _times_from(source: str | None) -> str:
    """`` · times from ...``: where the case's times came from (timeline, measurement:cuda-graph, ncu-replay)."""
    return f" · times from {source}" if source else ""
