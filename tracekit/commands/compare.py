"""``tracekit compare``: two runs GEMM by GEMM; ``--gate`` exits 5 on a regression (for CI)."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import click

from tracekit.errors import RegressionError
from tracekit.numbers import formatted

_STYLE = {
    "regression": "bold red",
    "broken": "bold red",
    "improvement": "green",
    "noise": "dim",
    "unchanged": "dim",
}


def _render(result: dict[str, Any], base: str, new: str) -> None:
    from rich.console import Console
    from rich.table import Table
    from rich.text import Text

    from tracekit.commands._render import safe

    console = Console()
    table = Table(
        title=f"{safe(base)} → {safe(new)} (threshold {result['threshold_pct']:g}%)", title_justify="left"
    )
    for col, just in (
        ("GEMM", "left"),
        ("base µs", "right"),
        ("new µs", "right"),
        ("Δ time", "right"),
        ("noise ±", "right"),
        ("TFLOP/s", "right"),
        ("status", "left"),
        ("factors moved", "left"),
    ):
        table.add_column(col, justify=just)  # type: ignore[arg-type]
    for r in result["gemms"]:
        moved = ", ".join(
            f"{m['factor']} {formatted(m['base'], '{:.2f}')}→{formatted(m['new'], '{:.2f}')}"
            for m in r.get("factors_moved") or []
        )
        tfl = f"{formatted(r.get('base_tflops'), '{:,.0f}')}→{formatted(r.get('new_tflops'), '{:,.0f}')}"
        table.add_row(
            Text(safe(r["gemm"], 60)),
            formatted(r.get("base_time_us")),
            formatted(r.get("new_time_us")),
            formatted(r.get("time_change_pct"), "{:+.1f}%"),
            formatted(r.get("noise_pct"), "{:.1f}%"),
            tfl,
            Text(r["status"], style=_STYLE.get(r["status"], "")),
            Text(safe(moved or r.get("error") or "", 80)),
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
                Text(f"{side.replace('_', ' ')}: " + ", ".join(safe(x, 60) for x in result[side][:20]))
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
    from tracekit.analyzers.analysis.obtain import run_analysis
    from tracekit.analyzers.compare import compare_runs
    from tracekit.analyzers.store import load_frames, open_run

    rb, rn = open_run(base), open_run(new)
    fb, fn = load_frames(rb), load_frames(rn)
    result = compare_runs(
        fb,
        fn,
        threshold_pct=threshold,
        base_environment=rb.record.environment,
        new_environment=rn.record.environment,
        base_analysis=run_analysis(rb, fb, breakdown="none"),
        new_analysis=run_analysis(rn, fn, breakdown="none"),
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
