"""The one sanitizer for untrusted text: kernel names, range names, error messages, paths from a stranger's files.

Such text is data, and may hold anything: ANSI escape sequences that would drive the terminal, a carriage return
that overwrites the line before it, NUL bytes. Everything tracekit draws (CLI tables, the TUI, reports) or checks
(bundle member names) from such text goes through this module, so one set of characters is treated as control
characters everywhere: C0 (``\\x00``-``\\x1f``), DEL (``\\x7f``) and C1 (``\\x80``-``\\x9f``, which some terminals
obey as escapes too). :func:`clean` shows each as ``\\xNN``; newline and tab are kept when asked for (multi-line
messages, tracebacks). Imports nothing but the standard library, so collectors and the TUI can use it alike.
"""

from __future__ import annotations

import re
from typing import Any

__all__ = ["CONTROL", "clean", "has_control"]

CONTROL = re.compile(r"[\x00-\x1f\x7f-\x9f]")
"""Every control character: C0, DEL and C1."""
_CONTROL_BUT_LINES = re.compile(r"[\x00-\x08\x0b-\x1f\x7f-\x9f]")
"""The same less newline (``\\n``) and tab (``\\t``)."""


def _visible(match: re.Match[str]) -> str:
    return f"\\x{ord(match.group()):02x}"


def clean(value: Any, *, keep_newlines: bool = False) -> str:
    """``value`` as text (``""`` for None) with every control character shown as ``\\xNN`` (``\\x1b`` for ESC).

    With ``keep_newlines`` a ``\\n`` and a ``\\t`` stay as they are (a traceback keeps its lines); a carriage
    return never does, since it lets a later part of the text overwrite an earlier one on a terminal."""
    text = "" if value is None else str(value)
    return (_CONTROL_BUT_LINES if keep_newlines else CONTROL).sub(_visible, text)


def has_control(text: str) -> bool:
    """Whether ``text`` holds a control character (newline and tab included): names must hold none."""
    return CONTROL.search(text) is not None
