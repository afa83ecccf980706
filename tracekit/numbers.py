"""How tracekit writes numbers for people: the CLI's tables, the terminal UI, reports, plots and sentences.

One module so a style is chosen, not rewritten: each function below is the style of one kind of output, and a
missing value (None, and NaN or infinity where a style says so) is written as :data:`MISSING`, never as 0.
Imports only the standard library and the core's text sanitizer.
"""

from __future__ import annotations

import math
from typing import Any

from tracekit import text as _text

MISSING = "–"
"""What a missing number is written as."""


def finite(value: Any) -> float | None:
    """``value`` as a float, or None when it is missing, not a number, NaN or infinite."""
    if value is None:
        return None
    try:
        v = float(value)
    except (TypeError, ValueError):
        return None
    return v if v == v and v not in (float("inf"), float("-inf")) else None


def table(value: Any) -> str:
    """A CLI table cell (``tracekit show`` / ``explain``): whole numbers from 100, two decimals from 1, three
    significant digits below; other values as text."""
    if value is None:
        return MISSING
    if isinstance(value, float):
        if value != value:
            return MISSING
        if abs(value) >= 100:
            return f"{value:,.0f}"
        if abs(value) >= 1:
            return f"{value:.2f}"
        return f"{value:.3g}"
    return str(value)


def cell(value: Any, digits: int | None = None) -> str:
    """A terminal-UI table cell: ``digits`` decimals when given, else by size; thousands separators for large
    values (integers from 100,000); other values as sanitized text."""
    if value is None:
        return MISSING
    if isinstance(value, float):
        if not math.isfinite(value):
            return MISSING
        if digits is not None:
            return f"{value:,.{digits}f}"
        if abs(value) >= 100:
            return f"{value:,.0f}"
        if abs(value) >= 10:
            return f"{value:.1f}"
        if abs(value) >= 1:
            return f"{value:.2f}"
        return f"{value:.3g}"
    if isinstance(value, int) and not isinstance(value, bool):
        return f"{value:,}" if abs(value) >= 100_000 else str(value)
    return _text.clean(value)


def time_us(ns: Any) -> str:
    """Nanoseconds shown as microseconds (``12.3``) or milliseconds (``1.42 ms``) when long."""
    if ns is None or (isinstance(ns, float) and not math.isfinite(ns)):
        return MISSING
    us = float(ns) / 1e3
    if us >= 10_000:
        return f"{us / 1e3:,.1f} ms"
    if us >= 100:
        return f"{us:,.0f}"
    return f"{us:.1f}"


def duration(ns: Any) -> str:
    """A duration in the unit that reads best, for the explain cards and the report: ``812 ns``, ``14.6 µs``,
    ``2.93 ms``, ``1.20 s``."""
    v = finite(ns)
    if v is None:
        return MISSING
    if v >= 1e9:
        return f"{v / 1e9:,.2f} s"
    if v >= 1e6:
        return f"{v / 1e6:,.2f} ms"
    if v >= 1e3:
        return f"{v / 1e3:,.1f} µs"
    return f"{v:,.0f} ns"


def share_of_kernel_time(part_ns: float, gpu_ns: float | None) -> float | None:
    """``part_ns`` (kernel time: a case's, or every GEMM's) in % of every kernel's time ``gpu_ns``, or None where
    the two cannot be compared: no timeline, nothing timed, or a part longer than the whole (Nsight Compute's
    replay times are not on the timeline; 0.01% of slack for the sums' rounding)."""
    if not gpu_ns or not part_ns or part_ns > gpu_ns * 1.0001:
        return None
    return 100.0 * part_ns / gpu_ns


def flop_amount(flops: float) -> str:
    """An amount of floating-point work, three significant figures in the unit that keeps it out of exponent
    notation: ``0.101 GFLOP``, ``51.6 GFLOP``, ``335 GFLOP``, ``1.1 TFLOP`` (not ``1.1e+03 GFLOP``), ``4.19 MFLOP``."""
    g = flops / 1e9
    if g >= 1e3:
        t = g / 1e3
        return f"{t:,.0f} TFLOP" if t >= 100 else f"{t:.3g} TFLOP" if t < 10 else f"{t:.1f} TFLOP"
    if g >= 100:
        return f"{g:.0f} GFLOP"
    if g >= 0.01:
        return f"{g:.3g} GFLOP"
    return f"{flops / 1e6:.3g} MFLOP"


def figure(value: Any, digits: int = 1) -> str:
    """A number in a report (Markdown, HTML): whole from 100, else ``digits`` decimals, thousands separated."""
    v = finite(value)
    if v is None:
        return MISSING
    if abs(v) >= 100:
        return f"{v:,.0f}"
    return f"{v:,.{digits}f}"


def trimmed(v: float) -> str:
    """A coordinate or tick of an SVG plot: one decimal, trailing zeros dropped (``12``, ``12.5``)."""
    return f"{v:.1f}".rstrip("0").rstrip(".")


def formatted(value: Any, template: str = "{:,.2f}", missing: str = MISSING) -> str:
    """``template.format(value)``, or ``missing`` for None: a cell whose style its table sets (compare's
    changes, bench's timings)."""
    return missing if value is None else template.format(value)


def millis(ns: float | None, missing: str = "?") -> str:
    """Nanoseconds as milliseconds with three decimals and the unit, for a sentence (``12.345 ms``)."""
    return missing if ns is None else f"{ns / 1e6:.3f} ms"
