"""``tracekit bundle``: pack a run into one zip file to attach to a ticket or send."""

from __future__ import annotations

from pathlib import Path

import click


@click.command()
@click.argument("run", type=click.Path(path_type=Path))
@click.option(
    "-o", "--out", type=click.Path(path_type=Path, dir_okay=False), required=True, help="The .zip to write."
)
@click.option("--raw", is_flag=True, help="Include the raw reports (raw/: .ncu-rep, .sqlite, traces, JSONL).")
def bundle(run: Path, out: Path, raw: bool) -> None:
    """Pack RUN's manifest and frames (and with --raw its raw reports) into FILE.zip.

    Every command that takes a run takes the bundle too (show, view, report, explain, compare): it is checked and
    unpacked into a private cache folder, never executed. Without --raw the bundle is small (frames only) but
    cannot be re-imported by a tracekit with another frame schema.

    \b
    Examples:
      tracekit bundle runs/h200-probe -o h200-probe.zip
      tracekit bundle runs/h200-probe -o h200-probe-full.zip --raw
      tracekit show h200-probe.zip
    """
    from tracekit.analyzers.importer import open_run
    from tracekit.bundle import write_bundle

    r = open_run(run)
    info = write_bundle(r, out, raw=raw)
    for w in info["warnings"]:
        click.echo(f"tracekit: warning: {w}", err=True)
    click.echo(
        f"wrote {info['path']}: {info['members']} members, {info['bytes'] / 1e6:.2f} MB"
        + (" (with raw reports)" if raw else " (manifest and frames; --raw adds the reports)"),
        err=True,
    )
