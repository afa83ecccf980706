"""A small scatter plot of TFLOP/s against M (log2 axis), per backend, with peak lines.

Drawn with characters into a grid (no plotting dependency): each backend gets its own marker glyph as well as
its own colour, so the plot reads without colour (NO_COLOR); datasheet peaks are ``═`` lines and the measured
(calibrated, or best in the run) peaks ``┈`` lines, each labelled at its right end.
"""

from __future__ import annotations

import itertools
import math
from typing import Any

from textual.content import Content
from textual.widget import Widget

from tracekit.tui.tables import PlotData
from tracekit.tui.text import clean

MARKERS = "●▲■◆✚✖★▼"
TONES = ("$primary", "$success", "$warning", "$error", "$accent", "$secondary", "$foreground", "$text-muted")
AXIS_W = 6


def _x(m: int, lo: float, hi: float, width: int) -> int:
    if hi <= lo:
        return width // 2
    return round((math.log2(m) - lo) / (hi - lo) * (width - 1))


def plot_lines(data: PlotData, width: int, height: int) -> list[Content]:
    """The plot as ``height`` lines of ``Content``, ``width`` cells wide (legend included)."""
    legend = _legend_lines(sorted(data.series), width)
    legend_rows = len(legend) + 1
    h = max(4, height - 2 - legend_rows)  # 2: x axis + x labels
    w = max(10, width - AXIS_W - 1)
    points = [(b, m, t) for b, pts in data.series.items() for m, t in pts if m > 0]
    if not points:
        return [Content("no GEMM with a shape and a TFLOP/s figure to plot").stylize("$text-muted")]
    ms = [m for _, m, _ in points]
    lo, hi = math.log2(min(ms)), math.log2(max(ms))
    if hi - lo < 1:
        lo, hi = lo - 1, hi + 1
    ymax = max([t for *_, t in points] + list(data.datasheet.values()) + list(data.measured.values()))
    ymax *= 1.08
    grid: list[list[tuple[str, str]]] = [[(" ", "")] * w for _ in range(h)]

    def row_of(t: float) -> int:
        return max(0, min(h - 1, h - 1 - round(t / ymax * (h - 1))))

    labels: dict[int, tuple[str, str]] = {}
    for cls, peak in sorted(data.datasheet.items()):
        r = row_of(peak)
        grid[r] = [("═", "$text-muted")] * w
        labels[r] = (f"{cls} datasheet {peak:,.0f}", "$text-muted")
    for cls, peak in sorted(data.measured.items()):
        r = row_of(peak)
        if r in labels:
            r = max(0, r - 1) if r - 1 not in labels else min(h - 1, r + 1)
        grid[r] = [("┈", "$accent")] * w
        labels[r] = (f"{cls} {data.measured_source} {peak:,.0f}", "$accent")
    backends = sorted(data.series)
    for bi, b in enumerate(backends):
        marker, tone = MARKERS[bi % len(MARKERS)], TONES[bi % len(TONES)]
        pts = sorted(data.series[b])
        if len({m for m, _ in pts}) < len(pts):
            continue  # several N×K at one M (the "all N×K" view): joins would zigzag between shapes
        for (m0, t0), (m1, t1) in itertools.pairwise(pts):  # faint joins between a backend's points
            x0, x1 = _x(m0, lo, hi, w), _x(m1, lo, hi, w)
            for x in range(x0 + 1, x1):
                t = t0 + (t1 - t0) * (x - x0) / max(1, x1 - x0)
                r = row_of(t)
                if grid[r][x][0] in " ═┈":
                    grid[r][x] = ("·", tone)
    for r, (text, tone) in labels.items():  # labels at the left end, where small M leaves room
        for i, ch in enumerate(f" {clean(text)} "[: w - 1]):
            grid[r][1 + i] = (ch, tone)
    for bi, b in enumerate(backends):
        marker, tone = MARKERS[bi % len(MARKERS)], TONES[bi % len(TONES)]
        for m, t in data.series[b]:
            grid[row_of(t)][_x(m, lo, hi, w)] = (marker, f"bold {tone}")
    lines: list[Content] = []
    for r in range(h):
        t = (h - 1 - r) / (h - 1) * ymax
        axis = (
            f"{t:>{AXIS_W - 1},.0f}┤" if r % max(1, h // 5) == 0 or r == h - 1 else " " * (AXIS_W - 1) + "│"
        )
        lines.append(Content.assemble((axis, "$text-muted"), *grid[r]))
    lines.append(Content(" " * (AXIS_W - 1) + "└" + "─" * w).stylize("$text-muted"))
    ticks = [" "] * w
    last_end = -1
    for m in sorted(set(ms)):
        x = _x(m, lo, hi, w)
        text = f"{m:,}" if m < 10_000 else f"{m // 1024}k"
        start = max(0, min(w - len(text), x - len(text) // 2))
        if start <= last_end:
            continue
        ticks[start : start + len(text)] = list(text)
        last_end = start + len(text)
    lines.append(Content(f"{'M':>{AXIS_W - 1}} " + "".join(ticks)).stylize("$text-muted"))
    lines.extend(legend)
    lines.append(
        Content.assemble(
            ("  ═ datasheet peak", "$text-muted"),
            ("   ┈ measured peak", "$accent"),
            (f" ({clean(data.measured_source)})   y: TFLOP/s", "$text-muted"),
        )
    )
    return lines


def _legend_lines(backends: list[str], width: int) -> list[Content]:
    """The backends' markers and names, as many to a line as fit ``width`` (an item is never split)."""
    lines: list[Content] = []
    items: list[Any] = ["  "]
    used = 2
    for bi, b in enumerate(backends):
        text = f" {clean(b)}   "
        if used + 1 + len(text) > width and len(items) > 1:
            lines.append(Content.assemble(*items))
            items, used = ["  "], 2
        items += [(MARKERS[bi % len(MARKERS)], f"bold {TONES[bi % len(TONES)]}"), text]
        used += 1 + len(text)
    lines.append(Content.assemble(*items))
    return lines


class TflopsPlot(Widget):
    """TFLOP/s vs M per backend; redraws to its size."""

    DEFAULT_CSS = "TflopsPlot { height: 1fr; }"

    def __init__(self, data: PlotData, *, id: str | None = None) -> None:
        super().__init__(id=id)
        self.data = data

    def set_data(self, data: PlotData) -> None:
        self.data = data
        self.refresh()

    def render(self) -> Content:
        return Content("\n").join(plot_lines(self.data, self.size.width or 80, self.size.height or 20))
