"""``tracekit explain``: each GEMM's gap to peak as a waterfall of factors."""

from __future__ import annotations

from collections.abc import Callable
from pathlib import Path
from typing import Any

import click

from tracekit.commands._options import top_count, top_options

DEVICE_HELP = (
    "The GPU the run was captured on, by catalog key or alias (case-insensitive): rtx-pro-6000, rtx-4060-ti, "
    "h100-nvl, mi300x, ...; `tracekit devices` lists them. Sets the peaks where the files name no GPU (Nsight "
    "Compute CSV exports give only the compute capability) or one the catalog does not know; where they name "
    "another GPU, this one is used and the output says so."
)


def device_option(f: Callable[..., Any]) -> Callable[..., Any]:
    """``--device NAME`` for explain, report and view."""
    return click.option("--device", "device_name", default=None, metavar="NAME", help=DEVICE_HELP)(f)


def resolve_device(name: str | None) -> Any:
    """The catalog DeviceSpec of ``--device`` (None without it); an unknown name is bad input (exit 2) with the
    closest catalog names."""
    if name is None:
        return None
    from tracekit.devices import lookup_device

    return lookup_device(name)


def case_matches(case: Any, pattern: str | None) -> bool:
    """Whether ``--gemm PATTERN`` selects a case: the pattern (case-insensitive) in its name, range, enclosing
    ranges, kernel or backend."""
    if not pattern:
        return True
    p = pattern.lower()
    fields = (case.name, case.range, *case.parents, case.kernel.name, case.backend)
    return any(p in (s or "").lower() for s in fields)


def select_cases(analysis: Any, pattern: str | None, top: int | None) -> list[Any]:
    """The cases a view shows: those ``--gemm`` selects, in the Analysis' order (time in calls), the first ``top``
    (None: all)."""
    cases = [c for c in analysis.cases if case_matches(c, pattern)]
    return cases if top is None else cases[:top]


def analysis_of(run: Path, device_name: str | None, calibration: Path | None) -> Any:
    """The Analysis of RUN as explain, report, show and view build it (``--device`` and ``--calibration``),
    with the device notes on stderr (stdout carries only data)."""
    from tracekit.analyzers.analysis.obtain import run_analysis
    from tracekit.analyzers.store import open_run

    device = resolve_device(device_name)  # a bad name fails before the run is read
    analysis = run_analysis(open_run(run), device=device, calibration=calibration, breakdown="devices")
    for line in analysis.run.device_notes:
        click.echo(line, err=True)
    return analysis


@click.command()
@click.argument("run", type=click.Path(path_type=Path))
@click.option(
    "--gemm", "gemm_filter", default=None, help="Only GEMMs whose range, kernel or backend contain this."
)
@click.option(
    "--json", "as_json", is_flag=True, help="Print the Analysis as JSON on stdout (docs/ANALYSIS.md)."
)
@click.option(
    "--calibration",
    type=click.Path(path_type=Path, dir_okay=False),
    default=None,
    help="A profile from `tracekit calibrate` (measured peak shown beside the datasheet's).",
)
@top_options
@device_option
def explain(
    run: Path,
    gemm_filter: str | None,
    as_json: bool,
    calibration: Path | None,
    top: int | None,
    show_all: bool,
    device_name: str | None,
) -> None:
    """Explain why each GEMM of RUN stops short of peak.

    Opens with a summary: GPU time, the three largest losses in the calls' time, and what is unknown with how to learn
    it. Then one card per GEMM case, most time in calls first (the top 10; --top N, --all): the datasheet peak
    times clock, wave-quantization, memory-bound, in-kernel, auxiliary-kernel and launch-gap factors equals its
    achieved TFLOP/s (sum of FLOPs / sum of call spans); the kernel rate (FLOPs / GEMM kernel time) beside it.
    The verdict is the factor that costs the most of the calls' time (launch gaps cost the idle time, aux kernels
    their own, the kernel's factors a share of the kernel's time), with that time and what to try. Nsight
    Compute's own findings are listed beside it.

    \b
    --json: the Analysis (docs/ANALYSIS.md): {schema_version, run, devices, summary, breakdown, cases: [{id,
            name, timing {achieved_tflops, kernel_tflops, ...}, factors, verdict, ...}], failures, ranks, moe};
            every case unless --top is given; --gemm keeps the cases it selects (the summary stays the run's).

    A run whose files name only the compute capability (Nsight Compute CSV exports) gets a line naming the
    catalog GPUs it may be; --device NAME picks one and sets the peaks. A GPU the catalog does not know gets no
    peak, and its GEMMs the note "peak unknown: give --device NAME" (`tracekit devices` lists the names).

    \b
    Examples:
      tracekit explain samples/h200-gemm-probe
      tracekit explain samples/h200-gemm-probe --top 3
      tracekit explain samples/h200-gemm-probe --gemm M=4096 --json | jq '.cases[0].verdict'
      tracekit import samples/h200-counter-probe/raw/ncu_details.csv -o runs/csv && tracekit explain runs/csv --device h200
    """
    count = top_count(top, show_all, default=None if as_json else 10)
    analysis = analysis_of(run, device_name, calibration)
    cases = select_cases(analysis, gemm_filter, count)
    if as_json:
        import msgspec

        if gemm_filter or count is not None:
            analysis = msgspec.structs.replace(analysis, cases=cases)
        click.echo(analysis.to_json().decode())
        return
    from tracekit.commands._explain_render import render_analysis

    matching = [c for c in analysis.cases if case_matches(c, gemm_filter)]
    render_analysis(analysis, matching, count, gemm_filter)
