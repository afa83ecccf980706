"""The report's step-breakdown section: each GPU's time by kernel class and idle, per range name, and what the
numbers leave out (analyzers/breakdown)."""

from __future__ import annotations

from typing import Any

import msgspec

from ..breakdown import Breakdown
from ..breakdown.table import breakdown_frame, collapse_same_ranges, headline
from .model import Bullets, Detail, Heading, Para, Table, _fmt
from .text import md_text

SUMMARISED_RANGES = 5
"""Range names a summarised report keeps (the longest GPU windows first)."""


def breakdown_blocks(data: Breakdown | dict[str, Any] | None, d: Detail, notes: list[str]) -> list[Any]:
    """Heading, one line per GPU, the table (% of span per class, whole run then per range name) and notes."""
    if not data:
        return []
    b = data if isinstance(data, Breakdown) else msgspec.convert(data, Breakdown)
    if b.empty:
        return []
    names = len({s.range for s in b.ranges})
    limit = None if d.gemm_rows is None else min(names, SUMMARISED_RANGES)
    if limit is not None and names > limit:
        notes.append(f"step breakdown: {limit} of {names} range names (longest GPU windows)")
    df = collapse_same_ranges(breakdown_frame(b, limit))
    pct = [c for c in df.columns if c not in ("scope", "gpu", "n", "span_ms")]
    blocks: list[Any] = [Heading(3, [("t", "Step breakdown")])]
    blocks.append(
        Para(
            [
                (
                    "t",
                    "Each GPU's span (first kernel start to last end) by kernel class, as % of the span: an instant "
                    "where several classes run on different streams counts for the first of gemm, attention, ..., "
                    "other, communication, memory; idle is no kernel, memcpy or memset running. Per range name "
                    "(counters folded), the span is the sum of its instances' GPU windows. comm hidden: % of "
                    "communication time that ran under compute.",
                )
            ]
        )
    )
    blocks.append(Bullets([[("t", md_text(headline(s), d.cell_chars))] for s in b.devices]))
    headers = [
        "scope",
        "GPU",
        "n",
        "span ms",
        *[f"{c} %" if c != "comm_hidden" else "comm hidden %" for c in pct],
    ]
    rows = []
    for r in df.iter_rows(named=True):
        rows.append(
            [
                [("t", md_text(r["scope"], min(d.cell_chars, 80)))],
                [("t", md_text(r["gpu"]))],
                [("t", "–" if r["n"] is None else f"{r['n']:,}")],
                [("t", _fmt(r["span_ms"], 2))],
                *[[("t", _fmt(r[c], 1))] for c in pct],
            ]
        )
    blocks.append(Table(headers, rows, ["l", "l", "r", "r", *["r"] * len(pct)]))
    if b.ranges_total > names:
        more = (
            f"{b.ranges_total - names} more range names with GPU work "
            "(`tracekit show RUN --json --all` breaks every one down)"
        )
        blocks.append(Para([("t", md_text(more))]))
    if b.notes:
        blocks.append(Bullets([[("t", md_text(n, d.cell_chars))] for n in b.notes]))
    return blocks
