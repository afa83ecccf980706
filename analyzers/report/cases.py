"""The report's GEMM sections from the Analysis' cases: the summary it opens with (GPU time, the largest losses in
the calls' time, what is unknown and how to learn it), the table of cases (most time in calls first) and one waterfall per
case. Cases are the Analysis' typed :class:`~..analysis.model.Case`; each is numbered by its place in GPU-time order
(1 = the most), the number the table, the waterfalls, the plots and the findings share."""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

from tracekit.numbers import duration as ns_text

from ..analysis.figures import median_call, median_call_text
from ..analysis.headline import time_headline
from ..analysis.model import Case, Summary
from ..gemm.fusion import beside_lines
from .model import Bullets, Detail, Heading, Image, Inline, Para, Table, _fmt
from .text import _one_line, md_text


def case_label(c: Case | dict[str, Any]) -> str:
    """What the table and plots call a case: its backend, else its kernel, else its name (a case of the report's
    JSON, a dict, too: the HTML plots draw from it)."""
    if isinstance(c, dict):
        return str(c.get("backend") or (c.get("kernel") or {}).get("name") or c.get("name") or "?")
    return str(c.backend or c.kernel.name or c.name or "?")


def case_shape(c: Case) -> str:
    s = c.shape
    if s is None:
        return "–"
    return f"{s.m}×{s.n}×{s.k}" + (f" ×{s.batch}" if s.batch and s.batch > 1 else "")


def verdict_text(c: Case) -> str:
    v = c.verdict
    if v.factor:
        text = v.factor + (f": {v.cause}" if v.cause else "")
        if v.lost_ns_total:
            text += f" ({ns_text(v.lost_ns_total)} lost)"
        return text
    return v.kind or "–"


def summary_blocks(s: Summary, numbers: dict[str, int], d: Detail) -> list[Any]:
    """The opening summary: GPU time, the step breakdown's headline, the three largest losses in the calls' time, what
    is unknown and how to learn it."""
    cc = d.cell_chars
    blocks: list[Any] = [Heading(3, [("t", "Summary")])]
    line = time_headline(s.cases, s.gemm_ns_total or 0.0, s.case_ns_total or 0.0, s.gpu_ns_total, ns_text)
    blocks.append(Para([("t", md_text(line + "."))]))
    if s.breakdown:
        blocks.append(Para([("b", "Step: "), ("t", md_text(s.breakdown, cc))]))
    if s.top_losses:
        items: list[Inline] = []
        for loss in s.top_losses:
            factor = loss.factor + (f" ({loss.cause})" if loss.cause else "")
            n = numbers.get(loss.case_id)
            item: Inline = [
                ("b", ns_text(loss.lost_ns_total)),
                ("t", " " + md_text(factor, cc) + " in "),
                ("k", _one_line(loss.case_name, min(cc, 160))),
            ]
            if n is not None:
                item.append(("t", f" (#{n})"))
            if loss.remedy:
                item.append(("t", ". Try: " + md_text(loss.remedy, cc)))
            items.append(item)
        blocks += [Para([("b", "Largest losses in the calls' time")]), Bullets(items)]
    if s.unknowns:
        blocks.append(Para([("b", "Unknown, and how to learn it")]))
        blocks.append(Bullets([[("t", md_text(f"{u.what}: {u.how}", cc))] for u in s.unknowns]))
    return blocks


def cases_table(rows: Sequence[tuple[int, Case]], d: Detail) -> Table:
    """One row per case: time in its calls, the median call's span, both rates named, % of peak and the
    verdict."""
    headers = [
        "#",
        "backend / kernel",
        "op",
        "M×N×K",
        "dtype",
        "calls",
        "time in calls",
        "median call µs",
        "p10–p90 µs",
        "achieved TFLOP/s",
        "kernel rate",
        "% peak",
        "SM MHz",
        "verdict",
    ]
    out = []
    for n, c in rows:
        t = c.timing
        span = t.span_ns
        mid = median_call(t)  # one real call (analyzers/analysis/figures.py), the figure every view prints
        spread = (
            f"{_fmt(span.p10 / 1e3, 2)}–{_fmt(span.p90 / 1e3, 2)}"
            if span.p10 is not None and span.p90 is not None
            else "–"
        )
        out.append(
            [
                [("t", str(n))],
                [("k", _one_line(case_label(c), d.cell_chars))],
                [("c", c.op)] if c.op else [("t", "–")],
                [("t", case_shape(c))],
                [("t", md_text((c.shape.dtype_a if c.shape else None) or c.rate.dtype_class or "–", 40))],
                [("t", str(t.calls))],
                [("t", ns_text(t.span_ns_total) if t.span_ns_total else "–")],
                [("t", _fmt(mid.span_ns / 1e3 if mid else None, 2))],
                [("t", spread)],
                [("t", _fmt(t.achieved_tflops))],
                [("t", _fmt(t.kernel_tflops))],
                [("t", _fmt(c.pct_of_peak, 0))],
                [("t", _fmt(c.sm_clock_hz / 1e6 if c.sm_clock_hz else None, 0))],
                [("t", md_text(verdict_text(c), d.cell_chars))],
            ]
        )
    return Table(headers, out, ["r", "l", "l", "r", "l", "r", "r", "r", "r", "r", "r", "r", "r", "l"])


def case_blocks(c: Case, n: int, d: Detail) -> list[Any]:
    """One case's waterfall: what it is and how fast, the factors from peak to achieved, the verdict (or what to
    capture to explain it) and the notes. Only what is known is written."""
    cc = d.cell_chars
    title: Inline = [("t", f"{n}. "), ("k", _one_line(c.name, cc))]
    if c.parents:
        title += [("t", " in "), ("c", _one_line(c.parents[-1], cc))]
    blocks: list[Any] = [Heading(4, title)]
    t, peak_info = c.timing, c.peak
    head: Inline = []
    if c.kernel.name:
        head += [("t", "kernel "), ("k", _one_line(c.kernel.name, cc)), ("t", "; ")]
    if t.calls:
        call = median_call_text(t)
        head.append(
            (
                "t",
                f"{t.calls} call{'s' if t.calls != 1 else ''} in {ns_text(t.span_ns_total)}"
                + (f", {call}; " if call else "; "),
            )
        )
    ach, kern = t.achieved_tflops, t.kernel_tflops
    peak = peak_info.tflops if peak_info else None
    if ach is not None:
        head += [("t", "achieved "), ("b", f"{ach:,.1f} TFLOP/s")]
    if kern is not None:
        head.append(("t", f" (kernel rate {kern:,.1f})"))
    if peak_info is not None:
        dtype = md_text(peak_info.dtype_class or "")
        head.append(
            (
                "t",
                f"; peak {peak_info.tflops:,.0f} TFLOP/s {dtype} ({md_text(peak_info.source)})".replace(
                    "  ", " "
                ),
            )
        )
        if c.pct_of_peak is not None:
            head.append(("t", f" = {c.pct_of_peak:.0f}%"))
        if peak_info.calibrated_tflops:
            head.append(("t", f"; calibrated {peak_info.calibrated_tflops:,.0f} TFLOP/s"))
    if c.flops.source in ("ncu-counters", "profiler-flops") and head:
        what = (
            "Nsight Compute's counters" if c.flops.source == "ncu-counters" else "the profiler's FLOP count"
        )
        dtype_from = f", dtype from {md_text(c.rate.source)}" if c.rate.source not in (None, "none") else ""
        head.append(("t", f" (no shape: FLOPs from {what}{dtype_from})"))
    if head:
        blocks.append(Para(head))
    if peak is not None and c.factors:
        blocks.append(Image(f"waterfall-{n}", f"waterfall of {_one_line(c.name, 80)}"))
    rows: list[list[Inline]] = []
    running = peak
    if peak is not None:
        rows.append([[("t", "datasheet peak")], [("t", "")], [("t", f"{peak:,.1f}")], [("t", "")]])
    for f in c.factors:
        value = f.value or 0.0
        name = f.name + (f" ({f.cause})" if f.cause else "")
        loss = "–"
        if running is not None:
            after = running * value
            loss = f"{after:,.1f} (−{running - after:,.1f})"
            running = after
        rows.append(
            [
                [("b", md_text(name, cc))],
                [("t", f"×{value:.3f}")],
                [("t", loss)],
                [("t", md_text(f.sentence, cc))],
            ]
        )
    if rows:
        if ach is not None and peak is not None:
            rows.append([[("t", "achieved")], [("t", "")], [("b", f"{ach:,.1f}")], [("t", "")]])
        blocks.append(Table(["factor", "×", "TFLOP/s after", "why"], rows, ["l", "r", "r", "l"]))
    v = c.verdict
    if v.factor:
        what = v.factor + (f" ({v.cause})" if v.cause else "")
        text: Inline = [("b", "Verdict:"), ("t", " " + md_text(what, cc))]
        costs = []
        if v.lost_ns_total:
            costs.append(f"it costs {ns_text(v.lost_ns_total)} of the calls' time")
        if v.gain_pct is not None:
            costs.append(f"removing it would give +{v.gain_pct:.0f}%")
        if costs:
            text.append(("t", ": " + "; ".join(costs) + "."))
        if v.remedy:
            text.append(("t", " Try: " + md_text(v.remedy, cc)))
        blocks.append(Para(text))
    else:
        text = [("b", f"Verdict: {v.kind}."), ("t", " " + md_text(v.sentence or "", cc))]
        if v.remedy:  # a fusion verdict names no factor but has a remedy
            text.append(("t", " Try: " + md_text(v.remedy, cc)))
        if v.capture_hint:
            text.append(("t", " To learn more: " + md_text(v.capture_hint, cc)))
        blocks.append(Para(text))
    beside = beside_lines(c)
    if beside:
        blocks.append(Bullets([[("t", md_text(x[0].upper() + x[1:], cc))] for x in beside]))
    if c.notes:
        blocks.append(Bullets([[("i", md_text(x, cc))] for x in c.notes]))
    return blocks
