"""Ranks of a multi-GPU run side by side: kernel time per rank (GEMM, communication, compute, idle), the straggler
and why, and with ``g`` the same GEMM on every rank.

The cross-rank analysis (analyzers/ranks/, through :func:`tracekit.tui.data.rank_analysis`) runs in a thread
worker that posts :class:`RanksScreen.RanksCompared`; a failure posts :class:`RanksScreen.RanksFailed`.
"""

from __future__ import annotations

from typing import Any, ClassVar

import polars as pl
from textual import work
from textual.app import ComposeResult
from textual.binding import Binding, BindingType
from textual.containers import VerticalScroll
from textual.content import Content
from textual.message import Message
from textual.widgets import Footer, Static

from tracekit.analyzers.ranks import RankAnalysis
from tracekit.errors import TracekitError
from tracekit.numbers import formatted
from tracekit.tui.data import RunData, rank_analysis
from tracekit.tui.screens.base import FrameScreen
from tracekit.tui.screens.dialogs import TextScreen, fields_content
from tracekit.tui.text import clean, time_us
from tracekit.tui.widgets.frame_table import Col, FrameTable


def _ms(value: Any, row: dict[str, Any] | None = None) -> str:
    return formatted(None if value is None else value / 1e6)


RANK_COLUMNS = [
    Col("rank", "rank", 4, "right", tone=lambda v, r: "bad" if r.get("straggler") else None),
    Col("pid", "pid", 7, "right"),
    Col("device", "dev", 3, "right"),
    Col("kernels", "kernels", 7, "right"),
    Col("gemm_ns", "GEMM ms", 9, "right", fmt=_ms),
    Col("comm_ns", "comm ms", 9, "right", fmt=_ms),
    Col("compute_ns", "compute ms", 10, "right", fmt=_ms),
    Col("idle_ns", "idle ms", 9, "right", fmt=_ms),
    Col("last_arrivals", "last in", 7, "right"),
    Col(
        "straggler",
        "",
        11,
        fmt=lambda v, r: "◀ straggler" if v else "",
        tone=lambda v, r: "bad" if v else None,
    ),
    Col("gpu", "GPU", None, min_width=8, hide_below=120),
]

GEMM_COLUMNS = [
    Col("gemm", "GEMM (range or kernel)", None, min_width=20, middle=True),
    Col("ranks", "ranks", 5, "right"),
    Col("min_ns", "min µs", 9, "right", fmt=lambda v, r: time_us(v)),
    Col("max_ns", "max µs", 9, "right", fmt=lambda v, r: time_us(v)),
    Col(
        "spread_pct",
        "spread",
        7,
        "right",
        fmt=lambda v, r: "–" if v is None else f"{v:.1f}%",
        tone=lambda v, r: None if v is None else "bad" if v >= 5 else "warn" if v >= 1 else None,
    ),
    Col("slowest_rank", "slow", 4, "right"),
    Col("why", "why", None, min_width=10, hide_below=120),
]


class RanksScreen(FrameScreen):
    """One row per rank (or, with ``g``, per GEMM across ranks); the straggler's evidence below."""

    BINDINGS: ClassVar[list[BindingType]] = [Binding("g", "gemms", "GEMMs across ranks")]
    TEXT_COLUMNS: ClassVar[list[str] | None] = None

    class RanksCompared(Message):
        """The cross-rank analysis finished."""

        def __init__(self, analysis: RankAnalysis | None) -> None:
            super().__init__()
            self.analysis = analysis
            """The rank table, GEMMs across ranks, steps and the straggler; None for a single-process run."""

    class RanksFailed(Message):
        """The cross-rank analysis failed."""

        def __init__(self, title: str, message: str) -> None:
            super().__init__()
            self.title = title
            """Error title."""
            self.message = message
            """What went wrong."""

    def __init__(self, data: RunData, run_analysis: Any = None) -> None:
        super().__init__(RANK_COLUMNS, empty_text="comparing ranks…")
        self.data = data
        self.run_analysis = run_analysis
        """The run's Analysis (its ``ranks``) when the overview has it; else the ranks are compared here."""
        self.analysis: RankAnalysis | None = None
        self.by_gemm = False
        self.reasons = Static(Content(""), id="rank-text")

    def compose(self) -> ComposeResult:
        yield Static(self._title(), id="screen-title")
        yield from self.compose_table()
        with VerticalScroll(id="rank-scroll"):
            yield self.reasons
        yield Footer()

    def _title(self) -> Content:
        mode = "the same GEMM on every rank" if self.by_gemm else "kernel time per rank"
        a = self.analysis
        parts: list[Any] = [("ranks", "bold $accent"), f" of {clean(self.data.name)} · {mode}"]
        if a is not None:
            parts.append(f" · {a.ranks.height} ranks · ")
            parts.append(
                (f"straggler: rank {a.straggler}", "bold $error")
                if a.straggler is not None
                else ("no straggler", "$success")
            )
        return Content.assemble(*parts)

    def on_mount(self) -> None:
        self.table.focus()
        self.compare()

    @work(thread=True, exclusive=True, group="ranks")
    def compare(self) -> None:
        try:
            self.post_message(self.RanksCompared(rank_analysis(self.data, self.run_analysis)))
        except TracekitError as exc:
            self.post_message(self.RanksFailed(exc.title, exc.message))
        except Exception as exc:  # keep the app alive; the error is shown in place
            self.post_message(self.RanksFailed(f"internal error: {type(exc).__name__}", str(exc)))

    def on_ranks_screen_ranks_compared(self, message: RanksScreen.RanksCompared) -> None:
        self.analysis = a = message.analysis
        self.query_one("#screen-title", Static).update(self._title())
        if a is None:
            self.table.empty_text = "a single-process run: no ranks to compare"
            self.set_base(pl.DataFrame())
            return
        self.table.empty_text = "no ranks"
        self.set_base(a.gemm_spread if self.by_gemm else a.ranks)
        self.reasons.update(self._reasons(a))

    def on_ranks_screen_ranks_failed(self, message: RanksScreen.RanksFailed) -> None:
        self.table.empty_text = "the ranks could not be compared"
        self.table.refresh()
        self.reasons.update(
            Content.assemble((f"{clean(message.title)}: ", "bold $error"), clean(message.message))
        )

    @staticmethod
    def _reasons(a: RankAnalysis) -> Content:
        parts: list[Any] = []
        for r in a.reasons:
            parts += [("• ", "$accent"), clean(r), "\n"]
        for n in a.notes:
            parts += [(clean(n), "$text-muted"), "\n"]
        return Content.assemble(*parts) if parts else Content("")

    def action_gemms(self) -> None:
        self.by_gemm = not self.by_gemm
        self.query_one("#screen-title", Static).update(self._title())
        self.columns = GEMM_COLUMNS if self.by_gemm else RANK_COLUMNS
        self.sort_key = None
        self.table.set_columns(self.columns)
        if self.analysis is not None:
            self.table.empty_text = "no GEMM seen on two or more ranks" if self.by_gemm else "no ranks"
            self.set_base(self.analysis.gemm_spread if self.by_gemm else self.analysis.ranks)

    def on_frame_table_row_selected(self, message: FrameTable.RowSelected) -> None:
        a = self.analysis
        if a is None or message.table is not self.table:
            return
        r = message.row
        if self.by_gemm:
            rows = a.gemms.filter(pl.col("gemm") == r["gemm"]).sort("rank")
            pairs: list[tuple[str, Any]] = [("GEMM", r["gemm"]), ("why", r.get("why") or "–")]
            for g in rows.iter_rows(named=True):
                line = f"{time_us(g['time_ns'])} µs × {g['launches']}"
                if g.get("tflops"):
                    line += f" · {g['tflops']:,.0f} TFLOP/s"
                if g.get("pct_of_peak"):
                    line += f" · {g['pct_of_peak']:.0f}% of peak"
                if g.get("verdict"):
                    line += f" · {g['verdict']}"
                pairs.append((f"rank {g['rank']}", line))
            self.app.push_screen(
                TextScreen("GEMM across ranks", fields_content(pairs, whole={"GEMM", "why"}))
            )
            return
        steps = a.steps.filter(pl.col("rank") == r["rank"]) if a.steps.height else a.steps
        pairs = [
            ("rank", r["rank"]),
            ("process / device", f"{r.get('pid')} / {r.get('device')}"),
            ("kernels", r.get("kernels")),
            (
                "GEMM / comm / other ms",
                f"{_ms(r.get('gemm_ns'))} / {_ms(r.get('comm_ns'))} / {_ms(r.get('other_ns'))}",
            ),
            ("span / idle ms", f"{_ms(r.get('span_ns'))} / {_ms(r.get('idle_ns'))}"),
            ("collectives reached last", r.get("last_arrivals")),
        ]
        for s in steps.head(50).iter_rows(named=True):
            pairs.append(
                (
                    f"step {s['step']}",
                    f"{clean(s['name'])}: {_ms(s['duration_ns'])} ms, GEMM {_ms(s['gemm_ns'])}, "
                    f"comm {_ms(s['comm_ns'])}, compute {_ms(s['compute_ns'])}",
                )
            )
        self.app.push_screen(TextScreen(f"rank {r['rank']}", fields_content(pairs)))
