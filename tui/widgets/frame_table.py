"""FrameTable: a virtual table over a polars frame, drawn with Textual's line API.

Why not DataTable: it builds a row object per row, and a million kernels would take seconds and hundreds of MB.
FrameTable keeps the frame as it is and, per paint, slices only the rows on screen (``df.slice`` is O(1)), formats
them and turns them into ``Segment``s. Cells are plain text (never markup) after :func:`tracekit.tui.text.clean`,
so names holding ``[bold]``, brackets or ANSI escapes draw as the characters they are; long names are elided
with ``…`` to the column's width. Sorting and filtering are the screen's job (on the frame, in a worker): the
table only draws, keeps a row cursor, and posts what the user did.
"""

from __future__ import annotations

import itertools
import os
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any, ClassVar

import polars as pl
from rich.segment import Segment
from rich.style import Style
from textual import events
from textual.binding import Binding, BindingType
from textual.geometry import Region
from textual.message import Message
from textual.strip import Strip
from textual.widget import Widget

from tracekit.tui.text import clean, fit, fit_middle, num

Formatter = Callable[[Any, dict[str, Any]], str]
Styler = Callable[[Any, dict[str, Any]], str | None]


@dataclass(frozen=True)
class Col:
    """One column: ``key`` is the frame column (and the sort key); ``width`` None shares the spare width.

    ``fmt`` turns a value (and its whole row) into text; ``tone`` names a tone (``good``, ``bad``, ``warn``,
    ``dim``) the cell is drawn in, themed through the ``frame-table--<tone>`` component classes.
    """

    key: str
    label: str
    width: int | None = None
    justify: str = "left"
    fmt: Formatter | None = None
    tone: Styler | None = None
    min_width: int = 8
    hide_below: int = 0
    """Leave the column out when the table is narrower than this (wide terminals show more)."""
    grow_to: int = 0
    """A fixed column that widens, up to this many cells, to its longest text where the table has room beyond
    what the flexible columns need (a backend name of 20 characters was cut to 12 even at 160 columns)."""
    middle: bool = False
    """A long name drops the prefix every row shares (``sm80_xmma_gemm_bf16bf16_…``) and shows what follows, or
    without one is elided in the middle: an end cut of names that share their start shows every row alike."""
    distinct: bool = False
    """A long name is cut at the end when that already tells it from every other name of the column, and
    otherwise shown from the word where it first differs from the name most like it (``…BinaryFunctor<float, …``
    of ``at::native::vectorized_elementwise_kernel<(int)4, at::native::BinaryFunctor<…``): kernel names of a
    run share long starts, and which part differs changes from row to row."""

    def text(self, value: Any, row: dict[str, Any]) -> str:
        if self.fmt is not None:
            return clean(self.fmt(value, row))
        return num(value) if self.justify == "right" else clean(value if value is not None else "–")


class FrameTable(Widget, can_focus=True):
    """A scrolling, cursor-driven view of a polars frame that draws only the rows on screen."""

    BINDINGS: ClassVar[list[BindingType]] = [
        Binding("up", "cursor(-1)", "Up", show=False),
        Binding("down", "cursor(1)", "Down", show=False),
        Binding("pageup", "page(-1)", "Page up", show=False),
        Binding("pagedown,space", "page(1)", "Page down", show=False),
        Binding("home", "jump(0)", "First", show=False),
        Binding("end", "jump(-1)", "Last", show=False),
        Binding("enter", "select", "Open", show=True),
    ]

    COMPONENT_CLASSES: ClassVar[set[str]] = {
        "frame-table--header",
        "frame-table--cursor",
        "frame-table--odd",
        "frame-table--empty",
        "frame-table--good",
        "frame-table--bad",
        "frame-table--warn",
        "frame-table--dim",
    }

    DEFAULT_CSS = """
    FrameTable { height: 1fr; background: $surface; }
    FrameTable > .frame-table--header { background: $panel; color: $text; text-style: bold; }
    FrameTable > .frame-table--cursor { background: $block-cursor-background; color: $block-cursor-foreground; text-style: bold; }
    FrameTable:blur > .frame-table--cursor { background: $block-cursor-blurred-background; text-style: bold; }
    FrameTable > .frame-table--odd { background: $surface-lighten-1; }
    FrameTable > .frame-table--empty { color: $text-muted; text-style: italic; }
    FrameTable > .frame-table--good { color: $success; }
    FrameTable > .frame-table--bad { color: $error; }
    FrameTable > .frame-table--warn { color: $warning; }
    FrameTable > .frame-table--dim { color: $text-muted; }
    """

    class RowHighlighted(Message):
        """The cursor moved to another row."""

        def __init__(self, table: FrameTable, index: int, row: dict[str, Any] | None) -> None:
            super().__init__()
            self.table = table
            """The table that posted it."""
            self.index = index
            """Row index in the table's current frame."""
            self.row = row
            """The row as a dict of column -> value (None when the frame is empty)."""

        @property
        def control(self) -> FrameTable:
            return self.table

    class RowSelected(Message):
        """The user chose a row (Enter, or a click on the highlighted row)."""

        def __init__(self, table: FrameTable, index: int, row: dict[str, Any]) -> None:
            super().__init__()
            self.table = table
            """The table that posted it."""
            self.index = index
            """Row index in the table's current frame."""
            self.row = row
            """The row as a dict of column -> value."""

        @property
        def control(self) -> FrameTable:
            return self.table

    class HeaderClicked(Message):
        """The user clicked a column header (screens sort by it)."""

        def __init__(self, table: FrameTable, key: str) -> None:
            super().__init__()
            self.table = table
            """The table that posted it."""
            self.key = key
            """The column's frame key."""

        @property
        def control(self) -> FrameTable:
            return self.table

    def __init__(
        self,
        columns: list[Col],
        frame: pl.DataFrame | None = None,
        *,
        empty_text: str = "no rows",
        name: str | None = None,
        id: str | None = None,
        classes: str | None = None,
    ) -> None:
        super().__init__(name=name, id=id, classes=classes)
        self.columns = columns
        self.frame = frame if frame is not None else pl.DataFrame()
        self.empty_text = empty_text
        self.cursor = 0
        self.top = 0
        self.sort_key: str | None = None
        self.sort_descending = False
        self._window: tuple[int, list[dict[str, Any]]] = (0, [])
        self._strips: dict[tuple[int, bool, int], Strip] = {}
        self._natural: dict[str, int] = {}
        self._prefix: dict[str, str] = {}
        self._differs: dict[str, dict[str, int]] = {}

    # -- data ---------------------------------------------------------------------------------------------------
    @property
    def row_count(self) -> int:
        return self.frame.height

    def set_frame(self, frame: pl.DataFrame, *, keep_cursor: bool = False) -> None:
        """Show ``frame`` (the cursor goes to the first row unless ``keep_cursor``)."""
        self.frame = frame
        self._window = (0, [])
        self._strips.clear()
        self._natural.clear()
        self._prefix.clear()
        self._differs.clear()
        if not keep_cursor:
            self.cursor = 0
            self.top = 0
        self.cursor = max(0, min(self.cursor, frame.height - 1))
        self._scroll_to_cursor()
        self.refresh()
        self._post_highlight()

    def set_columns(self, columns: list[Col]) -> None:
        self.columns = columns
        self._strips.clear()
        self.refresh()

    def row(self, index: int) -> dict[str, Any] | None:
        """Row ``index`` of the frame as a dict (from the on-screen window when it is there)."""
        if not 0 <= index < self.frame.height:
            return None
        start, rows = self._window
        if not start <= index < start + len(rows):
            span = max(self._page_rows() * 2, 64)
            start = max(0, index - span // 4)
            rows = self.frame.slice(start, span).rows(named=True)
            self._window = (start, rows)
        return rows[index - start]

    @property
    def cursor_row(self) -> dict[str, Any] | None:
        return self.row(self.cursor)

    # -- geometry -----------------------------------------------------------------------------------------------
    def _page_rows(self) -> int:
        return max(1, self.size.height - 1)

    def _scroll_to_cursor(self) -> None:
        page = self._page_rows()
        if self.cursor < self.top:
            self.top = self.cursor
        elif self.cursor >= self.top + page:
            self.top = self.cursor - page + 1
        self.top = max(0, min(self.top, max(0, self.frame.height - page)))

    def _natural_width(self, col: Col) -> int:
        """The longest text of ``col`` over the frame's first 2,000 rows (cached until the frame changes)."""
        if col.key not in self._natural:
            head = self.frame.head(2000) if col.key in self.frame.columns else pl.DataFrame()
            rows = head.to_dicts() if head.height else []
            self._natural[col.key] = max([len(col.label), *(len(col.text(r.get(col.key), r)) for r in rows)])
        return self._natural[col.key]

    def _shared_prefix(self, col: Col) -> str:
        """The start every row of ``col`` shares (first 2,000 rows), up to a ``_`` / ``-`` / ``:`` / space, when it
        is at least 6 characters; else ``""``. Cached until the frame changes."""
        if col.key not in self._prefix:
            head = self.frame.head(2000) if col.key in self.frame.columns else pl.DataFrame()
            texts = [col.text(r.get(col.key), r) for r in head.to_dicts()] if head.height > 1 else []
            common = os.path.commonprefix(texts) if texts else ""  # noqa: RUF071 - text, not paths
            cut = max(common.rfind(c) for c in "_-: ") + 1
            self._prefix[col.key] = common[:cut] if cut >= 6 else ""
        return self._prefix[col.key]

    def _first_difference(self, col: Col) -> dict[str, int]:
        """For each distinct text of ``col`` (first 2,000 rows): the index of its first character that differs from
        the text most like it (the longest common start with a neighbour in sorted order). Cached until the frame
        changes."""
        if col.key not in self._differs:
            head = self.frame.head(2000) if col.key in self.frame.columns else pl.DataFrame()
            texts = sorted({col.text(r.get(col.key), r) for r in head.to_dicts()}) if head.height else []
            common = [
                len(os.path.commonprefix([a, b]))  # noqa: RUF071 - text, not paths
                for a, b in itertools.pairwise(texts)
            ]
            self._differs[col.key] = {
                t: max(common[i - 1] if i else 0, common[i] if i < len(common) else 0)
                for i, t in enumerate(texts)
            }
        return self._differs[col.key]

    def _cell(self, col: Col, text: str, width: int) -> str:
        """``text`` fitted to ``width``: a ``middle`` column past its width drops the rows' shared prefix (shown as
        ``…``) and shows what follows, or without one elides in the middle; others are cut at the end (:func:`fit`)."""
        if col.distinct and col.justify == "left" and len(text) > width:
            at = self._first_difference(col).get(text, 0)
            if at < width - 1:  # the end cut already shows where it differs
                return fit(text, width)
            start = max(text.rfind(c, 0, at) for c in " _:<,(") + 1  # the word that differs
            if at - start >= width - 2:
                start = at - (width - 2) // 2
            start = min(
                start, max(0, len(text) - (width - 1))
            )  # a short rest: the cell filled from before it
            return fit("…" + text[start:], width)
        if not col.middle or col.justify != "left" or len(text) <= width:
            return fit(text, width, col.justify)
        prefix = self._shared_prefix(col)
        if prefix and text.startswith(prefix) and len(text) > len(prefix):
            return fit("…" + text[len(prefix) :], width)  # what follows the shared start is what differs
        return fit_middle(text, width)

    def _layout(self, width: int) -> list[tuple[Col, int]]:
        cols = [c for c in self.columns if width >= c.hide_below]
        fixed = sum(c.width for c in cols if c.width is not None)
        flex = [c for c in cols if c.width is None]
        gaps = len(cols)  # one space before each column
        room = width - fixed - gaps - sum(c.min_width for c in flex)
        grown: dict[str, int] = {}
        for c in cols:  # growing columns first take what the flexible ones can spare, in column order
            if c.width is not None and c.grow_to > c.width and room > 0:
                extra = min(room, min(c.grow_to, self._natural_width(c)) - c.width)
                if extra > 0:
                    grown[c.key] = c.width + extra
                    room -= extra
        spare = width - fixed - sum(grown.get(c.key, c.width or 0) - (c.width or 0) for c in cols) - gaps
        out = []
        for c in cols:
            if c.width is not None:
                out.append((c, grown.get(c.key, c.width)))
            else:
                share = spare // len(flex) if flex else 0
                out.append((c, max(c.min_width, share)))
        return out

    def _column_at(self, x: int) -> Col | None:
        pos = 0
        for col, w in self._layout(self.size.width):
            if pos <= x < pos + w + 1:
                return col
            pos += w + 1
        return None

    # -- drawing --------------------------------------------------------------------------------------------------
    def notify_style_update(self) -> None:
        super().notify_style_update()
        self._strips.clear()

    def on_resize(self, event: events.Resize) -> None:
        self._strips.clear()
        self._window = (0, [])
        self._scroll_to_cursor()

    def _style(self, name: str) -> Style:
        return self.get_component_rich_style(f"frame-table--{name}")

    def render_line(self, y: int) -> Strip:
        width = self.size.width
        base = self.rich_style
        if y == 0:
            return self._header(width)
        index = self.top + y - 1
        if self.frame.height == 0:
            if y == 1:
                return Strip([Segment(fit(self.empty_text, width), base + self._style("empty"))])
            return Strip.blank(width, base)
        if index >= self.frame.height:
            return Strip.blank(width, base)
        key = (index, index == self.cursor, width)
        strip = self._strips.get(key)
        if strip is None:
            strip = self._row_strip(index, width)
            if len(self._strips) > 2000:
                self._strips.clear()
            self._strips[key] = strip
        return strip

    def _header(self, width: int) -> Strip:
        style = self.rich_style + self._style("header")
        segments = []
        for col, w in self._layout(width):
            label = col.label
            if col.key == self.sort_key:
                label += "▼" if self.sort_descending else "▲"
            segments.append(Segment(" " + fit(label, w, col.justify), style))
        return Strip(segments).adjust_cell_length(width, style).crop(0, width)

    def _row_strip(self, index: int, width: int) -> Strip:
        row = self.row(index) or {}
        row_style = self.rich_style
        if index % 2:
            row_style += self._style("odd")
        if index == self.cursor:
            row_style += self._style("cursor")
        segments = []
        for col, w in self._layout(width):
            value = row.get(col.key)
            text = self._cell(col, col.text(value, row), w)
            style = row_style
            tone = col.tone(value, row) if col.tone else None
            if tone and index != self.cursor:
                style = row_style + self._style(tone)
            segments.append(Segment(" ", row_style))
            segments.append(Segment(text, style))
        return Strip(segments).adjust_cell_length(width, row_style).crop(0, width)

    # -- cursor ---------------------------------------------------------------------------------------------------
    def move_cursor(self, index: int) -> None:
        """Put the cursor on row ``index`` (clamped), scrolling it into view."""
        if self.frame.height == 0:
            return
        index = max(0, min(index, self.frame.height - 1))
        if index == self.cursor:
            return
        old = self.cursor
        self.cursor = index
        old_top = self.top
        self._scroll_to_cursor()
        if self.top != old_top:
            self.refresh()
        else:
            width = self.size.width
            self.refresh(Region(0, old - self.top + 1, width, 1), Region(0, index - self.top + 1, width, 1))
        self._post_highlight()

    def _post_highlight(self) -> None:
        self.post_message(self.RowHighlighted(self, self.cursor, self.cursor_row))

    def action_cursor(self, delta: int) -> None:
        self.move_cursor(self.cursor + delta)

    def action_page(self, direction: int) -> None:
        self.move_cursor(self.cursor + direction * self._page_rows())

    def action_jump(self, where: int) -> None:
        self.move_cursor(self.frame.height - 1 if where < 0 else 0)

    def action_select(self) -> None:
        row = self.cursor_row
        if row is not None:
            self.post_message(self.RowSelected(self, self.cursor, row))

    # -- mouse ----------------------------------------------------------------------------------------------------
    def on_click(self, event: events.Click) -> None:
        event.stop()
        if event.y == 0:
            col = self._column_at(event.x)
            if col is not None:
                self.post_message(self.HeaderClicked(self, col.key))
            return
        index = self.top + event.y - 1
        if index >= self.frame.height:
            return
        if index == self.cursor or event.chain >= 2:
            self.move_cursor(index)
            self.action_select()
        else:
            self.move_cursor(index)

    def _scroll(self, delta: int) -> None:
        page = self._page_rows()
        top = max(0, min(self.top + delta, max(0, self.frame.height - page)))
        if top == self.top:
            return
        self.top = top
        if self.cursor < top:
            self.cursor = top
            self._post_highlight()
        elif self.cursor >= top + page:
            self.cursor = top + page - 1
            self._post_highlight()
        self.refresh()

    def on_mouse_scroll_down(self, event: events.MouseScrollDown) -> None:
        event.stop()
        self._scroll(3)

    def on_mouse_scroll_up(self, event: events.MouseScrollUp) -> None:
        event.stop()
        self._scroll(-3)
