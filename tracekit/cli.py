"""The ``tracekit`` command line.

Commands live in ``tracekit/commands/<name>.py`` and are imported only when invoked, so ``tracekit --help``
stays instant (no polars, torch or textual). Errors from the ``TracekitError`` family are printed as one line on
stderr with their documented exit code; stdout carries only data, so ``--json`` output can be piped.
"""

from __future__ import annotations

import importlib
import os
import signal
import sys
import traceback
from typing import Any

import click

from tracekit import __version__
from tracekit.errors import EXIT_CODES, EXIT_INTERNAL, EXIT_INTERRUPTED, TracekitError, interrupt_exit_code

# name -> (module:attribute, one-line help). Order is the order shown in --help.
COMMANDS: dict[str, tuple[str, str]] = {
    "capture": (
        "tracekit.commands.capture:capture",
        "Run a benchmark under ncu / nsys / the PyTorch profiler into a run.",
    ),
    "bench": (
        "tracekit.commands.bench:bench",
        "Benchmark GEMM backends (bench gemm) and grouped MoE expert GEMMs (bench moe).",
    ),
    "import": (
        "tracekit.commands.importing:import_",
        "Build a run from existing .ncu-rep / nsys .sqlite / Kineto files.",
    ),
    "show": (
        "tracekit.commands.show:show",
        "Print a run's summary: device, ranges, kernels, GEMMs, failures.",
    ),
    "explain": (
        "tracekit.commands.explain:explain",
        "Explain each GEMM's gap to peak as a waterfall of factors.",
    ),
    "devices": (
        "tracekit.commands.devices:devices",
        "List the device catalog (the names --device takes); resolve a GPU name.",
    ),
    "calibrate": (
        "tracekit.commands.calibrate:calibrate",
        "Measure this GPU's achievable GEMM and copy ceilings.",
    ),
    "view": ("tracekit.commands.view:view", "Browse a run in the terminal UI."),
    "report": (
        "tracekit.commands.report:report",
        "Write a Markdown / JSON / HTML report for a kernel ticket.",
    ),
    "bundle": ("tracekit.commands.bundle:bundle", "Pack a run into one zip file to attach or send."),
    "export": (
        "tracekit.commands.export:export",
        "Write a run as a Chrome trace (Perfetto, chrome://tracing) with the verdicts on it.",
    ),
    "compare": (
        "tracekit.commands.compare:compare",
        "Compare two runs GEMM by GEMM; --gate fails CI on regressions.",
    ),
}

EPILOG = "Exit codes: " + "; ".join(f"{code} {text}" for code, text in EXIT_CODES.items()) + "."


class LazyGroup(click.Group):
    """A group whose subcommands are imported on first use."""

    def list_commands(self, ctx: click.Context) -> list[str]:
        return [name for name in COMMANDS if self._available(name)]

    @staticmethod
    def _available(name: str) -> bool:
        module = COMMANDS[name][0].split(":")[0]
        return importlib.util.find_spec(module) is not None

    def get_command(self, ctx: click.Context, cmd_name: str) -> click.Command | None:
        if cmd_name not in COMMANDS or not self._available(cmd_name):
            return None
        target, _ = COMMANDS[cmd_name]
        module, _, attr = target.partition(":")
        return getattr(importlib.import_module(module), attr)

    def format_commands(self, ctx: click.Context, formatter: click.HelpFormatter) -> None:
        rows = [(name, COMMANDS[name][1]) for name in self.list_commands(ctx)]
        if rows:
            with formatter.section("Commands"):
                formatter.write_dl(rows)


@click.group(cls=LazyGroup, epilog=EPILOG, context_settings={"help_option_names": ["-h", "--help"]})
@click.version_option(__version__, prog_name="tracekit")
@click.option("--debug", is_flag=True, envvar="TRACEKIT_DEBUG", help="Show full tracebacks on errors.")
@click.pass_context
def cli(ctx: click.Context, debug: bool) -> None:
    """tracekit: why do my GEMM kernels stop short of peak?

    \b
    Typical flow:
      tracekit capture --ncu --nsys -- python bench.py   # or: tracekit bench gemm --shapes glm5
      tracekit show runs/<run>                           # summary; --json for scripts
      tracekit explain runs/<run>                        # waterfall of factors per GEMM
      tracekit view runs/<run>                           # terminal UI
      tracekit report runs/<run> -o ticket.md            # Markdown for a kernel ticket

    Existing profiles work too: tracekit import profile.ncu-rep trace.sqlite trace.json.gz -o runs/mine
    """
    ctx.ensure_object(dict)
    ctx.obj["debug"] = debug


def _err(text: str) -> None:
    click.echo(f"tracekit: {text}", err=True)


def _stdout_closed_by_reader() -> bool:
    """Whether Rich or click has just given up on a stdout whose reader went away (see :func:`main`)."""
    if type(sys.stdout).__name__ == "_PacifyFlushWrapper":  # click's wrapper after EPIPE
        return True
    try:  # Rich's on_broken_pipe: fd 1 now points at /dev/null
        out, null = os.fstat(1), os.stat(os.devnull)
    except OSError:
        return False
    return (out.st_rdev, out.st_ino) == (null.st_rdev, null.st_ino)


def main(argv: list[str] | None = None) -> Any:
    """Entry point: runs the CLI and maps errors to one line and an exit code."""
    debug = "--debug" in (argv if argv is not None else sys.argv[1:]) or bool(
        os.environ.get("TRACEKIT_DEBUG")
    )
    try:
        return cli.main(args=argv, prog_name="tracekit", standalone_mode=False)
    except TracekitError as exc:
        if debug:
            traceback.print_exc()
        _err(exc.one_line())
        sys.exit(exc.exit_code)
    except click.exceptions.Abort:
        _err("interrupted")
        sys.exit(EXIT_INTERRUPTED)
    except KeyboardInterrupt as exc:
        signum = getattr(exc, "signum", None)
        _err(f"stopped by {signal.Signals(signum).name}" if signum else "interrupted")
        sys.exit(interrupt_exit_code(exc))
    except click.ClickException as exc:
        exc.show()
        sys.exit(exc.exit_code)
    except click.exceptions.Exit as exc:
        sys.exit(exc.exit_code)
    except BrokenPipeError:
        sys.exit(0)
    except SystemExit as exc:
        # A closed stdout (`tracekit explain RUN | head`) reaches here as exit 1 (documented as an internal error):
        # Rich's Console.on_broken_pipe points stdout at /dev/null and raises SystemExit(1); click's EPIPE handler
        # swaps in a pacifying stdout wrapper and exits 1. A reader that stopped early is not a failure: exit 0.
        if exc.code == 1 and _stdout_closed_by_reader():
            sys.exit(0)
        raise
    except Exception as exc:
        if debug:
            traceback.print_exc()
        _err(f"internal error: {type(exc).__name__}: {exc} — rerun with --debug and report it")
        sys.exit(EXIT_INTERNAL)
