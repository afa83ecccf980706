"""Escaping for reports: data (kernel names, ranges, error texts) made safe as Markdown text, code spans
and HTML attributes, and numbers made JSON-safe."""

from __future__ import annotations

import html
import re
from typing import Any

from tracekit.numbers import finite as _f  # noqa: F401 - the report modules' number check
from tracekit.text import clean


# --- escaping --------------------------------------------------------------------------------------------------------
def _clean(text: Any) -> str:
    """Text with control characters (ANSI escapes included) made visible; newlines kept."""
    s = "" if text is None else str(text)
    return clean(s.replace("\r\n", "\n").replace("\r", "\n"), keep_newlines=True)


def _one_line(text: Any, limit: int | None = None) -> str:
    s = " ".join(_clean(text).split())
    if limit is not None and len(s) > limit:
        s = s[: limit - 1] + "…"
    return s


_MD_ESCAPES = {c: "\\" + c for c in "\\`*_[]|~$#!{}"}
_MD_ESCAPES.update({"<": "&lt;", ">": "&gt;", "&": "&amp;", "@": "@\u2060"})
_MD_TABLE = str.maketrans(_MD_ESCAPES)


_CODE_SPAN = re.compile(r"`([^`]+)`")
"""A code span in a sentence: tracekit's own hints quote commands so (``capture with `tracekit capture --ncu```)."""


def md_text(text: Any, limit: int | None = None) -> str:
    r"""One line of data as Markdown text: emphasis, code, links, tables, math, HTML and @mentions neutralised
    (a word joiner after ``@`` keeps GitHub from notifying anyone). A `quoted` part stays a code span (its
    content is inert there), so a hint's command renders as code, not as ``\`tracekit …\```."""
    s = _one_line(text, limit)
    out, at = [], 0
    for m in _CODE_SPAN.finditer(s):
        out.append(s[at : m.start()].translate(_MD_TABLE))
        out.append(md_code(m.group(1), in_table="|" in m.group(1)))
        at = m.end()
    out.append(s[at:].translate(_MD_TABLE))
    return "".join(out)


def md_code(text: Any, limit: int | None = None, *, in_table: bool = True) -> str:
    """One line of data as a Markdown code span, with a fence longer than any backtick run in it."""
    s = _one_line(text, limit)
    if not s:
        return ""
    if in_table:
        s = s.replace("|", "\\|")
    run = max((len(m) for m in re.findall(r"`+", s)), default=0)
    fence = "`" * (run + 1)
    pad = " " if s.startswith(("`", " ")) or s.endswith(("`", " ")) or run else ""
    return f"{fence}{pad}{s}{pad}{fence}"


def _fence(text: str) -> str:
    run = max((len(m) for m in re.findall(r"`+", text)), default=0)
    return "`" * max(3, run + 1)


def _html_attr_safe(text: str) -> str:
    return html.escape(text, quote=True)
