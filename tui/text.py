"""Untrusted strings (kernel names, error messages, range names) made safe to draw.

Kernel names are data, never markup: a C++ template name holds ``[...]``, a stranger's trace may hold ANSI
escapes or Rich markup, and a name may be 10,000 characters long. Everything the UI draws from a frame goes
through :func:`clean` (:func:`tracekit.text.clean`, tabs widened for the screen: control characters shown as
``\\xNN``, so an escape sequence can never reach the terminal) and then into a ``rich.text.Text`` or a
``Segment`` (neither parses markup). This module imports no Textual, so it is usable (and tested) on its own.
"""

from __future__ import annotations

from typing import Any

from rich.cells import cell_len, set_cell_size

from tracekit import text as _text
from tracekit.numbers import cell as num  # noqa: F401 - the UI's cells
from tracekit.numbers import time_us  # noqa: F401

ELLIPSIS = "…"


def fit_middle(text: str, width: int) -> str:
    """``text`` elided in the middle to ``width`` cells (left-justified, padded): names that share a long prefix
    (``sm80_xmma_gemm_…``, ``torch-fp8-…``) differ at the end, which an end cut would remove from every row alike."""
    if width <= 0:
        return ""
    if cell_len(text) <= width:
        return set_cell_size(text, width)
    head = (width - 1) // 2
    tail = width - 1 - head
    return (
        set_cell_size(text, head) + ELLIPSIS + text[len(text) - tail :]
        if tail
        else set_cell_size(text, head) + ELLIPSIS
    )


def clean(value: Any, *, keep_newlines: bool = False) -> str:
    """``value`` as text with every control character made visible (``\\x1b`` for ESC), by
    :func:`tracekit.text.clean`; with ``keep_newlines`` a tab becomes four spaces (a cell has no tab stops)."""
    text = _text.clean(value, keep_newlines=keep_newlines)
    return text.replace("\t", "    ") if keep_newlines else text


def fit(text: str, width: int, justify: str = "left") -> str:
    """``text`` padded or elided (with ``…``) to exactly ``width`` cells; wide characters counted right."""
    if width <= 0:
        return ""
    if cell_len(text) > width:
        return set_cell_size(text, width - 1) + ELLIPSIS
    if justify == "right":
        return " " * (width - cell_len(text)) + text
    return set_cell_size(text, width)
