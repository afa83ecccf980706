"""The document model every writer shares: blocks (headings, paragraphs, bullets, tables, code, collapsible
details, plots) and the :class:`Detail` levels a Markdown report is summarised through to fit a comment."""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

from tracekit.numbers import figure as _fmt  # noqa: F401 - the report's numbers (sections.py)

# --- the document: blocks shared by the Markdown and HTML writers -----------------------------------------------------
Inline = list[tuple[str, str]]
"""Runs of inline content: ("t", text) plain, ("c", text) code, ("k", text) a kernel or case name (code in
Markdown; in HTML shortened, :func:`tracekit.text.short_kernel_name`, with the full name on hover), ("b", text)
bold, ("i", text) italic."""


@dataclass
class Heading:
    level: int
    parts: Inline


@dataclass
class Para:
    parts: Inline


@dataclass
class Bullets:
    items: list[Inline]


@dataclass
class Table:
    headers: list[str]
    rows: list[list[Inline]]
    align: list[str] = field(default_factory=list)  # "l" | "r" per column


@dataclass
class Code:
    text: str
    lang: str = "text"


@dataclass
class Details:
    summary: str
    body: list[Any]


@dataclass
class Image:
    key: str  # plot key: "tflops" or "waterfall-<gemm_id>"
    alt: str


@dataclass(frozen=True)
class Detail:
    """How much a Markdown report holds; later levels summarise more (see :data:`LEVELS`). None = everything."""

    name: str = "full"
    group_failures: bool = False
    gemm_rows: int | None = None
    waterfalls: int | None = None
    findings: int | None = None
    failure_details: int | None = None
    failure_groups: int | None = None
    detail_chars: int | None = None
    cell_chars: int = 600


LEVELS: tuple[Detail, ...] = (
    Detail("full"),
    Detail("grouped failures", group_failures=True),
    # GEMM sections shrink before error texts are cut: a failure's whole text is what a maintainer needs
    Detail("top", True, 200, 20, 60, 40, 400, None, 600),
    Detail("top", True, 100, 10, 30, 40, 400, None, 400),
    Detail("top", True, 200, 20, 60, 40, 400, 8000, 400),
    Detail("top", True, 100, 10, 30, 20, 200, 4000, 300),
    Detail("top", True, 50, 5, 15, 10, 100, 2000, 200),
    Detail("top", True, 25, 3, 8, 5, 50, 1000, 160),
    Detail("top", True, 10, 1, 3, 3, 20, 500, 120),
    Detail("top", True, 5, 0, 0, 0, 10, 300, 100),
)


def _shape(r: dict[str, Any]) -> str:
    return f"{r['m']}×{r['n']}×{r['k']}" if r.get("m") is not None else "–"


_CUT_MARK = " more characters: see `tracekit report --format json` or the bundle)"


def _cut(text: str, limit: int | None) -> str:
    if limit is None or len(text) <= limit:
        return text
    return text[:limit] + f"\n… ({len(text) - limit:,}{_CUT_MARK}"
