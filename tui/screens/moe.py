"""MoE: every grouped launch (efficiency, padding, hot expert, verdict) and, for the highlighted one, its expert
histogram (experts binned by rows: share of rows and of time, median % of peak, how many are memory-bound) and the
what-if rows, all from the run's Analysis (its ``moe``: launches with their histograms, the what-if); the screen
only draws, handing them over in :class:`MoeScreen.MoeAnalyzed` once mounted."""

from __future__ import annotations

from typing import Any, ClassVar

import polars as pl
from textual.app import ComposeResult
from textual.binding import BindingType
from textual.containers import VerticalScroll
from textual.content import Content
from textual.message import Message
from textual.widgets import Footer, Static

from tracekit.numbers import formatted
from tracekit.tui.screens.base import FrameScreen
from tracekit.tui.text import clean, time_us
from tracekit.tui.widgets.frame_table import Col, FrameTable


def _pct(v: Any, r: dict[str, Any]) -> str:
    return formatted(v, "{:.2f}")


LAUNCH_COLUMNS = [
    Col("backend", "backend", 18),
    Col("route", "route", 8),
    Col("tokens", "tokens", 6, "right"),
    Col("active", "active", 6, "right"),
    Col("time_ns", "µs", 8, "right", fmt=lambda v, r: time_us(v)),
    Col("tflops", "TFLOP/s", 7, "right", fmt=lambda v, r: "–" if v is None else f"{v:,.1f}"),
    Col("pct_of_peak", "%peak", 6, "right", fmt=_pct),
    Col("padding_waste_pct", "pad%", 4, "right", fmt=lambda v, r: "–" if v is None else f"{v:.0f}"),
    Col("hot_vs_median", "hot×", 5, "right", fmt=lambda v, r: "–" if v is None else f"{v:.1f}"),
    Col("verdict", "verdict", None, min_width=20, hide_below=120),
]


def histogram_content(
    launch: dict[str, Any], bins: list[dict[str, Any]], whatif: list[dict[str, Any]]
) -> Content:
    """The highlighted launch: its verdict, the expert histogram as bars, and the what-if rows of its backend."""
    parts: list[Any] = [
        (
            f"{clean(launch.get('backend'))} {clean(launch.get('route') or '')} tokens={launch.get('tokens')}",
            "bold $accent",
        ),
        f"  {launch.get('active')}/{launch.get('experts')} experts active · tile "
        f"{launch.get('tile_m') or '–'}x{launch.get('tile_n') or '–'} ({clean(launch.get('tile_source') or '–')})\n",
        (clean(launch.get("verdict") or ""), "$warning"),
        "\n\n",
        ("rows/expert  experts  %rows  %time                       median%peak  memory-bound\n", "bold"),
    ]
    for b in bins:
        t = b.get("time_share_pct") or 0.0
        bar = "█" * max(0, round(t / 4))
        label = b["rows"] + ("*" if b.get("hot") else "")
        med = b.get("median_pct_of_peak")
        parts.append(
            f"{label:>11}  {b['experts']:>7}  {b['rows_share_pct']:>5.1f}  {t:>5.1f} {bar:<20}  "
            f"{'–' if med is None else f'{med:.2f}':>11}  {b['memory_bound']:>12}\n"
        )
    parts.append(("* the hot expert's bin\n", "$text-muted"))
    rows = [w for w in whatif if w.get("backend") == launch.get("backend")]
    if rows:
        parts.append(
            ("\nwhat-if (rows per expert to reach a share of peak, from the measured curve):\n", "bold")
        )
        for w in rows:
            m = w.get("m_needed")
            parts.append(
                f"  {w['target_pct']:.0f}% of peak: "
                + (
                    "not reached"
                    if m is None
                    else f"{m:,.0f} rows/expert ({w['how']}), "
                    f"{w['tokens_per_step']:,.0f} tokens/step, EP {w['ep_degree']:,.1f} at {w['ep_batch']:.0f} tokens/GPU"
                )
                + "\n"
            )
    return Content.assemble(*parts)


class MoeScreen(FrameScreen):
    """Grouped / MoE launches of one run, with the highlighted launch's expert histogram below."""

    BINDINGS: ClassVar[list[BindingType]] = []
    TEXT_COLUMNS: ClassVar[list[str] | None] = ["backend", "route", "verdict"]

    class MoeAnalyzed(Message):
        """The MoE analysis of the run finished."""

        def __init__(self, launches: pl.DataFrame, experts: pl.DataFrame, whatif: pl.DataFrame) -> None:
            super().__init__()
            self.launches = launches
            """One row per grouped launch (tracekit.frames.MOE_LAUNCHES)."""
            self.experts = experts
            """One row per active expert of each launch (MOE_EXPERTS)."""
            self.whatif = whatif
            """What-if rows (MOE_WHATIF)."""

    def __init__(self, moe: Any, run_name: str) -> None:
        super().__init__(LAUNCH_COLUMNS, empty_text="analysing grouped launches…")
        self.moe = moe  # the Analysis' MoeSummary (None: no grouped launches)
        self.run_name = run_name
        self.experts: pl.DataFrame | None = None
        self.whatif: list[dict[str, Any]] = []
        self.detail = Static("", id="moe-detail")
        self.analysis: Any = None
        self.histograms: dict[int, list[dict[str, Any]]] = {}

    def compose(self) -> ComposeResult:
        yield Static(
            Content.assemble(("MoE", "bold $accent"), f" · {clean(self.run_name)}"), id="screen-title"
        )
        yield from self.compose_table()
        with VerticalScroll(id="moe-scroll"):
            yield self.detail
        yield Footer()

    def on_mount(self) -> None:
        self.table.focus()
        self.analyze()

    def analyze(self) -> None:
        import msgspec

        from tracekit.frames import SPECS

        launches = msgspec.to_builtins(self.moe.launches) if self.moe is not None else []
        self.histograms = {r["launch_id"]: r.pop("histogram") for r in launches}
        for r in launches:
            r.pop("per_expert")
        spec = SPECS["moe_launches"]
        frame = spec.conform(pl.DataFrame(launches, infer_schema_length=None)) if launches else spec.empty()
        experts = pl.DataFrame()  # each launch's histogram is the Analysis' own (self.histograms)
        whatif = pl.DataFrame(
            msgspec.to_builtins(self.moe.whatif if self.moe else []), infer_schema_length=None
        )
        self.post_message(self.MoeAnalyzed(frame, experts, whatif))

    def on_moe_screen_moe_analyzed(self, message: MoeScreen.MoeAnalyzed) -> None:
        self.analysis = message
        self.experts = message.experts
        self.whatif = message.whatif.to_dicts()
        self.table.empty_text = (
            "no grouped (MoE) launches in this run: tracekit bench moe, or instrument() a model"
        )
        self.set_base(message.launches)

    def on_frame_screen_view_computed(self, message: FrameScreen.ViewComputed) -> None:
        super().on_frame_screen_view_computed(message)
        self._show()

    def on_frame_table_row_highlighted(self, message: FrameTable.RowHighlighted) -> None:
        super().on_frame_table_row_highlighted(message)
        self._show()

    def _show(self) -> None:
        t = self.table
        if self.experts is None or not t.row_count:
            self.detail.update("")
            return
        row = t.row(t.cursor)
        self.detail.update(histogram_content(row, self.histograms.get(row["launch_id"], []), self.whatif))
