"""Modal screens: help (``?``), an error (a TracekitError: title, message, what to do), and a text viewer for
whole kernel names and error texts. All text is data: built as ``Content`` from cleaned strings, never markup."""

from __future__ import annotations

from typing import Any, ClassVar

from textual.app import ComposeResult
from textual.binding import Binding, BindingType
from textual.containers import VerticalScroll
from textual.content import Content
from textual.screen import ModalScreen
from textual.widgets import Static

from tracekit.tui.keys import HELP
from tracekit.tui.text import clean, time_us


class HelpScreen(ModalScreen[None]):
    """Every key of every screen (tui/keys.py)."""

    BINDINGS: ClassVar[list[BindingType]] = [
        Binding("escape,q,question_mark", "dismiss", "Close"),
    ]

    KEY_WIDTH = 24

    def compose(self) -> ComposeResult:
        with VerticalScroll(id="dialog"):
            yield Static(self._content(self.app.size.width), id="help-text")

    def _content(self, screen_width: int) -> Content:
        """The key table with each description wrapped under its own column (a hanging indent), for a dialog
        90% of ``screen_width`` wide (at most 110) less its border, padding and scrollbar."""
        import textwrap

        inner = min(110, int(screen_width * 0.9)) - 6
        desc_width = max(24, inner - self.KEY_WIDTH - 3)
        indent = " " * (self.KEY_WIDTH + 3)
        parts: list[Any] = [("tracekit view — keys\n", "bold $accent")]
        for section, keys in HELP:
            parts.append((f"\n{section}\n", "bold"))
            for key, what in keys:
                parts.append((f"  {key:<{self.KEY_WIDTH}}", "$accent"))
                lines = textwrap.wrap(what, desc_width) or [""]
                parts.append(" " + ("\n" + indent).join(lines) + "\n")
        parts.append(("\nesc closes this help", "$text-muted"))
        return Content.assemble(*parts)

    def on_resize(self) -> None:
        self.query_one("#help-text", Static).update(self._content(self.app.size.width))

    def action_dismiss(self, result: None = None) -> None:  # type: ignore[override]
        self.dismiss(None)


class TextScreen(ModalScreen[None]):
    """A scrollable dialog of text: a kernel's whole name, an error's full message and traceback."""

    BINDINGS: ClassVar[list[BindingType]] = [Binding("escape,q,enter", "close", "Close")]

    def __init__(self, title: str, body: Content) -> None:
        super().__init__()
        self.title_text = title
        self.body = body

    def compose(self) -> ComposeResult:
        with VerticalScroll(id="dialog"):
            yield Static(Content(clean(self.title_text)).stylize("bold $accent"), id="dialog-title")
            yield Static(self.body, id="dialog-body")
            yield Static(Content("esc closes").stylize("$text-muted"))

    def action_close(self) -> None:
        self.dismiss(None)


def fields_content(pairs: list[tuple[str, Any]], *, whole: set[str] | None = None) -> Content:
    """``key: value`` lines; values cleaned (newlines kept for keys in ``whole``: messages, tracebacks)."""
    whole = whole or set()
    parts: list[Any] = []
    for key, value in pairs:
        text = clean(value if value is not None else "–", keep_newlines=key in whole)
        if key in whole:
            parts += [(f"{key}:\n", "bold"), text, "\n\n"]
        else:
            parts += [(f"{key}: ", "bold"), text, "\n"]
    return Content.assemble(*parts)


def kernel_group_fields(row: dict[str, Any]) -> list[tuple[str, Any]]:
    """The ``key: value`` pairs of one kernel's launches taken together (a row of ``tables.kernel_groups`` or
    ``tables.gemm_kernels``): name, launches, total, mean, min and max time; the kernels and GEMM screens show it."""
    return [
        ("name", row.get("name")),
        ("launches", row.get("launches")),
        ("total", f"{time_us(row.get('total_ns'))} µs"),
        ("mean", f"{time_us(row.get('mean_ns'))} µs"),
        ("min / max", f"{time_us(row.get('min_ns'))} / {time_us(row.get('max_ns'))} µs"),
    ]


class ErrorScreen(ModalScreen[None]):
    """A TracekitError (or an unexpected one) shown as a dialog: what is wrong and what to do."""

    BINDINGS: ClassVar[list[BindingType]] = [Binding("escape,enter,q", "close", "Close")]

    def __init__(self, title: str, message: str, hint: str | None = None) -> None:
        super().__init__()
        self.error_title, self.message, self.hint = title, message, hint

    def compose(self) -> ComposeResult:
        parts: list[Any] = [
            (clean(self.error_title) + "\n\n", "bold $error"),
            clean(self.message, keep_newlines=True),
        ]
        if self.hint:
            parts += [("\n\nwhat to do: ", "bold"), clean(self.hint)]
        parts.append(("\n\nesc closes", "$text-muted"))
        with VerticalScroll(id="dialog", classes="error"):
            yield Static(Content.assemble(*parts), id="error-text")

    def action_close(self) -> None:
        self.dismiss(None)
