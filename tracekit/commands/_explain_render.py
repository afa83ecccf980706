"""Rich rendering of an Analysis: the summary every text view opens with, then one card per GEMM case (a bar per
factor, the verdict, Nsight Compute's findings beside).

The summary says the run's GPU time, the three largest losses in the calls' time and what is unknown with how to learn
it. Cards come in the Analysis' order (time in calls, largest first), cut to ``--top``; a card prints only what is
known (no empty fields, no "?" placeholders). Wide terminals get one table row per factor with its sentence in a
``why`` column; below ``WIDE`` columns each factor is one line and only the verdict's sentence is written out, so a
card stays a dozen lines (``--json`` and ``tracekit view`` hold every sentence).
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

from tracekit.analyzers.analysis.figures import median_call_text
from tracekit.numbers import duration as ns_text
from tracekit.numbers import flop_amount, share_of_kernel_time

NO_LOSS = 0.995
"""A factor at or above this value loses nothing worth naming (analyzers/analysis)."""
SAID = 0.95
"""On a narrow terminal a factor's sentence is written out when it loses at least 5% (or is the verdict): a card
of a model-scale run stays a dozen lines; --json and ``tracekit view`` hold every sentence."""
BAR = 30
WIDE = 180
"""Terminal width from which every factor's sentence sits in a ``why`` column beside the bars."""


def _bar(value: float, width: int = BAR) -> str:
    full = max(0, min(width, round(value * width)))
    return "█" * full + "░" * (width - full)


def _running(case: Any) -> list[str]:
    """TFLOP/s left after each factor (the peak times every factor so far); '' without a peak."""
    out: list[str] = []
    running = case.peak.tflops if case.peak is not None else None
    for f in case.factors:
        if running is not None:
            running *= f.value
        out.append(f"{running:,.1f}" if running is not None else "")
    return out


def _factor_table(case: Any) -> Any:
    """Wide terminals: one row per factor, its sentence in the ``why`` column beside the bar."""
    from rich.table import Table
    from rich.text import Text

    from tracekit.commands._render import safe

    table = Table(show_header=True, box=None, pad_edge=False)
    table.add_column("factor")
    table.add_column("×", justify="right")
    table.add_column("", no_wrap=True)
    if case.peak is not None:
        table.add_column("TFLOP/s", justify="right")
    table.add_column("why")
    for f, after in zip(case.factors, _running(case), strict=True):
        style = "red" if f.name == case.verdict.factor else ""
        cells = [
            Text(f.name + (f" ({f.cause})" if f.cause else ""), style=style),
            f"{f.value:.3f}",
            Text(_bar(f.value), style=style or "cyan"),
        ]
        if case.peak is not None:
            cells.append(after)
        table.add_row(*cells, Text(safe(f.sentence)))
    return table


def _factor_lines(case: Any, width: int) -> Any:
    """Narrow terminals: one line per factor (name and cause, ×, bar, TFLOP/s left); under a factor that loses
    5% or more (or is the verdict), its sentence on whole lines, indented."""
    from rich.console import Group
    from rich.padding import Padding
    from rich.table import Table
    from rich.text import Text

    from tracekit.commands._render import safe

    bar = BAR if width >= 100 else 16
    name_w = min(44, max(len(f.name + (f" ({f.cause})" if f.cause else "")) for f in case.factors))

    def grid() -> Table:
        t = Table.grid(padding=(0, 1))
        t.add_column(width=name_w, no_wrap=True, overflow="ellipsis")
        t.add_column(width=6, justify="right")
        t.add_column(width=bar, no_wrap=True)
        if case.peak is not None:
            t.add_column(width=9, justify="right")
        return t

    parts: list[Any] = []
    for f, after in zip(case.factors, _running(case), strict=True):
        style = "red" if f.name == case.verdict.factor else ""
        cells = [
            Text(safe(f.name + (f" ({f.cause})" if f.cause else "")), style=style or "bold"),
            f"{f.value:.3f}",
            Text(_bar(f.value, bar), style=style or "cyan"),
        ]
        if case.peak is not None:
            cells.append(after)
        row = grid()
        row.add_row(*cells)
        parts.append(row)
        if f.sentence and (f.value < SAID or f.name == case.verdict.factor):
            parts.append(Padding(Text(safe(f.sentence)), (0, 0, 0, 2)))
    return Group(*parts)


def _join(parts: Sequence[str | None], sep: str = " · ") -> str:
    return sep.join(p for p in parts if p)


def case_head(case: Any, gpu_ns: float | None, width: int = 120) -> list[tuple[str, str]]:
    """The card's head as (text, style) lines: what, calls and their time, the rates, where FLOPs came from, the
    kernel. Only what is known is written."""
    from tracekit.commands._render import safe

    t = case.timing
    lines: list[tuple[str, str]] = []
    plain_flops = case.flops.source == "shape" and case.rate.source in ("shape", "none")
    what = _join(
        [
            safe(case.device.name) if case.device and case.device.name else None,
            case.shape_text,
            case.rate.dtype_class,
            f"{flop_amount(case.flops.per_call)} per call" if case.flops.per_call and plain_flops else None,
        ]
    )
    if what:
        lines.append((what, ""))
    if t.calls:
        # the share is of kernel time: the case's kernels (GEMM and auxiliary) against every kernel's. Its span
        # would not do: a launch-bound loop's calls span several times its kernels' time (a "460%" share), and
        # Nsight Compute replay times are not on the timeline at all
        pct = share_of_kernel_time(t.gemm_ns_total + t.aux_ns_total, gpu_ns)
        share = ""
        if pct is not None:
            digits = 0 if pct >= 9.95 else 1 if pct >= 0.995 else 2  # a decode GEMM in a long step: 0.03%
            share = f" ({pct:.{digits}f}% of kernel time)" if pct >= 0.005 else " (<0.01% of kernel time)"
        # the calls' total span (GEMM, auxiliary kernels and the gaps inside the calls), then one real call's
        # parts, labelled (analyzers/analysis/figures.py: the one definition every view prints)
        call = median_call_text(t) or ""
        calls = f"{t.calls:,} call{'s' if t.calls != 1 else ''}"
        sep = ", " if call else ""
        line = f"{calls} in {ns_text(t.span_ns_total)}{share}{sep}{call}"
        if len(line) > width - 4:  # the card's inside: the share gives way before the call's parts wrap
            line = f"{calls} in {ns_text(t.span_ns_total)}{sep}{call}"
        lines.append((line, ""))
    if t.calls_without_kernel:
        lines.append((f"{t.calls_without_kernel} call(s) without their GEMM kernel left out", "yellow"))
    rates = []
    if t.achieved_tflops is not None:
        rates.append(f"achieved {t.achieved_tflops:,.1f} TFLOP/s")
    if t.kernel_tflops is not None:
        rates.append(f"kernel rate {t.kernel_tflops:,.1f} TFLOP/s")
    if case.peak is not None:
        what = [
            x
            for x in (case.peak.dtype_class, case.peak.source if case.peak.source != "datasheet" else None)
            if x
        ]
        peak = (
            f"peak {case.peak.tflops:,.1f} ({', '.join(what) or case.peak.source})"  # datasheet: the default
        )
        if case.pct_of_peak is not None:
            peak += f" → {case.pct_of_peak:.0f}%"
        if case.peak.calibrated_tflops:
            peak += f"; calibrated {case.peak.calibrated_tflops:,.0f}"
            if case.peak.pct_of_calibrated is not None:
                peak += f" ({case.peak.pct_of_calibrated:.0f}%)"
        rates.append(peak)
    if rates:
        lines.append((" · ".join(rates), "bold"))
    if case.flops.per_call and case.flops.source != "shape":
        origin = f"{flop_amount(case.flops.per_call)} per call from {case.flops.source}"
        dtype = f"{case.rate.dtype_class} from {case.rate.source}" if case.rate.dtype_class else None
        lines.append((_join([origin, dtype], "; "), "dim"))
    if case.kernel.name:
        lines.append((f"kernel {safe(case.kernel.name, max(20, width - 11))}", "dim"))
    return lines


def render_case(
    console: Any, case: Any, index: int, gpu_ns: float | None, said: frozenset[str] = frozenset()
) -> None:
    """One case as a panel (``said``: notes already written above the cards, left out here)."""
    from rich.console import Group
    from rich.panel import Panel
    from rich.text import Text

    from tracekit.analyzers.gemm.fusion import beside_lines
    from tracekit.analyzers.recommend import bench_hint
    from tracekit.commands._render import safe
    from tracekit.text import PIPE_WIDTH

    head = Text()
    for i, (line, style) in enumerate(case_head(case, gpu_ns, console.width)):
        head.append(("\n" if i else "") + line, style=style)
    parts: list[Any] = [head] if head.plain else []
    if case.factors:
        wide = console.width >= WIDE
        parts.append(_factor_table(case) if wide else _factor_lines(case, console.width))
    v = case.verdict
    verdict = Text()
    if v.factor:  # the blamed factor names the verdict in every view (show, report, the TUI)
        verdict.append(f"verdict: {v.factor}", style="bold red")
        if v.cause:
            verdict.append(f" — {safe(v.cause)}")
        if v.lost_ns_total:  # time, not a percentage: +15,853% of a 36 KFLOP op is noise
            verdict.append(f" (costs {ns_text(v.lost_ns_total)})")
        if v.kind != "explained":  # a kind of its own (stalled, clocks-locked ...): its sentence says why
            verdict.append(f"\n{safe(v.sentence)}")
    else:
        verdict.append(f"verdict: {v.kind}", style="bold yellow" if v.kind != "no-loss" else "bold green")
        verdict.append(f" — {safe(v.sentence)}")
    if v.remedy:
        verdict.append(f"\ntry: {safe(v.remedy)}")
    if v.capture_hint:
        verdict.append(f"\nto learn it: {safe(v.capture_hint)}", style="yellow")
    parts.append(verdict)
    parts.extend(Text(safe(line), style="dim") for line in beside_lines(case))
    rules = [r for r in (case.ncu.rules if case.ncu else []) if r.title and r.rule][:4]
    if rules:
        text = "; ".join(
            f"{safe(r.rule)}: {safe(r.title)}"
            + (f" (est. speed-up ~{r.speedup_pct:.0f}%)" if r.speedup_pct else "")
            for r in rules
        )
        parts.append(Text(f"ncu says: {text}", style="dim"))
    for note in case.notes:
        # a note the verdict already says in full (the reason FLOPs are unknown, and how to learn them) is not
        # repeated under it
        if note not in said and not (
            v.kind == "cannot-explain" and note == f"{v.sentence}: {v.capture_hint}"
        ):
            parts.append(Text(f"note: {safe(note)}", style="yellow"))
    title = Text(f"#{index} " + safe(case.label, 120))
    hint = bench_hint(case)  # in the bottom border: a card is no line longer for it
    subtitle = Text(hint, style="cyan") if hint else None
    # to a pipe (tracekit.text.PIPE_WIDTH) a card is as wide as what it holds, not a thousand columns of border
    console.print(
        Panel(
            Group(*parts),
            title=title,
            title_align="left",
            subtitle=subtitle,
            subtitle_align="left",
            expand=console.width < PIPE_WIDTH,
        )
    )


def render_summary(console: Any, analysis: Any, shown: int, total: int, what: str = "cases") -> None:
    """The opening: the run, its GPU time and how much of it the GEMM cases take, the step breakdown's headline,
    the three largest losses in the calls' time, what is unknown and how to learn it, and how many cases follow."""
    from rich.padding import Padding
    from rich.text import Text

    from tracekit.analyzers.analysis.headline import time_headline
    from tracekit.commands._render import safe

    s, run = analysis.summary, analysis.run
    order = {c.id: (i, c) for i, c in enumerate(analysis.cases, 1)}
    devices = ", ".join(safe(d.name) for d in analysis.devices if d.name) or "GPU not named in the files"
    status = (
        f" ({run.status}{', partial' if run.partial else ''})" if run.status not in (None, "complete") else ""
    )
    console.print(Text(f"{safe(run.name or run.path)}{status} · {devices}", style="bold"))
    console.print(Text(time_headline(s.cases, s.gemm_ns_total, s.case_ns_total, s.gpu_ns_total, ns_text)))
    if s.breakdown:
        console.print(Text(f"step: {safe(s.breakdown)}"))
        for note in (
            analysis.breakdown.notes if analysis.breakdown else []
        ):  # what the step's numbers leave out
            console.print(Padding(Text(f"note: {safe(note)}"), (0, 0, 0, 2)))
    if s.top_losses:
        console.print(Text("Largest losses in the calls' time:", style="bold"))
        for i, loss in enumerate(s.top_losses, 1):
            factor = loss.factor + (f" ({loss.cause})" if loss.cause else "")
            line = Text(f"  {i}. {ns_text(loss.lost_ns_total):>9}  ", style="red")
            i_case, case = order.get(loss.case_id, (None, None))
            where = case.label if case is not None else loss.case_name
            line.append((f"(#{i_case}) " if i_case else "") + f"{safe(factor)} in {safe(where)}")
            console.print(line, no_wrap=True, overflow="ellipsis")
    if s.unknowns:
        console.print(Text("Unknown, and how to learn it:", style="bold"))
        for u in s.unknowns:
            console.print(Text(f"  - {safe(u.what)}"), no_wrap=True, overflow="ellipsis")
            console.print(Padding(Text(safe(u.how), style="dim"), (0, 0, 0, 4)))
    if total:
        more = " (--top N, --all)" if shown < total else ""
        console.print(
            Text(f"The {shown} of {total} {what} with the most time in calls follow{more}.", style="italic")
        )


def render_analysis(
    analysis: Any, cases: Sequence[Any], top: int | None, gemm_filter: str | None, console: Any = None
) -> None:
    """``tracekit explain``'s text: the summary, then the first ``top`` of ``cases`` (None: all) as cards."""
    from rich.text import Text

    from tracekit.commands._render import safe
    from tracekit.text import PIPE_WIDTH, make_console

    console = console or make_console()
    if console.width >= PIPE_WIDTH:
        # to a pipe the cards are prose, not tables: read at a fixed width that still holds the factor table (WIDE),
        # instead of lines a thousand columns long
        console.width = WIDE + 20
    if not cases:
        render_summary(console, analysis, 0, 0)
        what = f"matching {gemm_filter!r}" if gemm_filter else "in this run"
        console.print(
            Text(
                f"No GEMMs {what}. tracekit finds GEMMs in tracekit `gemm` ranges and in your own NVTX / "
                "record_function ranges that hold a GEMM kernel, in `tracekit bench` measurements, and in Nsight "
                "Compute profiles.",
                style="yellow",
            )
        )
        return
    shown = list(cases) if top is None else list(cases)[:top]
    what = f"cases matching {gemm_filter!r}" if gemm_filter else "cases"
    render_summary(console, analysis, len(shown), len(cases), what)
    if analysis.run.calibration:
        console.print(Text(f"calibration: {analysis.run.calibration}", style="dim"))
    where: dict[str, list[int]] = {}
    for i, case in enumerate(shown, 1):
        for note in dict.fromkeys(case.notes):
            where.setdefault(note, []).append(i)
    common = frozenset(n for n, nums in where.items() if len(nums) > 1)
    for note in sorted(common, key=lambda n: where[n][0]):  # said once above the cards, not in each
        nums = where[note]
        whom = "every case below" if len(nums) == len(shown) else "cases " + ", ".join(f"#{n}" for n in nums)
        console.print(Text(f"note ({whom}): {safe(note)}", style="yellow"))
    for i, case in enumerate(shown, 1):
        render_case(console, case, i, analysis.summary.gpu_ns_total, common)
