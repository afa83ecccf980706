"""Reports for kernel tickets: one run as GitHub-flavoured Markdown, JSON, or one self-contained HTML file.

:func:`build_report` gathers everything a maintainer needs into one JSON-able dict (environment, capture
settings, the command that reproduces the capture, every GEMM with its waterfall and verdict, Nsight Compute's
findings, every failure in full). :func:`document` lays that out as a list of blocks (headings, tables, code,
collapsible details, plots) under a :class:`Detail` level; :func:`render_markdown` and :func:`render_html` write
the same blocks out. Markdown must fit a GitHub comment (65,536 characters): it is summarised level by level (failures
grouped by backend + error type + first message line, then the top GEMMs by time in calls, fewer waterfalls, shorter
texts) and says what it left out; a table is never cut mid-row. JSON and HTML are never summarised.

Everything from the run is data, not markup: kernel names, ranges and error texts are escaped for Markdown
(``|``, backticks, ``<``, emphasis, ``$`` math, ``@`` mentions) and HTML, and multi-line texts go in fenced blocks
whose fence is longer than any backtick run inside, so a traceback cannot break out of its ``<details>``.

The package by concern: ``text`` (escaping), ``gather`` (the report as data), ``model`` (blocks and detail
levels), ``sections`` (each section as blocks), ``document`` (the whole report as blocks), ``markdown``,
``html_page`` (HTML and the plots), ``write`` (files). Every public name is importable from here.
"""

from __future__ import annotations

from .document import document
from .gather import (
    REPORT_FORMAT,
    REPORT_VERSION,
    build_report,
    ncu_noise,
    ncu_text,
    reproduce_command,
)
from .html_page import plot_svg, render_html
from .markdown import GITHUB_COMMENT_LIMIT, Rendered, render_markdown
from .model import LEVELS, Bullets, Code, Detail, Details, Heading, Image, Inline, Para, Table
from .text import md_code, md_text
from .write import write_report

__all__ = [
    "GITHUB_COMMENT_LIMIT",
    "LEVELS",
    "REPORT_FORMAT",
    "REPORT_VERSION",
    "Bullets",
    "Code",
    "Detail",
    "Details",
    "Heading",
    "Image",
    "Inline",
    "Para",
    "Rendered",
    "Table",
    "build_report",
    "document",
    "md_code",
    "md_text",
    "ncu_noise",
    "ncu_text",
    "plot_svg",
    "render_html",
    "render_markdown",
    "reproduce_command",
    "write_report",
]
