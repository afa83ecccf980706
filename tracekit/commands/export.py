"""``tracekit export``: a run as Chrome trace-event JSON for ui.perfetto.dev and chrome://tracing."""

from __future__ import annotations

import re
from pathlib import Path

import click

from tracekit.errors import BadInputError


@click.command()
@click.argument("run", type=click.Path(path_type=Path))
@click.option(
    "-o",
    "--out",
    type=click.Path(path_type=Path, dir_okay=False),
    required=True,
    help="The trace to write (.json; open it in ui.perfetto.dev or chrome://tracing).",
)
@click.option(
    "--ranges",
    "ranges",
    default=None,
    help="Only ranges whose name matches this regex, the ranges inside them and the kernels they launched.",
)
@click.option(
    "--from-ms", type=float, default=None, help="Start of a window, ms after the run's first kernel."
)
@click.option("--to-ms", type=float, default=None, help="End of the window, ms after the run's first kernel.")
@click.option(
    "--cat",
    type=click.Choice(["class", "kernel"]),
    default="class",
    show_default=True,
    help="A kernel's category: its class (gemm, attention, ...: filterable in the viewers) or Kineto's "
    "'kernel' (Kineto readers, `tracekit import` included, read the file back as a profile).",
)
def export(
    run: Path, out: Path, ranges: str | None, from_ms: float | None, to_ms: float | None, cat: str
) -> None:
    """Write RUN as a Chrome trace (JSON trace events): a track per GPU and stream with its kernels, the
    user's ranges per thread, every GEMM call with its case, verdict, cost, rates, % of peak and factors, the
    largest losses marked, and the SM clock where it was measured (docs/REPORTS.md, "Timeline export").

    The file is written as it is made, in batches: a run of a million kernels needs about the memory of its
    import. --ranges and --from-ms / --to-ms make a big run's trace small enough for the browser.

    \b
    Examples:
      tracekit export samples/h100-serve-torchprof -o serve.json
      tracekit export samples/h100-serve-torchprof --ranges 'serve/prefill' -o prefill.json
      tracekit export samples/h200-capture-gemm --from-ms 0 --to-ms 50 -o first-50ms.json
      tracekit export samples/h100-serve-torchprof --cat kernel -o kineto.json && tracekit import kineto.json -o rt
    """
    import tracekit
    from tracekit.analyzers.export import ExportOptions, export_path

    if ranges is not None:
        try:
            re.compile(ranges)
        except re.error as exc:
            raise BadInputError(f"--ranges {ranges!r} is not a regular expression ({exc})") from None
    if from_ms is not None and to_ms is not None and to_ms < from_ms:
        raise BadInputError("--to-ms is before --from-ms", "give a window with --from-ms <= --to-ms")
    loaded = tracekit.load(run)
    if loaded.frames["kernels"].height == 0:
        raise BadInputError(
            f"{run} has no kernel timeline to export (an Nsight Compute report holds no times between kernels)",
            "capture the program with --nsys or --torch-profiler (tracekit capture --help)",
        )
    analysis = loaded.analyze()
    result = export_path(loaded, analysis, out, ExportOptions(ranges, from_ms, to_ms, cat))
    click.echo(
        f"wrote {out}: {result.kernels:,} kernels ({result.gemm_calls:,} GEMM calls, {result.marks} top losses "
        f"marked), {result.ranges:,} ranges, {result.counters:,} SM clock samples; open it in ui.perfetto.dev",
        err=True,
    )
