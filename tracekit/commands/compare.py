"""``tracekit compare``: two runs GEMM by GEMM; ``--gate`` exits 5 on a regression (for CI)."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import click

from tracekit.errors import RegressionError
from tracekit.numbers import formatted
from tracekit.text import short_name as gemm_label

_STYLE = {
    "regression": "bold red",
    "broken": "bold red",
    "improvement": "green",
    "noise": "dim",
    "unchanged": "dim",
}


def _render(result: dict[str, Any], base: str, new: str) -> None:
    import polars as pl
    from rich.text import Text

    from tracekit.commands._render import frame_table, safe
    from tracekit.text import make_console

    console = make_console()
    rows = []
    for r in result["gemms"]:
        moved = ", ".join(
            f"{m['factor']} {formatted(m['base'], '{:.2f}')}→{formatted(m['new'], '{:.2f}')}"
            for m in r.get("factors_moved") or []
        )
        rows.append(
            {
                "GEMM": gemm_label(r["gemm"]),
                "base µs": formatted(r.get("base_time_us")),
                "new µs": formatted(r.get("new_time_us")),
                "Δ time": formatted(r.get("time_change_pct"), "{:+.1f}%"),
                "noise ±": formatted(r.get("noise_pct"), "{:.1f}%"),
                "TFLOP/s": f"{formatted(r.get('base_tflops'), '{:,.0f}')}→"
                f"{formatted(r.get('new_tflops'), '{:,.0f}')}",
                "status": r["status"],
                "factors moved": moved or r.get("error") or "",
            }
        )
    cols = ["GEMM", "base µs", "new µs", "Δ time", "noise ±", "TFLOP/s", "status", "factors moved"]
    # the shared table layout (tracekit.commands._render.frame_table): numbers and statuses whole, one line per
    # GEMM; to a pipe the natural width (tracekit.text.make_console); on a narrow terminal the least needed
    # columns are left out, and the title says which
    table = frame_table(
        pl.DataFrame(rows, schema=dict.fromkeys(cols, pl.String)),
        f"{safe(base)} → {safe(new)} (threshold {result['threshold_pct']:g}%)",
        {"GEMM": 80, "factors moved": 200},
        width=console.width,
        priority=["GEMM", "Δ time", "status", "noise ±", "new µs", "base µs", "TFLOP/s", "factors moved"],
        min_widths={"GEMM": 30, "factors moved": 24},
        whole=("base µs", "new µs", "Δ time", "noise ±", "TFLOP/s", "status"),
    )
    console.print(table)
    for title, items in (
        ("new failures", result["new_failures"]),
        ("fixed failures", result["fixed_failures"]),
    ):
        for f in items:
            console.print(
                Text(
                    f"{title}: {safe(f['backend'])} {f['m']}x{f['n']}x{f['k']}: {safe(f['error_type'])}: "
                    f"{safe(f['first_line'], 120)}",
                    style="red" if title == "new failures" else "green",
                )
            )
    for side in ("only_in_base", "only_in_new"):
        if result[side]:
            console.print(
                Text(f"{side.replace('_', ' ')}: " + ", ".join(gemm_label(x) for x in result[side][:20]))
            )
    c = result["counts"]
    console.print(
        Text(
            f"{c['regression']} regressions, {c['broken']} broken, {c['improvement']} improvements, "
            f"{c['within threshold']} within threshold, {c['noise']} noise, {c['unchanged']} unchanged",
            style="bold",
        )
    )


@click.command()
@click.argument("base", type=click.Path(path_type=Path))
@click.argument("new", type=click.Path(path_type=Path))
@click.option(
    "--threshold",
    "threshold",
    type=click.FloatRange(min=0),
    default=5.0,
    show_default=True,
    help="Percent slower (beyond the repeats' spread) that counts as a regression.",
)
@click.option("--gate", is_flag=True, help="Exit 5 if any GEMM regressed or broke (for CI).")
@click.option("--json", "as_json", is_flag=True, help="Print the comparison as one JSON object on stdout.")
def compare(base: Path, new: Path, threshold: float, gate: bool, as_json: bool) -> None:
    """Compare NEW against BASE (run folders or bundles), GEMM by GEMM.

    GEMMs are matched on backend, M, N, K and dtype. A change inside the combined spread of the repeats
    (p10-p90 of each side, from `tracekit bench gemm`) is noise, not a regression. Also lists new and fixed
    failures, and which waterfall factors moved.

    \b
    Examples:
      tracekit compare samples/h200-capture-seed samples/h200-capture-gemm
      tracekit compare samples/h200-capture-gemm samples/h200-capture-seed --threshold 3 --gate  # exit 5: bf16 M=4096 regressed
      tracekit compare samples/h200-capture-gemm samples/h200-capture-seed --threshold 3 --json | jq '.gemms[] | select(.status=="regression")'
    """
    from tracekit.analyzers.analysis import load_analysis
    from tracekit.analyzers.compare import compare_runs
    from tracekit.analyzers.store import open_run
    from tracekit.commands.explain import say

    rb, rn = open_run(base), open_run(new)
    result = compare_runs(  # the runs' Analyses only: their cases, failures and wrong results
        None,
        None,
        threshold_pct=threshold,
        base_environment=rb.record.environment,
        new_environment=rn.record.environment,
        base_analysis=load_analysis(rb, say=say),
        new_analysis=load_analysis(rn, say=say),
    )
    result["base"], result["new"] = str(base), str(new)
    if as_json:
        click.echo(json.dumps(result, indent=2, default=str, allow_nan=False))
    else:
        _render(result, str(base), str(new))
    if gate and not result["passed"]:
        shown = ", ".join(result["regressions"][:5]) + (" …" if len(result["regressions"]) > 5 else "")
        raise RegressionError(
            f"{len(result['regressions'])} GEMM(s) regressed beyond {threshold:g}% or broke: {shown}",
            "see the table above (or --json) for the change and its noise band",
        )
