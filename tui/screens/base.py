"""FrameScreen: a screen around one FrameTable, with a filter box, sorting and a status line.

Filtering and sorting run on the frame in a thread worker (a million kernels sort in under a second, which must
not freeze the cursor); the worker posts :class:`FrameScreen.ViewComputed` and the table redraws only the rows
on screen.
"""

from __future__ import annotations

from typing import ClassVar

import polars as pl
from textual import on, work
from textual.app import ComposeResult
from textual.binding import Binding, BindingType
from textual.containers import Horizontal
from textual.message import Message
from textual.screen import Screen
from textual.widgets import Input, Static

from tracekit.tui.tables import filter_frame
from tracekit.tui.widgets.frame_table import Col, FrameTable


class FrameScreen(Screen[None]):
    """Base of the table screens: ``base`` is the full frame; the table shows it filtered and sorted."""

    BINDINGS: ClassVar[list[BindingType]] = [
        Binding("slash", "filter", "Filter"),
        Binding("s", "sort_next", "Sort"),
        Binding("r", "sort_reverse", "Reverse", show=False),
    ]

    TEXT_COLUMNS: ClassVar[list[str] | None] = None
    """Columns a plain filter word is searched in (None: every text column)."""

    class ViewComputed(Message):
        """A worker finished filtering and sorting the screen's frame."""

        def __init__(self, frame: pl.DataFrame, query: str, sort_key: str | None, descending: bool) -> None:
            super().__init__()
            self.frame = frame
            """The rows to show, in order."""
            self.filter_query = query
            """The filter they match."""
            self.sort_key = sort_key
            """Column sorted by (None: the frame's own order)."""
            self.descending = descending
            """Sort direction."""

    def __init__(
        self, columns: list[Col], base: pl.DataFrame | None = None, *, empty_text: str = "no rows"
    ) -> None:
        super().__init__()
        self.columns = columns
        self.base = base if base is not None else pl.DataFrame()
        self.filter_query = ""
        self.sort_key: str | None = None
        self.descending = False
        self.table = FrameTable(columns, empty_text=empty_text, id="table")
        self.status_bar = Static("", id="status", markup=False)
        self.filter_input = Input(
            placeholder="filter: words, or column=value, m>1024 …  (enter: done, esc: clear)", id="filter"
        )

    def compose_table(self) -> ComposeResult:
        with Horizontal(id="filter-bar"):
            yield self.filter_input
        yield self.table
        yield self.status_bar

    # -- view ------------------------------------------------------------------------------------------------------
    def set_base(self, base: pl.DataFrame) -> None:
        """Replace the full frame (e.g. when the worker that read it is done) and recompute the view."""
        self.base = base
        self.refresh_view()

    def refresh_view(self) -> None:
        self._compute(self.base, self.filter_query, self.sort_key, self.descending)

    @work(thread=True, exclusive=True, group="view")
    def _compute(self, base: pl.DataFrame, query: str, key: str | None, descending: bool) -> None:
        frame = filter_frame(base, query, self.TEXT_COLUMNS) if query else base
        if key is not None and key in frame.columns:
            frame = frame.sort(key, descending=descending, nulls_last=True, maintain_order=True)
        self.post_message(self.ViewComputed(frame, query, key, descending))

    def on_frame_screen_view_computed(self, message: FrameScreen.ViewComputed) -> None:
        if message.filter_query != self.filter_query or message.sort_key != self.sort_key:
            return  # a newer request is on its way
        self.table.sort_key, self.table.sort_descending = message.sort_key, message.descending
        self.table.set_frame(message.frame)
        self.update_status()

    def update_status(self) -> None:
        t = self.table
        parts = [f"row {t.cursor + 1:,} of {t.row_count:,}" if t.row_count else "no rows"]
        if self.filter_query:
            parts.append(f"filter “{self.filter_query}” ({t.row_count:,} of {self.base.height:,})")
        if self.sort_key:
            label = next((c.label for c in self.columns if c.key == self.sort_key), self.sort_key)
            parts.append(f"sorted by {label} {'▼' if self.descending else '▲'}")
        self.status_bar.update("  ·  ".join(parts))

    def on_frame_table_row_highlighted(self, message: FrameTable.RowHighlighted) -> None:
        if message.table is self.table:
            self.update_status()

    # -- actions ---------------------------------------------------------------------------------------------------
    def action_filter(self) -> None:
        self.add_class("filtering")
        self.filter_input.focus()
        self.app.refresh_bindings()  # esc now clears the filter: the footer shows it

    @on(Input.Changed, "#filter")
    def _filter_changed(self, event: Input.Changed) -> None:
        self.filter_query = event.value.strip()
        self.refresh_view()

    @on(Input.Submitted, "#filter")
    def _filter_done(self, event: Input.Submitted) -> None:
        if not self.filter_query:
            self.remove_class("filtering")
        self.table.focus()

    def sort_by(self, key: str) -> None:
        if self.sort_key == key:
            self.descending = not self.descending
        else:
            self.sort_key = key
            self.descending = self._numeric(key)  # numbers: largest first; text: A to Z
        self.refresh_view()

    def _numeric(self, key: str) -> bool:
        return key in self.base.columns and self.base.schema[key].is_numeric()

    def action_sort_next(self) -> None:
        keys = [c.key for c in self.columns]
        key = keys[0] if self.sort_key not in keys else keys[(keys.index(self.sort_key) + 1) % len(keys)]
        self.sort_key = key
        self.descending = self._numeric(key)
        self.refresh_view()

    def action_sort_reverse(self) -> None:
        if self.sort_key is None:
            self.sort_key = self.columns[0].key
        else:
            self.descending = not self.descending
        self.refresh_view()

    def on_frame_table_header_clicked(self, message: FrameTable.HeaderClicked) -> None:
        if message.table is self.table:
            self.sort_by(message.key)

    def clear_filter(self) -> bool:
        """Esc: clear an active filter first; True when there was one."""
        if self.filter_query or self.has_class("filtering"):
            self.filter_input.value = ""
            self.filter_query = ""
            self.remove_class("filtering")
            self.table.focus()
            self.refresh_view()
            self.app.refresh_bindings()
            return True
        return False
