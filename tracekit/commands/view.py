"""``tracekit view``: browse a run in the terminal UI (tracekit.tui). Textual is imported only when the command
runs, so ``tracekit view --help`` stays instant."""

from __future__ import annotations

from pathlib import Path

import click

from tracekit.commands.explain import device_option, resolve_device
from tracekit.tui.keys import help_text

_HELP = f"""Browse RUN in the terminal: GEMMs, why each stops short of peak, kernels, failures.

RUN is a run folder (tracekit capture / bench / import), a bundle (.zip), or a folder of runs (opens the
picker; a folder holding no run exits 2, as explain does). Without RUN: the picker over ./runs and the bundled samples, or, when ./runs holds none, the bundled
H200 sample (h200-gemm-probe).

\b
Screens:
  runs       the picker: every run found, newest first
  overview   device, counts, failures; the GEMM table (backend, M, N, K, dtype, time, TFLOP/s, % of peak, verdict)
  GEMM       the waterfall from datasheet peak to achieved, each factor's sentence and evidence, the kernels
             of its range, Nsight Compute's own findings
  kernels    every kernel launch (a million is fine): search, sort, group by name
  failures   backend x shape matrix; the full error text and traceback of the selected cell
  plot       TFLOP/s vs M per backend, datasheet and measured peaks as lines
  compare    two runs, GEMMs matched on backend + shape: change in time and TFLOP/s

\b
Keys:
{help_text(24)}

\b
Needs a terminal on stdin and stdout: without one (a pipe, a script, CI, ssh without -t) it exits 2 at once;
tracekit show, explain and report work without one. Works in 80x24 and larger, over SSH, with the mouse. NO_COLOR=1 draws without colour; --theme light (or
TRACEKIT_THEME=light) for light terminals; t toggles.

\b
Examples:
  tracekit view                                   # the picker, or the bundled sample
  tracekit view samples/h200-gemm-probe
  tracekit view samples/h200-capture-seed --compare samples/h200-capture-gemm
  tracekit view samples/h200-counter-probe --device h200    # a run whose files name no GPU
"""


def require_terminal() -> None:
    """Refuse to start the UI without a terminal on both stdin and stdout (exit 2, one line). Without one the UI
    would paint escape codes into a pipe and, with stdin at end of file (a script, CI, ``ssh host tracekit view``
    without -t, a background job), spin a core for ever: Textual's input thread reads the empty stdin in a loop
    (13 s of CPU in 13 s measured)."""
    import sys

    from tracekit.errors import BadInputError

    missing = [name for name, f in (("stdin", sys.stdin), ("stdout", sys.stdout)) if not _isatty(f)]
    if missing:
        raise BadInputError(
            f"tracekit view needs a terminal ({' and '.join(missing)} {'is' if len(missing) == 1 else 'are'} not one)",
            "tracekit show, explain and report work without one; over ssh use ssh -t",
        )


def _isatty(stream: object) -> bool:
    try:
        return bool(stream is not None and stream.isatty())  # type: ignore[attr-defined]
    except (AttributeError, ValueError, OSError):  # closed or replaced streams
        return False


@click.command(help=_HELP)
@click.argument("run", required=False, type=click.Path(path_type=Path))
@click.option(
    "--compare",
    "compare",
    type=click.Path(path_type=Path),
    default=None,
    help="A second run: open the comparison (RUN = A, this = B) once RUN is read.",
)
@click.option(
    "--theme",
    type=click.Choice(["dark", "light"]),
    default=None,
    help="Colour theme (default: dark, or $TRACEKIT_THEME).",
)
@device_option
def view(run: Path | None, compare: Path | None, theme: str | None, device_name: str | None) -> None:
    from tracekit.tui.data import Prefetch, first_target

    device = resolve_device(device_name)  # a bad name fails before the UI starts
    # a missing run, or a folder holding none, says so as explain does (exit 2), terminal or not
    kind, target = first_target(run, compare)
    require_terminal()
    # Start reading the run before Textual is imported: the two overlap (a 1M-kernel run paints sooner).
    prefetch = Prefetch(target, device) if kind == "run" else None
    from tracekit.tui.app import make_app

    make_app(run, compare=compare, theme=theme, prefetch=prefetch, device=device).run()
