"""``tracekit show``: a run's summary as tables, or JSON for scripts."""

from __future__ import annotations

import json
from pathlib import Path

import click

from tracekit.commands.explain import device_option


@click.command()
@click.argument("run", type=click.Path(path_type=Path))
@click.option(
    "--json", "as_json", is_flag=True, help="Print one JSON object on stdout (see README for its keys)."
)
@click.option(
    "--limit",
    default=15,
    show_default=True,
    type=click.IntRange(min=1),
    help="Rows per table (failures: groups); a cut table says how many rows it left out.",
)
@click.option("--all", "show_all", is_flag=True, help="Every row of every table (no --limit).")
@device_option
def show(run: Path, as_json: bool, limit: int, show_all: bool, device_name: str | None) -> None:
    """Summarise RUN: device, counts, GEMM cases, failures, top ranges and kernels.

    RUN is a run folder made by `tracekit capture`, `tracekit bench` or `tracekit import`.

    GEMM cases come most time in calls first, with both rates named: achieved (sum of FLOPs / sum of call spans)
    and kernel rate (sum of FLOPs / sum of GEMM kernel time). Each table shows --limit rows and says how many it left out; --all shows them all. Failures are grouped
    by backend, kind and the first line of the message, with their count and the shapes they cover
    (M=16..4096, N=768|2048, K=6144); --json and `tracekit report` keep every failure in full.

    \b
    --json keys: schema_version, analysis_schema_version, run, device {name, compute_capability, sm_count}
    (or devices: [...] when the run holds several GPUs), kernel_count, range_count, ncu_kernel_count, summary,
    gemms [{id, name, m, n, k, calls, time_us, achieved_tflops, kernel_tflops, pct_of_peak, verdict, ...}],
    failures [...], sources [...] (docs/ANALYSIS.md: the gemms are the Analysis' cases, projected),
    breakdown {devices [...], ranges [...], ranges_total, order, notes, headline} (the Analysis' step breakdown:
    GPU time by kernel class and idle per GPU, and per range name: the 20 longest, every one with --all; headline:
    the line over the user's steps where the run has any, saying which; docs/BREAKDOWN.md);
    tables {ranges [...], ranges_total, kernels [...], kernels_total, ncu_kernels [...]} (the Analysis' range and
    kernel names by total time, the first 200 of each, every one with --all, and the profiled kernels, as the
    tables print them; docs/ANALYSIS.md);
    for runs with grouped MoE launches moe {launches [{..., per_expert [...]}], whatif [...]} (docs/MOE.md);
    for a run of several ranks also ranks [...] (kernel time per rank; idle: no kernel running), straggler
    {rank, reasons} and rank_notes [...] (what the rank table leaves out or assumes).

    \b
    Examples:
      tracekit show samples/h200-bench-gemm
      tracekit show samples/h200-bench-gemm --all
      tracekit show samples/h200-bench-gemm --json | jq '.gemms[] | {backend, m, achieved_tflops}'
    """
    from tracekit.analyzers import summary as S
    from tracekit.analyzers.analysis import load_analysis
    from tracekit.analyzers.analysis.sections import TABLE_ROWS
    from tracekit.analyzers.store import open_run
    from tracekit.commands.explain import resolve_device, say

    device = resolve_device(device_name)
    r = open_run(run)
    # every table is the Analysis' (no frame is read): the stored one holds the first TABLE_ROWS names of each,
    # an Analysis of every name (built and kept in the per-user cache) serves --all and a larger --limit
    every = show_all or limit > TABLE_ROWS
    analysis = load_analysis(r, device=device, breakdown="all" if every else "top", say=say)
    for line in analysis.run.device_notes:
        click.echo(line, err=True)
    data = S.summary(r, analysis=analysis)
    if as_json:
        click.echo(json.dumps(data, indent=2, default=str))
        return
    from tracekit.commands._render import render_summary

    render_summary(data, analysis, None if show_all else limit)
