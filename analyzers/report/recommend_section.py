"""The report's recommendation section for a bench run made with ``tracekit bench gemm --shapes-from RUN``: the
table of tracekit.analyzers.recommend (the same cells the CLI prints), with its footnotes."""

from __future__ import annotations

from typing import Any

from .model import Detail, Heading, Para, Table
from .text import md_text


def recommendation_data(analysis: Any) -> dict[str, Any] | None:
    """The Analysis' recommendation as JSON-able data (``report.recommendation``), None for any other run."""
    from ..recommend import to_builtins

    rec = analysis.recommendation
    return None if rec is None else to_builtins(rec)


def recommendation_blocks(rep: dict[str, Any], d: Detail) -> list[Any]:
    """The section's blocks (none for a run that is not a --shapes-from bench run)."""
    import msgspec

    from ..recommend import Recommendation, recommendation_lines

    data = rep["report"].get("recommendation")
    if not data:
        return []
    title, header, rows, foot = recommendation_lines(msgspec.convert(data, Recommendation))
    align = [
        "l" if h in ("shape MxNxK", "dtype", "fastest backend", "failed", "what-if") else "r" for h in header
    ]
    cells = [[[("t", md_text(c, d.cell_chars))] for c in row] for row in rows]
    return [
        Heading(3, [("t", title)]),
        Table(header, cells, align),
        *(Para([("t", md_text(line))]) for line in foot),
    ]
