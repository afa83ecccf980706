"""``tracekit show``: a run's summary as tables, or JSON for scripts."""

from __future__ import annotations

import json
from pathlib import Path

import click


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
def show(run: Path, as_json: bool, limit: int, show_all: bool) -> None:
    """Summarise RUN: device, counts, measured GEMMs, failures, top ranges and kernels.

    RUN is a run folder made by `tracekit capture`, `tracekit bench` or `tracekit import`.

    Each table shows --limit rows and says how many it left out; --all shows them all. Failures are grouped
    by backend, kind and the first line of the message, with their count and the shapes they cover
    (M=16..4096, N=768|2048, K=6144); --json and `tracekit report` keep every failure in full.

    \b
    --json keys: schema_version, run, device {name, compute_capability, sm_count} (or devices: [...] when the run
    holds several GPUs), kernel_count, range_count, ncu_kernel_count, gemms [...], failures [...], sources [...];
    for runs with grouped MoE launches moe {launches [{..., per_expert [...]}], whatif [...]} (docs/MOE.md);
    for a run of several ranks also ranks [...] (kernel time per rank) and straggler {rank, reasons}.

    \b
    Examples:
      tracekit show samples/h200-gemm
      tracekit show samples/h200-gemm --all
      tracekit show samples/h200-gemm --json | jq '.gemms[] | {backend, m, tflops}'
    """
    from tracekit.analyzers import summary as S
    from tracekit.analyzers.store import load_frames, open_run

    r = open_run(run)
    frames = load_frames(r)
    data = S.summary(r, frames)
    if as_json:
        click.echo(json.dumps(data, indent=2, default=str))
        return
    from tracekit.commands._render import render_summary

    render_summary(data, frames, None if show_all else limit)
