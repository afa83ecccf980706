"""``tracekit report``: a run as Markdown for a kernel ticket (or JSON / self-contained HTML)."""

from __future__ import annotations

from pathlib import Path

import click

from tracekit.commands._options import top_count, top_options
from tracekit.commands.explain import device_option, resolve_device
from tracekit.errors import BadInputError

_SUFFIX_FORMAT = {".md": "md", ".markdown": "md", ".json": "json", ".html": "html", ".htm": "html"}


def _format_of(out: Path | None, fmt: str | None) -> str:
    """The format to write: ``--format``, else ``-o``'s extension (.md, .html, .json), else Markdown. An
    extension that names no format tracekit writes (``-o r.pdf``), or one that contradicts ``--format``, is bad
    input (exit 2): writing Markdown into r.pdf would hand the user a file no PDF reader opens."""
    from_suffix = _SUFFIX_FORMAT.get(out.suffix.lower()) if out is not None else None
    if out is not None and from_suffix is None and fmt is None:
        raise BadInputError(
            f"-o {out}: {out.suffix or 'no extension'} is not a report format",
            "tracekit report writes .md (Markdown), .html and .json: name the file so, or pass --format",
        )
    if fmt is not None and from_suffix is not None and from_suffix != fmt:
        raise BadInputError(
            f"-o {out} is {from_suffix} by its extension, but --format {fmt} was given",
            f"name the file .{fmt}, or leave --format out",
        )
    return fmt or from_suffix or "md"


@click.command()
@click.argument("run", type=click.Path(path_type=Path))
@click.option(
    "--gemm", "gemm_filter", default=None, help="Only GEMMs whose range, kernel or backend contain this."
)
@click.option(
    "--format",
    "fmt",
    type=click.Choice(["md", "json", "html"]),
    default=None,
    help="md (GitHub Markdown, default), json (same content for machines) or html (one self-contained file). "
    "Default: from -o's extension (.md, .html, .json; any other exits 2), else md.",
)
@click.option(
    "-o",
    "--out",
    type=click.Path(path_type=Path, dir_okay=False),
    default=None,
    help="File to write; Markdown's SVG plots go beside it as <name>-*.svg. Default: stdout (Markdown without plots).",
)
@click.option(
    "--calibration",
    type=click.Path(path_type=Path, dir_okay=False),
    default=None,
    help="A profile from `tracekit calibrate` (measured peak beside the datasheet's).",
)
@top_options
@device_option
def report(
    run: Path,
    gemm_filter: str | None,
    fmt: str | None,
    out: Path | None,
    calibration: Path | None,
    top: int | None,
    show_all: bool,
    device_name: str | None,
) -> None:
    """Write a report of RUN (a run folder or a bundle .zip) for a kernel ticket.

    The Markdown stands on its own in a GitHub issue comment: a summary (GPU time, the three largest losses in
    the calls' time, what is unknown and how to learn it), environment (GPU, driver, CUDA, library versions, ncu clock
    control), the command that reproduces the capture, the GEMM table (most time in calls first), the waterfall and
    verdict of the top 10 GEMMs by time in calls (--top N, --all), Nsight Compute's findings, and every failure's full
    error text in a collapsible block. --format json is the run's Analysis (docs/ANALYSIS.md) with a "report"
    object beside it (environment, capture, reproduce, selected cases, findings, failure groups). It fits
    GitHub's 65,536-character limit by summarising (grouped failures, top GEMMs by time in calls) and says so.
    Plots (TFLOP/s vs M, waterfalls) are SVG files beside the Markdown: drag them into the comment too.

    \b
    Examples:
      tracekit report samples/h200-gemm-probe -o ticket.md
      tracekit report samples/h200-gemm-probe --gemm M=4096 -o ticket.md
      tracekit report samples/h200-capture-gemm --format html -o report.html
      tracekit report samples/h200-gemm-probe --format json | jq '.cases[0].verdict'
      tracekit report samples/h200-counter-probe --device h200 -o ticket.md   # CSV exports name no GPU
    """
    from tracekit.analyzers.analysis import load_analysis
    from tracekit.analyzers.report import build_report, write_report
    from tracekit.analyzers.store import open_run
    from tracekit.commands.explain import say

    count = top_count(top, show_all)
    device = resolve_device(device_name)
    fmt = _format_of(out, fmt)
    if out is not None and out.exists() and out.is_dir():
        raise BadInputError(f"{out} is a folder", "give a file name, e.g. -o ticket.md")
    r = open_run(run)
    analysis = load_analysis(r, device=device, calibration=calibration, say=say)
    for line in analysis.run.device_notes:
        click.echo(line, err=True)
    rep = build_report(r, gemm_filter=gemm_filter, analysis=analysis, top=count)  # the Analysis only
    text, files, rendered = write_report(rep, fmt, out)
    if text is not None:
        click.echo(text, nl=False)
    else:
        click.echo(f"wrote {', '.join(str(f) for f in files)}", err=True)
    if rendered is not None and rendered.summarised:
        click.echo(
            f"summarised to fit GitHub's comment limit ({len(rendered.text):,} characters): "
            + "; ".join(rendered.summarised),
            err=True,
        )
