"""Rich rendering of waterfalls: one panel per GEMM, a bar per factor, the verdict, ncu's findings beside.

Wide terminals get one table row per factor with its sentence in a ``why`` column. Below ``WIDE`` columns that
column would be squeezed to a word or two per line, so each factor's sentence goes on its own lines under the
factor's row instead, indented, at the panel's full width. ``--json`` is not affected.
"""

from __future__ import annotations

from typing import Any

BAR = 30
WIDE = 140
"""Terminal width from which the sentence sits in a ``why`` column beside the bars (about 60 cells of it)."""


def _bar(value: float, width: int = BAR) -> str:
    full = max(0, min(width, round(value * width)))
    return "█" * full + "░" * (width - full)


def _running(wf: Any, peak: float | None) -> list[str]:
    """TFLOP/s left after each factor (the datasheet peak times every factor so far)."""
    out, running = [], peak
    for f in wf.factors:
        if running is not None:
            running *= f.value
        out.append(f"{running:,.1f}" if running is not None else "–")
    return out


def _factor_table(wf: Any, peak: float | None) -> Any:
    """Wide terminals: one row per factor, its sentence in the ``why`` column beside the bar."""
    from rich.table import Table
    from rich.text import Text

    from tracekit.commands._render import safe

    table = Table(show_header=True, box=None, pad_edge=False)
    table.add_column("factor")
    table.add_column("×", justify="right")
    table.add_column("", no_wrap=True)
    table.add_column("TFLOP/s", justify="right")
    table.add_column("why")
    for f, after in zip(wf.factors, _running(wf, peak), strict=True):
        style = "red" if f is wf.verdict else ""
        table.add_row(
            Text(f.name + (f" ({f.cause})" if f.cause else ""), style=style),
            f"{f.value:.3f}",
            Text(_bar(f.value), style=style or "cyan"),
            after,
            Text(safe(f.sentence)),
        )
    return table


def _factor_lines(wf: Any, peak: float | None, width: int) -> Any:
    """Narrow terminals: each factor's row (name, ×, bar, TFLOP/s left), then its cause and sentence on their
    own lines under it, indented, wrapped at the panel's width."""
    from rich.console import Group
    from rich.padding import Padding
    from rich.table import Table
    from rich.text import Text

    from tracekit.commands._render import safe

    bar = BAR if width >= 100 else 20
    name_w = min(24, max([len("factor"), *(len(f.name) for f in wf.factors)]))

    def grid() -> Table:
        t = Table.grid(padding=(0, 1))
        t.add_column(width=name_w, no_wrap=True, overflow="ellipsis")
        t.add_column(width=6, justify="right")
        t.add_column(width=bar, no_wrap=True)
        t.add_column(width=9, justify="right")
        return t

    head = grid()
    head.add_row(Text("factor", style="bold"), Text("×", style="bold"), "", Text("TFLOP/s", style="bold"))
    parts: list[Any] = [head]
    for f, after in zip(wf.factors, _running(wf, peak), strict=True):
        style = "red" if f is wf.verdict else ""
        row = grid()
        row.add_row(
            Text(f.name, style=style or "bold"),
            f"{f.value:.3f}",
            Text(_bar(f.value, bar), style=style or "cyan"),
            after,
        )
        why = Text()
        if f.cause:
            why.append(f"{safe(f.cause)}: ", style=style or "italic")
        why.append(safe(f.sentence))
        parts += [row, Padding(why, (0, 0, 0, 2))]
    return Group(*parts)


def render_waterfalls(waterfalls: list[Any], calibration: str | None, gemm_filter: str | None) -> None:
    from rich.console import Console, Group
    from rich.panel import Panel
    from rich.text import Text

    from tracekit.commands._render import safe

    console = Console()
    if not waterfalls:
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
    if calibration:
        console.print(Text(f"calibration: {calibration}", style="dim"))
    for wf in waterfalls:
        c = wf.case
        d = wf.to_dict()
        shape = f"M={c.m} N={c.n} K={c.k}" if c.m else ""
        title = Text(safe(c.label, 120))
        head = Text()
        ach, peak = d["achieved_tflops"], d["peak_tflops"]
        head.append(f"{safe(c.device.name if c.device else c.device_name)}  {shape}  {c.dtype_class or ''}\n")
        if ach is not None:
            head.append(f"achieved {ach:,.1f} TFLOP/s", style="bold")
        if peak is not None:
            head.append(f" of {peak:,.1f} peak ({d['peak_source']})")
            if ach is not None:
                head.append(f" = {100 * ach / peak:.0f}%")
        if d["calibrated_tflops"]:
            head.append(f"; calibrated {d['calibrated_tflops']:,.0f} ({d['pct_of_calibrated']:.0f}%)")
        if d.get("flops"):
            head.append(
                f"\n{d['flops'] / 1e9:,.3g} GFLOP per launch from {d['flops_source']}; "
                f"{c.dtype_class or 'dtype unknown'} from {d['dtype_source']}",
                style="dim",
            )
        if c.main_kernel:
            head.append(f"\nkernel {safe(c.main_kernel, 100)}", style="dim")
        wide = console.width >= WIDE
        table = _factor_table(wf, peak) if wide else _factor_lines(wf, peak, console.width)
        parts: list[Any] = [head, table]
        v = wf.verdict
        if v is not None:
            verdict = Text()
            verdict.append(f"verdict: {v.name}", style="bold red")
            if v.cause:
                verdict.append(f" — {v.cause}")
            verdict.append(f" (×{v.value:.2f}; removing it: +{v.gain_pct:.0f}%)\n")
            if v.remedy:
                verdict.append(f"try: {safe(v.remedy)}")
            parts.append(verdict)
        if wf.ncu_rules:
            rules = Text("ncu says: ", style="dim")
            shown = [r for r in wf.ncu_rules if r.get("title")][:4]
            rules.append(
                "; ".join(
                    f"{safe(r['rule'])}: {safe(r['title'])}"
                    + (f" (~{r['speedup_pct']:.0f}%)" if r.get("speedup_pct") else "")
                    for r in shown
                ),
                style="dim",
            )
            parts.append(rules)
        for note in wf.notes:
            parts.append(Text(f"note: {safe(note)}", style="yellow"))
        console.print(Panel(Group(*parts), title=title, title_align="left"))
