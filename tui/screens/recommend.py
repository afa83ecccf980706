"""Backends at a run's shapes: the recommendation table of a ``tracekit bench gemm --shapes-from RUN`` run (the
same cells the CLI prints and the report writes, tracekit.analyzers.recommend), and its footnotes."""

from __future__ import annotations

from typing import Any

from textual import work
from textual.app import ComposeResult
from textual.content import Content
from textual.message import Message
from textual.screen import Screen
from textual.widgets import DataTable, Static

from tracekit.tui.text import clean
from tracekit.tui.widgets.footer import KeyFooter


class RecommendScreen(Screen[None]):
    """Per shape of the source run: its own GEMM time per call, the fastest working backend, the saving."""

    class RecommendationBuilt(Message):
        """The recommendation's lines were made (None: the run is not a --shapes-from run)."""

        def __init__(self, lines: Any) -> None:
            super().__init__()
            self.lines = lines
            """(title, header, rows, footnotes) of tracekit.analyzers.recommend.recommendation_lines, or None."""

    def __init__(self, recommendation: Any, run_name: str) -> None:
        super().__init__()
        self.recommendation, self.run_name = recommendation, run_name
        """The Analysis' recommendation (tracekit.analyzers.recommend.Recommendation), None for another run."""
        self.title_text = Static(Content(f"backends · {clean(run_name)}"), id="screen-title")
        self.table: DataTable[str] = DataTable(zebra_stripes=True, cursor_type="row")
        self.notes = Static("", id="recommend-notes")

    def compose(self) -> ComposeResult:
        yield self.title_text
        yield self.table
        yield self.notes
        yield KeyFooter()

    def on_mount(self) -> None:
        self.table.focus()
        self.build()

    @work(thread=True, exclusive=True)
    def build(self) -> None:
        from tracekit.analyzers.recommend import recommendation_lines

        rec = self.recommendation
        self.post_message(self.RecommendationBuilt(None if rec is None else recommendation_lines(rec)))

    def on_recommend_screen_recommendation_built(self, message: RecommendScreen.RecommendationBuilt) -> None:
        if message.lines is None:
            self.title_text.update(
                Content.assemble(
                    ("backends", "bold $accent"),
                    f" · {clean(self.run_name)} is not a `tracekit bench gemm --shapes-from RUN` run",
                )
            )
            return
        title, header, rows, foot = message.lines
        self.title_text.update(Content.assemble((clean(title), "bold $accent")))
        self.table.add_columns(*header)
        for row in rows:
            self.table.add_row(*(clean(c) for c in row))
        self.notes.update(Content("\n".join(clean(line) for line in foot)))
