"""``tracekit bundle``: pack a run into one zip file to attach to a ticket or send."""

from __future__ import annotations

from pathlib import Path
from typing import TYPE_CHECKING

import click

if TYPE_CHECKING:
    from tracekit.run import Run


def current_frames(run: Run, scratch: Path) -> Run:
    """``run`` when its frames on disk are current, else a copy in ``scratch`` with its frames rebuilt from raw/
    in memory and written there (never into the run): what :func:`tracekit.bundle.write_bundle` packs."""
    from tracekit.analyzers.store import frames_copy, frames_in_memory, load_frames

    load_frames(run)
    return frames_copy(run, scratch) if frames_in_memory(run) else run


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
      tracekit bundle samples/h200-gemm-probe -o h200-probe.zip
      tracekit bundle samples/h200-gemm-probe -o h200-probe-full.zip --raw
      tracekit show h200-probe.zip
    """
    from tracekit.analyzers.store import open_run
    from tracekit.bundle import write_bundle

    r = open_run(run)
    info = write_bundle(r, out, raw=raw, make_current=current_frames)
    for w in info["warnings"]:
        click.echo(f"tracekit: warning: {w}", err=True)
    click.echo(
        f"wrote {info['path']}: {info['members']} members, {info['bytes'] / 1e6:.2f} MB"
        + (" (with raw reports)" if raw else " (manifest and frames; --raw adds the reports)"),
        err=True,
    )
