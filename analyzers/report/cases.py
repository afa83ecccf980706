"""The report's GEMM sections from the Analysis' cases: the summary it opens with (GPU time, the largest losses in
the calls' time, what is unknown and how to learn it), the table of cases (most time in calls first) and one waterfall per
case. Cases are the dicts of ``Analysis.to_builtins()``; each is numbered by its place in GPU-time order (1 = the
most), the number the table, the waterfalls, the plots and the findings share."""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

from tracekit.numbers import duration as ns_text

from ..analysis.headline import time_headline
from ..gemm.fusion import beside_lines
from .model import Bullets, Detail, Heading, Image, Inline, Para, Table, _fmt
from .text import _f, _one_line, md_text


def case_label(c: dict[str, Any]) -> str:
    """What the table and plots call a case: its backend, else its kernel, else its name."""
    return str(c.get("backend") or (c.get("kernel") or {}).get("name") or c.get("name") or "?")


def case_shape(c: dict[str, Any]) -> str:
    s = c.get("shape")
    if not s:
        return "–"
    text = f"{s['m']}×{s['n']}×{s['k']}"
    return text + (f" ×{s['batch']}" if s.get("batch") and s["batch"] > 1 else "")


def verdict_text(c: dict[str, Any]) -> str:
    v = c["verdict"]
    if v.get("factor"):
        text = str(v["factor"]) + (f": {v['cause']}" if v.get("cause") else "")
        if v.get("lost_ns_total"):
            text += f" ({ns_text(v['lost_ns_total'])} lost)"
        return text
    return str(v.get("kind") or "–")


def summary_blocks(rep: dict[str, Any], numbers: dict[str, int], d: Detail) -> list[Any]:
    """The opening summary: GPU time, the step breakdown's headline, the three largest losses in the calls' time, what
    is unknown and how to learn it."""
    s = rep["summary"]
    cc = d.cell_chars
    blocks: list[Any] = [Heading(3, [("t", "Summary")])]
    line = time_headline(
        s["cases"],
        s.get("gemm_ns_total") or 0.0,
        s.get("case_ns_total") or 0.0,
        s.get("gpu_ns_total"),
        ns_text,
    )
    blocks.append(Para([("t", md_text(line + "."))]))
    if s.get("breakdown"):
        blocks.append(Para([("b", "Step: "), ("t", md_text(s["breakdown"], cc))]))
    if s.get("top_losses"):
        items: list[Inline] = []
        for loss in s["top_losses"]:
            factor = loss["factor"] + (f" ({loss['cause']})" if loss.get("cause") else "")
            n = numbers.get(loss["case_id"])
            item: Inline = [
                ("b", ns_text(loss["lost_ns_total"])),
                ("t", " " + md_text(factor, cc) + " in "),
                ("c", _one_line(loss["case_name"], min(cc, 160))),
            ]
            if n is not None:
                item.append(("t", f" (#{n})"))
            if loss.get("remedy"):
                item.append(("t", ". Try: " + md_text(loss["remedy"], cc)))
            items.append(item)
        blocks += [Para([("b", "Largest losses in the calls' time")]), Bullets(items)]
    if s.get("unknowns"):
        blocks.append(Para([("b", "Unknown, and how to learn it")]))
        blocks.append(Bullets([[("t", md_text(f"{u['what']}: {u['how']}", cc))] for u in s["unknowns"]]))
    return blocks


def cases_table(rows: Sequence[tuple[int, dict[str, Any]]], d: Detail) -> Table:
    """One row per case: time in its calls, per-call time, both rates named, % of peak and the verdict."""
    headers = [
        "#",
        "backend / kernel",
        "op",
        "M×N×K",
        "dtype",
        "calls",
        "time in calls",
        "per call µs",
        "p10–p90 µs",
        "achieved TFLOP/s",
        "kernel rate",
        "% peak",
        "SM MHz",
        "verdict",
    ]
    out = []
    for n, c in rows:
        t = c["timing"]
        span = t["span_ns"]
        spread = (
            f"{_fmt(span['p10'] / 1e3, 2)}–{_fmt(span['p90'] / 1e3, 2)}"
            if span.get("p10") is not None and span.get("p90") is not None
            else "–"
        )
        shape = c.get("shape") or {}
        out.append(
            [
                [("t", str(n))],
                [("c", _one_line(case_label(c), d.cell_chars))],
                [("c", str(c["op"]))] if c.get("op") else [("t", "–")],
                [("t", case_shape(c))],
                [("t", md_text(shape.get("dtype_a") or c["rate"].get("dtype_class") or "–", 40))],
                [("t", str(t["calls"]))],
                [("t", ns_text(t["span_ns_total"]) if t.get("span_ns_total") else "–")],
                [("t", _fmt(span["median"] / 1e3 if span.get("median") is not None else None, 2))],
                [("t", spread)],
                [("t", _fmt(t.get("achieved_tflops")))],
                [("t", _fmt(t.get("kernel_tflops")))],
                [("t", _fmt(c.get("pct_of_peak"), 0))],
                [("t", _fmt(c["sm_clock_hz"] / 1e6 if c.get("sm_clock_hz") else None, 0))],
                [("t", md_text(verdict_text(c), d.cell_chars))],
            ]
        )
    return Table(headers, out, ["r", "l", "l", "r", "l", "r", "r", "r", "r", "r", "r", "r", "r", "l"])


def case_blocks(c: dict[str, Any], n: int, d: Detail) -> list[Any]:
    """One case's waterfall: what it is and how fast, the factors from peak to achieved, the verdict (or what to
    capture to explain it) and the notes. Only what is known is written."""
    cc = d.cell_chars
    title: Inline = [("t", f"{n}. "), ("c", _one_line(c.get("name"), cc))]
    if c.get("parents"):
        title += [("t", " in "), ("c", _one_line(c["parents"][-1], cc))]
    blocks: list[Any] = [Heading(4, title)]
    t, peak_info = c["timing"], c.get("peak")
    head: Inline = []
    if (c.get("kernel") or {}).get("name"):
        head += [("t", "kernel "), ("c", _one_line(c["kernel"]["name"], cc)), ("t", "; ")]
    if t.get("calls"):
        head.append(
            (
                "t",
                f"{t['calls']} call{'s' if t['calls'] != 1 else ''} in {ns_text(t['span_ns_total'])}; ",
            )
        )
    ach, kern = _f(t.get("achieved_tflops")), _f(t.get("kernel_tflops"))
    peak = _f(peak_info["tflops"]) if peak_info else None
    if ach is not None:
        head += [("t", "achieved "), ("b", f"{ach:,.1f} TFLOP/s")]
    if kern is not None:
        head.append(("t", f" (kernel rate {kern:,.1f})"))
    if peak is not None:
        dtype = md_text(peak_info.get("dtype_class") or "")  # type: ignore[union-attr]
        head.append(
            ("t", f"; peak {peak:,.0f} TFLOP/s {dtype} ({md_text(peak_info['source'])})".replace("  ", " "))
        )  # type: ignore[index]
        if c.get("pct_of_peak") is not None:
            head.append(("t", f" = {c['pct_of_peak']:.0f}%"))
        if peak_info.get("calibrated_tflops"):  # type: ignore[union-attr]
            head.append(("t", f"; calibrated {peak_info['calibrated_tflops']:,.0f} TFLOP/s"))  # type: ignore[index]
    flops_source = c["flops"].get("source")
    if flops_source in ("ncu-counters", "profiler-flops") and head:
        what = "Nsight Compute's counters" if flops_source == "ncu-counters" else "the profiler's FLOP count"
        rate = c["rate"]
        dtype_from = (
            f", dtype from {md_text(rate['source'])}" if rate.get("source") not in (None, "none") else ""
        )
        head.append(("t", f" (no shape: FLOPs from {what}{dtype_from})"))
    if head:
        blocks.append(Para(head))
    factors = c.get("factors") or []
    if peak is not None and factors:
        blocks.append(Image(f"waterfall-{n}", f"waterfall of {_one_line(c.get('name'), 80)}"))
    rows: list[list[Inline]] = []
    running = peak
    if peak is not None:
        rows.append([[("t", "datasheet peak")], [("t", "")], [("t", f"{peak:,.1f}")], [("t", "")]])
    for f in factors:
        value = _f(f.get("value")) or 0.0
        name = str(f.get("name")) + (f" ({f['cause']})" if f.get("cause") else "")
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
                [("t", md_text(f.get("sentence"), cc))],
            ]
        )
    if rows:
        if ach is not None and peak is not None:
            rows.append([[("t", "achieved")], [("t", "")], [("b", f"{ach:,.1f}")], [("t", "")]])
        blocks.append(Table(["factor", "×", "TFLOP/s after", "why"], rows, ["l", "r", "r", "l"]))
    v = c["verdict"]
    if v.get("factor"):
        what = str(v["factor"]) + (f" ({v['cause']})" if v.get("cause") else "")
        text: Inline = [("b", "Verdict:"), ("t", " " + md_text(what, cc))]
        costs = []
        if v.get("lost_ns_total"):
            costs.append(f"it costs {ns_text(v['lost_ns_total'])} of the calls' time")
        if v.get("gain_pct") is not None:
            costs.append(f"removing it would give +{v['gain_pct']:.0f}%")
        if costs:
            text.append(("t", ": " + "; ".join(costs) + "."))
        if v.get("remedy"):
            text.append(("t", " Try: " + md_text(v["remedy"], cc)))
        blocks.append(Para(text))
    else:
        text = [("b", f"Verdict: {v['kind']}."), ("t", " " + md_text(v.get("sentence") or "", cc))]
        if v.get("remedy"):  # a fusion verdict names no factor but has a remedy
            text.append(("t", " Try: " + md_text(v["remedy"], cc)))
        if v.get("capture_hint"):
            text.append(("t", " To learn more: " + md_text(v["capture_hint"], cc)))
        blocks.append(Para(text))
    beside = beside_lines(c)
    if beside:
        blocks.append(Bullets([[("t", md_text(x[0].upper() + x[1:], cc))] for x in beside]))
    notes = c.get("notes") or []
    if notes:
        blocks.append(Bullets([[("i", md_text(x, cc))] for x in notes]))
    return blocks
