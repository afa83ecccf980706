"""Failures: a backend x shape matrix (✗ and the kind where it failed, achieved TFLOP/s where it ran), and the
full, untruncated error text and traceback of the selected cell below it; everything from the run's Analysis."""

from __future__ import annotations

from typing import Any

from rich.text import Text
from textual.app import ComposeResult
from textual.containers import VerticalScroll
from textual.content import Content
from textual.screen import Screen
from textual.widgets import DataTable, Static

from tracekit.analyzers.summary import crash_evidence
from tracekit.tui.tables import FailureMatrix, failure_matrix
from tracekit.tui.text import clean
from tracekit.tui.widgets.footer import KeyFooter


def _crash_parts(r: dict[str, Any]) -> list[Any]:
    """A crash's evidence (analyzers/summary.py crash_evidence), whole: one-line items after their label,
    multi-line ones (stack, stderr) below it."""
    parts: list[Any] = []
    for label, text in crash_evidence(r):
        if "\n" in text:
            parts += [(f"{label}:\n", "bold"), (clean(text, keep_newlines=True), "$text-muted"), "\n"]
        else:
            parts += [(f"{label}: ", "bold"), clean(text), "\n"]
    return parts


def failure_content(rows: list[dict[str, Any]]) -> Content:
    """Every failure of one cell in full: kind, exception, message, traceback, device, versions."""
    parts: list[Any] = []
    for r in rows:
        shape = "x".join("?" if r.get(k) is None else str(r[k]) for k in ("m", "n", "k"))
        parts += [
            (f"{clean(r.get('backend'))} {clean(r.get('op') or '')} {shape}", "bold $accent"),
            (f"  {clean(r.get('kind') or '?')}", "bold $error"),
            f"  {clean(r.get('error_type') or '')}\n",
            ("message:\n", "bold"),
            clean(r.get("message") or "–", keep_newlines=True),
            "\n",
        ]
        if r.get("traceback"):
            parts += [
                ("traceback:\n", "bold"),
                (clean(r["traceback"], keep_newlines=True), "$text-muted"),
                "\n",
            ]
        parts += _crash_parts(r)
        device = " ".join(clean(r.get(k)) for k in ("device_name", "compute_capability") if r.get(k))
        if device:
            parts += [("device: ", "bold"), device, "\n"]
        if r.get("versions"):
            versions = ", ".join(f"{p['package']} {p['version']}" for p in r["versions"])
            parts += [("versions: ", "bold"), clean(versions), "\n"]
        parts.append("\n")
    return Content.assemble(*parts)


class FailuresScreen(Screen[None]):
    """What failed where, and exactly how."""

    def __init__(self, analysis: Any, run_name: str) -> None:
        super().__init__()
        self.matrix: FailureMatrix = failure_matrix(analysis)
        self.count = len(analysis.failures)
        self.run_name = run_name
        self.detail = Static("", id="failure-text")

    def compose(self) -> ComposeResult:
        yield Static(
            Content.assemble(
                ("failures", "bold $accent"),
                f" · {self.count} failure(s), {len(self.matrix.backends)} backend(s)",
                ("  ✗ failed · number: achieved TFLOP/s", "$text-muted"),
            ),
            id="screen-title",
        )
        table: DataTable[Text] = DataTable(id="matrix", cursor_type="cell", zebra_stripes=True)
        yield table
        with VerticalScroll(id="failure-scroll"):
            yield self.detail
        yield KeyFooter()

    def on_mount(self) -> None:
        table = self.query_one("#matrix", DataTable)
        m = self.matrix
        if not m.backends:
            self.detail.update(Content("no failures and no measurements in this run").stylize("$text-muted"))
            return
        table.add_column(Text("backend"), key="backend")
        for s in m.shapes:
            table.add_column(Text(m.shape_label(s), justify="right"), key=m.shape_label(s))
        for b in m.backends:
            cells: list[Text] = [Text(clean(b), style="bold")]
            for s in m.shapes:
                fails = m.failures.get((b, s))
                if fails:
                    cells.append(
                        Text(
                            f"✗ {clean(fails[0].get('kind') or 'failed')}", style="bold red", justify="right"
                        )
                    )
                elif (b, s) in m.tflops:
                    cells.append(Text(f"{m.tflops[(b, s)]:,.0f}", justify="right"))
                else:
                    cells.append(Text("·", style="dim", justify="right"))
            table.add_row(*cells, key=b)
        table.focus()
        first = next(
            (
                (bi, si)
                for bi, b in enumerate(m.backends)
                for si, s in enumerate(m.shapes)
                if (b, s) in m.failures
            ),
            (0, 1),
        )
        table.move_cursor(row=first[0], column=first[1] + 1)
        self._show(first[0], first[1] + 1)

    def _show(self, row: int, column: int) -> None:
        m = self.matrix
        if not (0 <= row < len(m.backends)) or column < 1 or column - 1 >= len(m.shapes):
            self.detail.update(
                Content("choose a cell: a backend (row) at a shape (column)").stylize("$text-muted")
            )
            return
        key = (m.backends[row], m.shapes[column - 1])
        fails = m.failures.get(key)
        if fails:
            self.detail.update(failure_content(fails))
        elif key in m.tflops:
            self.detail.update(
                Content(
                    f"{clean(key[0])} at {m.shape_label(key[1])}: ran, achieved {m.tflops[key]:,.0f} TFLOP/s"
                )
            )
        else:
            self.detail.update(
                Content(f"{clean(key[0])} at {m.shape_label(key[1])}: not run").stylize("$text-muted")
            )

    def on_data_table_cell_highlighted(self, event: DataTable.CellHighlighted) -> None:
        self._show(event.coordinate.row, event.coordinate.column)
