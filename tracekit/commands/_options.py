"""Options shared by several commands, spelled the same everywhere.

``-o/--out`` names what a command writes (a run folder, a zip, a report, a profile) in every command; the older
``--output`` of ``bench`` and ``calibrate`` still works as a hidden alias, so scripts written for it keep running.
"""

from __future__ import annotations

import functools
from collections.abc import Callable
from typing import Any

import click

from tracekit.errors import BadInputError


def out_option(help: str, **option: Any) -> Callable[[Callable[..., Any]], Callable[..., Any]]:
    """``-o/--out PATH`` (the command receives it as ``out``), with ``--output`` accepted as a hidden alias.

    ``option`` goes to :func:`click.option` for both spellings (``type``, ``default``; not ``required``, which
    would refuse the alias). Giving both spellings with different paths is bad input (exit 2)."""

    def decorate(f: Callable[..., Any]) -> Callable[..., Any]:
        @functools.wraps(f)
        def command(*args: Any, **kwargs: Any) -> Any:
            alias = kwargs.pop("output_alias", None)
            if alias is not None and kwargs.get("out") is not None and kwargs["out"] != alias:
                raise BadInputError(
                    f"-o/--out {kwargs['out']} and --output {alias} name different paths",
                    "give -o/--out once (--output is its old name)",
                )
            if alias is not None:
                kwargs["out"] = alias
            return f(*args, **kwargs)

        command = click.option("--output", "output_alias", hidden=True, **option)(command)
        return click.option("-o", "--out", "out", help=help, **option)(command)

    return decorate


TOP_DEFAULT = 10
"""Cases a view shows without ``--top`` / ``--all``."""


def top_options(f: Callable[..., Any]) -> Callable[..., Any]:
    """``--top N`` (the N cases with the most GPU time; 0 or a negative count is a usage error, exit 2) and
    ``--all`` (every case). The command receives ``top`` (None when not given) and ``show_all``."""
    f = click.option("--all", "show_all", is_flag=True, help="Every GEMM case (no --top).")(f)
    return click.option(
        "--top",
        "top",
        type=click.IntRange(min=1),
        default=None,
        metavar="N",
        help=f"The N GEMM cases with the most GPU time (default {TOP_DEFAULT}).",
    )(f)


def top_count(top: int | None, show_all: bool, default: int | None = TOP_DEFAULT) -> int | None:
    """How many cases to show: None for every case (``--all``), else ``--top`` or ``default``."""
    if show_all and top is not None:
        raise click.UsageError("--top and --all contradict each other: give one")
    if show_all:
        return None
    return top if top is not None else default
