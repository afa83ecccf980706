"""The one sanitizer for untrusted text: kernel names, range names, error messages, paths from a stranger's files.

Such text is data, and may hold anything: ANSI escape sequences that would drive the terminal, a carriage return
that overwrites the line before it, NUL bytes. Everything tracekit draws (CLI tables, the TUI, reports) or checks
(bundle member names) from such text goes through this module, so one set of characters is treated as control
characters everywhere: C0 (``\\x00``-``\\x1f``), DEL (``\\x7f``) and C1 (``\\x80``-``\\x9f``, which some terminals
obey as escapes too). :func:`clean` shows each as ``\\xNN``; newline and tab are kept when asked for (multi-line
messages, tracebacks). Imports nothing but the standard library, so collectors and the TUI can use it alike.
"""

from __future__ import annotations

import os
import re
from typing import Any

__all__ = ["CONTROL", "PIPE_WIDTH", "clean", "has_control", "make_console", "short_kernel_name", "short_name"]

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


PIPE_WIDTH = 1000
"""The width drawn for a pipe or a file (a CI log, ``less``, ``> out.txt``) when ``COLUMNS`` names none: wide
enough that no table is cut to fit an imagined terminal. A table takes its natural width, never this one."""


def make_console(*, stderr: bool = False, **options: Any) -> Any:
    """The Rich console every command draws with, so one layout rule serves them all.

    On a terminal: its width. ``COLUMNS`` set: that width, terminal or not (tests and users pin it). A pipe or a
    file with no ``COLUMNS``: :data:`PIPE_WIDTH`, so tables are printed whole instead of being squeezed into
    Rich's default of 80 columns; a reader of a log scrolls sideways, but no number, status or name is cut.
    Commands and paths that a user copies are printed with ``soft_wrap=True`` (never folded), whatever the width.
    Rich is imported here, not at module level: this module stays importable by the collectors' bare
    environments."""
    from rich.console import Console

    console = Console(stderr=stderr, **options)
    if (
        "width" not in options
        and not os.environ.get("COLUMNS", "").strip().isdigit()
        and not console.is_terminal
    ):
        console.width = PIPE_WIDTH
    return console


_PLAIN = re.compile(r"[^\s,<>():]+")
"""One simple template argument (a tile's name, a number, ``float``): no nested template, list, namespace or cast."""


def short_kernel_name(name: Any, *, elide: bool = True) -> str:
    """A kernel's name as a person scans a table: no return type, no parameter list, template arguments elided.

    ``void cutlass::Kernel2<cutlass::gemm::kernel::GemmUniversal<...>>(Params)`` -> ``cutlass::Kernel2<…>``; a
    template argument that is one plain name is kept, as it is what tells such kernels apart
    (``cutlass::Kernel<cutlass_80_tensorop_s1688gemm_256x64_16x4_tn_align1>``);
    ``sm90_xmma_gemm_bf16bf16_bf16f32_f32_tn_n_tilesize128x128x64`` stays whole (it has nothing to elide). The
    namespace stays: it tells a CUTLASS kernel from a PyTorch one. Reports keep the full name beside it (a
    hover title in HTML, ``--json``); control characters are shown as ``\\xNN`` (:func:`clean`). With ``elide``
    False the template arguments stay (only the return type and parameter list go): for kernels that differ only
    there."""
    s = clean(name).strip()
    if s.endswith(")"):  # the parameter list: the last top-level (...)
        depth = 0
        for i in range(len(s) - 1, -1, -1):
            if s[i] == ")":
                depth += 1
            elif s[i] == "(":
                depth -= 1
                if depth == 0:
                    s = s[:i].rstrip() or s
                    break
    out: list[str] = [] if elide else [s]
    depth, start = 0, 0
    for i, c in enumerate(s if elide else ""):
        if c == "<":
            if depth == 0:
                start = i
            depth += 1
        elif c == ">" and depth:
            depth -= 1
            if (
                depth == 0
            ):  # one plain name is what tells kernels apart (cutlass::Kernel<cutlass_80_…_align1>)
                inner = s[start + 1 : i]
                out.append(f"<{inner}>" if _PLAIN.fullmatch(inner) else "<…>")
        elif depth == 0:
            out.append(c)
    if depth:  # a name cut inside its template arguments
        out.append("<…>")
    s = "".join(out).strip()
    depth, cut = 0, -1
    for i, c in enumerate(s):  # a return type (``void``): the last space outside (...) and <...>
        depth += (c in "(<") - (c in ")>")
        if c == " " and depth == 0:
            cut = i
    return s[cut + 1 :] or clean(name)


def short_name(label: Any) -> str:
    """A case's label as tables and plot legends show it: a kernel name (one with a parameter list or template
    arguments) shortened by :func:`short_kernel_name`; any other label (``torch-bf16 4096x2048x6144``, a range
    name) whole, as it is already short and its spaces are part of it."""
    text = clean(label)
    return short_kernel_name(text) if "(" in text or "<" in text else text
