"""Rich rendering shared by commands. Kernel names and messages are data, never markup: every string goes
through ``rich.text.Text`` (no markup parsing) and control characters are made visible."""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

from tracekit import numbers
from tracekit.text import clean

if TYPE_CHECKING:  # polars is imported only where frames are drawn: capture runs on machines without it
    import polars as pl


def safe(value: Any, width: int | None = None) -> str:
    """Text safe to draw: control characters (ANSI escapes included) shown as \\xNN (tracekit/text.py; newlines
    and tabs kept), long names elided."""
    text = clean(value, keep_newlines=True)
    if width is not None and len(text) > width:
        text = text[: width - 1] + "…"
    return text


def frame_table(
    df: pl.DataFrame,
    title: str,
    widths: dict[str, int] | None = None,
    *,
    width: int | None = None,
    priority: list[str] | None = None,
    min_widths: dict[str, int] | None = None,
    whole: tuple[str, ...] = (),
) -> Any:
    """``df`` as a Rich table of one line per row that fits ``width`` cells: numbers whole, text elided with
    ``…`` (never folded over several lines). When even that does not fit, the least important columns are left
    out (the last ones, or those not in ``priority``, which lists the columns most important first) and the
    title says which; ``--json`` holds them all. A text column keeps at least ``min_widths[col]`` cells (12 by
    default) before a less important column gives way. Text columns in ``whole`` (a formatted number such as
    ``706→716``, a status) are kept whole like numbers, and right-aligned unless they are statuses (``status``)."""
    from rich.table import Table
    from rich.text import Text

    from tracekit.text import PIPE_WIDTH

    widths = widths or {}
    # to a pipe or a file (make_console's PIPE_WIDTH) names are printed whole: nothing asks them to fit
    whole_names = width is not None and width >= PIPE_WIDTH
    cells = {
        c: [safe(numbers.table(v), None if whole_names else widths.get(c, 60)) for v in df[c].to_list()]
        for c in df.columns
    }
    numeric = {c: df.schema[c].is_numeric() or c in whole for c in df.columns}

    def need(c: str) -> int:
        natural = max([len(c), *(len(t) for t in cells[c])])
        return natural if numeric[c] else min(natural, max(len(c), (min_widths or {}).get(c, 12)))

    shown = list(df.columns)
    if width is not None:
        order = [c for c in (priority or []) if c in shown] + [c for c in shown if c not in (priority or [])]
        while len(shown) > 1 and sum(need(c) for c in shown) + 3 * len(shown) + 1 > width:
            drop = next(c for c in reversed(order) if c in shown)
            shown.remove(drop)
    left_out = [c for c in df.columns if c not in shown]
    if left_out:
        title += f" (left out at this width: {', '.join(left_out)}; --json has them)"
    # Exact column widths: numbers whole; text columns get their minimum, then what is left, in priority order
    # (left to Rich, a squeezed table collapses whole columns to nothing).
    exact: dict[str, int | None] = dict.fromkeys(shown)
    if width is not None:
        exact = {c: need(c) for c in shown}
        spare = width - (sum(exact.values()) + 3 * len(shown) + 1)
        ranked = [c for c in (priority or []) if c in shown] + [c for c in shown if c not in (priority or [])]
        for c in ranked:
            if numeric[c] or spare <= 0:
                continue
            natural = max([len(c), *(len(t) for t in cells[c])])
            grow = min(spare, natural - exact[c])
            exact[c] += grow
            spare -= grow
    table = Table(title=title, title_justify="left", show_lines=False)
    for col in shown:
        table.add_column(
            col,
            justify="right" if numeric[col] and col != "status" else "left",
            no_wrap=True,
            overflow="ellipsis",
            width=exact[col],
        )
    for i in range(df.height):
        table.add_row(*[Text(cells[c][i]) for c in shown])
    return table


def more_line(left_out: int, what: str, run: str) -> str:
    """What a table cut to ``--limit`` rows says under it: how many rows it left out and how to see them."""
    import shlex

    return f"… {left_out} more {what}: `tracekit show {shlex.quote(run)} --all` or `--json`"


def _render_failures(console: Any, analysis: Any, limit: int | None, run: str) -> None:
    """The Analysis' failure groups (one backend, exception type and first message line): a line per group with
    its kinds, count and shapes, the message under it, each line cut to the terminal's width."""
    from rich.text import Text

    groups = analysis.failure_groups
    w = console.width
    console.print(
        Text(
            f"Failures: {len(analysis.failures)} in {len(groups)} group{'s' if len(groups) != 1 else ''} "
            "of one backend, exception and message (every failure in full: --json, tracekit report)",
            style="italic",
        )
    )
    shown = groups if limit is None else groups[:limit]
    kinds = {id(g): ", ".join(g.kinds) or "failed" for g in shown}
    bw = max(len(safe(g.backend, 40)) for g in shown)
    kw = max(len(safe(kinds[id(g)], 20)) for g in shown)
    cw = max(len(str(g.count)) for g in shown) + 1
    styles = {"crashed": "red", "error": "red", "unsupported": "yellow", "unavailable": "dim"}
    for g in shown:
        head = Text("  ")
        head.append(f"{safe(g.backend, 40):<{bw}}  ", style="bold")
        head.append(f"{safe(kinds[id(g)], 20):<{kw}}  ", style=styles.get(g.kinds[0] if g.kinds else "", ""))
        head.append(f"{'×' + str(g.count):>{cw}}  {g.shapes_text}")
        head.truncate(w, overflow="ellipsis")
        console.print(head, no_wrap=True, overflow="ellipsis")
        console.print(Text("      " + safe(g.message, max(w - 6, 10))), no_wrap=True, overflow="ellipsis")
    if len(groups) > len(shown):
        console.print(
            Text(more_line(len(groups) - len(shown), "failure groups", run), style="dim"), soft_wrap=True
        )


def _print_cut(console: Any, table: Any, total: int, shown: int, what: str, run: str) -> None:
    """Print ``table``, then the line that says how many rows it left out (when it did)."""
    from rich.text import Text

    console.print(table)
    if total > shown:
        console.print(Text(more_line(total - shown, what, run), style="dim"), soft_wrap=True)


def device_line(d: dict[str, Any]) -> str:
    """A device as ``show`` prints it: only the fields known; where the files name no compute capability or SM
    count (an Nsight Systems export), the hint that sets them."""
    if not d.get("name"):
        cc = f"compute capability {d['compute_capability']}, " if d.get("compute_capability") else ""
        return f"device: {cc}GPU not named in the files (--device NAME names it, e.g. --device h100-sxm)"
    parts = [f"device: {safe(d['name'])}"]
    if d.get("compute_capability"):
        parts.append(f"CC {d['compute_capability']}")
    if d.get("sm_count"):
        parts.append(f"{d['sm_count']} SMs")
    line = "  ".join(parts)
    if not (d.get("compute_capability") and d.get("sm_count")):
        line += "  (SMs and compute capability not in the files: --device NAME sets them)"
    return line


def cases_table(gemms: list[dict[str, Any]]) -> pl.DataFrame:
    """``show``'s GEMM table from ``show --json``'s rows (the Analysis' cases, most time in calls first);
    ``median_call_us`` is the median call's span (analyzers/analysis/figures.py)."""
    import polars as pl

    rows = [
        {
            "gemm": g.get("backend") or g.get("name"),
            "m": g.get("m"),
            "n": g.get("n"),
            "k": g.get("k"),
            "dtype": g.get("dtype"),
            "calls": g.get("calls"),
            "gpu_ms": g["gpu_time_us"] / 1e3 if g.get("gpu_time_us") else None,
            "median_call_us": g.get("time_us"),
            "achieved": g.get("achieved_tflops"),
            "kernel_rate": g.get("kernel_tflops"),
            "%peak": g.get("pct_of_peak"),
            "verdict": g.get("verdict"),
        }
        for g in gemms
    ]
    schema = {
        "gemm": pl.String,
        "m": pl.Int64,
        "n": pl.Int64,
        "k": pl.Int64,
        "dtype": pl.String,
        "calls": pl.Int64,
        "gpu_ms": pl.Float64,
        "median_call_us": pl.Float64,
        "achieved": pl.Float64,
        "kernel_rate": pl.Float64,
        "%peak": pl.Float64,
        "verdict": pl.String,
    }
    return pl.DataFrame(rows, schema=schema)


def _render_ncu_pass(console: Any, ncu: dict[str, Any] | None) -> None:
    """The capture's ncu pass: kernels profiled under which bound, and what its --ncu-budget left unprofiled."""
    from rich.text import Text

    if not ncu:
        return
    console.print(Text(f"ncu pass: {ncu.get('profiled', '?')} kernel(s) profiled; {safe(ncu.get('bound'))}"))
    budget = ncu.get("budget") or {}
    if budget.get("spent"):
        how = {
            "profiler-stop": "cuProfilerStop in the program",
            "stopping the program": "stopping the program",
        }
        console.print(
            Text(
                f"  ncu budget {budget.get('budget_s'):g} s spent at {budget.get('spent_at_s'):.1f} s "
                f"({how.get(budget.get('stopped_by') or '', 'no stop confirmed')}); not profiled: "
                f"{safe(budget.get('not_profiled'))}",
                style="yellow",
            )
        )


def render_summary(data: dict[str, Any], analysis: Any, limit: int | None) -> None:
    """``tracekit show``'s tables, every one from ``data`` (``show --json``'s object) and the run's ``analysis``;
    each is cut to ``limit`` rows (None: every row) and says what it left out."""
    import polars as pl
    from rich.text import Text

    from tracekit.text import make_console

    console = make_console()
    w = console.width
    path = str(data["run"]["path"])

    def cut(df: pl.DataFrame) -> pl.DataFrame:
        return df if limit is None else df.head(limit)

    run = data["run"]
    status = run["status"] + (" (partial)" if run["partial"] else "")
    console.print(Text(f"run {safe(run['path'])}  status: {status}", style="bold"), soft_wrap=True)
    if run.get("incomplete_reason"):
        console.print(Text(f"  incomplete: {run['incomplete_reason']}", style="yellow"))
    _render_ncu_pass(console, run.get("ncu_pass"))
    devs = data.get("devices") or ([data["device"]] if data.get("device") else [])
    for d in devs:
        console.print(Text(device_line(d)))
    console.print(
        Text(
            f"{data['kernel_count']} timeline kernels, {data['range_count']} ranges, "
            f"{data['ncu_kernel_count']} ncu-profiled kernels, {len(data['gemms'])} GEMMs, "
            f"{len(data['failures'])} failures"
        )
    )
    if data.get("ranks"):
        ranks = pl.DataFrame(data["ranks"]).select(
            "rank",
            "pid",
            "device",
            "kernels",
            *[
                (pl.col(c) / 1e6).alias(c.replace("_ns", "_ms"))
                for c in ("gemm_ns", "comm_ns", "compute_ns", "idle_ns")
            ],
            "last_arrivals",
            "straggler",
        )
        console.print(
            frame_table(
                ranks,
                "Ranks (kernel time; the straggler is the rank the others wait for)",
                width=w,
                priority=["rank", "kernels", "gemm_ms", "comm_ms", "idle_ms", "straggler", "compute_ms"],
            )
        )
        for reason in (data.get("straggler") or {}).get("reasons") or []:
            console.print(Text(f"  {safe(reason, 300)}"))
        for note in data.get("rank_notes") or []:
            console.print(Text(f"  note: {safe(note, 300)}", style="dim"))
    if analysis.breakdown is not None:
        _render_breakdown(console, analysis.breakdown, limit, path)
    for src in data["sources"]:
        if src.get("status") == "failed":
            console.print(Text(f"  source failed: {safe(src.get('message'))}", style="red"))
    if analysis.moe is not None:
        _render_moe(console, analysis.moe, limit)
        launches = len(analysis.moe.launches)
        if limit is not None and launches > limit:
            console.print(
                Text(more_line(launches - limit, "MoE launches", path), style="dim"), soft_wrap=True
            )
    gemms = cases_table(data["gemms"])
    if gemms.height:
        shown = cut(gemms)
        table = frame_table(
            shown,
            "GEMM cases, most time in calls first (achieved: FLOPs / call spans; kernel_rate: FLOPs / GEMM time)",
            width=w,
            priority=[
                "gemm",
                "m",
                "n",
                "k",
                "gpu_ms",
                "achieved",
                "verdict",
                "%peak",
                "kernel_rate",
                "calls",
            ],
            min_widths={"verdict": 12, "gemm": 12},
        )
        _print_cut(console, table, gemms.height, shown.height, "GEMMs", path)
    if analysis.failures:
        _render_failures(console, analysis, limit, path)
    if analysis.tables is not None:
        _render_tables(console, analysis.tables, limit, path)


def tables_frames(tables: Any) -> tuple[pl.DataFrame, pl.DataFrame, pl.DataFrame]:
    """The Analysis' run tables (:class:`~tracekit.analyzers.analysis.sections.RunTables`) as ``show`` prints
    them: Nsight Compute kernels, ranges and kernels by name, times in the units people read them in (ms, µs,
    MHz), the unit in the column's name (``--json`` keeps the Analysis' ns and Hz)."""
    import polars as pl

    def ms(ns: float | None) -> float | None:
        return None if ns is None else ns / 1e6

    def us(ns: float | None) -> float | None:
        return None if ns is None else ns / 1e3

    ncu = pl.DataFrame(
        [
            {
                "name": r.name,
                "nvtx_range": r.nvtx_range,
                "duration_µs": us(r.duration_ns),
                "sm_clock_MHz": None if r.sm_clock_hz is None else r.sm_clock_hz / 1e6,
                "achieved_occupancy_pct": r.achieved_occupancy_pct,
                "tensor_pipe_pct": r.tensor_pipe_pct,
            }
            for r in tables.ncu_kernels
        ],
        schema={
            "name": pl.String,
            "nvtx_range": pl.String,
            "duration_µs": pl.Float64,
            "sm_clock_MHz": pl.Float64,
            "achieved_occupancy_pct": pl.Float64,
            "tensor_pipe_pct": pl.Float64,
        },
    )
    ranges = pl.DataFrame(
        [
            {
                "name": r.name,
                "count": r.count,
                "total_ms": ms(r.total_ns),
                "median_ms": ms(r.median_ns),
                "kernels": r.kernels,
            }
            for r in tables.ranges
        ],
        schema={
            "name": pl.String,
            "count": pl.Int64,
            "total_ms": pl.Float64,
            "median_ms": pl.Float64,
            "kernels": pl.Int64,
        },
    )
    kernels = pl.DataFrame(
        [
            {
                "name": r.name,
                "launches": r.launches,
                "total_ms": ms(r.total_ns),
                "mean_us": us(r.mean_ns),
                "pct": r.pct,
            }
            for r in tables.kernels
        ],
        schema={
            "name": pl.String,
            "launches": pl.Int64,
            "total_ms": pl.Float64,
            "mean_us": pl.Float64,
            "pct": pl.Float64,
        },
    )
    return ncu, ranges, kernels


def _render_tables(console: Any, tables: Any, limit: int | None, run: str) -> None:
    """The Analysis' run tables, each cut to ``limit`` rows with the line that says how many it left out (the
    names beyond those the Analysis keeps included: ``--all`` holds every name)."""
    ncu, ranges, kernels = tables_frames(tables)
    w = console.width
    for df, total, title, widths, what, priority in (
        (
            ncu,
            ncu.height,
            "Nsight Compute kernels",
            {"name": 50, "nvtx_range": 50},
            "Nsight Compute kernels",
            ["name", "duration_µs", "tensor_pipe_pct", "sm_clock_MHz"],
        ),
        (ranges, tables.ranges_total, "Top ranges (by total time)", {"name": 70}, "range names", None),
        (kernels, tables.kernels_total, "Top kernels (by total time)", {"name": 70}, "kernel names", None),
    ):
        if not df.height:
            continue
        shown = df if limit is None else df.head(limit)
        table = frame_table(shown, title, widths, width=w, priority=priority)
        _print_cut(console, table, total, shown.height, what, run)


def _render_breakdown(console: Any, b: Any, limit: int | None, run: str) -> None:
    """The step breakdown (analyzers/breakdown): % of each GPU's span by kernel class and idle, for the whole run
    and per range name, then what the numbers leave out."""
    from rich.text import Text

    from tracekit.analyzers.breakdown.table import breakdown_frame, collapse_same_ranges

    if b.empty:
        return
    names = len({s.range for s in b.ranges})
    import polars as pl

    df = collapse_same_ranges(breakdown_frame(b, limit))
    classes = [c for c in df.columns if c not in ("scope", "gpu", "n", "span_ms", "idle", "comm_hidden")]
    df = df.with_columns(pl.col("idle", *classes, "comm_hidden").round(2))
    title = (
        "Step breakdown (% of each GPU's span by kernel class; comm_hidden: % of communication under compute)"
    )
    priority = ["scope", "gpu", "span_ms", "idle"]
    for c in sorted(classes, key=lambda c: -(df[c].max() or 0)):  # the larger classes stay on a narrow screen
        priority += [c, "comm_hidden"] if c == "communication" else [c]
    table = frame_table(
        df, title, {"scope": 50}, width=console.width, priority=priority, min_widths={"scope": 24}
    )
    console.print(table)
    shown = min(names, limit) if limit is not None else names
    if b.ranges_total > shown:
        import shlex

        console.print(
            Text(
                f"… {b.ranges_total - shown} more range names: `tracekit show {shlex.quote(run)} --all` "
                "(with --json: every range name's breakdown)",
                style="dim",
            ),
            soft_wrap=True,
        )
    for note in b.notes:
        console.print(Text(f"  {safe(note, 300)}", style="yellow"))


def _render_moe(console: Any, moe: Any, limit: int | None) -> None:
    """Grouped / MoE launches: one line each (numbers whole, the verdict elided to the width) with its
    efficiency, padding, hot expert and verdict."""
    import polars as pl

    def num(value: Any) -> float | None:
        return None if value is None else float(value)

    rows = [
        {
            "backend": r.backend,
            "route": r.route,
            "tokens": r.tokens,
            "active/E": f"{r.active}/{r.experts}",
            "µs": None if not r.time_ns else r.time_ns / 1e3,
            "TFLOP/s": num(r.tflops),
            "%peak": num(r.pct_of_peak),
            "pad%": num(r.padding_waste_pct),
            "hot": None if r.hot_expert is None else f"e{r.hot_expert} {r.hot_vs_median or 0:.1f}x",
            "verdict": r.verdict,
        }
        for r in moe.launches[:limit]
    ]
    schema = {
        "backend": pl.String,
        "route": pl.String,
        "tokens": pl.Int64,
        "active/E": pl.String,
        "µs": pl.Float64,
        "TFLOP/s": pl.Float64,
        "%peak": pl.Float64,
        "pad%": pl.Float64,
        "hot": pl.String,
        "verdict": pl.String,
    }
    console.print(
        frame_table(
            pl.DataFrame(rows, schema=schema, strict=False),
            "MoE grouped launches (per-expert rows: show --json, report, view key e)",
            {"verdict": 400},
            width=console.width,
            priority=["backend", "route", "tokens", "µs", "%peak", "verdict", "TFLOP/s", "pad%", "hot"],
            min_widths={"verdict": 30},
        )
    )
