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

from tracekit.tui.screens.dialogs import TextScreen, fields_content
from tracekit.tui.tables import gemm_kernels, gemm_rules
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


def factor_content(f: dict[str, Any], verdict: str | None) -> Content:
    """One factor: heading with its value and the gain if removed, the sentence, the remedy, the evidence."""
    name = clean(f.get("name"))
    value = f.get("value")
    gain = f.get("gain_pct")
    head: list[Any] = [(f"{name}", "bold $warning" if name == verdict else "bold")]
    if isinstance(value, int | float):
        head.append(f"  ×{value:.3f}")
    if isinstance(gain, int | float) and math.isfinite(gain) and gain >= 0.5:
        head.append((f"  (+{gain:.0f}% if removed)", "$text-muted"))
    if name == verdict:
        head.append(("  ◀ verdict", "bold $warning"))
    if f.get("cause"):
        head.append((f"  {clean(f['cause'])}", "italic"))
    parts: list[Any] = [*head, "\n", clean(f.get("sentence") or "")]
    if f.get("remedy"):
        parts += [("\ntry: ", "bold $success"), clean(f["remedy"])]
    ev = f.get("evidence") or {}
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

    def __init__(
        self, frames: dict[str, pl.DataFrame], gemm: dict[str, Any], explanation: dict[str, Any]
    ) -> None:
        super().__init__()
        self.frames = frames
        self.gemm = gemm
        self.explanation = explanation
        self.kernels_table = FrameTable(KERNEL_COLUMNS, empty_text="finding the kernels…", id="gemm-kernels")
        self.rules_text = Static("", id="gemm-rules")

    def compose(self) -> ComposeResult:
        g, e = self.gemm, self.explanation
        verdict = (e.get("verdict") or {}).get("factor")
        with VerticalScroll(id="gemm-detail"):
            yield Static(Content(clean(g.get("range") or "?")).stylize("bold $accent"), id="gemm-title")
            yield Static(self._summary(), id="gemm-summary")
            if e:
                yield Waterfall(e, id="waterfall")
                for f in e.get("factors") or []:
                    yield Static(factor_content(f, verdict), classes="factor")
                for note in e.get("notes") or []:
                    yield Static(Content(clean(note)).stylize("$text-muted italic"), classes="note")
            else:
                yield Static(
                    Content("no waterfall: the explainer gave none for this GEMM").stylize("$text-muted")
                )
            yield Static(Content("Kernels in this GEMM's range").stylize("bold"), classes="section")
            yield self.kernels_table
            yield Static(Content("Nsight Compute findings").stylize("bold"), classes="section")
            yield self.rules_text
        yield KeyFooter()

    def _summary(self) -> Content:
        g = self.gemm
        shape = "x".join("?" if g.get(k) is None else str(g[k]) for k in ("m", "n", "k"))
        ach, peak, pct = g.get("achieved_tflops"), g.get("peak_tflops"), g.get("pct_of_peak")
        dtype = "/".join(clean(g.get(k)) for k in ("dtype_a", "dtype_b", "dtype_out") if g.get(k))
        parts: list[Any] = [
            (clean(g.get("backend") or g.get("origin") or "?"), "bold"),
            f"  {shape}  {dtype or clean(g.get('dtype_class') or '')}",
            f"  {g.get('launches') or 0} launch(es) · from {clean(g.get('origin'))}"
            + _times_from(g.get("time_source"))
            + "\n",
            ("achieved ", "$text-muted"),
            ("–" if ach is None else f"{ach:,.0f} TFLOP/s", "bold"),
            ("  of peak ", "$text-muted"),
            "–" if peak is None else f"{peak:,.0f} ({clean(g.get('peak_source') or '')})",
            ("" if pct is None else f"  = {pct:.0f}%", "bold"),
        ]
        if g.get("calibrated_tflops"):
            parts.append(
                f"  · {g.get('pct_of_calibrated') or 0:.0f}% of calibrated {g['calibrated_tflops']:,.0f}"
            )
        parts += [
            ("\ntime per launch ", "$text-muted"),
            f"kernel {time_us(g.get('main_time_ns'))} µs + aux {time_us(g.get('aux_time_ns'))} + gaps "
            f"{time_us(g.get('gap_time_ns'))}",
            ("  · main kernel ", "$text-muted"),
            clean(g.get("main_kernel") or "–"),
        ]
        return Content.assemble(*parts)

    def on_mount(self) -> None:
        self.query_one("#gemm-detail", VerticalScroll).focus()
        self.load_detail()

    @work(thread=True, exclusive=True, group="detail")
    def load_detail(self) -> None:
        self.post_message(
            self.DetailLoaded(gemm_kernels(self.frames, self.gemm), gemm_rules(self.frames, self.gemm))
        )

    def on_gemm_screen_detail_loaded(self, message: GemmScreen.DetailLoaded) -> None:
        self.kernels_table.empty_text = "no kernels recorded for this GEMM"
        self.kernels_table.styles.height = min(12, max(2, message.kernels.height + 1))
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
        body = fields_content(
            [
                ("name", r.get("name")),
                ("launches", r.get("launches")),
                ("total", f"{time_us(r.get('total_ns'))} µs"),
                ("mean", f"{time_us(r.get('mean_ns'))} µs"),
                ("min / max", f"{time_us(r.get('min_ns'))} / {time_us(r.get('max_ns'))} µs"),
                ("from", r.get("source")),
            ],
            whole={"name"},
        )
        self.app.push_screen(TextScreen("kernel", body))

    def action_name(self) -> None:
        self.app.push_screen(TextScreen("range", Content(clean(self.gemm.get("range") or ""))))


def _times_from(source: str | None) -> str:
    """`` · times from the timeline`` when the times are not the GEMM's origin's own (a measurement timed with
    CUDA events under a profiler takes the timeline's kernel, aux and idle times)."""
    if source and source.startswith("timeline"):
        return " · times from the timeline"
    return ""
