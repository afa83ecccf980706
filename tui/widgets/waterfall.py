"""The waterfall of one GEMM drawn as bars: the datasheet peak, each factor's step down, the achieved TFLOP/s.

Each bar is as long as the TFLOP/s left after that factor (the full width is the peak); the part the factor took
away is shaded, so the longest shaded stretch is the verdict. Built from a case of the run's Analysis
(:class:`tracekit.analyzers.analysis.Case`, what ``tracekit explain --json`` prints per case). Bars use block characters and a ``×0.92`` figure, so they read the
same without colour (NO_COLOR).
"""

from __future__ import annotations

import math
from typing import Any

from textual.content import Content
from textual.widget import Widget

from tracekit.tui.text import clean, fit

LABEL_W = 14


def _bar(before: float, after: float, peak: float, width: int) -> list[tuple[str, str]]:
    """Segments of one bar: kept (solid), lost in this step (shaded), lost before (blank)."""
    if peak <= 0 or width <= 0:
        return []
    kept = max(0, min(width, round(after / peak * width)))
    prev = max(kept, min(width, round(before / peak * width)))
    return [("█" * kept, "$primary"), ("░" * (prev - kept), "$error"), (" " * (width - prev), "")]


def waterfall_lines(case: Any, width: int) -> list[Content]:
    """The waterfall of a case as lines of ``Content``, ``width`` cells wide."""
    peak = case.peak.tflops if case.peak is not None else None
    achieved = case.timing.achieved_tflops
    factors = case.factors
    verdict = case.verdict.factor
    if not peak or not isinstance(peak, int | float) or not math.isfinite(peak):
        msg = "no datasheet peak for this GEMM's device or dtype: the waterfall needs one"
        if achieved:
            msg += f" (achieved {achieved:,.0f} TFLOP/s)"
        return [Content(msg).stylize("$text-muted")]
    bar_w = max(8, width - LABEL_W - 23 - 14)  # 23: value, change, TFLOP/s; 14: the label after the bar
    lines: list[Content] = []
    cls = clean(case.peak.dtype_class or "")
    source = clean(case.peak.source or "datasheet")
    head = fit(f"peak {cls}".strip(), LABEL_W)
    lines.append(
        Content.assemble(
            (head, "bold"),
            f"{'':>7}{'':>6} {peak:>8,.0f} ",
            *_bar(peak, peak, peak, bar_w),
            (f" {source}"[:14], "$text-muted"),
        )
    )
    level = float(peak)
    for f in factors:
        value = f.value
        if not isinstance(value, int | float) or not math.isfinite(value):
            continue
        after = level * value
        name = clean(f.name)
        mark = "◀" if name == verdict else " "
        lost = (1 - value) * 100
        lines.append(
            Content.assemble(
                (fit(f"× {name}", LABEL_W), "bold $warning" if name == verdict else "bold"),
                f" ×{value:>5.2f}",
                (f"{-lost:>+5.0f}%" if lost >= 0.5 else "      ", "$error" if lost >= 0.5 else ""),
                f" {after:>8,.0f} ",
                *_bar(level, after, peak, bar_w),
                (f" {mark} verdict" if mark != " " else "", "bold $warning"),
            )
        )
        level = after
    if achieved:
        pct = case.pct_of_peak if case.pct_of_peak is not None else 100.0 * achieved / peak
        lines.append(
            Content.assemble(
                (fit("= achieved", LABEL_W), "bold"),
                f"{'':>7}{'':>6} {achieved:>8,.0f} ",
                *_bar(achieved, achieved, peak, bar_w),
                (f" {pct:.0f}% of peak"[:14], "bold"),
            )
        )
        if case.complete is False:
            lines.append(
                Content(
                    "  the factors do not multiply to the achieved figure: some evidence is missing"
                ).stylize("$text-muted")
            )
    return lines


class Waterfall(Widget):
    """Bars of one GEMM's waterfall; redraws to the width it gets."""

    DEFAULT_CSS = "Waterfall { height: auto; margin: 1 0; }"

    def __init__(self, case: Any, *, id: str | None = None) -> None:
        super().__init__(id=id)
        self.case = case

    def render(self) -> Content:
        return Content("\n").join(waterfall_lines(self.case, self.size.width or 80))

    def get_content_height(self, container: Any, viewport: Any, width: int) -> int:
        return len(waterfall_lines(self.case, width))
