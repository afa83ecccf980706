"""Plots for reports, as standalone SVG text: a tiny dependency-free writer (no matplotlib).

Two charts: :func:`tflops_vs_m` (TFLOP/s against M per backend, log2 x axis, dashed peak lines) and
:func:`waterfall` (datasheet peak stepped down factor by factor to the achieved TFLOP/s). Every string drawn is
XML-escaped: kernel and backend names are data. The output parses with ``xml.etree`` and renders on GitHub.
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from dataclasses import dataclass, field
from xml.sax.saxutils import escape, quoteattr

from tracekit.numbers import trimmed as _num

__all__ = ["Series", "Svg", "tflops_vs_m", "waterfall"]

PALETTE = (
    "#1f77b4",
    "#ff7f0e",
    "#2ca02c",
    "#d62728",
    "#9467bd",
    "#8c564b",
    "#e377c2",
    "#7f7f7f",
    "#bcbd22",
    "#17becf",
)
FONT = "font-family:Helvetica,Arial,sans-serif"


class Svg:
    """An SVG document built element by element."""

    def __init__(self, width: int, height: int, title: str | None = None) -> None:
        self.width, self.height = width, height
        self.items: list[str] = []
        if title:
            self.items.append(f"<title>{escape(title)}</title>")
        self.items.append(f'<rect x="0" y="0" width="{width}" height="{height}" fill="#ffffff"/>')

    @staticmethod
    def _attrs(attrs: dict[str, object]) -> str:
        return "".join(
            f" {k.replace('_', '-')}={quoteattr(str(v))}" for k, v in attrs.items() if v is not None
        )

    def line(self, x1: float, y1: float, x2: float, y2: float, **attrs: object) -> None:
        attrs.setdefault("stroke", "#000")
        self.items.append(
            f'<line x1="{_num(x1)}" y1="{_num(y1)}" x2="{_num(x2)}" y2="{_num(y2)}"{self._attrs(attrs)}/>'
        )

    def rect(self, x: float, y: float, w: float, h: float, **attrs: object) -> None:
        self.items.append(
            f'<rect x="{_num(x)}" y="{_num(y)}" width="{_num(max(w, 0))}" height="{_num(max(h, 0))}"'
            f"{self._attrs(attrs)}/>"
        )

    def polyline(self, points: Sequence[tuple[float, float]], **attrs: object) -> None:
        pts = " ".join(f"{_num(x)},{_num(y)}" for x, y in points)
        attrs.setdefault("fill", "none")
        self.items.append(f'<polyline points="{pts}"{self._attrs(attrs)}/>')

    def circle(self, x: float, y: float, r: float, **attrs: object) -> None:
        self.items.append(f'<circle cx="{_num(x)}" cy="{_num(y)}" r="{_num(r)}"{self._attrs(attrs)}/>')

    def text(
        self, x: float, y: float, text: str, *, size: int = 11, anchor: str = "start", **attrs: object
    ) -> None:
        style = f"{FONT};font-size:{size}px"
        self.items.append(
            f'<text x="{_num(x)}" y="{_num(y)}" text-anchor="{anchor}" style="{style}"{self._attrs(attrs)}>'
            f"{escape(text)}</text>"
        )

    def to_string(self) -> str:
        body = "\n".join(self.items)
        return (
            f'<svg xmlns="http://www.w3.org/2000/svg" width="{self.width}" height="{self.height}" '
            f'viewBox="0 0 {self.width} {self.height}">\n{body}\n</svg>\n'
        )


def _short(text: str, n: int) -> str:
    return text if len(text) <= n else text[: n - 1] + "…"


def _middle(text: str, n: int) -> str:
    """``text`` in ``n`` characters, cut in the middle: kernel names that share a prefix differ at their end (a
    tile size, ``_tn_align1``, ``N=64 K=100``), which an end cut would remove from every legend entry alike."""
    if len(text) <= n:
        return text
    head = (n - 1) // 2
    return text[:head] + "…" + text[len(text) - (n - 1 - head) :]


def _nice_step(span: float, ticks: int = 6) -> float:
    raw = span / max(ticks, 1)
    mag = 10 ** math.floor(math.log10(raw)) if raw > 0 else 1.0
    for mult in (1, 2, 2.5, 5, 10):
        if raw <= mult * mag:
            return mult * mag
    return 10 * mag


def _m_label(m: float) -> str:
    m = round(m)
    if m >= 1024 and m % 1024 == 0:
        return f"{m // 1024}K"
    return str(m)


@dataclass
class Series:
    """One line of :func:`tflops_vs_m`: ``points`` are (M, TFLOP/s)."""

    name: str
    points: list[tuple[float, float]] = field(default_factory=list)


def tflops_vs_m(
    series: Sequence[Series], peaks: dict[str, float], *, title: str = "TFLOP/s vs M", width: int = 760
) -> str:
    """Lines of TFLOP/s against M (log2 axis) per series, with a dashed line for each named peak."""
    legend_rows = len(series) + len(peaks)
    height = 360 + 16 * max(0, legend_rows - 8)
    left, right, top, bottom = 64, 220, 34, 48
    pw, ph = width - left - right, height - top - bottom
    svg = Svg(width, height, title)
    svg.text(left, 20, title, size=14, font_weight="bold")
    xs = [p[0] for s in series for p in s.points if p[0] > 0]
    ys = [p[1] for s in series for p in s.points] + list(peaks.values())
    if not xs or not ys:
        svg.text(left + pw / 2, top + ph / 2, "no GEMM with a known shape and time", anchor="middle")
        return svg.to_string()
    lo, hi = math.log2(min(xs)), math.log2(max(xs))
    if hi - lo < 1:
        lo, hi = lo - 0.5, hi + 0.5
    ymax = max(ys) * 1.08 or 1.0
    step = _nice_step(ymax)
    ymax = math.ceil(ymax / step) * step

    def px(m: float) -> float:
        return left + (math.log2(m) - lo) / (hi - lo) * pw

    def py(v: float) -> float:
        return top + ph - v / ymax * ph

    svg.rect(left, top, pw, ph, fill="none", stroke="#888")
    v = 0.0
    while v <= ymax + 1e-9:
        svg.line(left, py(v), left + pw, py(v), stroke="#e5e5e5")
        svg.text(left - 6, py(v) + 4, f"{v:g}", size=10, anchor="end")
        v += step
    for e in range(math.ceil(lo), math.floor(hi) + 1):
        x = px(2.0**e)
        svg.line(x, top + ph, x, top + ph + 4, stroke="#888")
        svg.text(x, top + ph + 16, _m_label(2.0**e), size=10, anchor="middle")
    svg.text(left + pw / 2, height - 10, "M (log2 scale)", anchor="middle")
    svg.text(16, top + ph / 2, "TFLOP/s", anchor="middle", transform=f"rotate(-90 16 {_num(top + ph / 2)})")
    ly = top + 6
    for i, (name, peak) in enumerate(sorted(peaks.items(), key=lambda kv: -kv[1])):
        color = "#555" if i % 2 == 0 else "#999"
        svg.line(left, py(peak), left + pw, py(peak), stroke=color, stroke_dasharray="6 4")
        svg.line(left + pw + 12, ly, left + pw + 32, ly, stroke=color, stroke_dasharray="6 4")
        svg.text(left + pw + 38, ly + 4, _short(f"{name} peak {peak:,.0f}", 30), size=10)
        ly += 16
    for i, s in enumerate(series):
        color = PALETTE[i % len(PALETTE)]
        pts = sorted((px(m), py(t)) for m, t in s.points if m > 0)
        if len(pts) > 1:
            svg.polyline(pts, stroke=color, stroke_width=2)
        for x, y in pts:
            svg.circle(x, y, 3, fill=color)
        svg.line(left + pw + 12, ly, left + pw + 32, ly, stroke=color, stroke_width=2)
        svg.text(left + pw + 38, ly + 4, _middle(s.name, 30), size=10)
        ly += 16
    return svg.to_string()


def waterfall(
    peak: float, steps: Sequence[tuple[str, float]], *, title: str, unit: str = "TFLOP/s", width: int = 760
) -> str:
    """Bars from ``peak`` down by each multiplicative step ``(name, factor)``, ending at the achieved value."""
    n = len(steps) + 2
    height = 320
    left, right, top, bottom = 64, 16, 34, 56
    pw, ph = width - left - right, height - top - bottom
    svg = Svg(width, height, title)
    svg.text(left, 20, _short(title, 100), size=13, font_weight="bold")
    levels = [peak]
    for _, value in steps:
        levels.append(levels[-1] * value)
    ymax = max(levels) * 1.1 or 1.0

    def py(v: float) -> float:
        return top + ph - v / ymax * ph

    slot = pw / n
    bw = slot * 0.62
    svg.line(left, top + ph, left + pw, top + ph, stroke="#888")
    step = _nice_step(ymax)
    v = 0.0
    while v <= ymax + 1e-9:
        svg.line(left, py(v), left + pw, py(v), stroke="#eee")
        svg.text(left - 6, py(v) + 4, f"{v:g}", size=10, anchor="end")
        v += step
    svg.text(16, top + ph / 2, unit, anchor="middle", transform=f"rotate(-90 16 {_num(top + ph / 2)})")

    def label(i: int, text: str, sub: str) -> None:
        cx = left + slot * (i + 0.5)
        svg.text(cx, top + ph + 16, _short(text, 16), size=10, anchor="middle")
        svg.text(cx, top + ph + 30, sub, size=10, anchor="middle", fill="#555")

    x0 = left + (slot - bw) / 2
    svg.rect(x0, py(peak), bw, py(0) - py(peak), fill="#4c78a8")
    svg.text(x0 + bw / 2, py(peak) - 4, f"{peak:,.0f}", size=10, anchor="middle")
    label(0, "peak", "datasheet")
    for i, (name, value) in enumerate(steps, start=1):
        before, after = levels[i - 1], levels[i]
        x = left + slot * i + (slot - bw) / 2
        svg.rect(x, py(after), bw, py(0) - py(after), fill="#c9d6e8")
        svg.rect(x, py(before), bw, py(after) - py(before), fill="#e45756")
        svg.text(x + bw / 2, py(before) - 4, f"−{before - after:,.0f}", size=10, anchor="middle")
        label(i, name, f"×{value:.2f}")
    final = levels[-1]
    x = left + slot * (n - 1) + (slot - bw) / 2
    svg.rect(x, py(final), bw, py(0) - py(final), fill="#54a24b")
    svg.text(x + bw / 2, py(final) - 4, f"{final:,.0f}", size=10, anchor="middle")
    label(n - 1, "achieved", f"{100 * final / peak:.0f}% of peak" if peak else "")
    return svg.to_string()
