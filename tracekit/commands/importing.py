"""``tracekit import``: make a run from existing profiler files."""

from __future__ import annotations

import json
import sys
from pathlib import Path

import click


def _not_read(files: tuple[Path, ...]) -> list[str]:
    """A warning for each file given that the import keeps in raw/ but does not read, by its name (``notes.txt``,
    a ``.log``): the user named it, so it is said, not kept without a word. Nsight Systems reports (.nsys-rep)
    get their own warning (export them to SQLite) from the import."""
    from tracekit.analyzers.rawfiles import is_read

    return [
        f"{f.name}: not a profiler file; kept in the run's raw/ but not read (tracekit reads Nsight Compute "
        ".ncu-rep or CSV, Nsight Systems .sqlite exports, PyTorch profiler .json / .json.gz traces)"
        for f in files
        if not is_read(f.name) and not f.name.endswith((".nsys-rep", ".qdstrm"))
    ]


@click.command("import")
@click.argument("files", nargs=-1, type=click.Path(path_type=Path))
@click.option(
    "-o", "--out", type=click.Path(path_type=Path), help="Run folder to create (default: runs/<time>-<name>)."
)
@click.option(
    "--runs-dir",
    type=click.Path(path_type=Path),
    default=Path("runs"),
    show_default=True,
    help="Where new runs go.",
)
@click.option(
    "--rebuild",
    "rebuild",
    type=click.Path(path_type=Path),
    help="Rebuild the frames of an existing RUN from its raw/, and the Analysis stored with it.",
)
@click.option(
    "--workers",
    type=click.IntRange(min=1),
    default=None,
    help="Files read at once, each in its own process (default: the cores; 1 reads them one after another).",
)
@click.option(
    "--executor",
    type=click.Choice(["local", "ray"]),
    default="local",
    show_default=True,
    help="Read the files in local processes, or as one task per file on a Ray cluster (pip install tracekit[ray]).",
)
@click.option(
    "--ray-address",
    metavar="ADDR",
    help="The Ray cluster to use with --executor ray (default: $RAY_ADDRESS, a running local one, or a new one).",
)
@click.option("--json", "as_json", is_flag=True, help="Print the import summary as JSON on stdout.")
def import_(
    files: tuple[Path, ...],
    out: Path | None,
    runs_dir: Path,
    rebuild: Path | None,
    workers: int | None,
    executor: str,
    ray_address: str | None,
    as_json: bool,
) -> None:
    """Build a run from existing reports: Nsight Compute (.ncu-rep, or CSV from `ncu --csv --page raw|details`),
    Nsight Systems SQLite exports (`nsys export --type sqlite`), PyTorch profiler traces (.json / .json.gz), in any mix.

    The kind of each file is detected from its content. Files are copied untouched into RUN/raw/; frames are
    written to RUN/frames/. A file that cannot be read is reported and kept in raw/ (the run is marked partial,
    exit 4); if none can be read nothing is written (exit 2). The run's Analysis is built and stored with it
    (RUN/analysis.msgpack, docs/ANALYSIS.md), so show, explain, report and view load it instead of building it.

    Several files (one per rank of a distributed job) are read in parallel, one process per file up to --workers,
    each writing its rank's frames; the run is the same as with --workers 1. With --executor ray each file is a
    task on a Ray cluster: the files and the run folder must be on storage every node sees (docs/RANKS.md).

    \b
    Examples:
      tracekit import samples/h200-gemm-probe/raw/probe.sqlite.xz -o runs/probe   # compressed files are fine
      tracekit import trace.sqlite kernels.ncu-rep rank0.json.gz
      tracekit import --rebuild runs/<run>        # after upgrading tracekit: the frames again, from raw/
      tracekit import traces/rank*.json.gz -o runs/job-1234 --workers 8
      tracekit import /shared/job/rank*.json.gz -o /shared/runs/job --executor ray --ray-address head:6379
    """
    from tracekit.analyzers.importer import import_files, import_into
    from tracekit.analyzers.store import open_run
    from tracekit.errors import EXIT_INCOMPLETE, BadInputError

    def progress(msg: str) -> None:
        if not as_json:
            click.echo(f"tracekit: {msg}", err=True)

    if rebuild is not None:
        if files:
            raise BadInputError("--rebuild takes a run, not files", "use either FILES... or --rebuild RUN")
        if executor != "local":
            raise BadInputError("--rebuild reads the run's raw/ here", "drop --executor ray for --rebuild")
        run = open_run(rebuild)
        summary = import_into(run, progress)
    elif executor == "ray" or (len(files) > 1 and workers != 1):
        from tracekit.analyzers.parallel import import_parallel
        from tracekit.analyzers.workers import default_workers

        if executor == "ray" or min(workers or default_workers(), len(files)) > 1:
            run, summary = import_parallel(
                list(files),
                out,
                runs_dir=runs_dir,
                workers=workers,
                executor=executor,
                ray_address=ray_address,
                on_event=progress,
            )
        else:  # one core: the serial path
            run, summary = import_files(list(files), out, runs_dir=runs_dir, on_event=progress)
    else:
        run, summary = import_files(list(files), out, runs_dir=runs_dir, on_event=progress)
    summary["warnings"] = _not_read(files) + summary["warnings"]
    if as_json:
        click.echo(json.dumps(summary, indent=2))
    else:
        for failure in summary["failed"]:
            click.echo(f"tracekit: skipped {failure['message']}", err=True)
        for warning in summary["warnings"]:
            click.echo(f"tracekit: warning: {warning}", err=True)
        rows = summary["rows"]
        click.echo(
            f"{run.path}: {summary['imported']}/{summary['files']} files, {rows.get('kernels', 0)} kernels, "
            f"{rows.get('ranges', 0)} ranges, {rows.get('ncu', 0)} ncu kernels, {rows.get('measurements', 0)} "
            f"measurements, {rows.get('failures', 0)} failures"
            + (
                f", ranks {', '.join(map(str, summary['ranks']))}"
                if len(summary.get("ranks") or []) > 1
                else ""
            )
            + (" (partial)" if summary["partial"] else "")
        )
    if summary["partial"]:
        sys.exit(EXIT_INCOMPLETE)
